"""The Redis target store (apply/redisstore.py) against a real redis-server: a hash per row
with every type as text, deletes, key-changing updates, truncates (with rows of the same
group), TTL, replays skipped exactly by the checkpoint in the same MULTI/EXEC, a checkpoint
moved by someone else refused, and a table with no known definition named with the fix."""

from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from binlogsync.apply.redisstore import RedisStore, checkpoints
from binlogsync.errors import ApplyError, MissingTableError
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync.tabledef import describe
from binlogsync_dev.redis_sandbox import RedisServer
from binlogsync_dev.sandbox import Server
from sitekit import create

pytestmark = pytest.mark.integration

COLUMNS = ("id", "code", "note", "amount", "bin", "at", "t", "tags")


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with tempfile.TemporaryDirectory(prefix="bls-redis-") as root:
        box = RedisServer(Path(root)).start()
        try:
            yield box
        finally:
            box.stop()


@pytest.fixture
def definition(origin: Server, dbname: str) -> dict:  # type: ignore[type-arg]
    create([origin], dbname, "CREATE TABLE t (id INT, code CHAR(2), note VARCHAR(20), "
           "amount DECIMAL(30,10), bin BLOB, at DATETIME(6), t TIME(6), tags SET('a','b'), "
           "PRIMARY KEY (id, code))")  # fmt: skip
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        found = describe(cur, dbname, "t")
    assert found is not None
    return found.to_wire()


def pos(seq: int) -> Position:
    return Position("binlog.000001", seq, f"0-1-{seq}", scheme="gtid")


def row(i: int, code: str = "aa", note: str | None = "n") -> tuple:  # type: ignore[type-arg]
    return (i, code, note, Decimal("12345678901234567890.0123456789"), b"\x00\xffz",
            dt.datetime(2026, 1, 2, 3, 4, 5, 6), dt.timedelta(hours=100, microseconds=5), {"b", "a"})  # fmt: skip


def test_rows_keys_types_and_exactly_once(
    server: RedisServer,
    definition: dict,
    dbname: str,  # type: ignore[type-arg]
) -> None:
    r = server.client()
    r.flushall()
    store = RedisStore(server.url, "db1", ttl=3600)
    ddl = Change("ddl", dbname, "t", statement="CREATE TABLE t …", definition=definition)
    ins = Change("insert", dbname, "t", COLUMNS, after=(row(1), row(2, note=None), row(3)))
    assert store.apply([Transaction(pos(1), 0.0, (ddl, ins))]) == pos(1)
    key = f"{dbname}:t:1:aa"
    assert r.hgetall(key) == {
        b"id": b"1", b"code": b"aa", b"note": b"n",
        b"amount": b"12345678901234567890.0123456789", b"bin": b"\x00\xffz",
        b"at": b"2026-01-02T03:04:05.000006", b"t": b"100:00:00.000005", b"tags": b"a,b",
    }  # fmt: skip
    assert b"note" not in r.hgetall(f"{dbname}:t:2:aa")  # NULL: an absent field
    assert 0 < r.ttl(key) <= 3600
    # The key changes: the row moves. A delete deletes. Replays of applied ones are skipped.
    move = Change("update", dbname, "t", COLUMNS, before=(row(1),), after=(row(1, "bb"),))
    gone = Change("delete", dbname, "t", COLUMNS, before=(row(2, note=None),))
    replay = Change("insert", dbname, "t", COLUMNS, after=(row(99),))
    txs = [Transaction(pos(1), 0.0, (replay,)), Transaction(pos(2), 0.0, (move, gone))]
    assert store.apply(txs) == pos(2)
    assert not r.exists(key) and r.exists(f"{dbname}:t:1:bb") and not r.exists(f"{dbname}:t:99:aa")
    assert not r.exists(f"{dbname}:t:2:aa")
    # A truncate deletes what is there and what its own group wrote before it.
    more = Change("insert", dbname, "t", COLUMNS, after=(row(7),))
    trunc = Change("truncate", dbname, "t")
    after = Change("insert", dbname, "t", COLUMNS, after=(row(8),))
    store.apply([Transaction(pos(3), 0.0, (more,)), Transaction(pos(4), 0.0, (trunc, after))])
    assert sorted(r.scan_iter(match=f"{dbname}:t:*")) == [f"{dbname}:t:8:aa".encode()]
    assert checkpoints(server.url)["db1"]["gtid"] == "0-1-4"
    store.close()
    # A new store (an agent restarted) knows the definition from Redis and the checkpoint.
    again = RedisStore(server.url, "db1")
    assert again.checkpoint() == pos(4)
    again.apply(
        [Transaction(pos(5), 0.0, (Change("insert", dbname, "t", COLUMNS, after=(row(9),)),))]
    )
    assert r.exists(f"{dbname}:t:9:aa")
    r.hset(
        "binlogsync:checkpoint",
        "db1",
        '{"position": {"file": "binlog.000001", "offset": 9, "gtid": "0-1-9", "scheme": "gtid"}}',
    )
    with pytest.raises(ApplyError, match="moved"):
        again.apply([Transaction(pos(6), 0.0, (Change("truncate", dbname, "t"),))])
    again.close()
    r.close()


def test_a_table_without_a_definition_is_named_with_the_fix(server: RedisServer) -> None:
    store = RedisStore(server.url, "db2")
    change = Change("insert", "shop", "unknown", ("id",), after=((1,),))
    with pytest.raises(MissingTableError, match="seed the table"):
        store.apply([Transaction(pos(1), 0.0, (change,))])
    store.close()
