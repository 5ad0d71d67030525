"""The applier against a real MariaDB target: types, statements, exactly-once, errors, skips.

The target server runs with a non-UTC default time zone (+05:30), so the tests' own
connections are not in UTC and the applier has to set +00:00 itself for TIMESTAMPs to land.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pymysql
import pytest

from applykit import Recording
from binlogsync.apply import Applier, failed_at, list_skipped, skip
from binlogsync.config import DatabaseSettings
from binlogsync.engines.mariadb.pipeline import HANDOVER_ROWS
from binlogsync.engines.mariadb.statements import Statement
from binlogsync.errors import (
    ApplyError,
    ConstraintError,
    MissingTableError,
    NoPrimaryKeyError,
    SchemaMismatchError,
    UnreachableError,
)
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync.zerodate import ZeroDate
from binlogsync_dev.sandbox import Sandbox, Server, free_port, kill_session

pytestmark = pytest.mark.integration

TZ = "+05:30"


# -- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(sandbox: Sandbox) -> Server:
    return sandbox.start("apply-target", 52, f"--default-time-zone={TZ}")


@pytest.fixture
def conn(server: Server, dbname: str) -> Iterator[pymysql.Connection]:
    c = server.connect()
    with c.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute("SELECT @@session.time_zone")
        assert cur.fetchone() == (TZ,)
    c.select_db(dbname)
    yield c
    with c.cursor() as cur:
        cur.execute(f"DROP DATABASE `{dbname}`")
    c.close()


@pytest.fixture
def settings(server: Server) -> DatabaseSettings:
    return DatabaseSettings(server.host, server.port, server.user, server.password)


@pytest.fixture
def origin_name(dbname: str) -> str:
    """The origin whose transactions a test applies (its own checkpoint row)."""
    return f"origin-{dbname}"


@pytest.fixture
def applier(settings: DatabaseSettings, origin_name: str) -> Iterator[Applier]:
    a = Applier(settings, origin_name)
    yield a
    a.close()


def q(c: pymysql.Connection, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with c.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def pos(i: int) -> Position:
    return Position("binlog.000001", 100 * i)


def txn(i: int | Position, *changes: Change) -> Transaction:
    return Transaction(i if isinstance(i, Position) else pos(i), 1700000000.0, changes)


def ins(s: str, t: str, cols: str, *rows: tuple[Any, ...]) -> Change:
    return Change("insert", s, t, tuple(cols.split(",")), (), rows)


def dele(s: str, t: str, cols: str, *rows: tuple[Any, ...]) -> Change:
    return Change("delete", s, t, tuple(cols.split(",")), rows, ())


def upd(s: str, t: str, cols: str, *pairs: tuple[tuple[Any, ...], tuple[Any, ...]]) -> Change:
    return Change(
        "update",
        s,
        t,
        tuple(cols.split(",")),
        tuple(p[0] for p in pairs),
        tuple(p[1] for p in pairs),
    )


def stored(c: pymysql.Connection, origin_name: str) -> tuple[Any, ...] | None:
    rows = q(
        c,
        "SELECT pos_key, file, `offset`, applied_transactions FROM "
        "binlogsync.checkpoint WHERE origin = %s",
        (origin_name,),
    )
    return rows[0] if rows else None


# -- values ------------------------------------------------------------------------------------

TYPES = """CREATE TABLE types (
    id INT PRIMARY KEY,
    ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT UNSIGNED,
    i INT, iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED,
    de DECIMAL(65,30), f FLOAT, d DOUBLE,
    dt DATE, tm TIME(6), dtm DATETIME(6), ts TIMESTAMP(6) NULL DEFAULT NULL, yr YEAR,
    vc VARCHAR(40), tx TEXT, bn BINARY(4), vb VARBINARY(8), bl BLOB,
    js JSON, en ENUM('a','b','c'), st SET('x','y','z'), bt BIT(64)
) CHARACTER SET utf8mb4"""
TYPE_COLUMNS = "id,ti,tiu,si,mi,i,iu,bi,bu,de,f,d,dt,tm,dtm,ts,yr,vc,tx,bn,vb,bl,js,en,st,bt"
BIG = Decimal("99999999999999999999999999999999999.999999999999999999999999999999")
NEG_BIG = Decimal("-99999999999999999999999999999999999.999999999999999999999999999999")
MAX_TIME = dt.timedelta(hours=838, minutes=59, seconds=59)
TYPE_ROWS = [
    (
        1,
        127,
        255,
        32767,
        16777215,
        2147483647,
        4294967295,
        2**63 - 1,
        2**64 - 1,
        BIG,
        1.5,
        1.7976931348623157e308,
        dt.date(9999, 12, 31),
        MAX_TIME,
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        dt.datetime(2038, 1, 19, 3, 14, 7, 999999),
        2155,
        "😀 ünï 漢字 '\\\" `",
        "a\x00b\nc\r\x1a",
        b"\x00\xff\x00\xff",
        b"\xff\x00'\\",
        bytes(range(256)),
        '{"a": [1, 2.5, null], "ü": "😀"}',
        "c",
        {"x", "z"},
        2**64 - 1,
    ),
    (
        2,
        -128,
        0,
        -32768,
        0,
        -2147483648,
        0,
        -(2**63),
        0,
        NEG_BIG,
        -0.25,
        -2.2250738585072014e-308,
        dt.date(1000, 1, 1),
        -MAX_TIME,
        dt.datetime(1000, 1, 1, 0, 0, 0),
        dt.datetime(1970, 1, 1, 0, 0, 1),
        1901,
        "",
        "",
        b"\x00\x00\x00\x00",
        b"",
        b"",
        "[]",
        "a",
        set(),
        0,
    ),
    (3, *([None] * 25)),
    (
        4,
        0,
        1,
        0,
        1,
        0,
        1,
        0,
        1,
        Decimal("0.000000000000000000000000000001"),
        0.0,
        1e-300,
        dt.date(2024, 2, 29),
        dt.timedelta(seconds=-1.5),
        dt.datetime(2024, 2, 29, 12, 0),
        dt.datetime(2024, 2, 29, 12, 0, 0, 123456),
        2000,
        "x",
        "y",
        b"\x7f\x80\x00\x01",
        b"\x00",
        b"\xff",
        '{"k": "v"}',
        "b",
        {"y"},
        2**63,
    ),
]


def normalize(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row as read back, in the types the applier was given."""
    out = list(row)
    if out[22] is not None:
        out[22] = json.loads(out[22])
    if out[24] is not None:
        out[24] = set(filter(None, out[24].split(",")))
    if out[25] is not None:
        out[25] = int.from_bytes(out[25], "big")
    return tuple(out)


def test_every_column_type_round_trips(
    conn: pymysql.Connection, dbname: str, applier: Applier
) -> None:
    q(conn, TYPES)
    applier.apply([txn(1, ins(dbname, "types", TYPE_COLUMNS, *TYPE_ROWS))])

    q(conn, "SET time_zone = '+00:00'")
    got = [normalize(r) for r in q(conn, "SELECT * FROM types ORDER BY id")]
    want = [
        tuple(json.loads(v) if i == 22 and v is not None else v for i, v in enumerate(row))
        for row in TYPE_ROWS
    ]
    assert got == want
    # NULL and '' stay apart.
    assert q(conn, "SELECT id FROM types WHERE vc = '' ORDER BY id") == [(2,)]
    assert q(conn, "SELECT id FROM types WHERE vc IS NULL ORDER BY id") == [(3,)]
    # Exact comparisons inside the server, not only through the driver's conversions.
    assert q(
        conn,
        "SELECT COUNT(*) FROM types WHERE bu = 18446744073709551615 AND "
        "bt = b'1111111111111111111111111111111111111111111111111111111111111111' "
        "AND bl = UNHEX(%s) AND tm = '838:59:59'",
        (bytes(range(256)).hex(),),
    ) == [(1,)]
    assert q(conn, "SELECT tm FROM types WHERE id = 4") == [(dt.timedelta(seconds=-1.5),)]


def test_timestamp_arrives_as_naive_utc(
    conn: pymysql.Connection, dbname: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE ev (id INT PRIMARY KEY, ts TIMESTAMP(6) NULL)")
    utc = dt.datetime(2024, 2, 29, 23, 0, 0, 500000)
    applier.apply(
        [txn(1, ins(dbname, "ev", "id,ts", (1, utc), (2, dt.datetime(1970, 1, 1, 0, 0, 1))))]
    )
    # Seen from the test's +05:30 session, 23:00 UTC is 04:30 the next day.
    assert q(conn, "SELECT ts FROM ev WHERE id = 1") == [
        (dt.datetime(2024, 3, 1, 4, 30, 0, 500000),)
    ]
    assert q(conn, "SELECT UNIX_TIMESTAMP(ts) FROM ev ORDER BY id") == [
        (Decimal("1709247600.500000"),),
        (Decimal("1.000000"),),
    ]


ZERO_DATES = (
    "CREATE TABLE z (d DATE NOT NULL, n INT NOT NULL, dtm DATETIME(6), ts TIMESTAMP NULL, "
    "ts3 TIMESTAMP(3) NULL, PRIMARY KEY (d, n))"
)


@pytest.mark.parametrize("server_mode", ["", "TRADITIONAL"], ids=["default", "traditional"])
def test_zero_partial_and_invalid_dates_land_exactly(
    conn: pymysql.Connection, dbname: str, applier: Applier, server_mode: str
) -> None:
    """As the origin stored them, whatever the target's sql_mode forbids its applications
    (TRADITIONAL: strict, NO_ZERO_DATE, NO_ZERO_IN_DATE): the apply session allows them. A
    zero date in the primary key is upserted and deleted by, alone and reduced in a group."""
    q(conn, ZERO_DATES)
    zero = ZeroDate("date")
    rows = [
        (zero, 1, ZeroDate("datetime", fsp=6), ZeroDate("timestamp"), ZeroDate("timestamp", fsp=3)),
        (ZeroDate("date", 2024, 0, 10), 2, ZeroDate("datetime", 2024, 5, 0, 10, 11, 12, 500000, 6),
         None, dt.datetime(2024, 2, 29, 12, 0, 0, 125000)),
        (ZeroDate("date", 2004, 4, 31), 3, ZeroDate("datetime", 2004, 2, 30, 1, 2, 3, 0, 6),
         dt.datetime(1970, 1, 1, 0, 0, 1), None),
        (ZeroDate("date", 0, 1, 1), 4, dt.datetime(2024, 1, 1), ZeroDate("timestamp"), None),
    ]  # fmt: skip
    cols = "d,n,dtm,ts,ts3"
    (before,) = q(conn, "SELECT @@GLOBAL.sql_mode")
    q(conn, "SET GLOBAL sql_mode = %s", (server_mode or before[0],))
    try:
        applier.close()  # its next session sees the server's new sql_mode
        applier.apply([txn(1, ins(dbname, "z", cols, *rows))])
        moved = (zero, 5, *rows[0][2:])
        applier.apply(
            [
                txn(2, upd(dbname, "z", cols, (rows[0], moved))),  # a key change: delete + upsert
                txn(3, dele(dbname, "z", cols, rows[2])),
                txn(4, ins(dbname, "z", cols, rows[2])),
            ]
        )
    finally:
        q(conn, "SET GLOBAL sql_mode = %s", (before[0],))
    q(conn, "SET time_zone = '+00:00'")
    got = q(conn, "SELECT CAST(d AS CHAR), n, CAST(dtm AS CHAR), CAST(ts AS CHAR), "
                  "CAST(ts3 AS CHAR) FROM z ORDER BY n")  # fmt: skip
    z = "0000-00-00 00:00:00"
    assert got == [
        ("2024-00-10", 2, "2024-05-00 10:11:12.500000", None, "2024-02-29 12:00:00.125"),
        ("2004-04-31", 3, "2004-02-30 01:02:03.000000", "1970-01-01 00:00:01", None),
        ("0000-01-01", 4, "2024-01-01 00:00:00.000000", z, None),
        ("0000-00-00", 5, f"{z}.000000", z, f"{z}.000"),
    ]


def test_a_date_the_target_column_cannot_hold_names_the_column_and_the_fix(
    conn: pymysql.Connection, dbname: str, applier: Applier
) -> None:
    """A TIMESTAMP holds the zero TIMESTAMP, but no partial date (an origin DATETIME's)."""
    q(conn, "CREATE TABLE w (id INT PRIMARY KEY, at TIMESTAMP NULL)")
    partial = ZeroDate("datetime", 2024, 0, 10, 8, 0, 0)
    with pytest.raises(SchemaMismatchError) as caught:
        applier.apply([txn(1, ins(dbname, "w", "id,at", (1, partial)))])
    error = caught.value
    assert "no calendar date" in error.message and "2024-00-10 08:00:00" in error.message
    assert "`at`" in error.message and f"{dbname}" in error.message
    assert "TIMESTAMP holds the zero TIMESTAMP but no partial" in error.fix
    applier.apply([txn(1, ins(dbname, "w", "id,at", (1, ZeroDate("timestamp"))))])
    assert q(conn, "SELECT CAST(at AS CHAR) FROM w") == [("0000-00-00 00:00:00",)]


def test_id_zero_replays_as_zero(conn: pymysql.Connection, dbname: str, applier: Applier) -> None:
    q(conn, "CREATE TABLE a (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(10))")
    applier.apply([txn(1, ins(dbname, "a", "id,v", (0, "zero"), (5, "five")))])
    assert q(conn, "SELECT id, v FROM a ORDER BY id") == [(0, "zero"), (5, "five")]


def test_odd_identifiers(conn: pymysql.Connection, dbname: str, applier: Applier) -> None:
    q(conn, "CREATE TABLE `we``ird%t` (`i d` INT PRIMARY KEY, `v``%s` VARCHAR(10))")
    applier.apply(
        [
            txn(1, ins(dbname, "we`ird%t", "i d,v`%s", (1, "a"), (2, "%s"))),
            txn(2, dele(dbname, "we`ird%t", "i d,v`%s", (1, "a"))),
        ]
    )
    assert q(conn, "SELECT * FROM `we``ird%t`") == [(2, "%s")]


def test_generated_target_columns_are_left_to_the_target(
    conn: pymysql.Connection, dbname: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE g (id INT PRIMARY KEY, v INT, dbl INT AS (v * 2) VIRTUAL)")
    applier.apply([txn(1, ins(dbname, "g", "id,v,dbl", (1, 5, 10)))])
    applier.apply([txn(2, upd(dbname, "g", "id,v,dbl", ((1, 5, 10), (1, 6, 12))))])
    assert q(conn, "SELECT id, v, dbl FROM g") == [(1, 6, 12)]


# -- statements --------------------------------------------------------------------------------


def test_composite_key_and_key_changing_updates(
    conn: pymysql.Connection, dbname: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE kv (a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b))")
    c = "a,b,v"
    applier.apply(
        [
            txn(1, ins(dbname, "kv", c, (1, "x", 1), (1, "y", 2), (2, "x", 3))),
            txn(2, upd(dbname, "kv", c, ((1, "x", 1), (1, "x", 10)), ((1, "y", 2), (3, "y", 2)))),
            txn(3, dele(dbname, "kv", c, (2, "x", 3))),
            # One statement that moves (3,y) to (4,y) and then (1,x) onto the freed (3,y).
            txn(4, upd(dbname, "kv", c, ((3, "y", 2), (4, "y", 2)), ((1, "x", 10), (3, "y", 10)))),
        ]
    )
    assert q(conn, "SELECT a, b, v FROM kv ORDER BY a, b") == [(3, "y", 10), (4, "y", 2)]


def test_single_key_shift_as_the_origin_logs_it(
    conn: pymysql.Connection, dbname: str, applier: Applier
) -> None:
    # UPDATE t SET id = id + 1 ORDER BY id DESC on the origin.
    q(conn, "CREATE TABLE s (id INT PRIMARY KEY, v CHAR(1))")
    rows = [(1, "a"), (2, "b"), (3, "c")]
    applier.apply(
        [
            txn(1, ins(dbname, "s", "id,v", *rows)),
            txn(2, upd(dbname, "s", "id,v", *[((i, v), (i + 1, v)) for i, v in reversed(rows)])),
        ]
    )
    assert q(conn, "SELECT id, v FROM s ORDER BY id") == [(2, "a"), (3, "b"), (4, "c")]


def test_many_rows_are_merged_into_few_statements(
    conn: pymysql.Connection, dbname: str, settings: DatabaseSettings, origin_name: str
) -> None:
    q(conn, "CREATE TABLE m (id INT PRIMARY KEY, v INT, pad VARCHAR(20))")
    c = "id,v,pad"
    log = [txn(1, ins(dbname, "m", c, *[(i, i, "p") for i in range(1, 5001)]))]
    log += [txn(1 + i, upd(dbname, "m", c, ((i, i, "p"), (i, -i, "p")))) for i in range(1, 5001)]
    log += [txn(6001, dele(dbname, "m", c, *[(i, -i, "p") for i in range(1, 2501)]))]
    # The unreduced path (net-change apply has its own tests: test_apply_reduce.py).
    with Recording(settings, origin_name, reduce=False) as applier:
        assert applier.apply(log) == pos(6001)
    # The 5,000-row insert as one LOAD DATA (loaddata.py), 5,000 one-row updates and 2,500
    # deletes merged at 2,000 rows per statement.
    assert [(s.kind, s.rows) for s in applier.statements] == [
        ("load", 5000),
        ("upsert", 2000),
        ("upsert", 2000),
        ("upsert", 1000),
        ("delete", 2000),
        ("delete", 500),
    ]
    assert q(conn, "SELECT COUNT(*), SUM(v), MIN(id) FROM m") == [
        (2500, Decimal(-sum(range(2501, 5001))), 2501)
    ]


def test_statements_split_by_bytes(
    conn: pymysql.Connection, dbname: str, settings: DatabaseSettings, origin_name: str
) -> None:
    q(conn, "CREATE TABLE big (id INT PRIMARY KEY, b MEDIUMBLOB)")
    blob = bytes(range(256)) * 1024  # 256 KiB, 512 KiB as hex
    with Recording(settings, origin_name, max_bytes=1_200_000) as applier:
        applier.apply([txn(1, ins(dbname, "big", "id,b", *[(i, blob) for i in range(8)]))])
    assert [s.rows for s in applier.statements] == [2, 2, 2, 2]
    assert q(conn, "SELECT COUNT(*) FROM big WHERE b = %s", (blob,)) == [(8,)]


def test_order_is_kept_within_and_across_transactions(
    conn: pymysql.Connection, dbname: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE o (k INT PRIMARY KEY, v INT)")
    applier.apply(
        [
            txn(1, ins(dbname, "o", "k,v", (1, 1))),
            txn(2, dele(dbname, "o", "k,v", (1, 1))),
            txn(3, ins(dbname, "o", "k,v", (1, 3))),
            txn(4, ins(dbname, "o", "k,v", (2, 2))),
            txn(5, dele(dbname, "o", "k,v", (2, 2))),
            txn(
                6,
                ins(dbname, "o", "k,v", (5, 5)),
                dele(dbname, "o", "k,v", (5, 5)),
                ins(dbname, "o", "k,v", (5, 7)),
            ),
            txn(
                7,
                ins(dbname, "o", "k,v", (9, 9)),
                Change("truncate", dbname, "o"),
                ins(dbname, "o", "k,v", (8, 8)),
            ),
        ]
    )
    assert q(conn, "SELECT k, v FROM o ORDER BY k") == [(8, 8)]
    applier.apply(
        [
            txn(8, ins(dbname, "o", "k,v", (1, 1))),
            txn(9, dele(dbname, "o", "k,v", (1, 1))),
            txn(10, ins(dbname, "o", "k,v", (1, 3))),
        ]
    )
    assert q(conn, "SELECT k, v FROM o ORDER BY k") == [(1, 3), (8, 8)]


# -- exactly once ------------------------------------------------------------------------------


def counter_log(dbname: str) -> list[Transaction]:
    """A counter moved by successive update images, and one history row per transaction."""
    log = [txn(1, ins(dbname, "c", "id,n", (1, 0)), ins(dbname, "h", "id", (1,)))]
    for i in range(2, 12):
        log.append(
            txn(i, upd(dbname, "c", "id,n", ((1, i - 2), (1, i - 1))), ins(dbname, "h", "id", (i,)))
        )
    log.append(
        txn(
            Position("binlog.000002", 4),
            upd(dbname, "c", "id,n", ((1, 10), (1, 11))),
            ins(dbname, "h", "id", (12,)),
        )
    )
    return log


def test_exactly_once_same_list_twice(
    conn: pymysql.Connection,
    dbname: str,
    origin_name: str,
    settings: DatabaseSettings,
    applier: Applier,
) -> None:
    q(conn, "CREATE TABLE c (id INT PRIMARY KEY, n INT)")
    q(conn, "CREATE TABLE h (id INT PRIMARY KEY)")
    log = counter_log(dbname)
    last = Position("binlog.000002", 4)
    assert applier.checkpoint() is None
    assert applier.apply(log) == last
    assert applier.apply(log) == last
    assert q(conn, "SELECT n FROM c") == [(11,)]
    assert q(conn, "SELECT COUNT(*) FROM h") == [(12,)]
    assert stored(conn, origin_name) == (last.key, "binlog.000002", 4, 12)
    # An old prefix delivered again would set n back to 5 if it were applied.
    assert applier.apply(log[:6]) == last
    with Applier(settings, origin_name) as fresh:  # no cached checkpoint: read from the target
        assert fresh.apply(log[:6]) == last
        assert fresh.checkpoint() == last
    assert q(conn, "SELECT n FROM c") == [(11,)]
    assert stored(conn, origin_name) == (last.key, "binlog.000002", 4, 12)


def test_exactly_once_overlapping_lists(
    conn: pymysql.Connection, dbname: str, origin_name: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE c (id INT PRIMARY KEY, n INT)")
    q(conn, "CREATE TABLE h (id INT PRIMARY KEY)")
    log = counter_log(dbname)
    assert applier.apply(log[:6]) == pos(6)
    assert q(conn, "SELECT n FROM c") == [(5,)]
    assert stored(conn, origin_name) == (pos(6).key, "binlog.000001", 600, 6)
    assert applier.apply(log[3:9]) == pos(9)
    assert applier.apply(log[7:]) == Position("binlog.000002", 4)
    assert q(conn, "SELECT n FROM c") == [(11,)]
    assert q(conn, "SELECT COUNT(*) FROM h") == [(12,)]
    assert stored(conn, origin_name)[3] == 12  # type: ignore[index]


def test_upto_moves_the_checkpoint_past_filtered_transactions(
    conn: pymysql.Connection, dbname: str, origin_name: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE c (id INT PRIMARY KEY, n INT)")
    assert applier.apply([], upto=pos(5)) == pos(5)
    assert stored(conn, origin_name) == (pos(5).key, "binlog.000001", 500, 0)
    # Below the checkpoint: skipped; upto never moves it back.
    assert applier.apply([txn(4, ins(dbname, "c", "id,n", (1, 1)))], upto=pos(3)) == pos(5)
    assert q(conn, "SELECT COUNT(*) FROM c") == [(0,)]
    assert applier.apply([txn(6, ins(dbname, "c", "id,n", (1, 1)))], upto=pos(9)) == pos(9)
    assert applier.apply([txn(12, ins(dbname, "c", "id,n", (2, 2)))], upto=pos(10)) == pos(12)
    assert stored(conn, origin_name) == (pos(12).key, "binlog.000001", 1200, 2)


def test_a_failure_keeps_nothing_of_the_call(
    conn: pymysql.Connection, dbname: str, origin_name: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE p (id INT PRIMARY KEY, v INT CHECK (v >= 0))")
    applier.apply([txn(1, ins(dbname, "p", "id,v", (1, 1)))])
    before = stored(conn, origin_name)
    log = [txn(i, ins(dbname, "p", "id,v", (i, -1 if i == 4 else i))) for i in range(2, 7)]
    with pytest.raises(ConstraintError) as caught:
        applier.apply(log)
    # The five inserts were one statement; the error still names the 3rd transaction.
    message = str(caught.value)
    assert origin_name in message and f"`{dbname}`.`p`" in message and str(pos(4)) in message
    assert "4025" in message  # CHECK constraint failed
    assert failed_at(caught.value) == pos(4)
    assert q(conn, "SELECT id FROM p ORDER BY id") == [(1,)]
    assert stored(conn, origin_name) == before
    assert applier.checkpoint() == pos(1)


def test_a_failure_in_another_table_keeps_nothing(
    conn: pymysql.Connection, dbname: str, origin_name: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE p (id INT PRIMARY KEY)")
    log = [txn(i, ins(dbname, "p" if i != 3 else "nope", "id", (i,))) for i in range(1, 6)]
    with pytest.raises(MissingTableError) as caught:
        applier.apply(log)
    assert failed_at(caught.value) == pos(3)
    assert q(conn, "SELECT COUNT(*) FROM p") == [(0,)]
    assert stored(conn, origin_name) is None


# -- errors ------------------------------------------------------------------------------------


def test_missing_table_then_resumes_by_itself(
    conn: pymysql.Connection, dbname: str, origin_name: str, applier: Applier
) -> None:
    log = [txn(1, ins(dbname, "later", "id,v", (1, "a")))]
    with pytest.raises(MissingTableError) as caught:
        applier.apply(log)
    message = str(caught.value)
    assert f"`{dbname}`.`later`" in message and origin_name in message and str(pos(1)) in message
    assert "create it on the target" in message
    q(conn, "CREATE TABLE later (id INT PRIMARY KEY, v VARCHAR(5))")
    assert applier.apply(log) == pos(1)
    assert q(conn, "SELECT * FROM later") == [(1, "a")]


def test_missing_columns_are_listed(
    conn: pymysql.Connection, dbname: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE t (id INT PRIMARY KEY, v INT, extra_target INT DEFAULT 7)")
    log = [txn(1, ins(dbname, "t", "id,v,new1,new2", (1, 1, 2, 3)))]
    with pytest.raises(SchemaMismatchError, match="lacks column\\(s\\) new1, new2"):
        applier.apply(log)
    q(conn, "ALTER TABLE t ADD COLUMN new1 INT, ADD COLUMN new2 INT")
    applier.apply(log)
    assert q(conn, "SELECT id, v, extra_target, new1, new2 FROM t") == [(1, 1, 7, 2, 3)]


def test_ddl_is_never_executed_but_explains_a_mismatch(
    conn: pymysql.Connection, dbname: str, origin_name: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    applier.apply([txn(1, ins(dbname, "t", "id,v", (1, 1)))])  # table definition now cached
    drop = Change("ddl", dbname, "t", statement=f"DROP TABLE `{dbname}`.`t`")
    alter = Change("ddl", dbname, "t", statement="ALTER TABLE t ADD COLUMN c INT")
    assert applier.apply([txn(2, drop), txn(3, alter)]) == pos(3)
    assert q(conn, "SELECT * FROM t") == [(1, 1)]  # not dropped, not altered
    assert stored(conn, origin_name)[3] == 3  # type: ignore[index]

    log = [txn(4, ins(dbname, "t", "id,v,c", (2, 2, 2)))]
    with pytest.raises(SchemaMismatchError) as caught:
        applier.apply(log)
    assert caught.value.fix == (
        f"the origin ran: ALTER TABLE t ADD COLUMN c INT (at {pos(3)}); run the same on the "
        "target, apply resumes by itself"
    )
    q(conn, "ALTER TABLE t ADD COLUMN c INT")
    assert applier.apply(log) == pos(4)
    assert q(conn, "SELECT * FROM t ORDER BY id") == [(1, 1, None), (2, 2, 2)]


def test_a_dropped_column_the_target_still_has_stops_apply_at_the_ddl(
    conn: pymysql.Connection,
    dbname: str,
    origin_name: str,
    applier: Applier,
    settings: DatabaseSettings,
) -> None:
    """Not at the next row (which a restarted agent could not tell from an extra column):
    the DDL's transaction itself waits, so a new applier stops there too."""
    q(conn, "CREATE TABLE t (id INT PRIMARY KEY, v INT, gone INT DEFAULT 7, `key` INT)")
    applier.apply([txn(1, ins(dbname, "t", "id,v,gone,key", (1, 1, 1, 1)))])
    alter = "ALTER TABLE t DROP COLUMN gone, DROP INDEX i, DROP IF EXISTS `key`"
    log = [
        txn(2, Change("ddl", dbname, "t", statement=alter)),
        txn(3, ins(dbname, "t", "id,v", (2, 2))),
    ]
    for attempt in (applier, Applier(settings, origin_name)):  # the second: after a restart
        try:
            with pytest.raises(SchemaMismatchError) as caught:
                attempt.apply(log)
        finally:
            if attempt is not applier:
                attempt.close()
        assert "the origin dropped column(s) `gone`, `key`" in caught.value.message
        assert "`binlogsync skip` this DDL transaction" in caught.value.fix
        assert stored(conn, origin_name)[1:3] == ("binlog.000001", 100)  # type: ignore[index]
    q(conn, "ALTER TABLE t DROP COLUMN gone, DROP COLUMN `key`")
    assert applier.apply(log) == pos(3)
    assert q(conn, "SELECT * FROM t ORDER BY id") == [(1, 1), (2, 2)]


def test_ddl_invalidates_the_cached_table_definition(
    conn: pymysql.Connection, dbname: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    applier.apply([txn(1, ins(dbname, "t", "id,v", (1, 1)))])
    q(conn, "ALTER TABLE t ADD COLUMN c INT")  # the DBA ran it before the change arrives
    applier.apply(
        [
            txn(2, Change("ddl", dbname, "t", statement="ALTER TABLE t ADD COLUMN c INT")),
            txn(3, ins(dbname, "t", "id,v,c", (2, 2, 2))),
        ]
    )
    assert q(conn, "SELECT * FROM t ORDER BY id") == [(1, 1, None), (2, 2, 2)]


def test_table_without_primary_key(conn: pymysql.Connection, dbname: str, applier: Applier) -> None:
    q(conn, "CREATE TABLE nopk (id INT, v INT)")
    with pytest.raises(NoPrimaryKeyError) as caught:
        applier.apply([txn(1, ins(dbname, "nopk", "id,v", (1, 1)))])
    assert "add a primary key on the target, or exclude the table from the route" in str(
        caught.value
    )
    assert q(conn, "SELECT COUNT(*) FROM nopk") == [(0,)]


def test_foreign_key_refusals(conn: pymysql.Connection, dbname: str, applier: Applier) -> None:
    q(conn, "CREATE TABLE parent (id INT PRIMARY KEY) ENGINE=InnoDB")
    q(
        conn,
        "CREATE TABLE child (id INT PRIMARY KEY, pid INT, "
        "FOREIGN KEY (pid) REFERENCES parent (id)) ENGINE=InnoDB",
    )
    with pytest.raises(ConstraintError, match="1452"):
        applier.apply([txn(1, ins(dbname, "child", "id,pid", (1, 99)))])
    applier.apply(
        [txn(1, ins(dbname, "parent", "id", (1,))), txn(2, ins(dbname, "child", "id,pid", (1, 1)))]
    )
    with pytest.raises(ConstraintError, match="1451"):
        applier.apply([txn(3, dele(dbname, "parent", "id", (1,)))])
    assert q(conn, "SELECT COUNT(*) FROM parent") == [(1,)]


def test_not_null_and_unique_refusals(
    conn: pymysql.Connection, dbname: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE u (id INT PRIMARY KEY, name VARCHAR(10) NOT NULL, UNIQUE KEY (name))")
    with pytest.raises(ConstraintError, match="1048"):
        applier.apply([txn(1, ins(dbname, "u", "id,name", (1, None)))])
    applier.apply([txn(1, ins(dbname, "u", "id,name", (1, "ann")))])
    # A different row with the same unique name: refused, the first row is not overwritten.
    with pytest.raises(ConstraintError):
        applier.apply([txn(2, ins(dbname, "u", "id,name", (2, "ann")))])
    # The same row again (same key) is an ordinary upsert.
    applier.apply([txn(2, ins(dbname, "u", "id,name", (1, "ann")))])
    assert q(conn, "SELECT id, name FROM u") == [(1, "ann")]


@pytest.mark.parametrize(
    ("column", "value", "code"),
    [("TINYINT", 1000, "1264"), ("VARCHAR(3)", "abcdef", "1406"), ("INT", "x", "1366")],
)
def test_values_that_do_not_fit(
    conn: pymysql.Connection, dbname: str, applier: Applier, column: str, value: Any, code: str
) -> None:
    q(conn, f"CREATE TABLE f (id INT PRIMARY KEY, v {column})")
    with pytest.raises(SchemaMismatchError, match=code) as caught:
        applier.apply([txn(1, ins(dbname, "f", "id,v", (1, value)))])
    assert "does not fit" in str(caught.value)


def test_lost_connection_between_calls_reconnects(
    conn: pymysql.Connection, dbname: str, applier: Applier
) -> None:
    q(conn, "CREATE TABLE k (id INT PRIMARY KEY)")
    applier.apply([txn(1, ins(dbname, "k", "id", (1,)))])
    first = applier.connection_id
    q(conn, f"KILL {first}")
    assert applier.apply([txn(2, ins(dbname, "k", "id", (2,)))]) == pos(2)
    assert applier.connection_id != first
    assert q(conn, "SELECT id FROM k ORDER BY id") == [(1,), (2,)]


def test_a_connection_in_use_is_checked_without_a_round_trip(
    conn: pymysql.Connection,
    dbname: str,
    applier: Applier,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each call checks the open connection from its socket, not with a COM_PING (a round
    trip and some 50 µs of CPU per target transaction); a session the server ended is still
    found before the call, without a failure."""
    pings: list[object] = []
    real_ping = pymysql.connections.Connection.ping

    def counted(self: pymysql.connections.Connection, reconnect: bool = True) -> None:
        pings.append(self)
        real_ping(self, reconnect)

    monkeypatch.setattr(pymysql.connections.Connection, "ping", counted)
    q(conn, "CREATE TABLE k (id INT PRIMARY KEY)")
    for n in range(1, 4):
        assert applier.apply([txn(n, ins(dbname, "k", "id", (n,)))]) == pos(n)
    first = applier.connection_id
    assert first is not None
    assert pings == []
    kill_session(conn, first)
    assert applier.apply([txn(4, ins(dbname, "k", "id", (4,)))]) == pos(4)
    assert applier.connection_id != first
    assert q(conn, "SELECT COUNT(*) FROM k") == [(4,)]
    assert pings == []


def test_small_statements_run_in_place_and_bulk_ones_beside_the_next(
    conn: pymysql.Connection, dbname: str, origin_name: str, settings: DatabaseSettings
) -> None:
    """A statement of few rows runs on the applying thread (handing it to the pipeline's worker
    costs more CPU than the overlap saves); a bulk one runs on the worker while the next is
    built, and its failure is still reported as that statement's."""
    for table in ("big", "small", "last"):
        q(conn, f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(3))")

    class Recorded(Applier):
        def _execute(self, cursor: Any, statement: Statement) -> None:
            ran.append((statement.table, threading.current_thread() is caller))
            super()._execute(cursor, statement)

    ran: list[tuple[str, bool]] = []
    caller = threading.current_thread()
    many = [(i, "x") for i in range(HANDOVER_ROWS)]
    with Recorded(settings, origin_name) as applier:
        changes = (ins(dbname, t, "id,v", *rows) for t, rows in
                   (("big", many), ("small", [(1, "x")]), ("last", [(1, "x")])))  # fmt: skip
        assert applier.apply([txn(1, *changes)]) == pos(1)
        assert ran == [("big", False), ("small", True), ("last", True)]
        assert q(conn, "SELECT COUNT(*) FROM big") == [(HANDOVER_ROWS,)]
        too_long = [(HANDOVER_ROWS + i, "x" if i else "long") for i in range(HANDOVER_ROWS)]
        with pytest.raises(SchemaMismatchError, match="1406") as caught:
            applier.apply([txn(2, ins(dbname, "big", "id,v", *too_long),
                                ins(dbname, "small", "id,v", (2, "x")))])  # fmt: skip
        assert caught.value.position == pos(2)
        assert applier.checkpoint() == pos(1)
    assert q(conn, "SELECT COUNT(*) FROM big") == [(HANDOVER_ROWS,)]


def test_lost_connection_during_a_call(
    conn: pymysql.Connection, dbname: str, origin_name: str, settings: DatabaseSettings
) -> None:
    q(conn, "CREATE TABLE k (id INT PRIMARY KEY)")
    q(conn, "CREATE TABLE other (id INT PRIMARY KEY)")

    class Killed(Applier):
        kill = False

        def _execute(self, cursor: Any, statement: Statement) -> None:
            if self.kill and statement.table == "other":
                q(conn, f"KILL {self.connection_id}")  # after the 1st statement ran
            super()._execute(cursor, statement)

    log = [txn(2, ins(dbname, "k", "id", (2,)), ins(dbname, "other", "id", (2,)))]
    with Killed(settings, origin_name) as applier:
        applier.apply([txn(1, ins(dbname, "k", "id", (1,)))])
        applier.kill = True
        with pytest.raises(UnreachableError) as caught:
            applier.apply(log)
        assert origin_name in str(caught.value) and str(settings) in str(caught.value)
        assert q(conn, "SELECT id FROM k ORDER BY id") == [(1,)]
        assert applier.checkpoint() == pos(1)
        applier.kill = False
        assert applier.apply(log) == pos(2)
    assert q(conn, "SELECT id FROM k ORDER BY id") == [(1,), (2,)]


def test_unreachable_target(origin_name: str) -> None:
    with Applier(DatabaseSettings("127.0.0.1", free_port()), origin_name) as applier:
        with pytest.raises(UnreachableError, match="127.0.0.1"):
            applier.apply([])
        with pytest.raises(UnreachableError):
            applier.checkpoint()


def test_two_appliers_of_one_origin_cannot_both_commit(
    conn: pymysql.Connection,
    dbname: str,
    origin_name: str,
    settings: DatabaseSettings,
    applier: Applier,
) -> None:
    q(conn, "CREATE TABLE c (id INT PRIMARY KEY, n INT)")
    q(conn, "CREATE TABLE h (id INT PRIMARY KEY)")
    log = counter_log(dbname)
    applier.apply(log[:2])
    with Applier(settings, origin_name) as other:
        other.apply(log[:4])
    with pytest.raises(ApplyError, match="checkpoint on the target moved"):
        applier.apply(log[:3])  # its cached checkpoint (2) is stale
    assert applier.apply(log[:5]) == pos(5)  # re-read: applies only the 5th
    assert q(conn, "SELECT n FROM c") == [(4,)]
    assert stored(conn, origin_name)[3] == 5  # type: ignore[index]


# -- skip --------------------------------------------------------------------------------------


def test_skip_moves_past_one_transaction_and_is_recorded(
    conn: pymysql.Connection,
    dbname: str,
    origin_name: str,
    settings: DatabaseSettings,
    applier: Applier,
) -> None:
    q(conn, "CREATE TABLE p (id INT PRIMARY KEY, v INT CHECK (v >= 0))")
    log = [txn(i, ins(dbname, "p", "id,v", (i, -1 if i == 3 else i))) for i in range(1, 6)]
    applier.apply(log[:2])
    with pytest.raises(ConstraintError) as caught:
        applier.apply(log)
    failing = failed_at(caught.value)
    assert failing == pos(3)

    with pytest.raises(ApplyError, match="already applied"):
        skip(settings, origin_name, pos(2), "wrong one")
    assert skip(settings, origin_name, failing, "v < 0 is refused here (TICKET-1)") == pos(3)
    with pytest.raises(ApplyError, match="already applied"):
        skip(settings, origin_name, pos(3), "twice")

    assert applier.apply(log) == pos(5)
    assert q(conn, "SELECT id FROM p ORDER BY id") == [(1,), (2,), (4,), (5,)]
    skipped = list_skipped(settings, origin_name)
    assert [(s.origin, s.position, s.reason) for s in skipped] == [
        (origin_name, pos(3), "v < 0 is refused here (TICKET-1)")
    ]
    assert abs(skipped[0].skipped_at - dt.datetime.now(dt.UTC).replace(tzinfo=None)) < (
        dt.timedelta(minutes=5)
    )
    assert all(s.origin != origin_name for s in list_skipped(settings, "someone-else"))
    assert stored(conn, origin_name)[3] == 4  # type: ignore[index]  # 4 applied, 1 skipped


def test_skip_needs_a_reason(settings: DatabaseSettings, origin_name: str) -> None:
    with pytest.raises(ApplyError, match="reason"):
        skip(settings, origin_name, pos(1), "  ")


def test_skip_of_a_never_applied_origin(
    conn: pymysql.Connection, settings: DatabaseSettings, origin_name: str
) -> None:
    assert skip(settings, origin_name, pos(7), "start here") == pos(7)
    assert stored(conn, origin_name) == (pos(7).key, "binlog.000001", 700, 0)


def test_origin_name_is_checked(settings: DatabaseSettings) -> None:
    from binlogsync.errors import ConfigError

    with pytest.raises(ConfigError):
        Applier(settings, "x" * 65)
