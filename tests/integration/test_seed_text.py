"""A seed chunk's rows as the origin server's text (rowtext.py, seed/chunks.py `text_sql`) hold
exactly what the typed form holds, for every column type: read into values at a target that
takes values, and loaded as they came by a MariaDB target's LOAD DATA."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from applykit import Recording
from binlogsync.codec import pack, text_conversions, unpack
from binlogsync.config import DatabaseSettings
from binlogsync.engines.mariadb import loaddata
from binlogsync.model import Change, Transaction, body_from_wire
from binlogsync.position import Position
from binlogsync.rowtext import TextRows
from binlogsync.seed import chunks, readers
from binlogsync.seed.tables import SeedTable, plan
from binlogsync.transport.frames import check_body
from binlogsync_dev.sandbox import Server
from everytype import ROWS, create

pytestmark = pytest.mark.integration


@pytest.fixture
def table(target: Server, dbname: str) -> SeedTable:
    with target.connect() as conn, conn.cursor() as cur:
        create(cur, dbname)
        (found,) = plan(cur, [f"{dbname}.t"], None)
    return found


def _read(target: Server, table: SeedTable, limit: int = 100) -> Change:
    """The table's one chunk as the hub and a target see it: packed, checked, decoded."""
    with target.connect(conv=text_conversions()) as conn:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
        got = readers.read(conn, readers.Task(0, table, None, None, limit, False, 1 << 30))
    (piece,) = got.pieces
    check_body(piece.body, 1 << 30)
    (change,) = body_from_wire(unpack(piece.body)).changes
    return change


def _typed(table: SeedTable) -> SeedTable:
    """The same table read as values (a table whose description is not exact is)."""
    definition = dataclasses.replace(table.definition, unsupported="read as values")
    return dataclasses.replace(table, definition=definition)


def _typed_values(rows: Any) -> list[list[tuple[type, Any]]]:
    return [[(type(v), v) for v in row] for row in rows]


def test_every_type_reads_into_the_values_the_typed_form_carries(
    target: Server, table: SeedTable
) -> None:
    text, typed = _read(target, table), _read(target, _typed(table))
    assert isinstance(text.after, TextRows) and not isinstance(typed.after, TextRows)
    assert len(text.after) == len(typed.after) == len(ROWS)
    assert _typed_values(text.after) == _typed_values(typed.after)
    # One row alone (a piece's last key) reads the same as all of them.
    assert text.after[-1] == typed.after[-1]
    assert chunks.key_of(table, text.after[0]) == (1,)


def test_every_type_loads_by_load_data_as_the_origin_holds_it(
    target: Server, table: SeedTable, dbname: str
) -> None:
    change = _read(target, table)
    assert isinstance(change.after, TextRows)
    # BIT is not LOAD DATA's (statements.py keeps the upsert for it): copy the other columns.
    keep = [i for i, c in enumerate(table.columns) if c != "bt"]
    rows = TextRows(
        [b"\t".join(line.split(b"\t")[i] for i in keep) for line in change.after.lines],
        tuple(change.after.forms[i] for i in keep),
    )
    names = [f"`{table.columns[i]}`" for i in keep]
    with target.connect(dbname, local_infile=True) as conn, conn.cursor() as cur:
        loaddata.install()
        loaddata.mark(conn)
        cur.execute("SET SESSION time_zone = '+00:00', sql_mode = ''")
        cur.execute("CREATE TABLE copy LIKE t")
        cur.execute("ALTER TABLE copy DROP COLUMN bt")
        sql, name = loaddata.statement("copy", names, rows.hexed)
        data, hexed = loaddata.rows(rows, range(len(keep)))
        assert (data, hexed) == (rows.text, rows.hexed)  # as it came
        loaddata.execute(cur, sql, name, data, 1 << 20)
        assert cur.rowcount == len(ROWS)
        conn.commit()
        listed = ", ".join(names)
        cur.execute(f"SELECT {listed} FROM t ORDER BY id")
        origin = cur.fetchall()
        cur.execute(f"SELECT {listed} FROM copy ORDER BY id")
        assert cur.fetchall() == origin


def test_a_chunk_over_its_byte_limit_goes_in_pieces_that_end_at_their_last_key(
    target: Server, table: SeedTable
) -> None:
    with target.connect(conv=text_conversions()) as conn:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
        got = readers.read(conn, readers.Task(0, table, None, None, 100, False, 2048))
    assert len(got.pieces) > 1
    ids = []
    for piece in got.pieces:
        (change,) = body_from_wire(unpack(piece.body)).changes
        assert isinstance(change.after, TextRows)
        ids.extend(row[0] for row in change.after)
    assert ids == sorted(ids) and len(ids) == len(ROWS)
    assert [p.last_key for p in got.pieces[:-1]] == [
        (unpack(pack(ids[sum(p.rows for p in got.pieces[: n + 1]) - 1])),)
        for n in range(len(got.pieces) - 1)
    ]


def test_a_row_whose_text_the_server_cannot_write_is_read_as_values(
    target: Server, dbname: str
) -> None:
    """A BLOB longer than half the server's max_allowed_packet has no HEX() (NULL, with a
    warning): that chunk is read as values, in the same snapshot, never loaded as NULL."""
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@max_allowed_packet")
        (packet,) = cur.fetchone()
        size = packet * 3 // 5
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(f"CREATE TABLE `{dbname}`.t (id INT PRIMARY KEY, b LONGBLOB, v VARCHAR(9))")
        cur.execute(
            f"INSERT INTO `{dbname}`.t VALUES (1, 'small', 'a'), (2, REPEAT('x', {size}), 'b')"
        )
        cur.execute(f"INSERT INTO `{dbname}`.t VALUES (3, 'small', 'c')")
        (table,) = plan(cur, [f"{dbname}.t"], None)
    with target.connect(conv=text_conversions()) as conn:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
        small = chunks.read(conn, table, None, 1)
        whole = chunks.read(conn, table, None, 10)
    assert isinstance(small.rows, TextRows) and small.last_key == (1,)
    assert not isinstance(whole.rows, TextRows)
    assert [(r[0], len(r[1]), r[2]) for r in whole.rows] == [
        (1, 5, "a"),
        (2, size, "b"),
        (3, 5, "c"),
    ]
    assert whole.last_key == (3,)


def test_enum_and_set_members_are_escaped_where_they_need_it(target: Server, dbname: str) -> None:
    """Members with a tab or a backslash (escaped) beside plain ones (written as they are)."""
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(
            f"CREATE TABLE `{dbname}`.t (id INT PRIMARY KEY, e ENUM('t\\tab', 'b\\\\s', 'p'), "
            "s SET('x\\ny', 'z'), q ENUM('a', 'b') CHARACTER SET latin1)"
        )
        cur.execute(
            f"INSERT INTO `{dbname}`.t VALUES (1, 't\\tab', 'x\\ny,z', 'a'), (2, 'b\\\\s', 'z', 'b'),"
            " (3, 'p', '', NULL)"
        )
        (table,) = plan(cur, [f"{dbname}.t"], None)
    text, typed = _read(target, table), _read(target, _typed(table))
    assert isinstance(text.after, TextRows)
    assert (
        list(text.after)
        == list(typed.after)
        == [
            (1, "t\tab", {"x\ny", "z"}, "a"),
            (2, "b\\s", {"z"}, "b"),
            (3, "p", set(), None),
        ]
    )


@pytest.mark.parametrize("layout", ["same", "reordered", "unique"])
def test_a_chunk_as_text_applies_equal_to_the_origin(
    target: Server, dbname: str, layout: str
) -> None:
    """The every-type table without BIT, 5 × 64 rows, seeded as text through the MariaDB
    applier: into the same table its text goes to LOAD DATA as it came; with the columns in
    another order it is read into values for LOAD DATA; with another unique key (REPLACE
    would mean something else) into values for the upsert. Equal to the origin each time."""
    copy = f"{dbname}_copy"
    with target.connect() as conn, conn.cursor() as cur:
        create(cur, dbname)
        cur.execute(f"ALTER TABLE `{dbname}`.t DROP COLUMN bt")
        # An ENUM's '' (a value outside its members, written in non-strict mode) is refused by
        # the target's strict apply session in either form: not this test's subject.
        cur.execute(f"UPDATE `{dbname}`.t SET en = 'x' WHERE en = ''")
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = 't' ORDER BY ORDINAL_POSITION",
            (dbname,),
        )
        names = [name for (name,) in cur.fetchall()]
        listed = ", ".join(f"`{c}`" for c in names)
        for k in range(1, 64):
            cur.execute(
                f"INSERT INTO `{dbname}`.t ({listed}) "
                f"SELECT id + {100 * k}, {listed.split(', ', 1)[1]} FROM `{dbname}`.t WHERE id < 100"
            )
        cur.execute(f"CREATE DATABASE `{copy}`")
        cur.execute(f"CREATE TABLE `{copy}`.t LIKE `{dbname}`.t")
        if layout == "reordered":
            cur.execute(f"ALTER TABLE `{copy}`.t MODIFY js JSON AFTER id")
        if layout == "unique":
            cur.execute(f"ALTER TABLE `{copy}`.t ADD UNIQUE KEY (ti, id)")
        (table,) = plan(cur, [f"{dbname}.t"], None)
    change = _read(target, table, limit=1000).renamed(copy)
    assert isinstance(change.after, TextRows) and len(change.after) == 5 * 64
    settings = DatabaseSettings(target.host, target.port, target.user, target.password)
    with Recording(settings, f"o{dbname}", reduce=False, max_rows=250) as applier:
        applier.repair(
            Transaction(Position("binlog.000001", 4), 1.7e9, (change,)),
            Position("binlog.000001", 4),
            seed=True,
        )
        statements = applier.statements
    kinds = {s.kind for s in statements if s.table == "t"}
    assert kinds == ({"upsert"} if layout == "unique" else {"load"}), kinds
    loads = [s for s in statements if s.kind == "load"]
    if layout == "same":
        assert b"".join(s.load[1] for s in loads if s.load) == change.after.text  # as it came
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(f"SELECT {listed} FROM `{dbname}`.t ORDER BY id")
        origin = cur.fetchall()
        cur.execute(f"SELECT {listed} FROM `{copy}`.t ORDER BY id")
        assert cur.fetchall() == origin
        cur.execute(f"DROP DATABASE `{copy}`")
