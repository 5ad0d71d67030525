"""Reconciliation: find every row that differs between a source and its targets, and repair it.

Chunk checksums are computed inside each database over primary-key ranges; Spark parallelises
the chunks; only differing chunks are compared row by row; differences are re-checked while
writes continue and reported by key. docs/reconcile.md explains the guarantees.

    urls.py         mysql://user:password@host:port
    schema.py       table definitions on each side; what can be compared
    checksums.py    the canonical row encoding, per-row hash and chunk checksum SQL
    chunks.py       primary-key range chunks, and splitting differing ones
    pinning.py      source snapshots at a binlog position; waiting for a target to apply it
    connections.py  database sessions
    tasks.py        what runs in Spark tasks: checksums, rows, re-check rounds
    job.py          the driver: plan, stages, report, repair
    report.py       summary.json, rows.parquet, the stdout summary, exit codes
    repair.py       repair through the hub, or a SQL file
    options.py      the command line (binlogsync reconcile and spark_jobs/reconcile_job.py)

Nothing here imports PySpark at import time.
"""
