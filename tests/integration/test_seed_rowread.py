"""The seed's row reader gives exactly the rows PyMySQL gives, for every column type."""

from __future__ import annotations

import datetime as dt

import pytest

from binlogsync.codec import pack, text_conversions, unpack
from binlogsync.seed.rowread import check_library, fetch_all
from binlogsync.zerodate import ZeroDate
from binlogsync_dev.sandbox import Server
from everytype import ROWS, create


@pytest.fixture
def table(target: Server, dbname: str) -> str:
    with target.connect() as conn, conn.cursor() as cur:
        create(cur, dbname)
        # Rows longer than one 16 MiB protocol packet.
        cur.execute(f"INSERT INTO `{dbname}`.t (id, bl) VALUES (5, REPEAT(x'cd', 17000000))")
        cur.execute(f"INSERT INTO `{dbname}`.t (id, bl) VALUES (6, REPEAT(x'ef', 16777200))")
    return f"`{dbname}`.t"


@pytest.mark.parametrize("conv", ["driver", "codec"])
def test_rows_are_read_as_the_driver_reads_them(target: Server, table: str, conv: str) -> None:
    check_library()
    extra = {"conv": text_conversions()} if conv == "codec" else {}
    sql = f"SELECT *, fl + 0e0 FROM {table} ORDER BY id"
    with target.connect(**extra) as conn:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute(sql)
            expected = list(cur.fetchall())
        got = fetch_all(conn, sql)
        assert len(got) == len(expected) == len(ROWS) + 2
        # Codec values compare by what they pack to (ExtType payloads are the server's text).
        assert [unpack(pack(list(r))) for r in got] == [unpack(pack(list(r))) for r in expected]
        assert fetch_all(conn, f"SELECT * FROM {table} WHERE id < 0") == []
        with conn.cursor() as cur:  # the connection is usable afterwards
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)


def test_a_query_error_is_the_drivers_and_the_connection_stays_usable(
    target: Server, table: str
) -> None:
    import pymysql

    with target.connect() as conn:
        with pytest.raises(pymysql.err.OperationalError, match="nope"):
            fetch_all(conn, f"SELECT nope FROM {table}")
        assert fetch_all(conn, "SELECT 2") == [(2,)]


def test_zero_partial_and_invalid_dates_are_read_as_what_they_are(
    target: Server, dbname: str
) -> None:
    """Through the codec's converters: a ZeroDate of the column's kind once unpacked, never
    text (which a PostgreSQL target could not tell from a string) nor an unreadable DATE."""
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(
            f"CREATE TABLE `{dbname}`.z (id INT PRIMARY KEY, d DATE, dt DATETIME(6), "
            "ts TIMESTAMP(3) NULL)"
        )
        cur.execute(
            f"INSERT INTO `{dbname}`.z VALUES (1, '0000-00-00', '0000-00-00 00:00:00', "
            "'0000-00-00 00:00:00'), (2, '2024-00-10', '2024-05-00 10:11:12.5', NULL), "
            "(3, '2004-04-31', '2004-02-30 00:00:00', '2024-02-29 12:00:00.25'), "
            "(4, '2024-02-29', '2024-02-29 23:59:59.999999', '1970-01-01 00:00:01')"
        )
    with target.connect(conv=text_conversions()) as conn:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
        rows = [unpack(pack(list(r))) for r in fetch_all(conn, f"SELECT * FROM `{dbname}`.z")]
    assert rows == [
        [1, ZeroDate("date"), ZeroDate("datetime", fsp=6), ZeroDate("timestamp", fsp=3)],
        [2, ZeroDate("date", 2024, 0, 10), ZeroDate("datetime", 2024, 5, 0, 10, 11, 12, 500000, 6),
         None],
        [3, ZeroDate("date", 2004, 4, 31), ZeroDate("datetime", 2004, 2, 30, fsp=6),
         dt.datetime(2024, 2, 29, 12, 0, 0, 250000)],
        [4, dt.date(2024, 2, 29), dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
         dt.datetime(1970, 1, 1, 0, 0, 1)],
    ]  # fmt: skip
