"""paper_timing (on demand): the paper's Table 1 — seconds to replicate N single-row
INSERTs, UPDATEs and DELETEs — measured on throwaway sandbox servers beside native
replication, kept per run as JSON and a PNG plot (ours, native and the paper's seconds per
DML and statement count) in the state folder; the binlogsync page shows the latest.
Library: binlogsync.ops.timing."""

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
    },
) as dag:
    PaperTimingOperator(task_id="paper_timing", rows="{{ params.rows }}", runs="{{ params.runs }}")
