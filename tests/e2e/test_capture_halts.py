"""What capture must not pass by itself, with the agents as processes on real MariaDB.

A `SET GLOBAL binlog_format='STATEMENT'` (or `binlog_row_image` MINIMAL/NOBLOB) while the
origin agent runs once made capture log an error and carry on: the target missed the rows,
status showed everything applied and the capture counter counted them (issue 6, defect 3).
Now capture halts at that transaction, says so in `status`, and moves on only through an
explicit, recorded `binlogsync capture-skip`. And a column dropped on the origin while the
target still has it is surfaced instead of being filled with its default (issue 6, item 9).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from binlogsync.engines.mariadb import checkpoint as checkpoints
from binlogsync.hubcommands import fetch_status
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Server, free_port
from binlogsync_dev.verify import caught_up, origin_gtid, table_rows
from sitekit import create, site

pytestmark = pytest.mark.e2e
AGENTS = str(Path(__file__).resolve().parents[2] / "agents")

TABLE = "CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL, note VARCHAR(40), doc BLOB)"


@pytest.fixture
def restore_format(origin: Server) -> Iterator[None]:
    """The origin server is shared by the session: put its binlog settings back."""
    yield
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_format = 'ROW'")
        cur.execute("SET GLOBAL binlog_row_image = 'FULL'")


@contextmanager
def global_setting(server: Server, name: str, value: str) -> Iterator[None]:
    """SET GLOBAL for the block; the session's other tests share this server."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT @@GLOBAL.{name}")
        before = cur.fetchone()[0]
        cur.execute(f"SET GLOBAL {name} = %s", (value,))
    try:
        yield
    finally:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SET GLOBAL {name} = %s", (before,))


def _run(server: Server, db: str, *statements: str) -> None:
    """Each call is a new session: it takes the server's global binlog settings of now."""
    with server.connect(db) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def _insert(server: Server, db: str, ids: range) -> None:
    _run(
        server,
        db,
        *(f"INSERT INTO t VALUES ({i}, {i}, 'row {i}', REPEAT('b', {100 + i}))" for i in ids),
    )


def _ids(server: Server, db: str) -> list[int]:
    return [int(r[0]) for r in table_rows(server, db, "t")]


def _status(s: LocalSite) -> dict[str, Any]:
    return fetch_status(str(s.agents["hub"].config), timeout=5)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": AGENTS},  # this checkout's code, not the venv's
    )


def _wait_caught_up(s: LocalSite) -> None:
    gtid = origin_gtid(s.origin)
    for target in s.targets:
        try:
            wait_until(lambda t=target: caught_up(t, "origin", gtid), 60, 0.05, target.name)
        except TimeoutError as exc:
            raise AssertionError(f"{exc} catching up to {gtid}\n{s.logs()}") from None


def _wait_halted(s: LocalSite) -> dict[str, Any]:
    try:
        return wait_until(  # type: ignore[no-any-return]
            lambda: _status(s)["origins"][0]["halted"], 60, 0.05, "the halt in status"
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{s.logs()}") from None


def _checkpoint(target: Server) -> checkpoints.Checkpoint:
    with target.connect() as conn, conn.cursor() as cur:
        found = (checkpoints.read_all(cur) or {}).get("origin")
    assert found is not None
    return found


def _metric(port: int, name: str) -> float:
    """A metric of the origin agent's endpoint."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.search(rf"^{name} (\S+)$", body, re.M)
    assert found, body
    return float(found.group(1))


def _captured(port: int) -> float:
    return _metric(port, "binlogsync_captured_transactions_total")


def _capture_skip(s: LocalSite, to: str, reason: str) -> str:
    result = _cli(
        "capture-skip",
        "--config",
        str(s.agents["hub"].config),
        "--origin",
        "origin",
        "--to",
        to,
        "--reason",
        reason,
    )
    assert result.returncode == 0, result.stderr + s.logs()
    return result.stdout


def _recorded_skips(s: LocalSite) -> list[tuple[Any, ...]]:
    with sqlite3.connect(s.root / "hub-data" / "hub.sqlite3") as db:
        rows = db.execute(
            "SELECT origin, skipped_from, skipped_to, reason FROM capture_skips ORDER BY id"
        ).fetchall()
    return [(o, json.loads(f) if f else None, json.loads(t), r) for o, f, t, r in rows]


@pytest.mark.usefixtures("restore_format")
def test_statement_format_at_run_time_halts_capture_until_an_explicit_skip(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, TABLE)
    metrics = free_port()
    extra = {"origin": f"\n[metrics]\nport = {metrics}\n"}
    with site(tmp_path, origin, [target], dbname, agent_extra=extra) as s:
        s.start()
        s.wait_online()
        _insert(origin, dbname, range(1, 11))
        _wait_caught_up(s)
        applied = _checkpoint(target)
        appended, captured = _status(s)["origins"][0]["appended"], _captured(metrics)
        # the agent's own endpoint says so too (the compose site's healthcheck reads it)
        assert _metric(metrics, "binlogsync_origin_capture_halted") == 0

        _run(origin, dbname, "SET GLOBAL binlog_format = 'STATEMENT'")
        _insert(origin, dbname, range(11, 16))  # five transactions, logged as statements
        halted = _wait_halted(s)
        assert _metric(metrics, "binlogsync_origin_capture_halted") == 1

        error = halted["error"]
        assert error.startswith("capture stopped at binlog."), error
        assert f"{dbname}.t" in error and "binlog_format is not ROW" in error, error
        assert "INSERT INTO t VALUES (11," in error, error  # the first of them, not a later one
        # It stands after the last transaction it captured; `end` is where the halted one ends.
        assert halted["position"] == applied.position.to_json(), (halted, applied)
        end = halted["end"]
        assert (end["file"], end["offset"]) > (applied.position.file, applied.position.offset)
        shown = _cli("status", "--config", str(s.agents["hub"].config))
        assert shown.returncode == 0, shown.stderr
        assert "HALTED" in shown.stdout and "binlog_format is not ROW" in shown.stdout

        # Nothing diverged: what came before is applied, nothing after the halt, and no
        # counter counts what was not captured.
        assert _ids(target, dbname) == list(range(1, 11))
        assert _checkpoint(target).position == applied.position
        status = _status(s)
        assert status["targets"][0]["backlog"] == 0
        assert status["origins"][0]["appended"] == appended
        assert _captured(metrics) == captured
        log = s.agents["origin"].log.read_text()
        assert log.count("statement-based DML") == 1, log  # said once, not a retry loop

        # Fixed on the origin, then moved past on purpose: `--to current` (after a reseed of
        # the rows in between, which the skip leaves out).
        _run(origin, dbname, "SET GLOBAL binlog_format = 'ROW'")
        reason = "rows 11-15 were written as statements; reseeded by hand"
        said = _capture_skip(s, "current", reason)
        assert "capture of origin moved from" in said, said
        _insert(origin, dbname, range(16, 26))
        _wait_caught_up(s)
        assert _ids(target, dbname) == [*range(1, 11), *range(16, 26)]
        assert _ids(origin, dbname) == list(range(1, 26))

        status = _status(s)
        row = status["origins"][0]
        assert row["halted"] is None
        assert row["capture_skips"] == 1
        assert row["last_capture_skip"]["reason"] == reason
        assert row["last_capture_skip"]["from"] == applied.position.to_json()
        assert _captured(metrics) == captured + 10
        assert _metric(metrics, "binlogsync_origin_capture_halted") == 0
        [(name, skipped_from, skipped_to, recorded)] = _recorded_skips(s)
        assert (name, skipped_from, recorded) == ("origin", applied.position.to_json(), reason)
        assert (skipped_to["file"], skipped_to["offset"]) >= (end["file"], end["offset"])
        shown = _cli("status", "--config", str(s.agents["hub"].config))
        assert "running" in shown.stdout and "HALTED" not in shown.stdout, shown.stdout
        assert "on purpose (capture-skip" in s.agents["hub"].log.read_text()


@pytest.mark.usefixtures("restore_format")
@pytest.mark.parametrize("image", ["MINIMAL", "NOBLOB"])
def test_partial_row_image_at_run_time_halts_capture(
    tmp_path: Path, origin: Server, target: Server, dbname: str, image: str
) -> None:
    """An UPDATE of `n` alone: MINIMAL logs only the key and `n`, NOBLOB leaves out `doc`.
    Then moved past with `capture-skip --to GTID`, the end of the halted transaction,
    so the rows written after it (with FULL again) are not lost."""
    create([origin, target], dbname, TABLE)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        _insert(origin, dbname, range(1, 6))
        _wait_caught_up(s)
        applied = _checkpoint(target)

        _run(origin, dbname, f"SET GLOBAL binlog_row_image = '{image}'")
        _run(origin, dbname, "UPDATE t SET n = n + 100 WHERE id = 1")
        halted = _wait_halted(s)
        error = halted["error"]
        assert f"the row image of {dbname}.t is partial (binlog_row_image is not FULL)" in error, (
            error
        )
        assert halted["position"] == applied.position.to_json()

        _run(origin, dbname, "SET GLOBAL binlog_row_image = 'FULL'")
        _insert(origin, dbname, range(6, 9))  # after the halt: waits for the skip
        assert _ids(target, dbname) == [1, 2, 3, 4, 5]
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SELECT n FROM t WHERE id = 1")
            assert cur.fetchone()[0] == 1
        assert _checkpoint(target).position == applied.position
        fix = _cli("status", "--json", "--config", str(s.agents["hub"].config))
        assert "binlog_row_image=FULL" in json.loads(fix.stdout)["origins"][0]["halted"]["error"]

        end = halted["end"]
        assert end["scheme"] == "gtid" and end["gtid"]  # MariaDB: a GTID state names it
        _capture_skip(s, end["gtid"], f"{image} row image for one UPDATE")
        _wait_caught_up(s)
        assert _ids(target, dbname) == list(range(1, 9))
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SELECT n FROM t WHERE id = 1")
            assert cur.fetchone()[0] == 1  # the skipped UPDATE, as the record says
        row = _status(s)["origins"][0]
        assert row["halted"] is None and row["capture_skips"] == 1
        [(_name, skipped_from, skipped_to, _reason)] = _recorded_skips(s)
        assert skipped_from == applied.position.to_json()
        assert (skipped_to["gtid"], skipped_to["scheme"]) == (end["gtid"], "gtid")


@pytest.mark.parametrize(
    ("setting", "value", "statement", "says"),
    [
        ("binlog_format", "STATEMENT", "INSERT INTO t VALUES (10, 10, 'stmt', 'x')", "statement"),
        ("binlog_row_image", "MINIMAL", "UPDATE t SET note = 'minimal' WHERE id = 1", "partial"),
        ("binlog_row_image", "NOBLOB", "UPDATE t SET note = 'noblob' WHERE id = 1", "partial"),
    ],
)
def test_a_setting_changed_at_run_time_halts_capture_until_an_explicit_skip(
    tmp_path: Path,
    origin: Server,
    target: Server,
    dbname: str,
    setting: str,
    value: str,
    statement: str,
    says: str,
) -> None:
    """The setting put back right after the offending statement, a row written after it:
    capture still stops at the offending one, and `--to current` moves past all of it."""
    create([origin, target], dbname, TABLE)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        _run(origin, dbname, "INSERT INTO t VALUES (1, 1, 'row', 'x')")
        _wait_caught_up(s)
        with global_setting(origin, setting, value):
            _run(origin, dbname, statement, "INSERT INTO t VALUES (11, 11, 'after', 'x')")
        _run(origin, dbname, "INSERT INTO t VALUES (12, 12, 'row again', 'x')")

        halted = _wait_halted(s)
        assert says.lower() in halted["error"].lower(), halted
        assert halted["position"] is not None and "capture stopped at" in halted["error"]
        # Stopped there: nothing after the event reached the target, nothing was skipped.
        assert _ids(target, dbname) == [1]
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SELECT note FROM t WHERE id = 1")
            assert cur.fetchone()[0] == "row"
        stays = _status(s)["origins"][0]
        assert stays["halted"] is not None and stays["capture_skips"] == 0

        done = _capture_skip(s, "current", f"{setting}={value} for a test; reseeded by hand")
        assert "moved from" in done
        _run(origin, dbname, "INSERT INTO t VALUES (13, 13, 'after skip', 'x')")
        _wait_caught_up(s)
        assert _ids(target, dbname)[-1] == 13 and 11 not in _ids(target, dbname)
        after = _status(s)["origins"][0]
        assert after["halted"] is None
        assert after["capture_skips"] == 1
        assert setting in after["last_capture_skip"]["reason"]


DROPPABLE = (
    "CREATE TABLE c (id INT PRIMARY KEY, keep_me INT, gone VARCHAR(20) NOT NULL DEFAULT 'dflt')"
)


def _apply_error(s: LocalSite) -> str:
    def failing() -> str | None:
        return _status(s)["targets"][0]["last_error"]  # type: ignore[no-any-return]

    try:
        return wait_until(failing, 60, 0.05, "the apply error in status")  # type: ignore[no-any-return]
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{s.logs()}") from None


@pytest.mark.parametrize("restart", [False, True], ids=["running", "target agent restarted"])
def test_a_column_dropped_on_the_origin_stops_apply_until_the_target_drops_it(
    tmp_path: Path, origin: Server, target: Server, dbname: str, restart: bool
) -> None:
    """The origin drops `gone`; the target still has it. The next row would get the default
    'dflt' on the target without a word: instead apply stops at the DDL with the reason in
    status and the target agent's log, also after a restart of the target agent (a check at
    the next row, from memory, once let a restarted agent fill the default with only a
    warning), and resumes by itself once the target drops the column too."""
    create([origin, target], dbname, DROPPABLE)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        _run(origin, dbname, *(f"INSERT INTO c VALUES ({i}, {i}, 'x{i}')" for i in (1, 2, 3)))
        _wait_caught_up(s)
        applied = _checkpoint(target)
        _run(origin, dbname, "ALTER TABLE c DROP COLUMN gone")
        _run(origin, dbname, "INSERT INTO c VALUES (4, 4)")
        error = _apply_error(s)
        log = s.agents[target.name].log
        since = 0
        if restart:
            s.stop(target.name)
            since = log.stat().st_size
            s.start(target.name)

        def said() -> bool:
            with log.open("rb") as handle:
                handle.seek(since)
                return b"drop `gone` on the target" in handle.read()

        wait_until(said, 60, 0.05, "the error and its fix in the target agent's log")
        assert (
            f"`{dbname}`.`c` on target root@127.0.0.1:{target.port}: the origin dropped "
            "column(s) `gone` (ALTER TABLE c DROP COLUMN gone), which the target still has" in error
        ), error
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM c WHERE gone = 'dflt' OR id = 4")
            assert cur.fetchone()[0] == 0  # not filled with the default
        assert _checkpoint(target).position == applied.position  # the DDL waits
        shown = _cli("status", "--config", str(s.agents["hub"].config))
        assert "the origin dropped column(s) `gone`" in shown.stdout, shown.stdout

        _run(target, dbname, "ALTER TABLE c DROP COLUMN gone")  # the DBA follows the origin
        _wait_caught_up(s)
        assert table_rows(origin, dbname, "c") == table_rows(target, dbname, "c")
        wait_until(
            lambda: _status(s)["targets"][0]["last_error"] is None, 30, 0.05, "error cleared"
        )
