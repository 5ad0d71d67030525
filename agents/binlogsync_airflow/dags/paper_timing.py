"""paper_timing (on demand): the paper's Table 1 — seconds to replicate N single-row
INSERTs, UPDATEs and DELETEs — kept per run as JSON and a PNG plot (ours, native and the
paper's seconds per DML and statement count) in the state folder; the binlogsync page shows
the latest. Library: binlogsync.ops.timing.

Where it measures: the param `origin`, else the Airflow Variable `binlogsync_timing_origin`
(the compose site sets it: AIRFLOW_VAR_BINLOGSYNC_TIMING_ORIGIN), names a site's origin: then
the site's own pipeline is timed on the scratch table `binlogsync_timing.t` of that origin
until the targets (`targets`, else the Variable `binlogsync_timing_targets`, comma-separated)
hold the same rows; native replicas of the origin (its connection's extra `replicas`) are
timed beside it, and the result says when there is none. With neither: throwaway sandbox
servers beside a native replica (a clone of the repository with mariadbd)."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param

from binlogsync_airflow.operators import PaperTimingOperator

with DAG(
    dag_id="paper_timing",
    schedule=None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["binlogsync"],
    doc_md=__doc__,
    params={
        "rows": Param(
            [100, 200, 400, 600, 1000],
            type="array",
            items={"type": "integer", "enum": [100, 200, 400, 600, 1000]},
            description="Statement counts to measure (the paper's: 100, 200, 400, 600, 1000).",
        ),
        "runs": Param(
            1,
            type="integer",
            minimum=1,
            maximum=10,
            description="Runs per cell; the median is kept.",
        ),
        "origin": Param(
            "",
            type="string",
            description="A site's origin to time (empty: the Variable binlogsync_timing_origin, "
            "else throwaway sandbox servers).",
        ),
        "targets": Param(
            [],
            type="array",
            items={"type": "string"},
            description="The site's targets to wait for (empty: the Variable "
            "binlogsync_timing_targets).",
        ),
    },
) as dag:
    PaperTimingOperator(
        task_id="paper_timing",
        rows="{{ params.rows }}",
        runs="{{ params.runs }}",
        origin="{{ params.origin or var.value.get('binlogsync_timing_origin', '') }}",
        targets="{{ params.targets or var.value.get('binlogsync_timing_targets', '') }}",
    )
