"""Schema changes that follow the origin (issue 8, part 3), from capture to apply: the origin's
DDL is captured with the table's definition (capture/reader.py + tabledef.py), and an Applier
with `schema_changes` set builds its own DDL (engines/mariadb/schemachange.py), then applies the rows
that use the new shape. Each ends with the tables equal (CHECKSUM TABLE and definitions); each
refused case stops with what differs and what to run."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from binlogsync.apply import Applier
from binlogsync.capture.positions import current_position
from binlogsync.capture.reader import BinlogReader
from binlogsync.config import DatabaseSettings
from binlogsync.engines.mariadb.schemachange import Mode
from binlogsync.errors import ProtocolError, SchemaMismatchError
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync.tabledef import describe
from binlogsync.tables import TableFilter
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Server

pytestmark = pytest.mark.integration
_ids = itertools.count(7600)


def _db(server: Server) -> DatabaseSettings:
    return DatabaseSettings(server.host, server.port, server.user, server.password)


def _capture(origin: Server, dbname: str, statements: list[str]) -> list[Transaction]:
    start = current_position(_db(origin))
    origin.sql(*statements, db=dbname)
    return _capture_from(origin, dbname, start)


def _capture_from(origin: Server, dbname: str, start: Position) -> list[Transaction]:
    db = _db(origin)
    end = current_position(db)
    reader = BinlogReader(db, next(_ids), start, TableFilter((f"{dbname}.*",)))
    out: list[Transaction] = []
    try:
        for item in reader.transactions():
            assert isinstance(item, Transaction)
            out.append(item)
            if item.position.gtid == end.gtid:
                break
    finally:
        reader.close()
    return out


def _checksums(server: Server, dbname: str, *tables: str) -> list[Any]:
    with server.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("CHECKSUM TABLE " + ", ".join(f"`{t}`" for t in tables))
        return [row[1] for row in cur.fetchall()]


def _shape(server: Server, dbname: str, table: str) -> Any:
    with server.connect() as conn, conn.cursor() as cur:
        found = describe(cur, dbname, table)
    assert found is not None
    return (found.columns, found.primary_key, found.indexes)


@pytest.fixture
def pair(origin: Server, target: Server, dbname: str) -> Iterator[tuple[Server, Server, str]]:
    for server in (origin, target):
        server.sql(f"CREATE DATABASE `{dbname}`", db="mysql")
        server.sql("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10), b INT)", db=dbname)
    yield origin, target, dbname


def _applier(target: Server, dbname: str, mode: Mode) -> Applier:
    return Applier(_db(target), f"o-{dbname}"[:64], schema_changes=mode)


FOLLOWED = [
    (
        "additive",
        ["ALTER TABLE t ADD COLUMN c DATETIME(3) NULL", "INSERT INTO t VALUES (3, 'x', 3, NOW(3))"],
        ["t"],
    ),
    (
        "additive",
        ["ALTER TABLE t MODIFY a VARCHAR(200)", f"INSERT INTO t VALUES (3, '{'y' * 150}', 3)"],
        ["t"],
    ),
    ("additive", ["ALTER TABLE t ADD INDEX kb (b)", "INSERT INTO t VALUES (3, 'z', 3)"], ["t"]),
    (
        "additive",
        [
            "CREATE TABLE n (id BIGINT UNSIGNED PRIMARY KEY, v DECIMAL(10,2) NOT NULL DEFAULT 0)",
            "INSERT INTO n VALUES (1, 2.5), (2, 3.75)",
            "INSERT INTO t VALUES (3, 'w', 3)",
        ],
        ["t", "n"],
    ),
    ("all", ["ALTER TABLE t DROP COLUMN b", "INSERT INTO t VALUES (3, 'v')"], ["t"]),
    (
        "all",
        ["ALTER TABLE t RENAME COLUMN a TO a2", "INSERT INTO t VALUES (3, 'r', 3)"],
        ["t"],
    ),
]


@pytest.mark.parametrize(
    ("mode", "statements", "tables"),
    FOLLOWED,
    ids=["add column", "widen varchar", "add index", "new table", "drop column", "rename column"],
)
def test_the_target_follows(
    pair: tuple[Server, Server, str], mode: Mode, statements: list[str], tables: list[str]
) -> None:
    origin, target, dbname = pair
    for server in (origin, target):
        server.sql("INSERT INTO t VALUES (1, 'one', 1), (2, 'two', 2)", db=dbname)
    txns = _capture(origin, dbname, statements)
    ddl = [c for t in txns for c in t.changes if c.kind == "ddl"]
    assert ddl and all(c.definition is not None for c in ddl)
    with _applier(target, dbname, mode) as applier:
        applier.apply(txns)
        # Applied again (a replay after a crash): the checkpoint skips everything.
        checkpoint = applier.apply(txns)
    assert checkpoint == txns[-1].position
    for table in tables:
        assert _shape(target, dbname, table) == _shape(origin, dbname, table)
    assert _checksums(target, dbname, *tables) == _checksums(origin, dbname, *tables)


REFUSED = [
    ("additive", "ALTER TABLE t DROP COLUMN b", "column b was dropped on the origin"),
    ("additive", "ALTER TABLE t MODIFY a VARCHAR(5)", "which is not a widening"),
    ("additive", "ALTER TABLE t RENAME COLUMN a TO a2", "column a was renamed to a2"),
    ("off", "ALTER TABLE t ADD COLUMN c INT", None),  # off: today's behaviour, the DDL noted
]


@pytest.mark.parametrize(("mode", "statement", "says"), REFUSED)
def test_what_the_mode_does_not_allow_stops_apply(
    pair: tuple[Server, Server, str], mode: Mode, statement: str, says: str | None
) -> None:
    origin, target, dbname = pair
    before = _shape(target, dbname, "t")
    txns = _capture(origin, dbname, [statement])
    with _applier(target, dbname, mode) as applier:
        if says is None:
            applier.apply(txns)  # noted only; the target's table is the DBA's
        else:
            with pytest.raises(SchemaMismatchError) as caught:
                applier.apply(txns)
            assert says in str(caught.value)
            assert "run the matching DDL on the target" in str(caught.value)
            assert applier.checkpoint() is None  # nothing moved
    assert _shape(target, dbname, "t") == before


def test_a_definition_about_another_table_is_refused_at_the_edge() -> None:
    change = Change(
        "ddl",
        "s",
        "t",
        statement="ALTER TABLE t ADD c INT",
        definition={"v": 1, "schema": "s", "table": "other", "columns": [], "primary_key": []},
    )
    with pytest.raises(ProtocolError):
        Change.from_wire(change.to_wire())
    rows = Change("insert", "s", "t", ("id",), (), ((1,),)).to_wire() + [{"v": 1}]
    with pytest.raises(ProtocolError, match="only a ddl change"):
        Change.from_wire(rows)


def _tables(server: Server, dbname: str) -> list[str]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
            "ORDER BY TABLE_NAME",
            (dbname,),
        )
        return [row[0] for row in cur.fetchall()]


@pytest.mark.parametrize(
    "rename", ["RENAME TABLE t TO t2", "ALTER TABLE t RENAME TO t2, ADD COLUMN c INT"]
)
def test_a_renamed_table_keeps_its_rows(pair: tuple[Server, Server, str], rename: str) -> None:
    origin, target, dbname = pair
    for server in (origin, target):
        server.sql("INSERT INTO t VALUES (1, 'one', 1), (2, 'two', 2)", db=dbname)
    txns = _capture(origin, dbname, [rename, "INSERT INTO t2 (id, a) VALUES (3, 'three')"])
    with _applier(target, dbname, "additive") as applier, pytest.raises(SchemaMismatchError) as e:
        applier.apply(txns)
    assert "was renamed to" in str(e.value)
    assert _tables(target, dbname) == ["t"]  # never an empty t2 beside it
    with _applier(target, dbname, "all") as applier:
        applier.apply(txns)
    assert _tables(target, dbname) == ["t2"]
    assert _shape(target, dbname, "t2") == _shape(origin, dbname, "t2")
    assert _checksums(target, dbname, "t2") == _checksums(origin, dbname, "t2")


def test_a_dropped_table_is_dropped_under_all_and_kept_under_additive(
    pair: tuple[Server, Server, str],
) -> None:
    origin, target, dbname = pair
    txns = _capture(origin, dbname, ["DROP TABLE t"])
    with _applier(target, dbname, "additive") as applier:
        applier.apply(txns)
    assert _tables(target, dbname) == ["t"]
    # Another origin name: its own checkpoint, so the same DDL is applied again under "all".
    with Applier(_db(target), f"p-{dbname}"[:64], schema_changes="all") as applier:
        applier.apply(txns)
    assert _tables(target, dbname) == []


def test_an_alter_of_a_table_the_target_lacks_is_refused(
    pair: tuple[Server, Server, str],
) -> None:
    origin, target, dbname = pair
    origin.sql("CREATE TABLE only_here (id INT PRIMARY KEY)", db=dbname)
    txns = _capture(origin, dbname, ["ALTER TABLE only_here ADD COLUMN c INT"])
    with _applier(target, dbname, "all") as applier, pytest.raises(SchemaMismatchError) as e:
        applier.apply(txns)
    assert "the target has no table" in str(e.value)
    assert _tables(target, dbname) == ["t"]


def _server_clock(server: Server) -> int:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT UNIX_TIMESTAMP()")
        return int(cur.fetchone()[0])


def test_a_definition_read_after_later_ddl_is_not_taken_for_this_ones(
    pair: tuple[Server, Server, str],
) -> None:
    """Capture behind: when it reaches ADD COLUMN … DEFAULT 0, the origin's table already has
    DEFAULT 5 from a later DDL; taking that shape would fill the target's existing rows with
    5 where the origin has 0. The later DDL runs two seconds of the server's clock after the
    first (the time capture would be behind), so the first DDL's definition says it is not its
    own, and apply stops there."""
    origin, target, dbname = pair
    for server in (origin, target):
        server.sql("INSERT INTO t VALUES (1, 'one', 1)", db=dbname)
    db = _db(origin)
    start = current_position(db)
    origin.sql("ALTER TABLE t ADD COLUMN c INT DEFAULT 0", db=dbname)
    first_done = _server_clock(origin)
    wait_until(lambda: _server_clock(origin) >= first_done + 3, 10, 0.1, "3 s of server clock")
    origin.sql("ALTER TABLE t ALTER COLUMN c SET DEFAULT 5", db=dbname)
    txns = _capture_from(origin, dbname, start)
    first, second = [c for t in txns for c in t.changes if c.kind == "ddl"]
    assert first.definition is not None and "changed again" in first.definition["unsupported"]
    assert second.definition is not None and second.definition["unsupported"] is None
    with _applier(target, dbname, "all") as applier, pytest.raises(SchemaMismatchError) as e:
        applier.apply(txns)
    assert "changed again on the origin after this DDL" in str(e.value)
    assert [c.name for c in _shape(target, dbname, "t")[0]] == ["id", "a", "b"]
