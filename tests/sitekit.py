"""Test kit for end-to-end tests: a LocalSite over the session's sandbox servers, one database
per test, and waits that poll with a deadline."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from binlogsync.engines.postgresql import checkpoints
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.pg_sandbox import PgServer
from binlogsync_dev.sandbox import Server
from binlogsync_dev.verify import caught_up, differences, origin_gtid


def create(servers: list[Server], db: str, *ddl: str) -> None:
    """The same schema on every server (the target's schema is the DBA's, not replicated)."""
    for server in servers:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"USE `{db}`")
            for statement in ddl:
                cur.execute(statement)


@contextmanager
def target_sql_mode(server: Server, mode: str) -> Iterator[None]:
    """The server's global sql_mode set to `mode` for the block (the apply agent's sessions
    start inside it), then put back."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.sql_mode")
        before = cur.fetchone()[0]
        cur.execute("SET GLOBAL sql_mode = %s", (mode,))
    try:
        yield
    finally:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = %s", (before,))


def site(
    tmp_path: Path, origin: Server, targets: list[Server], db: str, **kwargs: object
) -> LocalSite:
    """A new site over the session's servers, as a fresh deployment: the targets keep no
    checkpoint of an earlier test's site (its hub would start capture there, and a test that
    purged the origin's binlog would leave them "reseed needed")."""
    for target in targets:
        with target.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE "
                        "TABLE_SCHEMA = 'binlogsync' AND TABLE_NAME = 'checkpoint'")  # fmt: skip
            if cur.fetchone()[0]:
                cur.execute("DELETE FROM binlogsync.checkpoint WHERE origin = 'origin'")
    return LocalSite(tmp_path / "site", origin, targets, tables=(f"{db}.*",), **kwargs)  # type: ignore[arg-type]


def wait_equal(s: LocalSite, db: str, tables: list[str], timeout: float = 60) -> None:
    """Wait until every target applied the origin's last transaction, then compare rows."""
    gtid = origin_gtid(s.origin)
    for target in s.targets:
        try:
            wait_until(
                lambda t=target: caught_up(t, "origin", gtid),
                timeout,
                0.02,
                f"{target.name} catching up to {gtid}",
            )
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{s.logs()}") from None
        for table in tables:
            problem = differences(s.origin, target, db, table)
            assert not problem, problem


def seed(s: LocalSite, target: str) -> None:
    """`binlogsync seed` of every routed table into `target`, as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", "seed", "--config", str(s.agents["hub"].config),
         "--origin", "origin", "--target", target, "--source", s.origin.url, "--quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + s.logs()


def pg_site(tmp_path: Path, origin: Server, pg: PgServer, db: str, extra: str = "") -> LocalSite:
    """A site whose one target, `pgt`, is the PostgreSQL server `pg` (tables created from the
    origin's definitions by a seed); `extra`: more lines of its [target] section."""
    section = f'[target]\nkind = "postgresql"\nurl = "{pg.url}"\ncreate_tables = true\n{extra}'
    return LocalSite(tmp_path / "site", origin, [Server("pgt", 0, 0, "", 0)],
                     tables=(f"{db}.*",), target_sections={"pgt": section})  # fmt: skip


def wait_pg_caught_up(s: LocalSite, pg: PgServer, timeout: float = 90) -> None:
    """Until the PostgreSQL target's checkpoint holds the origin's current GTID position."""
    gtid = origin_gtid(s.origin)
    try:
        wait_until(
            lambda: checkpoints(pg.url).get("origin", {}).get("gtid") == gtid, timeout, 0.05,
            f"the PostgreSQL target reaching {gtid}",
        )  # fmt: skip
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{s.logs()}") from None
