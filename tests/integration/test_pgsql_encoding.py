"""The portable row encoding computed by PostgreSQL (pgsql.py) equals MariaDB's byte for byte,
row by row, on the values where the two servers' text differs most: 8,000 doubles and floats
(random bit patterns, every power of ten, subnormals, both zeros), every fraction length of
DATETIME, TIMESTAMP and TIME (TIME beyond 24 h and negative), YEAR 0, DECIMAL(65,30), empty
strings against NULL, 4-byte characters, a latin1 column and every byte value."""

from __future__ import annotations

import datetime as dt
import math
import random
import struct
from decimal import Decimal
from typing import Any

import pytest

from binlogsync.reconcile import checksums, choices, pgsql, postgres, schema
from binlogsync.reconcile.checksums import Encoding
from binlogsync_dev.pg_sandbox import PgServer
from binlogsync_dev.sandbox import Server
from reconcile_kit import execute

pytestmark = pytest.mark.integration

MARIADB = """CREATE TABLE t (id INT PRIMARY KEY, db DOUBLE, f FLOAT, y YEAR,
    d DECIMAL(65,30), dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts1 TIMESTAMP(1) NULL,
    ts6 TIMESTAMP(6) NULL, t0 TIME, t2 TIME(2), t6 TIME(6), dd DATE, s VARCHAR(20),
    bl BLOB, b BIT(64), l VARCHAR(20) CHARACTER SET latin1)"""
POSTGRES = """CREATE TABLE enc.t (id integer PRIMARY KEY, db double precision, f real,
    y smallint, d numeric(65,30), dt0 timestamp(0), dt3 timestamp(3), dt6 timestamp(6),
    ts1 timestamptz(1), ts6 timestamptz(6), t0 interval, t2 interval, t6 interval, dd date,
    s varchar(20), bl bytea, b numeric(20,0), l varchar(20))"""
COLUMNS = ("id, db, f, y, d, dt0, dt3, dt6, ts1, ts6, t0, t2, t6, dd, s, bl, b, l").split(", ")


def _doubles() -> list[float]:
    values = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308]
    for e in range(-323, 308):
        for mantissa in (1.0, 1.5, 1.2345678901234567, 9.999999999999998):
            v = mantissa * 10.0**e
            if math.isfinite(v) and v != 0:
                values += [v, -v]
    rng = random.Random(7)
    while len(values) < 8000:
        v = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(v):
            values.append(v)
    return values


def _float32(v: float) -> float | None:
    if not math.isfinite(v) or abs(v) > 3.4e38:
        return None
    return float(struct.unpack("<f", struct.pack("<f", v))[0])


def _rows() -> list[tuple[Any, ...]]:
    base = dt.datetime(2024, 2, 29, 23, 59, 58)
    times = [
        dt.timedelta(hours=838, minutes=59, seconds=59),
        -dt.timedelta(hours=838, minutes=59, seconds=59),
        dt.timedelta(hours=25, microseconds=10),
        -dt.timedelta(microseconds=500_000),
        dt.timedelta(0),
        dt.timedelta(hours=9, minutes=5, seconds=3, microseconds=120_000),
    ]
    strings = ["", "a,b", "héllo 𝄞", "0", None]
    rows = []
    for i, v in enumerate(_doubles()):
        at = base + dt.timedelta(microseconds=i * 7919) if i % 17 else None
        rows.append(
            (
                i, v, _float32(v), [0, 1901, 2155, None][i % 4],
                Decimal(f"{i}.{i:030d}") if i % 5 else None,
                at and at.replace(microsecond=0), at and at.replace(microsecond=at.microsecond // 1000 * 1000),
                at, at and at.replace(microsecond=at.microsecond // 100_000 * 100_000), at,
                times[i % 6] - dt.timedelta(microseconds=times[i % 6].microseconds),
                times[i % 6] - dt.timedelta(microseconds=times[i % 6].microseconds % 10_000),
                times[i % 6], at and at.date(), strings[i % 5],
                bytes(range(i % 256)) if i % 3 else (b"" if i % 2 else None),
                [0, 1, 2**63, 2**64 - 1][i % 4],
                ["", "façade", "Ærø ÿ", None][i % 4],  # latin1 on MariaDB, UTF-8 on PostgreSQL
            )
        )  # fmt: skip
    return rows


def test_postgresql_computes_mariadbs_encoding_byte_for_byte(
    origin: Server, dbname: str, pg: PgServer
) -> None:
    rows = _rows()
    execute(origin, None, f"CREATE DATABASE `{dbname}`", f"USE `{dbname}`", MARIADB)
    marks = ", ".join(["%s"] * len(COLUMNS))
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.executemany(f"INSERT INTO t VALUES ({marks})", rows)
    with pg.connect() as conn:
        conn.execute("DROP SCHEMA IF EXISTS enc CASCADE")
        conn.execute("CREATE SCHEMA enc")
        conn.execute(POSTGRES)
        conn.execute("SET TIME ZONE 'UTC'")
        pg_rows = [
            tuple(v.replace(tzinfo=dt.UTC) if isinstance(v, dt.datetime) and c.startswith("ts")
                  else v for c, v in zip(COLUMNS, r, strict=True))
            for r in rows
        ]  # fmt: skip
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO enc.t VALUES ({marks})", pg_rows)

    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        source = schema.describe(cur, dbname, "t")
        assert source is not None
        pair = schema.TablePair(source, source, tuple(COLUMNS), ("id",))
        encoding = Encoding.of([pair], "text", choices.PORTABLE)
        cur.execute(checksums.row_hashes_sql(dbname, "t", ("id",), encoding, "TRUE"), [])
        mine = dict(cur.fetchall())
        cur.execute(checksums.column_hashes_sql(dbname, "t", ("id",), encoding, "TRUE"), [])
        my_columns = {r[0]: r[1:] for r in cur.fetchall()}
    with pg.connect() as conn, conn.cursor() as cur:
        conn.execute("SET TIME ZONE 'UTC'")
        described = postgres.describe(cur, "enc", "t")
        assert described is not None
        types = {c.name: c.data_type for c in described.columns}
        assert pgsql.unsupported(encoding, types) == ""
        cur.execute(pgsql.row_hashes_sql("enc", "t", ("id",), encoding, types, "TRUE"), [])
        theirs = {int(k): int(h) for k, h in cur.fetchall()}
        cur.execute(pgsql.column_hashes_sql("enc", "t", ("id",), encoding, types, "TRUE"), [])
        their_columns = {r[0]: r[1:] for r in cur.fetchall()}
    assert len(mine) == len(rows) == len(theirs)
    columns = {
        (c, i)
        for i in my_columns
        for c, a, b in zip(COLUMNS, my_columns[i], their_columns[i], strict=True)
        if a != b
    }
    assert not columns, sorted(columns)[:10]
    differing = [i for i in mine if int(mine[i]) != theirs[i]]
    assert not differing, [rows[i] for i in differing[:5]]


def test_a_zero_date_mapped_on_postgresql_is_a_difference(
    origin: Server, dbname: str, pg: PgServer
) -> None:
    """A PostgreSQL target holds no zero date: what `zero_dates` maps it to (NULL, 1970-01-01)
    is not the origin's value, and the comparison says so, column by column; the real dates
    beside it still compare equal."""
    execute(
        origin,
        None,
        f"CREATE DATABASE `{dbname}`",
        f"USE `{dbname}`",
        "SET SESSION sql_mode = '', time_zone = '+00:00'",
        "CREATE TABLE z (id INT PRIMARY KEY, d DATE, dtm DATETIME(6), ts TIMESTAMP(3) NULL)",
        "INSERT INTO z VALUES (1, '0000-00-00', '2024-00-10 10:00:00', '0000-00-00'), "
        "(2, '0000-00-00', '0000-00-00', '0000-00-00'), "
        "(3, '2024-02-29', '2024-02-29 12:00:00.5', '2024-02-29 12:00:00.25')",
    )
    with pg.connect() as conn:
        conn.execute("DROP SCHEMA IF EXISTS zero CASCADE")
        conn.execute("CREATE SCHEMA zero")
        conn.execute("CREATE TABLE zero.z (id integer PRIMARY KEY, d date, dtm timestamp(6), "
                     "ts timestamptz(3))")  # fmt: skip
        conn.execute(
            "INSERT INTO zero.z VALUES (1, NULL, NULL, NULL), "  # zero_dates = "null"
            "(2, '1970-01-01', '1970-01-01', '1970-01-01 00:00:00+00'), "  # "epoch"
            "(3, '2024-02-29', '2024-02-29 12:00:00.5', '2024-02-29 12:00:00.25+00')"
        )
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        source = schema.describe(cur, dbname, "z")
        assert source is not None
        pair = schema.TablePair(source, source, ("id", "d", "dtm", "ts"), ("id",))
        encoding = Encoding.of([pair], "text", choices.PORTABLE)
        cur.execute(checksums.column_hashes_sql(dbname, "z", ("id",), encoding, "TRUE"), [])
        mine = {r[0]: r[1:] for r in cur.fetchall()}
    with pg.connect() as conn, conn.cursor() as cur:
        conn.execute("SET TIME ZONE 'UTC'")
        described = postgres.describe(cur, "zero", "z")
        assert described is not None
        types = {c.name: c.data_type for c in described.columns}
        assert pgsql.unsupported(encoding, types) == ""
        cur.execute(pgsql.column_hashes_sql("zero", "z", ("id",), encoding, types, "TRUE"), [])
        theirs = {r[0]: r[1:] for r in cur.fetchall()}
    differing = {
        i: [c for c, a, b in zip(pair.columns, mine[i], theirs[i], strict=True) if a != b]
        for i in mine
    }
    assert differing == {1: ["d", "dtm", "ts"], 2: ["d", "dtm", "ts"], 3: []}
