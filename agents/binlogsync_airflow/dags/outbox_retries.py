"""outbox_retries (every 5 minutes): the paper's outbox as operations. Reports hosts offline
and for how long, per target and origin the backlog (transactions, bytes, age), and targets
stuck on an apply error (with the error; the agent retries by itself, so a fix needs no
restart). A target whose backlog passes `detach_after_age_seconds` or
`detach_after_bytes` is detached — the hub stops holding its changes, so one dead host
cannot fill the hub's disk — and reseeded (snapshot + handoff) once it is back online.
Any alert fails the task with a message naming it (Airflow's alerting carries it); the report
is the task's return value. Library: binlogsync.ops.outbox."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param

from binlogsync_airflow.operators import OutboxOperator

LIMIT = ["null", "number"]

with DAG(
    dag_id="outbox_retries",
    schedule=dt.timedelta(minutes=5),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["binlogsync"],
    doc_md=__doc__,
    params={
        "max_offline_seconds": Param(
            600,
            type=LIMIT,
            minimum=0,
            description="Alert when a host has not been heard for longer (null: never).",
        ),
        "max_age_seconds": Param(
            3600,
            type=LIMIT,
            minimum=0,
            description="Alert when a target's oldest waiting transaction is older (null: never).",
        ),
        "max_bytes": Param(
            None,
            type=LIMIT,
            minimum=0,
            description="Alert when a target's backlog holds more bytes (null: never).",
        ),
        "max_transactions": Param(
            None,
            type=LIMIT,
            minimum=0,
            description="Alert when a target's backlog holds more transactions (null: never).",
        ),
        "detach_after_age_seconds": Param(
            None,
            type=LIMIT,
            minimum=0,
            description="Detach a target whose oldest waiting transaction is older (null: "
            "never). The hub then stops holding its changes; it comes back by a reseed.",
        ),
        "detach_after_bytes": Param(
            None,
            type=LIMIT,
            minimum=0,
            description="Detach a target whose backlog holds more bytes (null: never).",
        ),
        "reseed": Param(
            True,
            type="boolean",
            description="Reseed detached targets that are online again (needs the origins' "
            "database connections binlogsync_db_<ORIGIN>).",
        ),
    },
) as dag:
    OutboxOperator(
        task_id="outbox",
        max_offline="{{ params.max_offline_seconds }}",
        max_age="{{ params.max_age_seconds }}",
        max_bytes="{{ params.max_bytes }}",
        max_transactions="{{ params.max_transactions }}",
        detach_after_age="{{ params.detach_after_age_seconds }}",
        detach_after_bytes="{{ params.detach_after_bytes }}",
        reseed="{{ params.reseed }}",
        retries=0,
    )
