"""The PostgreSQL store (apply/postgres.py) on a private PostgreSQL server: the COPY path of a
long run of upserts (the last image of a key wins), replays skipped by the checkpoint in the
same transaction, a checkpoint moved by someone else refused, a table the target lacks named
with the fix, a column it lacks named, and zero dates refused or mapped as `zero_dates` says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from binlogsync.apply.postgres import COPY_ROWS, PostgresStore, checkpoints
from binlogsync.errors import ApplyError, MissingTableError, SchemaMismatchError
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync.zerodate import ZeroDate
from binlogsync_dev.pg_sandbox import PgServer

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


ZERO_COLUMNS = ("id", "d", "dtm", "ts", "note")


def _zero_rows(first: int, count: int = 1) -> list[tuple[Any, ...]]:
    return [
        (i, ZeroDate("date", 2024, 0, 10), ZeroDate("datetime", fsp=6), ZeroDate("timestamp"),
         ZeroDate("datetime", 2024, 5, 0, 10, 11, 12))
        for i in range(first, first + count)
    ]  # fmt: skip


@pytest.mark.parametrize("mode", ["error", "null", "epoch"])
def test_zero_dates_are_refused_or_mapped_as_zero_dates_says(pg: PgServer, mode: str) -> None:
    """`error` names the table, the column and the value; `null` and `epoch` map them, through
    single-row upserts and COPY alike; a text column always takes the exact text."""
    table = f"z_{mode}"
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE shop.{table} (id bigint PRIMARY KEY, d date, "
                     "dtm timestamp(6), ts timestamptz(3), note text)")  # fmt: skip
    store = PostgresStore(pg.url, f"zero-{mode}", zero_dates=mode)

    def insert(seq: int, rows: list[tuple[Any, ...]]) -> Transaction:
        return Transaction(
            pos(seq), 0.0, (Change("insert", "shop", table, ZERO_COLUMNS, after=tuple(rows)),)
        )

    try:
        if mode == "error":
            with pytest.raises(ApplyError) as caught:
                store.apply([insert(1, _zero_rows(1))])
            assert f"shop.{table}.d" in caught.value.message
            assert "'2024-00-10'" in caught.value.message
            assert 'zero_dates = "null" or "epoch"' in caught.value.fix
            return
        store.apply([insert(1, _zero_rows(1)), insert(2, _zero_rows(2, COPY_ROWS))])
    finally:
        store.close()
    with pg.connect() as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        got = conn.execute(
            f"SELECT DISTINCT d::text, dtm::text, ts::text, note FROM shop.{table}"
        ).fetchall()
        assert conn.execute(f"SELECT count(*) FROM shop.{table}").fetchone() == (COPY_ROWS + 1,)
    if mode == "null":
        assert got == [(None, None, None, "2024-05-00 10:11:12")]
    else:
        assert got == [
            ("1970-01-01", "1970-01-01 00:00:00", "1970-01-01 00:00:00+00", "2024-05-00 10:11:12")
        ]


def test_a_zero_date_in_a_key_is_never_made_null(pg: PgServer) -> None:
    with pg.connect() as conn:
        conn.execute("CREATE TABLE shop.zk (d date PRIMARY KEY, n int)")
    store = PostgresStore(pg.url, "zero-key", zero_dates="null")
    change = Change("insert", "shop", "zk", ("d", "n"), after=((ZeroDate("date"), 1),))
    try:
        with pytest.raises(ApplyError, match="primary key column") as caught:
            store.apply([Transaction(pos(1), 0.0, (change,))])
        assert "'0000-00-00'" in caught.value.message and "shop.zk.d" in caught.value.message
    finally:
        store.close()
