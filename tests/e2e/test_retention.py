"""`binlogsync retention` end to end: an origin with several rotated binlog files, a hub and a
target as processes, and a native replica. The dry run purges nothing; a real run purges only
below every needed position (the hub's head, the target's checkpoint, the replica's), and the
origin's agent still resumes afterwards; unknown positions (hub down, origin never connected,
replica stopped or unreachable) refuse and name which; the keep-files and keep-hours floors
hold files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlogsync.hubcommands import fetch_status
from binlogsync.ops.retention import RetentionOptions, binlog_retention
from binlogsync.reconcile.urls import parse_url
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Sandbox, Server, free_port
from binlogsync_dev.verify import origin_gtid
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.e2e

TABLE = "CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(40))"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """An origin and its native GTID replica, of this module alone (their binlogs are purged)."""
    box = Sandbox(tmp_path_factory.mktemp("retention"))
    try:
        primary = box.start("ret_origin", 31)
        replica = box.start("ret_replica", 32)
        replica.sql("RESET MASTER")
        box.replicate(primary, replica)
        yield primary, replica
    finally:
        box.stop_all()


def _binlogs(server: Server) -> list[str]:
    return [row[0] for row in server.sql("SHOW BINARY LOGS")]


def _current(server: Server) -> str:
    return str(server.sql("SHOW MASTER STATUS")[0][0])


class Rows:
    """Inserts on the origin, each followed by FLUSH BINARY LOGS: one file per row."""

    def __init__(self, server: Server, db: str) -> None:
        self.server, self.db, self.next = server, db, 0

    def rotate(self, count: int) -> None:
        for _ in range(count):
            self.server.sql(f"INSERT INTO t VALUES ({self.next}, 'row')", db=self.db)
            self.server.sql("FLUSH BINARY LOGS")
            self.next += 1


def _hub_has_all(s: LocalSite) -> None:
    """Wait until the hub's durable head is the origin's last transaction."""
    gtid = origin_gtid(s.origin)

    def stored() -> bool:
        status = fetch_status(str(s.agents["hub"].config), timeout=2)
        return any(o["head"] and o["head"]["gtid"] == gtid for o in status["origins"])

    wait_until(stored, 30, 0.05, f"the hub's head reaching {gtid}")


def _retention(s: LocalSite, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "binlogsync.cli",
            "retention",
            "--config",
            str(s.agents["hub"].config),
            "--origin",
            "origin",
            "--source",
            s.origin.url,
            "--timeout",
            "2",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _plan(s: LocalSite, *args: str) -> dict[str, Any]:
    done = _retention(s, "--json", *args)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{s.logs()}"
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _by_file(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["file"]: f for f in plan["files"]}


def _refused(s: LocalSite, *args: str) -> str:
    before = _binlogs(s.origin)
    done = _retention(s, "--keep-files", "1", "--keep-hours", "0", *args)
    assert done.returncode == 1, f"{done.stdout}\n{done.stderr}"
    assert _binlogs(s.origin) == before  # nothing purged
    assert "nothing was purged" in done.stderr
    return done.stderr


def test_purges_only_below_the_hub_head_and_the_target_and_capture_resumes(
    tmp_path: Path, pair: tuple[Server, Server], target: Server, dbname: str
) -> None:
    origin, _replica = pair
    create([origin, target], dbname, TABLE)
    rows = Rows(origin, dbname)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        rows.rotate(3)
        wait_equal(s, dbname, ["t"])
        target_file = _current(origin)  # the target's checkpoint is this file's start state
        s.stop(target.name)
        rows.rotate(2)
        _hub_has_all(s)
        head_file = _current(origin)
        s.stop("origin")
        rows.rotate(2)
        files = _binlogs(origin)
        older = files[: files.index(target_file)]
        assert len(older) >= 3

        plan = _plan(s, "--keep-files", "1", "--keep-hours", "0", "--dry-run")
        assert _binlogs(origin) == files  # a dry run purges nothing
        assert plan["purge_to"] == target_file and plan["purged"] == []
        by_file = _by_file(plan)
        assert [f for f in files if by_file[f]["status"] == "would purge"] == older
        assert any(
            r.startswith(f"target {target.name} ") and r.endswith(" is in it")
            for r in by_file[target_file]["reasons"]
        ), by_file[target_file]
        assert any(r.startswith("hub head ") for r in by_file[head_file]["reasons"])
        assert "the current file" in by_file[files[-1]]["reasons"]
        assert {n["who"]: n["file"] for n in plan["needs"]} == {
            "hub head": head_file,
            f"target {target.name}": target_file,
        }

        ignoring = _plan(s, "--keep-files", "1", "--keep-hours", "0", "--dry-run",
                         "--ignore-targets")  # fmt: skip
        assert ignoring["purge_to"] == head_file  # the offline target holds nothing back now

        plan = _plan(s, "--keep-files", "1", "--keep-hours", "0")
        assert plan["purged"] == older
        assert _binlogs(origin) == files[len(older) :]

        plan = _plan(s, "--keep-files", "1", "--keep-hours", "0", "--ignore-targets")
        assert _binlogs(origin)[0] == head_file
        text = _retention(s, "--keep-files", "1", "--keep-hours", "0")
        assert text.returncode == 0 and "nothing to purge" in text.stdout, text.stdout

        # Capture resumes at the hub's head, which is still there; the target catches up
        # from the hub's log (its checkpoint's binlog file is gone).
        s.start("origin", target.name)
        rows.rotate(1)
        wait_equal(s, dbname, ["t"])
        s.kill("origin")
        s.start("origin")
        rows.rotate(1)
        wait_equal(s, dbname, ["t"])
        # No target was blocked for a reseed (the hub's start-up note that a silent target
        # *would* ask for one, when the origin registers first, is not one).
        assert "reseed needed" not in s.logs().lower()


def test_refuses_when_a_position_is_unknown(
    tmp_path: Path, pair: tuple[Server, Server], target: Server, dbname: str
) -> None:
    origin, replica = pair
    create([origin, target], dbname, TABLE)
    Rows(origin, dbname).rotate(2)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start("hub")  # the origin's agent never connects
        error = _refused(s)
        assert "origin 'origin' is unknown" in error and "never connected" in error, error
        assert "has no origin 'elsewhere'" in _refused(s, "--origin", "elsewhere")

        s.start()
        s.wait_online()
        nowhere = f"mysql://root@127.0.0.1:{free_port()}"
        error = _refused(s, "--replica", nowhere)
        assert "replica 127.0.0.1:" in error and "cannot reach" in error, error
        error = _refused(s, "--replica", origin.url)  # not a replica of itself
        assert "does not replicate from the origin" in error, error

        s.stop("hub")
        error = _refused(s, "--replica", replica.url)
        assert "the hub's durable head for origin 'origin' is unknown" in error, error
        assert "did not answer" in error


def test_a_lagging_replica_holds_files_back_and_a_stopped_one_refuses(
    tmp_path: Path, pair: tuple[Server, Server], target: Server, dbname: str
) -> None:
    origin, replica = pair
    create([origin, target], dbname, TABLE)
    rows = Rows(origin, dbname)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        rows.rotate(2)
        _replicated(origin, replica)
        replica.sql("STOP SLAVE SQL_THREAD")  # receives on, applies nothing
        replica_file = _current(origin)
        rows.rotate(3)
        _hub_has_all(s)
        wait_equal(s, dbname, ["t"])
        files = _binlogs(origin)

        plan = _plan(s, "--keep-files", "1", "--keep-hours", "0", "--replica", replica.url,
                     "--dry-run")  # fmt: skip
        assert plan["purge_to"] == replica_file
        reasons = _by_file(plan)[replica_file]["reasons"]
        [(applied,)] = replica.sql("SELECT @@gtid_slave_pos")
        assert reasons == [f"replica 127.0.0.1:{replica.port} {applied} is in it"]
        plan = _plan(s, "--keep-files", "1", "--keep-hours", "0", "--replica", replica.url)
        assert _binlogs(origin) == files[files.index(replica_file) :]

        replica.sql("STOP SLAVE")
        error = _refused(s, "--replica", replica.url)
        assert f"replica 127.0.0.1:{replica.port} is unknown" in error, error
        assert "IO thread is not running" in error

        replica.sql("START SLAVE")
        _replicated(origin, replica)  # what it still needed was there


def _replicated(origin: Server, replica: Server) -> None:
    gtid = origin_gtid(origin)
    [(done,)] = replica.sql(f"SELECT MASTER_GTID_WAIT('{gtid}', 30)")
    assert done == 0, f"the replica did not reach {gtid}"


def _server_now(server: Server) -> int:
    return int(server.sql("SELECT UNIX_TIMESTAMP()")[0][0])


def test_keep_files_and_keep_hours_hold_files(
    tmp_path: Path, pair: tuple[Server, Server], target: Server, dbname: str
) -> None:
    origin, _replica = pair
    create([origin, target], dbname, TABLE)
    rows = Rows(origin, dbname)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        rows.rotate(3)
        young_from = _current(origin)  # closed by the first rotation after the pause
        started = _server_now(origin)
        wait_until(lambda: _server_now(origin) >= started + 10, 20, 0.2, "10 s passing")
        rows.rotate(2)
        _hub_has_all(s)
        files = _binlogs(origin)

        every = _plan(s, "--dry-run")  # the defaults: 2 files, 24 hours
        assert every["purge_to"] is None
        # Files close in order: once one is younger, no later one's time needs reading.
        closed = [f["closed_at"] for f in every["files"][:-1]]
        assert every["now"] - 120 < closed[0] <= every["now"] and set(closed[1:]) == {None}
        assert all("younger than 24 h" in f["reasons"] for f in every["files"][:-1])

        plan = _plan(s, "--dry-run", "--keep-hours", "0", "--keep-files", "4")
        assert plan["purge_to"] == files[-4]
        assert _by_file(plan)[files[-4]]["reasons"] == ["one of the newest 4"]

        # The files closed before the pause are older than the window, the rest younger: the
        # window ends halfway through the pause, however long the steps above took.
        window = _server_now(origin) - (started + 5)
        options = RetentionOptions(
            str(s.agents["hub"].config),
            "origin",
            parse_url(origin.url),
            keep_files=1,
            keep_hours=window / 3600,
        )
        result = binlog_retention(options)
        assert result.purge_to == young_from
        assert result.purged == files[: files.index(young_from)]
        kept = {f.name: f.reasons for f in result.files}
        assert kept[young_from] == (f"younger than {window / 3600:g} h",)
        assert _binlogs(origin) == files[files.index(young_from) :]
