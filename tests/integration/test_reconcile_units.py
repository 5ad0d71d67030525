"""Reconciliation pieces without servers: URLs, the WHERE text of key ranges, the row encoding,
SQL literals of the repair file, chunk boundaries."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from binlogsync.errors import ConfigError
from binlogsync.reconcile.checksums import Encoding, keys_where, range_where
from binlogsync.reconcile.chunks import equal_width
from binlogsync.reconcile.repair import literal
from binlogsync.reconcile.schema import Column, TableDef, TableError, pair
from binlogsync.reconcile.urls import parse_url

pytestmark = pytest.mark.unit


def test_urls() -> None:
    db = parse_url("mysql://check:p%40ss@db1.example:3307")
    assert (db.host, db.port, db.user, db.password) == ("db1.example", 3307, "check", "p@ss")
    db = parse_url("mariadb://check@[::1]", {"PW": "secret"}, "PW")
    assert (db.host, db.port, db.password) == ("::1", 3306, "secret")
    db = parse_url("mysql://u@h:1?password_env=MINE", {"MINE": "x", "PW": "y"}, "PW")
    assert db.password == "x"
    with pytest.raises(ConfigError, match=r"\$NOPE, which is not set"):
        parse_url("mysql://u@h:1?password_env=NOPE", {})
    with pytest.raises(ConfigError, match="must start with mysql:// or mariadb:// —"):
        parse_url("postgres://u:secret@h:1")
    pg = parse_url("postgresql://u@h?password_env=PW", {"PW": "z"}, postgres=True)
    assert (pg.kind, pg.host, pg.port, pg.user, pg.password) == ("postgresql", "h", 5432, "u", "z")
    assert pg.database == "u"  # as libpq: the user's name  # type: ignore[attr-defined]
    pg = parse_url("postgres://u@h:6/warehouse", postgres=True)
    assert (pg.port, pg.database, str(pg)) == (6, "warehouse", "postgresql://u@h:6/warehouse")  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="one database name"):
        parse_url("postgresql://u@h/a/b", postgres=True)
    with pytest.raises(ConfigError, match="names a database") as info:
        parse_url("mysql://u:secret@h:1/shop")
    assert "secret" not in str(info.value)  # passwords never appear in messages
    with pytest.raises(ConfigError, match="malformed"):
        parse_url("mysql://u@h:notaport")


def test_key_ranges_are_written_for_the_range_optimizer() -> None:
    sql, params = range_where(["a", "b"], (5, "x"), (9,))
    assert sql == "((`a` > %s) OR (`a` = %s AND `b` >= %s)) AND ((`a` < %s))"
    assert params == [5, 5, "x", 9]
    assert range_where(["id"], None, None) == ("TRUE", [])
    sql, params = keys_where(["a", "b"], [(1, "x"), (2, "y")])
    assert sql == "((`a` = %s AND `b` = %s) OR (`a` = %s AND `b` = %s))"
    assert params == [1, "x", 2, "y"]


def _column(name: str, data_type: str, nullable: bool = True) -> Column:
    return Column(name, data_type, data_type, nullable)


def test_encoding_flags_nulls_and_prefixes_lengths() -> None:
    source = TableDef(
        "s",
        "t",
        (
            _column("id", "int", False),
            _column("v", "varchar"),
            _column("f", "float"),
            _column("b", "bit"),
            _column("d", "decimal", False),
        ),
        ("id",),
    )
    target = TableDef("s", "t", source.columns[:4] + (_column("d", "decimal", True),), ("id",))
    encoding = Encoding.of([pair(source, target, "t")])
    # v, the only (so the last) length-prefixed column, needs no length: only its fields can
    # hold a ',', and the fields after it have none.
    assert encoding.row() == (
        "CONCAT_WS(',', `id`, `v`, (`f` + 0e0), (`b` + 0), `d`, "
        "CONCAT(`v` IS NULL, `f` IS NULL, `b` IS NULL, `d` IS NULL))"  # d: nullable on the target
    )
    # The portable encoding (PostgreSQL computes it too) keeps every length.
    assert "LENGTH(`v`), `v`" in Encoding.of([pair(source, target, "t")], hash="sha256").row()
    two = TableDef("s", "t", (*source.columns, _column("w", "blob")), ("id",))
    assert (
        Encoding.of([pair(two, two, "t")], hash="crc")
        .row()
        .startswith("CONCAT_WS(',', `id`, LENGTH(`v`), `v`, (`f` + 0e0), (`b` + 0), `d`, `w`, ")
    )
    assert encoding.floats == ("f",)
    assert Encoding.of([pair(source, target, "t")], json="value").json == ()


def test_pair_refuses_what_cannot_be_compared() -> None:
    keyed = TableDef("s", "t", (_column("id", "int", False), _column("v", "int")), ("id",))
    with pytest.raises(TableError, match="no primary key on the source"):
        pair(TableDef("s", "t", keyed.columns, ()), keyed, "t")
    other = TableDef("s", "t", (_column("id", "int", False), _column("w", "int")), ("id",))
    with pytest.raises(TableError, match="only on the source: v; only on t: w"):
        pair(keyed, other, "t")
    wider = TableDef(
        "s", "t", (_column("id", "int", False), Column("v", "int", "bigint", True)), ("id",)
    )
    assert "column v is int on the source but bigint on t" in pair(keyed, wider, "t").notes[0]


def test_sql_literals_are_exact() -> None:
    assert literal(None) == "NULL"
    assert literal(b"\x00'\xff") == "X'0027ff'"
    assert literal(b"") == "X''"
    assert literal("it's \\ ok") == "'it\\'s \\\\ ok'"
    assert literal(Decimal("1.2500")) == "1.2500"
    assert literal(0.1) == "0.1"
    assert literal(dt.datetime(2024, 1, 2, 3, 4, 5, 6)) == "'2024-01-02 03:04:05.000006'"
    assert literal(-dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999)) == (
        "'-838:59:59.999999'"
    )
    assert literal({"b", "a"}) == "'a,b'"


def test_equal_width_chunks_cover_every_key_once() -> None:
    chunks = equal_width(0, 1, 100, 4)
    assert [(c.lower, c.upper) for c in chunks] == [
        (None, (26,)),
        ((26,), (51,)),
        ((51,), (76,)),
        ((76,), None),
    ]
    assert len(equal_width(0, 5, 6, 10)) == 2  # never more pieces than keys
