"""The PostgreSQL store (apply/postgres.py) on a private PostgreSQL server: the COPY path of a
long run of upserts (the last image of a key wins), replays skipped by the checkpoint in the
same transaction, a checkpoint moved by someone else refused, a table the target lacks named
with the fix, and a column it lacks named."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from binlogsync.apply.postgres import COPY_ROWS, PostgresStore, checkpoints
from binlogsync.devsite.pg_sandbox import PgServer
from binlogsync.errors import ApplyError, MissingTableError, SchemaMismatchError
from binlogsync.model import Change, Transaction
from binlogsync.position import Position

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    server = PgServer().start()
    try:
        with server.connect() as conn:
            conn.execute("CREATE SCHEMA shop")
            conn.execute("CREATE TABLE shop.t (id bigint PRIMARY KEY, note text)")
        yield server
    finally:
        server.remove()


def pos(seq: int) -> Position:
    return Position("binlog.000001", seq, f"0-1-{seq}", scheme="gtid")


def ins(seq: int, *rows: tuple[Any, ...]) -> Transaction:
    return Transaction(pos(seq), 0.0, (Change("insert", "shop", "t", ("id", "note"), after=rows),))


def test_a_long_run_goes_through_copy_and_replays_are_skipped(pg: PgServer) -> None:
    store = PostgresStore(pg.url, "db1")
    count = COPY_ROWS * 3
    txs = [ins(i, (i, f"n{i}")) for i in range(1, count + 1)]
    # The same key again later in the run: its last image wins.
    txs.append(ins(count + 1, (5, "last")))
    assert store.apply(txs) == pos(count + 1)
    assert store.apply(txs[:10]) == pos(count + 1)  # a replay: nothing applied twice
    with pg.connect() as conn:
        assert conn.execute("SELECT count(*) FROM shop.t").fetchone() == (count,)
        assert conn.execute("SELECT note FROM shop.t WHERE id = 5").fetchone() == ("last",)
    assert checkpoints(pg.url)["db1"]["gtid"] == f"0-1-{count + 1}"
    with pg.connect() as conn:
        conn.execute("UPDATE binlogsync.checkpoint SET position = jsonb_set(position, "
                     "'{gtid}', '\"0-1-999999\"') WHERE origin = 'db1'")  # fmt: skip
    with pytest.raises(ApplyError, match="moved"):
        store.apply([ins(count + 2, (count + 2, "x"))])
    store.close()


def test_missing_tables_and_columns_are_named(pg: PgServer) -> None:
    store = PostgresStore(pg.url, "db2")
    missing = Transaction(pos(1), 0.0, (Change("insert", "shop", "nope", ("id",), after=((1,),)),))
    with pytest.raises(MissingTableError, match="no table shop.nope"):
        store.apply([missing])
    extra = Transaction(pos(1), 0.0, (Change("insert", "shop", "t", ("id", "note", "added"),
                                             after=((1, "a", 2),)),))  # fmt: skip
    with pytest.raises(SchemaMismatchError, match="has no column added"):
        store.apply([extra])
    store.close()
