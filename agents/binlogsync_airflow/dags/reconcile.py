"""reconcile (daily, and on demand): prove the copies equal. `plan` asks the hub which
targets each origin feeds and finds the routed tables on the origin; `spark_reconcile` runs
spark_jobs/reconcile_job.py through SparkSubmitOperator (connection `spark_default`: its
master — `local[*]`, a standalone cluster's `spark://…:7077`, YARN, Kubernetes) once per DAG
run, with every planned job in that one Spark application: the comparison runs in
spark-submit's driver and executors, with binlogsync's code sent as --py-files and the
passwords as --files; `reconcile_result` reads each job's report, keeps it (the run's folder,
XCom, and the state folder the binlogsync page reads) and fails the run listing the differing
rows — unless `repair` is on, in which case the rows were sent through the hub, ordered with
live changes, and the next run is green. `mode`: full (every row), since_last (only keys
changed since the last equal run), or auto (full on Sundays, since_last otherwise). Before
comparing, `caught_up` (TargetCaughtUpSensor, deferrable: the wait runs in the triggerer,
holding no worker slot) waits until each compared target has applied what the hub holds for
it from that origin (one wait per job; at most `max_backlog` transactions left), so a target
that is merely behind is not reported as different. A target still behind after an hour
(CATCH_UP_TIMEOUT), blocked or detached fails its wait, naming what it waits for, and that run
compares nothing.
Library: binlogsync.ops.site, binlogsync.ops.reconcile_run."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param

from binlogsync_airflow.operators import (
    BinlogsyncReconcileOperator,
    ReconcilePlanOperator,
    ReconcileResultOperator,
)
from binlogsync_airflow.sensors import TargetCaughtUpSensor, wait_for_job

CATCH_UP_TIMEOUT = 3600  # seconds; the param's default

with DAG(
    dag_id="reconcile",
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
            description="Origins to reconcile, as the hub's routes name them; empty: all.",
        ),
        "tables": Param(
            [],
            type="array",
            items={"type": "string"},
            description="SCHEMA.TABLE globs among the routed tables; empty: every routed table.",
        ),
        "mode": Param(
            "auto",
            type="string",
            enum=["auto", "full", "since_last"],
            description="full: every row; since_last: only the keys the origin's binlog "
            "changed since each table's last equal run (changes made outside replication are "
            "not looked at); auto: full on Sundays, since_last on the other days.",
        ),
        "max_backlog": Param(
            0,
            type="integer",
            minimum=0,
            description="Compare once each target has at most this many transactions left to "
            "apply from its origin (0: everything the hub holds).",
        ),
        "repair": Param(
            False,
            type="boolean",
            description="Send the source's rows for every differing key through the hub "
            "(applied in order with live changes). Off: the run fails listing them.",
        ),
    },
) as dag:
    plan = ReconcilePlanOperator(
        task_id="plan", origins="{{ params.origins }}", tables="{{ params.tables }}"
    )
    caught_up = TargetCaughtUpSensor.partial(
        task_id="caught_up",
        max_backlog="{{ params.max_backlog }}",
        deferrable=True,
        poke_interval=5,
        timeout=CATCH_UP_TIMEOUT,
    ).expand_kwargs(plan.output.map(wait_for_job))
    spark = BinlogsyncReconcileOperator(
        task_id="spark_reconcile",
        conn_id="spark_default",
        jobs=plan.output,
        repair="{{ params.repair }}",
        mode="{{ params.mode }}",
    )
    result = ReconcileResultOperator(
        task_id="reconcile_result",
        jobs="{{ ti.xcom_pull(task_ids='plan') }}",
        trigger_rule="all_done",  # differences or not, the report is read and kept
    )
    caught_up >> spark >> result
