"""TargetCaughtUpSensor in both modes, with dag.test() against a real hub: it waits while the
target's agent is down and its backlog grows, and succeeds once the agent is back and has
applied everything; deferred, the wait runs in the trigger."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflowkit import site_env
from binlogsync.hubcommands import fetch_status
from binlogsync_dev.airflow_site import DagTest
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Server
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.airflow

DAGS = """
import datetime as dt
from airflow.sdk import DAG
from binlogsync_airflow.sensors import TargetCaughtUpSensor

for deferrable in (False, True):
    with DAG(f"wait_{'deferred' if deferrable else 'poking'}", schedule=None,
             start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)):
        TargetCaughtUpSensor(task_id="caught_up", target="{target}", poke_interval=0.5,
                             timeout=120, deferrable=deferrable)
"""


@pytest.mark.parametrize("mode", ["poking", "deferred"])
def test_the_sensor_waits_for_an_offline_target_and_succeeds_once_it_caught_up(
    tmp_path: Path, airflow_home: Path, origin: Server, target: Server, dbname: str, mode: str
) -> None:
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "waits.py").write_text(DAGS.replace("{target}", target.name))
    create([origin, target], dbname, "CREATE TABLE t (id INT PRIMARY KEY)")
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        s.stop(target.name)
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            for i in range(50):  # 50 transactions
                cur.execute("INSERT INTO t VALUES (%s)", (i,))
        hub = str(s.agents["hub"].config)
        wait_until(lambda: fetch_status(hub)["targets"][0]["backlog"] >= 50, 30, what="backlog")
        run = DagTest(site_env(airflow_home, s), f"wait_{mode}", folder=folder,
                      log=tmp_path / "dag.log")  # fmt: skip
        try:
            # The target starts only once the waiting part has said it is behind: deferred,
            # the trigger itself (started after the sensor's first poke, it could otherwise
            # find the target caught up at once and never log, as on a loaded CI machine).
            waiter = "TargetCaughtUpTrigger" if mode == "deferred" else "TargetCaughtUpSensor"

            def behind() -> bool:
                return any(
                    "transaction(s) to apply" in line and waiter in line
                    for line in run.output().splitlines()
                )

            wait_until(lambda: behind() or run.proc.poll() is not None, 120, 0.2,
                       f"the {waiter}'s first check, behind")  # fmt: skip
            assert run.proc.poll() is None, run.output()[-4000:]  # still waiting
            s.start(target.name)
            result = run.wait(180)
        finally:
            if run.proc.poll() is None:
                run.proc.kill()
        assert result.ok, result.output[-4000:]
        if mode == "deferred":  # the wait ran in the trigger, not in a poking worker
            assert "[DAG TEST] Trigger completed" in result.output
        wait_equal(s, dbname, ["t"])
