"""Lifecycle work that runs on a schedule: one module per job, each a plain function with
a frozen options dataclass and a result with `to_json()`, usable without Airflow. The CLI
calls them (`binlogsync retention`), and Airflow DAGs will be thin wrappers around the same
calls.

    retention.py     binlog_retention: purge an origin's binlogs below what anything needs
    binlogfiles.py   the origin's binlog files (start states, ages), purging, replica positions
"""
