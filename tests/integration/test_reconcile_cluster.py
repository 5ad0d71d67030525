"""Reconciliation on a Spark standalone cluster: a master and two workers on loopback, started
from the pyspark wheel with `spark-class`, whose executors run a Python that has neither
binlogsync nor PyMySQL nor PySpark installed. The command ships binlogsync's code with the job
(shipping.py), the executors do the work, and every differing row is named."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from binlogsync.reconcile.sparkapp import EXECUTOR_JVM_OPTIONS
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Server
from reconcile_kit import execute, make_table

pytestmark = pytest.mark.integration


def test_a_standalone_cluster_without_binlogsync_on_its_workers_names_every_row(
    spark_cluster: Any, origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    python = str(spark_cluster.python)
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for module in ("binlogsync", "pymysql", "pyspark"):
        absent = subprocess.run([python, "-c", f"import {module}"], capture_output=True, env=bare)
        assert absent.returncode != 0, f"the executors' Python must lack {module}"
    make_table([origin, target], dbname, rows=2000)
    execute(
        target,
        dbname,
        "DELETE FROM t WHERE id = 17",
        "UPDATE t SET amount = amount + 1 WHERE id = 1234",
        "INSERT INTO t (id, name) VALUES (99999, 'extra')",
    )
    out = tmp_path / "report"
    done = subprocess.run(
        [
            sys.executable, "-m", "binlogsync.cli", "reconcile",
            "--master", spark_cluster.master_url,
            "--conf", f"spark.pyspark.python={python}",
            *(f"--conf={k}={v}" for k, v in spark_cluster.event_conf().items()),
            "--source", f"mysql://root@127.0.0.1:{origin.port}",
            "--target", f"mysql://root@127.0.0.1:{target.port}",
            "--tables", f"{dbname}.t", "--pin", "none", "--chunk-rows", "500",
            "--out", str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},  # the driver on loopback too
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    for line in ("missing   id=17", "changed   id=1234  columns: amount", "extra     id=99999"):
        assert line in done.stdout, done.stdout
    summary = json.loads((out / "summary.json").read_text())
    app_id = summary["spark"]["app_id"]
    assert summary["spark"]["master"] == spark_cluster.master_url

    # The master lists the application as finished; its executors, on the two workers, ran
    # the tasks (the history server reads the application's event log).
    wait_until(lambda: spark_cluster.completed(app_id) is not None, 60, 0.5, "the app finished")
    assert spark_cluster.completed(app_id)["state"] == "FINISHED"
    executors = spark_cluster.application(app_id, "allexecutors")
    workers = [e for e in executors if e["id"] != "driver"]
    assert len(workers) == 2, executors
    assert sum(e["totalTasks"] for e in workers) > 0 and all(e["failedTasks"] == 0 for e in workers)
    # The report's rows were written by Spark, partitioned by table.
    assert list((out / "rows.parquet").glob(f"table={dbname}.t/*.parquet"))
    # The executors, started for this one run, got JVM options for a short life.
    properties = dict(spark_cluster.application(app_id, "environment")["sparkProperties"])
    assert EXECUTOR_JVM_OPTIONS in properties["spark.executor.extraJavaOptions"], properties


START_AND_WARM = """
import os, sys
from binlogsync.reconcile.sparkapp import SparkSettings, SparkStart
conf = tuple(arg.split("=", 1) for arg in sys.argv[2:])
start = SparkStart(SparkSettings(master=sys.argv[1], conf=conf), os.environ)
start.session()
start._thread.join()  # its warm-up done (or not made)
print(start.context().applicationId)
start.stop()
"""


def test_the_warm_up_runs_no_task_where_the_executors_lack_binlogsync(spark_cluster: Any) -> None:
    """The Spark application's warm-up (Python workers importing the task modules) starts as
    soon as its context does, before the command ships binlogsync to the executors: on a
    cluster whose executors lack binlogsync, each of its tasks failed four times (in a full
    suite run, the reconcile above counted them as failed tasks). It runs only where the
    executors can import binlogsync: local, or shipped by spark-submit."""
    conf = {"spark.pyspark.python": str(spark_cluster.python), **spark_cluster.event_conf()}
    done = subprocess.run(
        [sys.executable, "-c", START_AND_WARM, spark_cluster.master_url,
         *(f"{k}={v}" for k, v in conf.items())],
        capture_output=True, text=True, timeout=180,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    app_id = done.stdout.strip().splitlines()[-1]
    wait_until(lambda: spark_cluster.completed(app_id) is not None, 60, 0.5, "the app finished")
    executors = spark_cluster.application(app_id, "allexecutors")
    failed = sum(e["failedTasks"] for e in executors if e["id"] != "driver")
    assert failed == 0, executors


TWO_RUNS_OF_PASSWORDS = """
import json, os, sys
from pyspark.sql import SparkSession
from binlogsync.reconcile import passwords
session = SparkSession.builder.master(sys.argv[1]).getOrCreate()
sc = session.sparkContext

def read(name):
    def task(_):
        from pyspark import SparkFiles
        with open(SparkFiles.get(name)) as f:
            return os.path.abspath(SparkFiles.getRootDirectory()), json.load(f)
    return task

first = passwords.Distributed(sc, {"source": "one"}, local=False)
sc.parallelize([0], 1).map(read(first.name)).collect()  # one task: one executor fetches it
first.remove()
second = passwords.Distributed(sc, {"source": "two"}, local=False)
got = sc.parallelize(range(40), 40).map(read(second.name)).collect()
print(json.dumps({"executors": sorted({folder for folder, _ in got}),
                  "read": sorted({json.dumps(p) for _, p in got}),
                  "first": first.path.read_text(),
                  "folders": [str(first.folder), str(second.folder)]}))
session.stop()
"""


def test_a_later_run_on_an_executor_new_to_the_application_finds_every_secrets_file(
    spark_cluster: Any, tmp_path: Path
) -> None:
    """An executor fetches every file added to the application so far before its first task.
    A run's secrets file was deleted when the run ended, so the next run of the same
    application (the next job of one spark-submit, a warm server's next run) failed every
    task on an executor that had not worked for the first ("Stream '/files/…secrets.json' was
    not found"; CI, test_several_jobs_share_one_application_on_the_cluster). The file stays,
    emptied of its passwords when its run ends, and its folder (one per driver process) goes
    with the driver's process."""
    done = subprocess.run(
        [sys.executable, "-c", TWO_RUNS_OF_PASSWORDS, spark_cluster.master_url],
        capture_output=True, text=True, timeout=180,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(seen["executors"]) == 2, seen  # the second run reached the new executor too
    assert seen["read"] == [json.dumps({"source": "two"})]
    assert seen["first"] == "{}"  # the first run's passwords left the driver's disk with it
    assert len(set(seen["folders"])) == 1  # one folder per driver process
    assert not Path(seen["folders"][0]).exists()


def test_several_jobs_share_one_application_on_the_cluster(
    spark_cluster: Any, origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    """The reconcile DAG's submission on a cluster whose executors lack binlogsync: spark-submit
    runs reconcile_job.py with a --job per job, in one application. binlogsync's code goes to
    the executors once (a second addPyFile of it, from the second job's own folder, failed that
    job: "File binlogsync-reconcile.zip was already registered with a different path"); each
    job sends its own passwords file; both jobs' tasks run on the cluster and each job reports
    its own result. A job that cannot compare (a table that does not exist) does not stop the
    next, and the exit code is the worst (2)."""
    make_table([origin, target], dbname, rows=1000)
    for server in (origin, target):
        execute(server, dbname, "CREATE TABLE u (id INT PRIMARY KEY, v INT)",
                "INSERT INTO u VALUES (1, 1), (2, 2), (3, 3)")  # fmt: skip
    execute(target, dbname, "DELETE FROM t WHERE id = 17", "UPDATE t SET amount = 0 WHERE id = 900")
    submit = Path(sys.executable).parent / "spark-submit"
    job = Path(__file__).resolve().parents[2] / "spark_jobs" / "reconcile_job.py"
    outs = {"no_such_table": tmp_path / "missing", "u": tmp_path / "first",
            "t": tmp_path / "second"}  # fmt: skip
    jobs = [
        json.dumps([
            "--source", f"mysql://root@127.0.0.1:{origin.port}?password_env=NO_PASSWORD",
            "--target", f"mysql://root@127.0.0.1:{target.port}?password_env=NO_PASSWORD",
            "--tables", f"{dbname}.{table}", "--pin", "none", "--chunk-rows", "250",
            "--connections", "2", "--out", str(out),
        ])
        for table, out in outs.items()
    ]  # fmt: skip
    conf = {
        "spark.pyspark.python": str(spark_cluster.python),  # the executors'
        "spark.pyspark.driver.python": sys.executable,
        **spark_cluster.event_conf(),
    }
    done = subprocess.run(
        [str(submit), "--master", spark_cluster.master_url,
         *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")), str(job),
         *(a for j in jobs for a in ("--job", j))],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "NO_PASSWORD": "",
             "PYSPARK_DRIVER_PYTHON": sys.executable},
    )  # fmt: skip
    said = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert done.returncode == 2, done.stdout + "\n".join(said[:30])
    assert f"{dbname}.no_such_table" in done.stdout + done.stderr
    assert f"{dbname}.u → root@127.0.0.1:{target.port}: EQUAL" in done.stdout, done.stdout
    for line in ("missing   id=17", "changed   id=900  columns: amount"):
        assert line in done.stdout, done.stdout + done.stderr[-6000:]
    summaries = [json.loads((outs[t] / "summary.json").read_text()) for t in ("u", "t")]
    assert [s["exit_code"] for s in summaries] == [0, 1]
    apps = {s["spark"]["app_id"] for s in summaries}
    assert len(apps) == 1, summaries
    app_id = apps.pop()
    wait_until(lambda: spark_cluster.completed(app_id) is not None, 60, 0.5, "the app finished")
    executors = [
        e for e in spark_cluster.application(app_id, "allexecutors") if e["id"] != "driver"
    ]
    assert len(executors) == 2 and all(e["totalTasks"] > 0 for e in executors), executors
    assert all(e["failedTasks"] == 0 for e in executors), executors


def test_a_reconcile_server_on_the_cluster_serves_a_second_run(
    spark_cluster: Any, origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    """`binlogsync reconcile-server --master spark://…` whose executors lack binlogsync: its
    first run ships binlogsync's code into the application, and its second run must not try
    again from a folder of its own (Spark refused that: "already registered with a different
    path", and every run after the first exited 2)."""
    make_table([origin, target], dbname, rows=500)
    execute(target, dbname, "DELETE FROM t WHERE id = 5")
    sock = tmp_path / "reconcile.sock"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "NO_PASSWORD": ""}
    server = subprocess.Popen(
        [sys.executable, "-m", "binlogsync.cli", "reconcile-server", f"--socket={sock}",
         "--master", spark_cluster.master_url,
         f"--conf=spark.pyspark.python={spark_cluster.python}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        wait_until(sock.exists, 180, 0.1, "the server's socket")
        for run in ("one", "two"):
            done = subprocess.run(
                [sys.executable, "-m", "binlogsync.cli", "reconcile", f"--spark-server={sock}",
                 f"--source=mysql://root@127.0.0.1:{origin.port}?password_env=NO_PASSWORD",
                 f"--target=mysql://root@127.0.0.1:{target.port}?password_env=NO_PASSWORD",
                 f"--tables={dbname}.t", "--pin=none", f"--out={tmp_path / run}"],
                capture_output=True, text=True, timeout=300, env=env,
            )  # fmt: skip
            assert done.returncode == 1, f"run {run}: {done.stdout}{done.stderr[-3000:]}"
            assert "missing   id=5" in done.stdout, done.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=60)
    assert server.returncode == 0, output[-3000:]
