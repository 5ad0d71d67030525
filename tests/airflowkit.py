"""Test kit for the Airflow faces (binlogsync_dev/airflow_site.py holds the machinery, shared with
`./dev airflow` and the demo): `run_dag` prints each dag.test() time for the suite's log."""

from __future__ import annotations

from typing import Any

from binlogsync_dev.airflow_site import (  # noqa: F401  (re-exported for the tests)
    DAGS,
    DagResult,
    DagTest,
    base_env,
    dag_test,
    migrate,
    site_env,
)


def run_dag(env: dict[str, str], dag_id: str, conf: dict[str, Any] | None = None) -> DagResult:
    result = dag_test(env, dag_id, conf)
    print(f"{dag_id}: {result.state} in {result.seconds} s (dag.test), {result.wall_seconds} s "
          "waited (with the runner's start, the first time)")  # fmt: skip
    return result
