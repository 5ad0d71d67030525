"""The binlog_retention, outbox_retries and paper_timing DAGs with dag.test(), with real
effects on a private origin and target (their binlogs are purged, their hosts stopped):
retention purges only safe files, the origin's agent still resumes, and a down hub refuses;
an offline target is reported, detached past the limit (the hub's log shrinks to nothing)
and reseeded to equality once back; the timing run writes its JSON and PNG."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflowkit import base_env, run_dag, site_env
from binlogsync.hubcommands import fetch_status
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Sandbox, Server
from binlogsync_dev.verify import origin_gtid
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.airflow

T = "CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(200))"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    box = Sandbox(tmp_path_factory.mktemp("af-sandbox"))
    try:
        yield box.start("af_origin", 41), box.start("af_target", 42)
    finally:
        box.stop_all()


def _binlogs(server: Server) -> list[str]:
    return [row[0] for row in server.sql("SHOW BINARY LOGS")]


def _status(s: LocalSite) -> dict[str, Any]:
    return fetch_status(str(s.agents["hub"].config), timeout=2, detail=True)


def _hub_has_all(s: LocalSite) -> None:
    gtid = origin_gtid(s.origin)
    wait_until(
        lambda: any(o["head"] and o["head"]["gtid"] == gtid for o in _status(s)["origins"]),
        30, 0.05, f"the hub's head reaching {gtid}",
    )  # fmt: skip


def test_retention_purges_only_safe_files_and_refuses_without_the_hub(
    tmp_path: Path, airflow_home: Path, servers: tuple[Server, Server], dbname: str
) -> None:
    origin, target = servers
    create([origin, target], dbname, T)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        for i in range(6):  # one binlog file per row
            origin.sql(f"INSERT INTO t VALUES ({i}, 'row')", db=dbname)
            origin.sql("FLUSH BINARY LOGS")
        wait_equal(s, dbname, ["t"])
        _hub_has_all(s)
        before = _binlogs(origin)
        env = site_env(airflow_home, s)

        dry = run_dag(env, "binlog_retention", {"keep_files": 1, "keep_hours": 0, "dry_run": True})
        assert dry.ok, dry.output[-3000:]
        assert _binlogs(origin) == before
        report = json.loads((airflow_home / "state" / "last-retention.json").read_text())
        assert report["dry_run"] and report["origins"]["origin"]["purged"] == []

        done = run_dag(env, "binlog_retention", {"keep_files": 1, "keep_hours": 0})
        assert done.ok, done.output[-3000:]
        after = _binlogs(origin)
        report = json.loads((airflow_home / "state" / "last-retention.json").read_text())
        purged = report["origins"]["origin"]["purged"]
        assert purged and all(f not in after for f in purged)
        assert after[0] == before[len(purged)]  # the oldest files went, in order
        # Every kept file says why; the log says the same.
        kept = [f for f in report["origins"]["origin"]["files"] if f["status"] == "kept"]
        assert kept and all(f["reasons"] for f in kept)
        assert "PURGE BINARY LOGS TO" in done.output

        # The origin's agent resumes from the hub's head after the purge.
        s.stop("origin")
        origin.sql("INSERT INTO t VALUES (100, 'after the purge')", db=dbname)
        s.start("origin")
        wait_equal(s, dbname, ["t"])

        s.stop("hub")
        refused = run_dag(env, "binlog_retention", {"keep_files": 1, "keep_hours": 0})
        assert refused.state == "failed"
        assert "retention refused" in refused.output and "hub" in refused.output
        assert _binlogs(origin) == after


def test_outbox_detaches_an_offline_target_bounds_the_hub_log_and_reseeds_it(
    tmp_path: Path, airflow_home: Path, servers: tuple[Server, Server], dbname: str
) -> None:
    origin, target = servers
    create([origin, target], dbname, T)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        env = site_env(airflow_home, s)
        quiet = run_dag(env, "outbox_retries")
        assert quiet.ok, quiet.output[-3000:]

        s.stop(target.name)
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            for i in range(300):
                cur.execute("INSERT INTO t VALUES (%s, REPEAT('x', 150))", (i,))
        wait_until(
            lambda: next(t for t in _status(s)["targets"])["backlog"] >= 300, 30, what="backlog"
        )
        stored = next(o for o in _status(s)["origins"])["stored"]
        assert stored >= 300
        limits = {"max_offline_seconds": 0, "detach_after_bytes": 10_000}
        alerted = run_dag(env, "outbox_retries", limits)
        assert alerted.state == "failed"
        assert f"host {target.name} has been offline" in alerted.output
        assert "detached" in alerted.output
        report = json.loads((airflow_home / "state" / "last-outbox.json").read_text())
        assert report["detached"] and report["detached"][0]["target"] == target.name
        # Nothing holds the log any more: compaction empties it.
        wait_until(
            lambda: next(o for o in _status(s)["origins"])["stored"] == 0, 60, 0.2,
            "the hub's log compacted after the detach",
        )  # fmt: skip

        s.start(target.name)
        s.wait_online()
        back = run_dag(env, "outbox_retries")
        assert back.ok, back.output[-3000:]
        report = json.loads((airflow_home / "state" / "last-outbox.json").read_text())
        assert report["reseeded"] and report["reseeded"][0]["target"] == target.name
        assert report["reseeded"][0]["rows"] == 300
        wait_equal(s, dbname, ["t"])
        assert not next(t for t in _status(s)["targets"])["detached"]


def test_paper_timing_keeps_its_json_and_plot(airflow_home: Path) -> None:
    done = run_dag(base_env(airflow_home), "paper_timing", {"rows": [100], "runs": 1})
    assert done.ok, done.output[-3000:]
    runs = sorted((airflow_home / "state" / "timing").glob("timing-*.json"))
    assert runs
    data = json.loads(runs[-1].read_text())
    assert {c["dml"] for c in data["cells"]} == {"insert", "update", "delete"}
    assert all(c["rows"] == 100 and c["seconds"] > 0 for c in data["cells"])
    png = runs[-1].with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
