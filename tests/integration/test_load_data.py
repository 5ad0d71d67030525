"""Large upserts as LOAD DATA LOCAL … REPLACE (engines/mariadb/loaddata.py) against a real
MariaDB target: the same rows as the upsert writes, for every value type; the same strict-mode
errors; the upsert kept wherever REPLACE would mean something else; a server that asks for
another file gets nothing."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pymysql
import pytest

from applykit import Recording
from binlogsync.config import DatabaseSettings
from binlogsync.engines.mariadb import loaddata
from binlogsync.errors import ApplyError, ConstraintError
from binlogsync.model import Change, Part, Transaction
from binlogsync.position import Position
from binlogsync_dev.sandbox import Sandbox, Server

pytestmark = pytest.mark.integration

ROWS = 600  # above statements.BULK_ROWS, and more than one piece of max_rows below
COLUMNS = "id,bu,de,f,d,dt,tm,dtm,ts,yr,vc,l1,tx,bn,bl,js,en,st"
TABLE = """CREATE TABLE {name} (
    id INT PRIMARY KEY, bu BIGINT UNSIGNED, de DECIMAL(30,10), f FLOAT, d DOUBLE,
    dt DATE, tm TIME(6), dtm DATETIME(6), ts TIMESTAMP(6) NULL DEFAULT NULL, yr YEAR,
    vc VARCHAR(40), l1 VARCHAR(20) CHARACTER SET latin1, tx TEXT, bn BINARY(4), bl BLOB,
    js JSON, en ENUM('a','b','c'), st SET('x','y','z')
) CHARACTER SET utf8mb4"""
TEXTS = ["plain", "tab\there", "new\nline", "cr\rx", "back\\slash", "nul\x00x", "\\N", "NULL",
         "", "ü€😀", "quote'\"", "a\\tb"]  # fmt: skip


def row(i: int, turn: int) -> tuple[Any, ...]:
    """Row `i` of version `turn`: every type, NULLs, every awkward character and byte."""
    text = TEXTS[(i + turn) % len(TEXTS)]
    return (
        i,
        None if i % 7 == 0 else 2**64 - 1 - i - turn,
        Decimal(f"-{i}.{turn:010d}"),
        float(i) / 8 + turn,
        i / 3 + turn,
        dt.date(2020, 1, 1) + dt.timedelta(days=i + turn),
        dt.timedelta(hours=-(i % 800), microseconds=turn + 1),
        dt.datetime(2021, 6, 1, 12, 0, 0, i + turn),
        None if i % 5 == 0 else dt.datetime(2022, 3, 1, 1, 2, 3, turn),
        1990 + (i + turn) % 100,
        f"{text}-{i}",
        "café" if i % 2 else None,
        text * 3,
        bytes([i % 256, 0, 9, 10]),
        None if i % 11 == 0 else bytes(range(256)) + bytes([turn]),
        {"i": i, "t": text} if i % 3 else [i, None],
        "abc"[(i + turn) % 3],
        {"x", "z"} if i % 2 else set(),
    )


def pos(i: int) -> Position:
    return Position("binlog.000001", 100 * i)


def writes(schema: str, table: str, columns: str = COLUMNS) -> list[Transaction]:
    """A transaction inserting ROWS rows, one updating all of them, one inserting more."""
    names = tuple(columns.split(","))
    width = len(names)
    first = tuple(row(i, 0)[:width] for i in range(1, ROWS + 1))
    second = tuple(row(i, 1)[:width] for i in range(1, ROWS + 1))
    more = tuple(row(i, 2)[:width] for i in range(ROWS + 1, 2 * ROWS + 1))
    return [
        Transaction(pos(1), 1.7e9, (Change("insert", schema, table, names, (), first),)),
        Transaction(pos(2), 1.7e9, (Change("update", schema, table, names, first, second),)),
        Transaction(pos(3), 1.7e9, (Change("insert", schema, table, names, (), more),)),
    ]


@pytest.fixture(scope="module")
def server(sandbox: Sandbox) -> Server:
    return sandbox.start("load-target", 61)


@pytest.fixture
def conn(server: Server, dbname: str) -> Iterator[pymysql.Connection]:
    c = server.connect()
    q(c, f"CREATE DATABASE `{dbname}`")
    c.select_db(dbname)
    yield c
    q(c, f"DROP DATABASE `{dbname}`")
    q(c, "SET GLOBAL local_infile = 1")
    c.close()


@pytest.fixture
def settings(server: Server) -> DatabaseSettings:
    return DatabaseSettings(server.host, server.port, server.user, server.password)


def q(c: pymysql.Connection, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with c.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def apply(settings: DatabaseSettings, origin: str, log: list[Transaction]) -> list[str]:
    """Apply `log` as one origin; the kinds of the statements run."""
    with Recording(settings, origin, reduce=False, max_rows=250) as applier:
        assert applier.apply(log) == log[-1].position
        return [s.kind for s in applier.statements]


def contents(c: pymysql.Connection, table: str) -> list[tuple[Any, ...]]:
    return q(c, f"SELECT *, HEX(bl), HEX(l1) FROM {table} ORDER BY id")


def test_load_data_writes_what_the_upsert_writes_for_every_type(
    conn: pymysql.Connection, settings: DatabaseSettings, dbname: str
) -> None:
    for name in ("loaded", "upserted"):
        q(conn, TABLE.format(name=name))
    kinds = apply(settings, f"{dbname}-load", writes(dbname, "loaded"))
    assert set(kinds) == {"load"}, kinds
    # each 600-row change in pieces of 250 rows: one LOAD DATA (16 pieces fit) per change
    assert kinds == ["load"] * 3
    q(conn, "SET GLOBAL local_infile = 0")  # the server refuses LOCAL: upserts, as before
    kinds = apply(settings, f"{dbname}-upsert", writes(dbname, "upserted"))
    assert set(kinds) == {"upsert"}, kinds
    loaded, upserted = contents(conn, "loaded"), contents(conn, "upserted")
    assert len(loaded) == 2 * ROWS
    assert loaded == upserted
    # the awkward text arrived as sent, not as LOAD DATA's escapes or NULL
    sent = {r[0]: r[10] for r in loaded}
    assert sent == {i: row(i, 1 if i <= ROWS else 2)[10] for i in sent}
    assert {t.split("-")[0] for t in sent.values()} >= {"\\N", "NULL", "", "nul\x00x"}
    blob = bytes(range(256)) + b"\x01"
    assert {r[0]: r[14] for r in loaded}[1] == blob


def test_a_value_strict_mode_refuses_fails_as_in_an_insert(
    conn: pymysql.Connection, settings: DatabaseSettings, dbname: str
) -> None:
    q(conn, "CREATE TABLE narrow (id INT PRIMARY KEY, n TINYINT, v VARCHAR(3))")
    rows = tuple((i, i % 100, "ab") for i in range(1, ROWS + 1))
    bad = (*rows, (ROWS + 1, 1000, "ab"))
    log = [
        Transaction(pos(1), 1.7e9, (Change("insert", dbname, "narrow", ("id", "n", "v"), (), bad),))
    ]
    with Recording(settings, f"{dbname}-o", reduce=False) as applier:
        with pytest.raises(ApplyError, match="Out of range value for column 'n'"):
            applier.apply(log)
        assert [s.kind for s in applier.statements] == ["load"]
    assert q(conn, "SELECT COUNT(*) FROM narrow") == [(0,)]


KEPT: dict[str, tuple[str, tuple[str, ...], Any]] = {
    "another unique key (REPLACE would delete the row clashing on it)": (
        ", u VARCHAR(20) UNIQUE",
        ("id", "v", "u"),
        lambda i, turn: (i, f"v{turn}", f"u{i}"),
    ),
    "a column the change does not write (REPLACE would reset it)": (
        ", note VARCHAR(20) DEFAULT 'kept'",
        ("id", "v"),
        lambda i, turn: (i, f"v{turn}"),
    ),
    "a BIT column (LOAD DATA would read its digits as bytes)": (
        ", b BIT(8)",
        ("id", "v", "b"),
        lambda i, turn: (i, f"v{turn}", i % 256),
    ),
}


def test_a_null_for_a_not_null_column_is_refused_as_the_upsert_refuses_it(
    conn: pymysql.Connection, settings: DatabaseSettings, dbname: str
) -> None:
    """LOAD DATA says 1263 where an INSERT says 1048: both are the same ConstraintError."""
    q(conn, "CREATE TABLE strict (id INT PRIMARY KEY, n INT NOT NULL)")
    rows = (*((i, i) for i in range(1, ROWS + 1)), (ROWS + 1, None))
    change = Change("insert", dbname, "strict", ("id", "n"), (), rows)
    for origin, load in ((f"{dbname}-load", True), (f"{dbname}-upsert", False)):
        q(conn, f"SET GLOBAL local_infile = {int(load)}")
        with Recording(settings, origin, reduce=False) as applier:
            with pytest.raises(ConstraintError, match="the target refused a row"):
                applier.apply([Transaction(pos(1), 1.7e9, (change,))])
            assert [s.kind for s in applier.statements][-1:] == ["load" if load else "upsert"]
    assert q(conn, "SELECT COUNT(*) FROM strict") == [(0,)]


@pytest.mark.parametrize("why", list(KEPT))
def test_the_upsert_stays_where_replace_would_mean_something_else(
    conn: pymysql.Connection, settings: DatabaseSettings, dbname: str, why: str
) -> None:
    extra, columns, make = KEPT[why]
    q(conn, f"CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20){extra})")
    q(conn, "INSERT INTO t (id, v) VALUES (1, 'old')")
    if "note" in extra:
        q(conn, "UPDATE t SET note = 'local' WHERE id = 1")
    first = tuple(make(i, 0) for i in range(2, ROWS + 2))
    before = (make(1, 0)[:2] + (None,) * (len(columns) - 2), *first)
    after = tuple(make(i, 1) for i in range(1, ROWS + 2))
    log = [
        Transaction(pos(1), 1.7e9, (Change("insert", dbname, "t", columns, (), first),)),
        Transaction(pos(2), 1.7e9, (Change("update", dbname, "t", columns, before, after),)),
    ]
    kinds = apply(settings, f"{dbname}-o", log)
    assert kinds and "load" not in kinds
    assert q(conn, "SELECT COUNT(*), MIN(v), MAX(v) FROM t") == [(ROWS + 1, "v1", "v1")]
    if "note" in extra:
        assert q(conn, "SELECT note FROM t WHERE id = 1") == [("local",)]
    if "BIT" in extra:
        assert q(conn, "SELECT b + 0 FROM t WHERE id = 7") == [(7,)]


def test_a_server_asking_for_another_file_gets_nothing(
    conn: pymysql.Connection, server: Server, dbname: str, tmp_path: Any
) -> None:
    """The sender for LOAD DATA LOCAL sends only rows offered for the name in our statement:
    a server naming a file of the agent's host is refused and no byte of it leaves."""
    secret = tmp_path / "agent.key_secret"
    secret.write_text("1\tthe agent's secret\n")
    q(conn, "CREATE TABLE stolen (id INT PRIMARY KEY, v VARCHAR(100))")
    loaddata.install()
    c = server.connect(local_infile=True)
    loaddata.mark(c)  # as the apply engine marks its connections
    try:
        with c.cursor() as cur:
            with pytest.raises(pymysql.err.OperationalError, match="did not offer"):
                cur.execute(f"LOAD DATA LOCAL INFILE '{secret}' INTO TABLE `{dbname}`.stolen")
            # offered under one name, asked under another: refused as well
            with pytest.raises(pymysql.err.OperationalError, match="did not offer"):
                loaddata.execute(
                    cur,
                    f"LOAD DATA LOCAL INFILE '{secret}' INTO TABLE `{dbname}`.stolen",
                    "binlogsync-load-0",
                    b"2\tfine\n",
                    1 << 16,
                )
    finally:
        c.close()
    assert q(conn, "SELECT COUNT(*) FROM stolen") == [(0,)]


def test_connections_not_marked_keep_pymysqls_own_sender(
    conn: pymysql.Connection, server: Server, dbname: str, tmp_path: Any
) -> None:
    """The replaced sender leaves every other connection of the process as PyMySQL made it: a
    LOAD DATA LOCAL of a real file (as tests/integration/test_capture_limits.py writes its
    origin's rows) still loads it."""
    data = tmp_path / "rows.tsv"
    data.write_text("1\tone\n2\ttwo\n")
    q(conn, "CREATE TABLE loaded (id INT PRIMARY KEY, v VARCHAR(10))")
    loaddata.install()
    c = server.connect(local_infile=True)
    try:
        with c.cursor() as cur:
            cur.execute(f"LOAD DATA LOCAL INFILE '{data}' INTO TABLE `{dbname}`.loaded")
        c.commit()
    finally:
        c.close()
    assert q(conn, "SELECT id, v FROM loaded ORDER BY id") == [(1, "one"), (2, "two")]


def test_a_part_of_many_small_changes_goes_as_load_data(
    conn: pymysql.Connection, settings: DatabaseSettings, dbname: str
) -> None:
    """Capture makes one change per Rows event, about 80 rows of 100 bytes: a part of a large
    transaction holds a hundred such changes. Each alone is below the bulk threshold, and
    every row went as its own upsert (the large-transaction benchmark's INSERT before); the
    engine joins each run of one table and kind, so the part goes as LOAD DATA."""
    q(conn, "CREATE TABLE big (id INT PRIMARY KEY, n INT NOT NULL, pad VARCHAR(100))")
    names = ("id", "n", "pad")
    changes = tuple(
        Change("insert", dbname, "big", names, (),
               tuple((i, i % 7, "x" * 88) for i in range(first, first + 82)))
        for first in range(1, 82 * 30, 82)
    )  # fmt: skip
    part = Part(pos(1), 1, True, changes, pos(2), 1.7e9)
    with Recording(settings, f"{dbname}-parts", reduce=False) as applier:
        assert applier.apply_part(part, pos(2), b"1") == pos(2)
        kinds = [s.kind for s in applier.statements]
    assert kinds == ["load"], kinds
    assert q(conn, "SELECT COUNT(*), SUM(n) FROM big") == [
        (82 * 30, sum(i % 7 for i in range(1, 82 * 30 + 1)))
    ]
