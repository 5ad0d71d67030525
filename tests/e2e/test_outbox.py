"""`binlogsync outbox`: offline hosts, backlogs (transactions, bytes, age) and stuck targets,
read from a real hub, with alerts as a failing exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from binlogsync.hubcommands import fetch_status
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Server
from sitekit import create, site

pytestmark = pytest.mark.e2e

T = "CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(200))"


def outbox(s: LocalSite, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", "outbox", "--config",
         str(s.agents["hub"].config), "--json", *extra],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _target_row(s: LocalSite, target: Server) -> dict:  # type: ignore[type-arg]
    status = fetch_status(str(s.agents["hub"].config), detail=True)
    return next(t for t in status["targets"] if t["target"] == target.name)


def test_an_offline_target_and_its_backlog_are_reported_and_alerted(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, T)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        quiet = outbox(s)
        assert quiet.returncode == 0, quiet.stderr
        assert json.loads(quiet.stdout)["alerts"] == []
        s.stop(target.name)
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            for i in range(50):
                cur.execute("INSERT INTO t VALUES (%s, REPEAT('x', 150))", (i,))
        wait_until(lambda: _target_row(s, target)["backlog"] >= 50, 30, what="the backlog")
        hub = str(s.agents["hub"].config)
        wait_until(
            lambda: (
                not any(h["online"] for h in fetch_status(hub)["hosts"] if h["name"] == target.name)
            ),
            30,
            what="the target offline",
        )
        done = outbox(s, "--max-offline", "0", "--max-age", "0", "--max-bytes", "1000")
        assert done.returncode == 1
        report = json.loads(done.stdout)
        host = next(h for h in report["hosts"] if h["name"] == target.name)
        assert host["online"] is False and host["offline_seconds"] >= 0
        backlog = next(b for b in report["backlogs"] if b["target"] == target.name)
        assert backlog["transactions"] >= 50
        assert backlog["bytes"] > 50 * 150  # the stored changes, rows of 150 bytes each
        assert backlog["age_seconds"] > 0
        assert f"host {target.name} has been offline" in done.stderr
        assert "oldest waiting transaction" in done.stderr and "bytes wait" in done.stderr
        # Within the limits, the same state is a report, not an alert.
        calm = outbox(s, "--max-offline", "3600", "--max-age", "3600")
        assert calm.returncode == 0, calm.stderr


def test_a_stuck_target_is_named_with_its_error_and_recovers_after_the_fix(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin], dbname, T)
    create([target], dbname)  # no table t on the target: apply fails
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (1, 'a')")
        wait_until(lambda: bool(_target_row(s, target)["last_error"]), 30, what="the apply error")
        stuck = outbox(s)
        assert stuck.returncode == 1
        report = json.loads(stuck.stdout)
        assert report["stuck"] and report["stuck"][0]["target"] == target.name
        assert "t" in report["stuck"][0]["reason"] and "is stuck" in stuck.stderr
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute(T)  # the fix; the agent retries by itself
        wait_until(lambda: outbox(s).returncode == 0, 60, 0.5, what="the target recovered")
        assert _target_row(s, target)["backlog"] == 0


def _stored(s: LocalSite) -> int:
    status = fetch_status(str(s.agents["hub"].config))
    return int(next(o for o in status["origins"] if o["origin"] == "origin")["stored"])


def test_a_target_past_the_limit_is_detached_the_log_stays_bounded_and_it_is_reseeded(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, T)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        s.stop(target.name)

        def write(start: int, count: int) -> None:
            with origin.connect(dbname) as conn, conn.cursor() as cur:
                for i in range(start, start + count):
                    cur.execute("INSERT INTO t VALUES (%s, REPEAT('y', 150))", (i,))

        write(0, 300)
        wait_until(lambda: _target_row(s, target)["backlog"] >= 300, 30, what="the backlog")
        held = _stored(s)
        assert held >= 300  # the offline target holds the log
        done = outbox(s, "--max-offline", "3600", "--detach-after-bytes", "10000")
        assert done.returncode == 1 and "detached" in done.stderr, done.stderr
        assert json.loads(done.stdout)["detached"][0]["target"] == target.name
        assert _target_row(s, target)["detached"] is True
        # Nothing holds the log for it now: compaction empties it, and more writes stay bounded.
        write(300, 300)
        wait_until(lambda: _stored(s) < 50, 30, 0.2, what="the hub's log compacted")
        bounded = _stored(s)
        # Back online, it is reseeded (every table) and streams again.
        s.start(target.name)
        wait_until(
            lambda: any(
                h["online"]
                for h in fetch_status(str(s.agents["hub"].config))["hosts"]
                if h["name"] == target.name
            ),
            30,
            what="the target online",
        )
        url = f"origin=mysql://root@127.0.0.1:{origin.port}"
        again = outbox(s, "--max-offline", "3600", "--reseed-source", url)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["reseeded"][0]["rows"] == 600
        write(600, 10)
        from sitekit import wait_equal

        wait_equal(s, dbname, ["t"])
        assert _target_row(s, target)["detached"] is False
        print(f"hub log rows: {held} while holding for the offline target, {bounded} once detached")
