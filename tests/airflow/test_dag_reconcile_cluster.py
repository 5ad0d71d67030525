"""The `reconcile` DAG submitting to a Spark standalone cluster (client deploy mode, as the
compose site does), with databases behind real passwords: the run succeeds on the cluster, and
the password is nowhere it must not be — not in the spark-submit command line, not in the
Spark application's environment (the history server's REST API, read from the application's
event log), not in the Airflow task log — and its file is gone after the run."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from airflowkit import run_dag, site_env
from binlogsync.reconcile.sparkapp import EXECUTOR_JVM_OPTIONS
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Server
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.airflow

T = "CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(40))"


def _checker(server: Server, password: str) -> dict[str, Any]:
    """A user that reconciles with a password, and its Airflow connection."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'checker'@'127.0.0.1' IDENTIFIED BY %s", (password,))
        cur.execute("ALTER USER 'checker'@'127.0.0.1' IDENTIFIED BY %s", (password,))
        cur.execute("GRANT ALL ON *.* TO 'checker'@'127.0.0.1'")
    return {"conn_type": "mysql", "host": "127.0.0.1", "port": server.port,
            "login": "checker", "password": password}  # fmt: skip


def test_the_dag_runs_on_a_standalone_cluster_and_no_password_leaks(
    tmp_path: Path,
    airflow_home: Path,
    spark_cluster: Any,
    origin: Server,
    target: Server,
    dbname: str,
) -> None:
    password = "pw-" + secrets.token_hex(12)
    create([origin, target], dbname, T)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"n{i}") for i in range(300)])
        wait_equal(s, dbname, ["t"])
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("UPDATE t SET note = 'drifted' WHERE id = 42")
        env = site_env(airflow_home, s)
        env["AIRFLOW_CONN_BINLOGSYNC_DB_ORIGIN"] = json.dumps(_checker(origin, password))
        env["AIRFLOW_CONN_BINLOGSYNC_DB_TARGET"] = json.dumps(_checker(target, password))
        host, port = spark_cluster.master_url.rsplit(":", 1)
        env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(
            {"conn_type": "spark", "host": host, "port": int(port),
             "extra": {"deploy-mode": "client"}}
        )  # fmt: skip
        # The cluster's own defaults, as an operator of a cluster keeps them: the executors'
        # Python (without binlogsync) and the event log the history server reads.
        conf = tmp_path / "spark-conf"
        conf.mkdir()
        defaults = {"spark.pyspark.python": str(spark_cluster.python),
                    **spark_cluster.event_conf()}  # fmt: skip
        (conf / "spark-defaults.conf").write_text(
            "".join(f"{k} {v}\n" for k, v in defaults.items())
        )
        env.update(SPARK_CONF_DIR=str(conf), SPARK_LOCAL_IP="127.0.0.1")

        found = run_dag(env, "reconcile", {"tables": [f"{dbname}.*"], "mode": "full"})
        assert found.tasks["spark_reconcile"] == "success", found.output[-4000:]
        assert found.tasks["reconcile_result"] == "failed"  # the drifted row, named
        assert "1 row(s) differ" in found.output and '"id": 42' in found.output

        state = airflow_home / "state" / "reconcile" / "origin" / "last-reconcile.json"
        out = Path(json.loads(state.read_text())["out"])
        spark = json.loads((out / "summary.json").read_text())["spark"]
        assert spark["master"] == spark_cluster.master_url
        app_id = spark["app_id"]
        wait_until(lambda: spark_cluster.completed(app_id) is not None, 60, 0.5, "the app")

        # Where the password must not be.
        command = [line for line in found.output.splitlines() if "Spark-Submit cmd" in line]
        # (the provider masks what follows a path with "secrets" in it: --py-files here)
        assert command and "--files" in command[0] and "binlogsync-reconcile.zip" in command[0]
        assert password not in found.output  # the task log, spark-submit's output included
        for log in (airflow_home / "logs").rglob("*"):
            if log.is_file():
                assert password not in log.read_text(errors="replace"), log
        environment = spark_cluster.application_text(app_id, "environment")
        assert ".pw" in environment  # the files went as --files, by path
        assert password not in environment
        # spark-submit's driver gave the executors the JVM options of a run's short life
        properties = dict(json.loads(environment)["sparkProperties"])
        assert EXECUTOR_JVM_OPTIONS in properties["spark.executor.extraJavaOptions"]
        assert not (out.parent / "reconcile.secrets").exists()  # removed after the run
