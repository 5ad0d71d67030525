"""How a run's Spark application starts (sparkapp.SparkStart): in local mode the chunk checksum
tasks hold every task slot from the run's first second to the end of its longest stage, so
nothing the run waits for may sit behind a Spark job meanwhile.

Each check runs in a process of its own: SparkStart warms only an application it started, and
a test worker may hold a SparkContext already."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    from pathlib import Path
    from binlogsync.reconcile import sparkapp

    # The worker warm-up is a Spark job; here it stands for one queued behind the checksum
    # tasks, which hold both slots until their stage ends: it waits until released.
    release = threading.Event()
    warming = threading.Event()

    def queued(sc):
        warming.set()
        release.wait(300)

    sparkapp._warm_workers = queued
    start = sparkapp.SparkStart(
        sparkapp.SparkSettings("local[2]", (), Path(sys.argv[1])), os.environ
    )
    sc = start.context()
    ready = threading.Event()
    threading.Thread(target=lambda: (start.session(), ready.set()), daemon=True).start()
    print("session while the warm-up waits:", ready.wait(120) and warming.is_set(), flush=True)
    release.set()
    session = start.session()
    start._thread.join(120)

    jobs = set(sc.statusTracker().getJobIdsForGroup())
    sparkapp._warm_sql(session)
    print("jobs the SQL warm-up ran:", sorted(set(sc.statusTracker().getJobIdsForGroup()) - jobs))
    print("adaptive:", session.conf.get("spark.sql.adaptive.enabled"))
    start.stop()
    """
)


@pytest.mark.timeout(600)
def test_the_session_never_waits_behind_a_job_and_the_sql_warm_up_runs_none(
    tmp_path: object,
) -> None:
    environ = {**os.environ}
    environ.pop("PYSPARK_SUBMIT_ARGS", None)  # an earlier SparkStart in this worker sets it
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=540,
        env=environ,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    # Before: the session was made only after the worker warm-up's job, which in a run waited
    # for the whole checksum stage (and the row stage's first query paid Spark SQL's start).
    assert "session while the warm-up waits: True" in done.stdout, done.stdout + done.stderr[-3000:]
    # Before: the SQL warm-up counted a join, a job that waited for the checksum tasks too.
    assert "jobs the SQL warm-up ran: []" in done.stdout, done.stdout + done.stderr[-3000:]
    # Off by default: with it the plan holds no generated code for the warm-up to compile.
    assert "adaptive: false" in done.stdout, done.stdout
