"""Table definitions as data (tabledef.py) and the target's own DDL built from them
(engines/mariadb/schemachange.py), against a real MariaDB: the origin's table is described, travels
through its wire form, and the plan run on the target makes the target's table describe the
same; refused cases say what differs."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from binlogsync import codec
from binlogsync.ddl import renamed_columns, table_renames
from binlogsync.engines.mariadb.schemachange import Mode, plan, widens
from binlogsync.tabledef import ColumnDef, TableDef, TableDefError, describe
from binlogsync_dev.sandbox import Server

integration = pytest.mark.integration
unit = pytest.mark.unit

RICH = """
CREATE TABLE t (
  id BIGINT UNSIGNED NOT NULL,
  k INT NOT NULL DEFAULT 0,
  name VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci NOT NULL DEFAULT 'it''s',
  price DECIMAL(12,3) DEFAULT '1.500',
  ratio DOUBLE, f FLOAT, flags BIT(5), yr YEAR,
  d DATE, dt DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6), ts TIMESTAMP(3) NULL, tm TIME(2),
  fixed CHAR(3), bin BINARY(4), vb VARBINARY(300),
  body MEDIUMTEXT, pic BLOB, doc JSON,
  state ENUM('new','paid','it''s') NOT NULL DEFAULT 'new', tags SET('a','b','c'),
  PRIMARY KEY (id), UNIQUE KEY uk_name (name(20), k), KEY k_k (k)
) DEFAULT CHARSET=latin1
"""


def _describe(server: Server, database: str, table: str) -> TableDef | None:
    with server.connect() as conn, conn.cursor() as cur:
        return describe(cur, database, table)


def _travel(table: TableDef) -> TableDef:
    """Through the wire form, as the hub would carry it."""
    return TableDef.from_wire(codec.unpack(codec.pack(table.to_wire())))


def _apply(server: Server, desired: TableDef, database: str, mode: Mode) -> Any:
    target_name = dataclasses.replace(desired, schema=database)
    actual = _describe(server, database, desired.table)
    steps = plan(target_name, actual, mode)
    with server.connect() as conn, conn.cursor() as cur:
        for sql, params in steps.statements:
            cur.execute(sql, params or None)
    return steps


def _same_shape(a: TableDef | None, b: TableDef | None) -> None:
    assert a is not None and b is not None
    assert dataclasses.replace(a, schema="x") == dataclasses.replace(b, schema="x")


@pytest.fixture
def two(origin: Server, dbname: str) -> tuple[str, str]:
    origin.sql(f"CREATE DATABASE `{dbname}`", f"CREATE DATABASE `{dbname}_t`", db="mysql")
    return dbname, f"{dbname}_t"


@integration
def test_a_rich_table_is_described_and_created_the_same(
    origin: Server, two: tuple[str, str]
) -> None:
    src, dst = two
    origin.sql(RICH, db=src)
    desired = _describe(origin, src, "t")
    assert desired is not None and desired.unsupported is None
    assert desired.column("name") == ColumnDef(
        "name", "varchar", 40, None, False, False, ("literal", "it's"), (), "utf8mb4",
        "utf8mb4_unicode_ci",
    )  # fmt: skip
    assert desired.column("dt") is not None and desired.column("dt").default == (  # type: ignore[union-attr]
        "expr", "current_timestamp", 6,
    )  # fmt: skip
    travelled = _travel(desired)
    assert travelled == desired
    steps = _apply(origin, travelled, dst, "additive")
    assert steps.changes == ["create table " + f"{dst}.t"]
    _same_shape(_describe(origin, dst, "t"), desired)
    # Nothing left to do.
    assert not plan(
        dataclasses.replace(desired, schema=dst), _describe(origin, dst, "t"), "all"
    ).needed


SCENARIOS = [
    # (name, target starts as, origin becomes, mode, refused?)
    (
        "add a column",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT)",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10) NOT NULL DEFAULT 'x')",
        "additive",
        False,
    ),
    (
        "add a column in the middle",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT)",
        "CREATE TABLE t (id INT PRIMARY KEY, m DATETIME(3), a INT)",
        "additive",
        False,
    ),
    (
        "widen a varchar",
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10))",
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(200))",
        "additive",
        False,
    ),
    (
        "widen an int to bigint",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT UNSIGNED)",
        "CREATE TABLE t (id INT PRIMARY KEY, a BIGINT)",
        "additive",
        False,
    ),
    (
        "add an index",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT)",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, KEY ka (a))",
        "additive",
        False,
    ),
    (
        "narrow a varchar",
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(200))",
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10))",
        "additive",
        True,
    ),
    (
        "drop a column under additive",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT)",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT)",
        "additive",
        True,
    ),
    (
        "drop a column under all",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT, KEY kb (b))",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT)",
        "all",
        False,
    ),
    (
        "narrow under all",
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(200), s ENUM('x','y'))",
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10), s ENUM('y','x','z'))",
        "all",
        False,
    ),
    (
        "any difference under off",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT)",
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT)",
        "off",
        True,
    ),
    (
        "a changed primary key",
        "CREATE TABLE t (id INT, a INT NOT NULL DEFAULT 0, PRIMARY KEY (id))",
        "CREATE TABLE t (id INT, a INT NOT NULL DEFAULT 0, PRIMARY KEY (id, a))",
        "all",
        True,
    ),
]


@integration
@pytest.mark.parametrize(
    ("before", "after", "mode", "refused"),
    [s[1:] for s in SCENARIOS],
    ids=[s[0] for s in SCENARIOS],
)
def test_the_target_follows_or_refuses(
    origin: Server, two: tuple[str, str], before: str, after: str, mode: Mode, refused: bool
) -> None:
    src, dst = two
    origin.sql(after, db=src)
    origin.sql(before, "INSERT INTO t (id) VALUES (1), (2)", db=dst)
    desired = _travel(_describe(origin, src, "t"))  # type: ignore[arg-type]
    steps = _apply(origin, desired, dst, mode)
    if refused:
        assert steps.refused and not steps.statements, steps
        return
    assert not steps.refused, steps.refused
    _same_shape(_describe(origin, dst, "t"), desired)
    with origin.connect(dst) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM t ORDER BY id")
        assert cur.fetchall() == ((1,), (2,))  # rows kept


@integration
def test_a_rename_is_a_rename_not_a_drop_and_add(origin: Server, two: tuple[str, str]) -> None:
    src, dst = two
    origin.sql("CREATE TABLE t (id INT PRIMARY KEY, old_name VARCHAR(20))", db=src)
    origin.sql("CREATE TABLE t (id INT PRIMARY KEY, old_name VARCHAR(20))", db=dst)
    origin.sql("INSERT INTO t VALUES (1, 'kept')", db=dst)
    origin.sql("ALTER TABLE t RENAME COLUMN old_name TO new_name", db=src)
    desired = dataclasses.replace(
        _describe(origin, src, "t"),  # type: ignore[arg-type]
        renamed_from={"new_name": "old_name"},
    )
    refused = _apply(origin, _travel(desired), dst, "additive")
    assert refused.refused == ["column old_name was renamed to new_name"]
    steps = _apply(origin, _travel(desired), dst, "all")
    assert steps.changes == ["rename column old_name to new_name"]
    with origin.connect(dst) as conn, conn.cursor() as cur:
        cur.execute("SELECT new_name FROM t")
        assert cur.fetchall() == (("kept",),)


@integration
def test_hostile_names_are_only_ever_names(origin: Server, two: tuple[str, str]) -> None:
    src, dst = two
    evil = "x`; DROP TABLE t; -- %s"
    desired = TableDef(
        src,
        "t",
        (
            ColumnDef("id", "int", nullable=False),
            ColumnDef(evil, "varchar", 40, default=("literal", "'); DROP TABLE t; --")),
            ColumnDef("e", "enum", values=("a', 'b", "%s")),
        ),
        ("id",),
    )
    _apply(origin, _travel(desired), dst, "additive")
    created = _describe(origin, dst, "t")
    assert created is not None
    assert [c.name for c in created.columns] == ["id", evil, "e"]
    assert created.column(evil).default == ("literal", "'); DROP TABLE t; --")  # type: ignore[union-attr]
    assert created.column("e").values == ("a', 'b", "%s")  # type: ignore[union-attr]


@integration
def test_what_cannot_be_rebuilt_is_refused_with_the_reason(
    origin: Server, two: tuple[str, str]
) -> None:
    src, dst = two
    origin.sql("CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT AS (a + 1) VIRTUAL)", db=src)
    desired = _describe(origin, src, "t")
    assert desired is not None and desired.unsupported and "VIRTUAL" in desired.unsupported
    steps = _apply(origin, _travel(desired), dst, "all")
    assert steps.refused and "cannot be rebuilt" in steps.refused[0] and not steps.statements


def _wire(**changes: Any) -> dict[str, Any]:
    base = TableDef("s", "t", (ColumnDef("id", "int", nullable=False),), ("id",)).to_wire()
    base.update(changes)
    return base


@unit
@pytest.mark.parametrize(
    "wire",
    [
        _wire(v=2),
        _wire(columns=[]),
        _wire(columns=[{"name": "id", "type": "int) ; DROP TABLE t; --"}]),
        _wire(columns=[{"name": "id", "type": "varchar"}]),  # no length
        _wire(columns=[{"name": "id", "type": "varchar", "length": 70000}]),
        _wire(columns=[{"name": "id", "type": "decimal", "length": 5, "scale": 6}]),
        _wire(columns=[{"name": "id", "type": "int", "default": ["expr", "uuid", 0]}]),
        _wire(columns=[{"name": "id", "type": "int", "charset": "utf8; DROP"}]),
        _wire(columns=[{"name": "x" * 65, "type": "int"}]),
        _wire(columns=[{"name": "id", "type": "int"}, {"name": "ID", "type": "int"}]),
        _wire(primary_key=["missing"]),
        _wire(schema=None),
        _wire(columns=[{"name": "id", "type": "enum", "values": []}]),
        _wire(columns=[{"name": "id", "type": "int", "nullable": "yes"}]),
        [1, 2, 3],
    ],
)
def test_malformed_definitions_are_refused(wire: Any) -> None:
    with pytest.raises(TableDefError):
        TableDef.from_wire(wire)


@unit
@pytest.mark.parametrize(
    ("old", "new", "wider"),
    [
        (ColumnDef("a", "varchar", 10), ColumnDef("a", "varchar", 11), True),
        (ColumnDef("a", "varchar", 10), ColumnDef("a", "varchar", 9), False),
        (ColumnDef("a", "varchar", 10), ColumnDef("a", "text"), True),
        (ColumnDef("a", "char", 10), ColumnDef("a", "varchar", 10), False),
        (ColumnDef("a", "int"), ColumnDef("a", "bigint"), True),
        (ColumnDef("a", "int", unsigned=True), ColumnDef("a", "int"), False),
        (ColumnDef("a", "int", unsigned=True), ColumnDef("a", "bigint"), True),
        (ColumnDef("a", "int"), ColumnDef("a", "bigint", unsigned=True), False),
        (ColumnDef("a", "decimal", 10, 2), ColumnDef("a", "decimal", 12, 3), True),
        (ColumnDef("a", "decimal", 10, 2), ColumnDef("a", "decimal", 10, 3), False),
        (ColumnDef("a", "float"), ColumnDef("a", "double"), True),
        (ColumnDef("a", "datetime", 0), ColumnDef("a", "datetime", 6), True),
        (ColumnDef("a", "enum", values=("x",)), ColumnDef("a", "enum", values=("x", "y")), True),
        (ColumnDef("a", "enum", values=("x", "y")), ColumnDef("a", "enum", values=("y",)), False),
        (ColumnDef("a", "int"), ColumnDef("a", "int", nullable=False), False),
        (ColumnDef("a", "blob"), ColumnDef("a", "tinyblob"), False),
    ],
)
def test_widening(old: ColumnDef, new: ColumnDef, wider: bool) -> None:
    assert widens(old, new) is wider


@unit
@pytest.mark.parametrize(
    ("sql", "columns", "tables"),
    [
        ("ALTER TABLE t RENAME COLUMN a TO b", {"b": "a"}, {}),
        ("ALTER TABLE t CHANGE COLUMN `x y` z INT, ADD c INT", {"z": "x y"}, {}),
        ("ALTER TABLE t CHANGE a a BIGINT", {}, {}),
        ("RENAME TABLE t TO t2, u TO d2.u", {}, {("d", "t2"): ("d", "t"), ("d2", "u"): ("d", "u")}),
        ("ALTER TABLE t RENAME TO t2, ADD COLUMN c INT", {}, {("d", "t2"): ("d", "t")}),
        ("ALTER TABLE t ADD c INT, RENAME INDEX a TO b", {}, {}),
        ("DROP TABLE t", {}, {}),
    ],
)
def test_renames_read_from_the_origins_ddl(
    sql: str, columns: dict[str, str], tables: dict[Any, Any]
) -> None:
    assert renamed_columns(sql) == columns
    assert table_renames(sql, "d") == tables
