"""The `reconcile` DAG with dag.test(): real Airflow, real Spark (spark-submit through the
provider's operator, every run), real MariaDB and a real hub. An injected difference fails the
run with the row named; with repair=true it is repaired through the hub (the target then
equals the origin); a run after a wait for a target behind is green."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflowkit import DagTest, run_dag, site_env
from binlogsync.hubcommands import fetch_status
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.pg_sandbox import PgServer
from binlogsync_dev.sandbox import Server
from sitekit import create, pg_site, seed, site, wait_equal

pytestmark = pytest.mark.airflow

T = "CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(40))"


def test_reconcile_fails_on_a_difference_and_repairs_it(
    tmp_path: Path, airflow_home: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, T)
    # CURVE on: the hook reaches the hub with key files from its connection, and the repair
    # is an admin command signed by them.
    with site(tmp_path, origin, [target], dbname, curve=True) as s:
        s.start()
        s.wait_online()
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"n{i}") for i in range(200)])
        wait_equal(s, dbname, ["t"])
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("UPDATE t SET note = 'drifted' WHERE id = 17")
        env = site_env(airflow_home, s)
        state = airflow_home / "state"
        conf = {"tables": [f"{dbname}.*"]}

        found = run_dag(env, "reconcile", conf)
        assert found.state == "failed", found.output[-3000:]
        assert found.tasks["spark_reconcile"] == "success"  # differences are not Spark's failure
        assert found.tasks["reconcile_result"] == "failed"
        assert "1 row(s) differ" in found.output and '"id": 17' in found.output
        last = json.loads((state / "reconcile" / "origin" / "last-reconcile.json").read_text())
        assert last["state"] == "different" and last["differing_rows"] == 1
        assert last["tables"][0]["source_positions"]["last"]  # the pin is kept
        spark = json.loads((Path(last["out"]) / "summary.json").read_text())["spark"]
        assert spark["master"] == "local[*]" and spark["app_id"].startswith("local-")
        assert "Spark-Submit cmd" in found.output  # the provider's spark-submit ran it

        repaired = run_dag(env, "reconcile", {**conf, "repair": True})
        assert repaired.ok, repaired.output[-3000:]
        last = json.loads((state / "reconcile" / "origin" / "last-reconcile.json").read_text())
        assert last["state"] == "repaired"
        # The repair went through the hub and the target's agent: the copies are equal again
        # (a green run after a wait: test_reconcile_waits_for_a_target_behind_before_comparing).
        wait_equal(s, dbname, ["t"])
        # Every run is a Spark application of its own, started by spark-submit.
        summary = json.loads((Path(last["out"]) / "summary.json").read_text())
        assert summary["spark"]["app_id"].startswith("local-")
        assert summary["spark"]["app_id"] != spark["app_id"]


def test_reconcile_compares_a_postgresql_target(
    tmp_path: Path, airflow_home: Path, origin: Server, dbname: str, pg: PgServer
) -> None:
    """A PostgreSQL target's database is a `postgres` connection: the DAG compares it with
    its origin exactly (of 200 rows it names the one that drifted there, no other)."""
    create([origin], dbname, T)
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"n{i}") for i in range(200)])
    with pg_site(tmp_path, origin, pg, dbname) as s:
        s.start()
        s.wait_online()
        seed(s, "pgt")
        env = site_env(airflow_home, s)
        env["AIRFLOW_CONN_BINLOGSYNC_DB_PGT"] = json.dumps(
            {"conn_type": "postgres", "host": "127.0.0.1", "port": pg.port,
             "login": pg.user, "schema": "postgres"}
        )  # fmt: skip
        with pg.connect() as conn:
            conn.execute(f"UPDATE \"{dbname}\".t SET note = 'drifted' WHERE id = 17")
        # A change outside replication: only a full run looks at every row.
        found = run_dag(env, "reconcile", {"tables": [f"{dbname}.*"], "mode": "full"})
        assert found.state == "failed" and found.tasks["reconcile_result"] == "failed"
        assert "1 row(s) differ" in found.output and '"id": 17' in found.output
        last = json.loads(
            (airflow_home / "state" / "reconcile" / "origin" / "last-reconcile.json").read_text()
        )
        assert last["differing_rows"] == 1 and last["tables"][0]["target"] == "pgt", last


def test_reconcile_waits_for_a_target_behind_before_comparing(
    tmp_path: Path, airflow_home: Path, origin: Server, target: Server, dbname: str
) -> None:
    """`caught_up` (TargetCaughtUpSensor, deferred to the trigger) holds the comparison while
    the target's agent is down with a backlog; once it is back and has applied everything the
    run compares and is green. Without the wait the comparison would see 50 missing rows."""
    create([origin, target], dbname, T)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        s.stop(target.name)
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            for i in range(50):  # 50 transactions the target has not applied
                cur.execute("INSERT INTO t VALUES (%s, %s)", (i, f"n{i}"))
        hub = str(s.agents["hub"].config)
        wait_until(lambda: fetch_status(hub)["targets"][0]["backlog"] >= 50, 30, what="backlog")
        run = DagTest(site_env(airflow_home, s), "reconcile", {"tables": [f"{dbname}.*"]},
                      log=tmp_path / "reconcile.log")  # fmt: skip
        try:
            behind = "transaction(s) to apply"
            wait_until(lambda: behind in run.output() or run.proc.poll() is not None, 180, 0.2,
                       "the sensor's first poke, behind")  # fmt: skip
            assert run.proc.poll() is None, run.output()[-4000:]  # still waiting
            assert "Spark-Submit cmd" not in run.output()  # nothing compared yet
            s.start(target.name)
            result = run.wait(300)
        finally:
            if run.proc.poll() is None:
                run.proc.kill()
        assert result.ok, result.output[-4000:]
        assert result.tasks["caught_up[0]"] == "success"
        assert "TargetCaughtUpTrigger" in result.output  # the wait ran in the trigger
        last = json.loads(
            (airflow_home / "state" / "reconcile" / "origin" / "last-reconcile.json").read_text()
        )
        assert last["state"] == "equal" and last["differing_rows"] == 0
        print(f"reconcile with a wait for {target.name}: {result.seconds} s (dag.test)")
