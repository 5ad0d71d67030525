"""binlog_retention (daily): purge each origin's binary logs only below the oldest position
that anything still needs — the hub's durable head, every routed target's checkpoint, every
native replica (connection extra `replicas`) — and never the newest `keep_files` files nor
any file younger than `keep_hours`. When one of those positions is unknown (hub unreachable,
an origin agent that never connected, a replica that does not replicate) nothing is purged
on that origin and the task fails naming it. The task log and its return value list what was
purged and why each kept file was kept. Library: binlogsync.ops.retention."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param

from binlogsync_airflow.operators import BinlogRetentionOperator

with DAG(
    dag_id="binlog_retention",
    schedule="@daily",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["binlogsync"],
    doc_md=__doc__,
    params={
        "origins": Param(
            [],
            type="array",
            items={"type": "string"},
            description="Origins to purge, as the hub's routes name them; empty: every origin.",
        ),
        "keep_files": Param(
            2,
            type="integer",
            minimum=1,
            description="Always keep at least this many of the newest binlog files.",
        ),
        "keep_hours": Param(
            24.0,
            type="number",
            minimum=0,
            description="Always keep every file closed less than this many hours ago "
            "(so a hub that must be rebuilt can re-read).",
        ),
        "dry_run": Param(
            False, type="boolean", description="Show what would be purged; purge nothing."
        ),
        "ignore_targets": Param(
            False,
            type="boolean",
            description="Do not keep what offline targets' checkpoints need (a hub rebuilt "
            "from nothing could then not re-read for them). Prefer detaching them.",
        ),
    },
) as dag:
    BinlogRetentionOperator(
        task_id="purge_binlogs",
        origins="{{ params.origins }}",
        keep_files="{{ params.keep_files }}",
        keep_hours="{{ params.keep_hours }}",
        dry_run="{{ params.dry_run }}",
        ignore_targets="{{ params.ignore_targets }}",
    )
