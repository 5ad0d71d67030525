"""`binlogsync skip` on every kind of target: the command reads the target agent's config and
skips through that kind's adapter, recording the skip where the kind keeps records (PostgreSQL's
binlogsync.skipped, Redis's list binlogsync:skipped, a `skip` line of the audit log), and
the next apply goes on after the skipped transaction. Real PostgreSQL and Redis servers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from binlogsync.apply.auditlog import AuditLogStore
from binlogsync.apply.postgres import PostgresStore
from binlogsync.apply.redisstore import RedisStore
from binlogsync.errors import ApplyError
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync.tabledef import ColumnDef, TableDef
from binlogsync_dev.pg_sandbox import PgServer
from binlogsync_dev.redis_sandbox import RedisServer

pytestmark = pytest.mark.integration

DEFINITION = TableDef("s", "t", (ColumnDef("id", "int", nullable=False),
                                 ColumnDef("v", "int")), ("id",))  # fmt: skip


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    server = PgServer().start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="module")
def rs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()


def pos(seq: int) -> Position:
    return Position("binlog.000001", seq, f"0-1-{seq}", scheme="gtid")


def tx(seq: int, *rows: tuple[object, ...], table: str = "t") -> Transaction:
    return Transaction(pos(seq), 0.0, (Change("insert", "s", table, ("id", "v"), after=rows),))


def skip(tmp_path: Path, target: str, position: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "target.toml"
    config.write_text(f'[client]\nname = "t1"\nhub = "tcp://127.0.0.1:5555"\n\n[target]\n{target}')
    return subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", "skip", "--config", str(config), "--origin",
         "db1", "--position", position, "--reason", "poison (TICKET-7)"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_postgresql(tmp_path: Path, pg: PgServer) -> None:
    with pg.connect() as conn:
        conn.execute("CREATE SCHEMA s")
        conn.execute("CREATE TABLE s.t (id integer PRIMARY KEY, v integer CHECK (v >= 0))")
    with PostgresStore(pg.url, "db1") as store:
        store.apply([tx(1, (1, 1))])
        with pytest.raises(ApplyError) as caught:
            store.apply([tx(2, (2, -1)), tx(3, (3, 3))])
        assert caught.value.position == pos(2)
        done = skip(tmp_path, f'kind = "postgresql"\nurl = "{pg.url}"\n', "0-1-2")
        assert done.returncode == 0, done.stderr
        assert "postgresql target" in done.stdout and "binlogsync.skipped" in done.stdout
        again = skip(tmp_path, f'kind = "postgresql"\nurl = "{pg.url}"\n', "0-1-2")
        assert again.returncode == 1 and "already applied" in again.stderr
        assert store.apply([tx(2, (2, -1)), tx(3, (3, 3))]) == pos(3)
    with pg.connect() as conn:
        assert conn.execute("SELECT id FROM s.t ORDER BY id").fetchall() == [(1,), (3,)]
        [(position, reason)] = conn.execute(
            "SELECT position, reason FROM binlogsync.skipped WHERE origin = 'db1'"
        ).fetchall()
    assert Position.from_json(position) == pos(2) and reason == "poison (TICKET-7)"


def test_redis(tmp_path: Path, rs: RedisServer) -> None:
    with RedisStore(rs.url, "db1") as store:
        store.repair(Transaction(pos(1), 0.0, (Change("ddl", "s", "t", statement="CREATE",
                     definition=DEFINITION.to_wire()),)), pos(1), seed=True)  # fmt: skip
        with pytest.raises(ApplyError) as caught:  # no definition of s.u: cannot key its rows
            store.apply([tx(2, (2, 2), table="u"), tx(3, (3, 3))])
        assert caught.value.position == pos(2)
        done = skip(tmp_path, f'kind = "redis"\nurl = "{rs.url}"\n', "0-1-2")
        assert done.returncode == 0, done.stderr
        assert "binlogsync:skipped" in done.stdout
        assert store.apply([tx(2, (2, 2), table="u"), tx(3, (3, 3))]) == pos(3)
    client = redis.Redis.from_url(rs.url)
    assert client.hgetall("s:t:3") == {b"id": b"3", b"v": b"3"} and not client.exists("s:u:2")
    [record] = [json.loads(r) for r in client.lrange("binlogsync:skipped", 0, -1)]
    assert Position.from_json(record["position"]) == pos(2)
    assert record["reason"] == "poison (TICKET-7)" and record["origin"] == "db1"


def test_audit_log(tmp_path: Path) -> None:
    with AuditLogStore(tmp_path / "audit", "db1", 1 << 20, epoch="e1") as store:
        store.apply([tx(1, (1, 1))])
    done = skip(tmp_path, f'kind = "auditlog"\npath = "{tmp_path / "audit"}"\n', "0-1-2")
    assert done.returncode == 0, done.stderr
    with AuditLogStore(tmp_path / "audit", "db1", 1 << 20) as store:
        assert store.checkpoint() == pos(2)
        assert store.apply([tx(2, (2, 2)), tx(3, (3, 3))]) == pos(3)
    lines = [json.loads(x) for x in (tmp_path / "audit/db1/audit-000001.jsonl").read_text()
             .splitlines()]  # fmt: skip
    assert [(x["gtid"], x["kind"]) for x in lines] == [
        ("0-1-1", "insert"), ("0-1-2", "skip"), ("0-1-3", "insert")]  # fmt: skip
    assert lines[1]["reason"] == "poison (TICKET-7)"
    checkpoint = json.loads((tmp_path / "audit/db1/checkpoint.json").read_text())
    assert checkpoint["epoch"] == "e1"  # the hub log's epoch survives the skip
