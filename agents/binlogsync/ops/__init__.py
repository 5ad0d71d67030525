"""Lifecycle work that runs on a schedule: one module per job, usable without Airflow. The CLI
calls them, and Airflow DAGs will be thin wrappers around the same calls.

    retention.py     binlog_retention: purge an origin's binlogs below what anything needs
    binlogfiles.py   the origin's binlog files (start states, ages), purging, replica positions
    outbox.py        who is offline, what waits for whom, what is stuck; detach past limits,
                     reseed when back
    timing.py        the paper's Table 1, kept as JSON and a PNG per run
    reconcile_run.py after a reconciliation: the outcome kept, differing rows as the failure
    commands.py      the command-line faces of retention
"""
