"""Settings that change under a running origin agent: `binlog_format = STATEMENT` or a partial
`binlog_row_image` puts events in the binlog that carry no full row images. Capture stops at
the first one, says so in `status`, never skips; moving past it is an explicit, recorded
`capture-skip` (issue 6, defect 3: capture once logged an error and carried on, the target
missed the rows, and status showed all applied).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from binlogsync.devsite.localsite import LocalSite, wait_until
from binlogsync.devsite.sandbox import Server
from binlogsync.devsite.verify import caught_up, origin_gtid
from binlogsync.hubcommands import fetch_status
from sitekit import create, site

pytestmark = pytest.mark.e2e
AGENTS = str(Path(__file__).resolve().parents[2] / "agents")
T = "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), b TEXT)"  # NOBLOB leaves out b


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


def _run(db: Server, database: str, *statements: str) -> None:
    """On a new session: SET GLOBAL applies to sessions that start after it."""
    with db.connect(database) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def _ids(server: Server, database: str) -> list[int]:
    with server.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM t ORDER BY id")
        return [int(r[0]) for r in cur.fetchall()]


def _origin_status(s: LocalSite) -> dict[str, Any]:
    return fetch_status(str(s.agents["hub"].config))["origins"][0]  # type: ignore[no-any-return]


def _replicated(s: LocalSite, target: Server) -> None:
    gtid = origin_gtid(s.origin)
    wait_until(lambda: caught_up(target, "origin", gtid), 60, 0.05, "catch-up")


def _capture_skip(s: LocalSite, reason: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "binlogsync.cli",
            "capture-skip",
            "--config",
            str(s.agents["hub"].config),
            "--origin",
            "origin",
            "--to",
            "current",
            "--reason",
            reason,
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": AGENTS},
    )


@pytest.mark.parametrize(
    ("setting", "value", "statement", "says"),
    [
        ("binlog_format", "STATEMENT", "INSERT INTO t VALUES (10, 'stmt', 'x')", "statement"),
        ("binlog_row_image", "MINIMAL", "UPDATE t SET v = 'minimal' WHERE id = 1", "partial"),
        ("binlog_row_image", "NOBLOB", "UPDATE t SET v = 'noblob' WHERE id = 1", "partial"),
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
    create([origin, target], dbname, T)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        _run(origin, dbname, "INSERT INTO t VALUES (1, 'row', 'x')")
        _replicated(s, target)
        with global_setting(origin, setting, value):
            _run(origin, dbname, statement, "INSERT INTO t VALUES (11, 'after', 'x')")
        _run(origin, dbname, "INSERT INTO t VALUES (12, 'row again', 'x')")

        halted = wait_until(lambda: _origin_status(s)["halted"], 60, 0.1, "HALTED in status")
        assert says.lower() in halted["error"].lower(), halted
        assert halted["position"] is not None and "capture stopped at" in halted["error"]
        # Stopped there: nothing after the event reached the target, nothing was skipped.
        assert _ids(target, dbname) == [1]
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SELECT v FROM t WHERE id = 1")
            assert cur.fetchone()[0] == "row"
        stays = _origin_status(s)
        assert stays["halted"] is not None and stays["capture_skips"] == 0

        done = _capture_skip(s, f"{setting}={value} for a test; reseeded by hand")
        assert done.returncode == 0, done.stderr
        assert "moved from" in done.stdout
        _run(origin, dbname, "INSERT INTO t VALUES (13, 'after skip', 'x')")
        _replicated(s, target)
        assert _ids(target, dbname)[-1] == 13 and 11 not in _ids(target, dbname)
        after = _origin_status(s)
        assert after["halted"] is None
        assert after["capture_skips"] == 1
        assert setting in after["last_capture_skip"]["reason"]
