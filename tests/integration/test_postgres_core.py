"""A PostgreSQL target gets what every kind gets from the exactly-once core (apply/core.py):
groups applied as their net change, a failing group replayed unreduced to name exactly the one
transaction that fails (not a range), and the origin's DDL followed as PostgreSQL's own
statements under apply_schema_changes "additive" and "all" — on a private PostgreSQL server."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from binlogsync.apply.postgres import PostgresStore
from binlogsync.errors import ApplyError, SchemaMismatchError
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync.tabledef import ColumnDef, IndexDef, TableDef
from binlogsync_dev.pg_sandbox import PgServer

pytestmark = pytest.mark.integration

ID = ColumnDef("id", "int", nullable=False)
NOTE = ColumnDef("note", "varchar", 20)


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    server = PgServer().start()
    try:
        yield server
    finally:
        server.remove()


def pos(seq: int) -> Position:
    return Position("binlog.000001", seq, f"0-1-{seq}", scheme="gtid")


def tx(seq: int, *changes: Change) -> Transaction:
    return Transaction(pos(seq), 0.0, changes)


def ins(table: str, columns: tuple[str, ...], *rows: tuple[Any, ...]) -> Change:
    return Change("insert", "s", table, columns, after=rows)


def upd(
    table: str, columns: tuple[str, ...], *pairs: tuple[tuple[Any, ...], tuple[Any, ...]]
) -> Change:
    return Change(
        "update", "s", table, columns, tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    )


def dele(table: str, columns: tuple[str, ...], *rows: tuple[Any, ...]) -> Change:
    return Change("delete", "s", table, columns, before=rows)


def ddl(table: str, statement: str, *columns: ColumnDef, indexes: tuple[IndexDef, ...] = (),
        renamed: dict[str, str] | None = None) -> Change:  # fmt: skip
    definition = TableDef("s", table, columns, ("id",), indexes, renamed_from=renamed or {})
    return Change("ddl", "s", table, statement=statement, definition=definition.to_wire())


def rows(pg: PgServer, query: str) -> list[tuple[Any, ...]]:
    with pg.connect() as conn:
        return list(conn.execute(query).fetchall())


def test_a_group_reduces_and_a_failing_one_names_its_transaction(
    pg: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    with pg.connect() as conn:
        conn.execute("CREATE SCHEMA s")
        conn.execute("CREATE TABLE s.r (id integer PRIMARY KEY, note varchar(20))")
    c = ("id", "note")
    store = PostgresStore(pg.url, "db1")
    # Inserted, updated, moved, deleted inside one group: only the net change lands.
    group = [
        tx(1, ins("r", c, (1, "a"), (2, "b"), (3, "c"))),
        tx(2, upd("r", c, ((1, "a"), (1, "a2")))),
        tx(3, upd("r", c, ((2, "b"), (20, "b")))),  # the key moves
        tx(4, dele("r", c, (3, "c"))),
    ]
    assert store.apply(group) == pos(4)
    assert rows(pg, "SELECT id, note FROM s.r ORDER BY id") == [(1, "a2"), (20, "b")]
    # A group whose third transaction carries a value PostgreSQL cannot hold: the reduced group
    # fails, the unreduced replay finds exactly that transaction; nothing of the group lands.
    caplog.set_level(logging.WARNING)
    bad = [
        tx(5, ins("r", c, (5, "fine"))),
        tx(6, upd("r", c, ((5, "fine"), (5, "again")))),
        tx(7, ins("r", c, (7, "nul\x00here"))),
        tx(8, ins("r", c, (8, "after"))),
    ]
    with pytest.raises(ApplyError) as caught:
        store.apply(bad)
    assert caught.value.position == pos(7), caught.value
    assert "NUL" in str(caught.value) and "…" not in str(caught.value)
    assert rows(pg, "SELECT count(*) FROM s.r WHERE id IN (5, 7, 8)") == [(0,)]
    # What comes before it applies on its own (as the target role does), then the rest fails
    # again on the same transaction.
    assert store.apply(bad[:2]) == pos(6)
    with pytest.raises(ApplyError) as again:
        store.apply(bad[2:])
    assert again.value.position == pos(7)
    store.close()


def test_the_origins_ddl_is_followed_additively_then_all(pg: PgServer) -> None:
    store = PostgresStore(pg.url, "db2", schema_changes="additive")
    c = ("id", "note")
    # A new table: made from the origin's CREATE.
    assert store.apply([tx(1, ddl("t", "CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(20))",
                                  ID, NOTE))]) == pos(1)  # fmt: skip
    assert store.apply([tx(2, ins("t", c, (1, "one"), (2, "two")))]) == pos(2)
    # A new NOT NULL column (existing rows get MySQL's implicit default), a widened type, an
    # index: all followed, and the rows that use them flow.
    qty = ColumnDef("qty", "int", nullable=False)
    wide = ColumnDef("note", "varchar", 200)
    alter = ddl("t", "ALTER TABLE t ADD qty INT NOT NULL, MODIFY note VARCHAR(200), ADD KEY n (note)",
                ID, wide, qty, indexes=(IndexDef("n", False, (("note", None),)),))  # fmt: skip
    c3 = ("id", "note", "qty")
    assert store.apply([tx(3, alter), tx(4, ins("t", c3, (3, "x" * 150, 7)))]) == pos(4)
    assert rows(pg, "SELECT id, note, qty FROM s.t ORDER BY id") == [
        (1, "one", 0), (2, "two", 0), (3, "x" * 150, 7),
    ]  # fmt: skip
    assert rows(pg, "SELECT indexname FROM pg_indexes WHERE tablename = 't' AND "
                    "indexname = 't_n'") == [("t_n",)]  # fmt: skip
    # Narrowing is refused under "additive", naming the column and the fix.
    narrow = ddl(
        "t", "ALTER TABLE t MODIFY note VARCHAR(5)", ID, ColumnDef("note", "varchar", 5), qty
    )
    with pytest.raises(SchemaMismatchError, match="note would change") as refused:
        store.apply([tx(5, narrow)])
    assert 'apply_schema_changes = "all"' in str(refused.value)
    assert store.checkpoint() == pos(4)  # nothing applied
    store.close()
    # Under "all": a renamed column keeps its values, a dropped column goes.
    every = PostgresStore(pg.url, "db2", schema_changes="all")
    renamed = ddl("t", "ALTER TABLE t CHANGE note label VARCHAR(200), DROP qty",
                  ID, ColumnDef("label", "varchar", 200), renamed={"label": "note"})  # fmt: skip
    assert every.apply([tx(5, renamed), tx(6, ins("t", ("id", "label"), (4, "four")))]) == pos(6)
    assert rows(pg, "SELECT id, label FROM s.t ORDER BY id") == [
        (1, "one"), (2, "two"), (3, "x" * 150), (4, "four"),
    ]  # fmt: skip
    assert rows(pg, "SELECT column_name FROM information_schema.columns WHERE table_schema = 's' "
                    "AND table_name = 't' ORDER BY ordinal_position") == [("id",), ("label",)]  # fmt: skip
    every.close()


def test_without_schema_following_a_new_column_stops_apply_naming_it(pg: PgServer) -> None:
    with pg.connect() as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS s")
        conn.execute("CREATE TABLE s.u (id integer PRIMARY KEY, note varchar(20))")
    store = PostgresStore(pg.url, "db3")
    change = ins("u", ("id", "note", "extra"), (1, "a", 5))
    with pytest.raises(SchemaMismatchError, match="no column extra") as caught:
        store.apply([tx(1, change)])
    assert caught.value.position == pos(1) and "additive" in str(caught.value)
    store.close()
