"""The binlog service writes rows byte for byte as the origin wrote them.

SQL in on a real MariaDB origin; capture reads the binlog (as the origin agent does); the
service's encoder writes each captured change back; the result must equal the row images of
the origin's own Rows events, read from its binlog file, for every column type of the
fidelity test and the types kit, fractional seconds 0-6, negative TIMEs, several character
sets, ENUM/SET, BIT, DECIMAL limits and 2-byte length prefixes. The Table_map bodies capture
keeps must be the origin's too.
"""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from pathlib import Path

import pytest

import typeskit
from binlogsync.binlogservice import rowencode, tablemap
from binlogsync.capture.reader import BinlogReader
from binlogsync.config import DatabaseSettings
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync_dev.sandbox import Server

pytestmark = pytest.mark.integration

FIDELITY = """CREATE TABLE all_types (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d DECIMAL(65,30), f FLOAT, db DOUBLE,
  dt DATE, tm TIME(6), dtm DATETIME(6), ts TIMESTAMP(6) NULL, yr YEAR,
  c CHAR(10), vc VARCHAR(200), tx TEXT, bn BINARY(4), vb VARBINARY(20), bl BLOB,
  js JSON, en ENUM('a','b','c'), st SET('x','y','z'), b1 BIT(1), b64 BIT(64)
) CHARSET utf8mb4"""
FIDELITY_ROWS = [
    (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
     -9223372036854775808, 18446744073709551615,
     "-12345678901234567890123456789012345.123456789012345678901234567890", 1.5, -2.5e300,
     "1000-01-01", "-838:59:59.000000", "1000-01-01 00:00:00.000000",
     "1970-01-01 05:30:01.000000", 1901, "", "", "", b"\0\0\0\0", b"", b"", "[]", "a", "",
     0, 0),
    (2, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 0,
     "0.000000000000000000000000000001", 3.25, 1e-300, "9999-12-31", "838:59:59.999999",
     "9999-12-31 23:59:59.999999", "2038-01-19 03:14:07.999999", 2155, "héllo",
     "日本語 🚀💾", "emoji 🎉 text\nwith newline", b"\0\xff\0\x01", b"\xff\0\xfe",
     bytes(range(256)) * 4, '{"b": [1, 2.5, null], "a": {"x": "🚀"}}', "c", "x,z", 1,
     18446744073709551615),
    (3, *([None] * 29)),
]  # fmt: skip
TEMPORAL = (
    "CREATE TABLE tm (id INT PRIMARY KEY, t1 TIME(1), t2 TIME(2), t3 TIME(3), t4 TIME(4), "
    "t5 TIME(5), t0 TIME, d1 DATETIME(1), d3 DATETIME(3), d5 DATETIME(5), d0 DATETIME, "
    "s2 TIMESTAMP(2) NULL, s4 TIMESTAMP(4) NULL, s0 TIMESTAMP NULL, "
    "c100 CHAR(100) CHARACTER SET utf8mb4, l1 VARCHAR(10) CHARACTER SET latin1, "
    "a1 VARCHAR(10) CHARACTER SET ascii, u2 VARCHAR(10) CHARACTER SET ucs2, big VARCHAR(300), "
    "e2 ENUM('a','b'), dec1 DECIMAL(10,0), dec2 DECIMAL(5,5), dec3 DECIMAL(20,10), "
    "bn BINARY(3), bt BIT(17), ub TINYINT UNSIGNED, y YEAR, mt MEDIUMTEXT, lb LONGBLOB)"
)
TEMPORAL_ROWS = [
    (1, "-00:00:01.5", "-01:02:03.25", "-838:59:58.999", "12:00:00.1234", "-00:00:00.00001",
     "-838:59:59", "2020-01-01 00:00:00.5", "1999-12-31 23:59:59.999",
     "2000-02-29 12:34:56.12345", "2000-01-01 01:02:03", "2001-01-01 00:00:00.01",
     "2037-12-31 00:00:00.9999", "2020-06-01 10:00:00", "x" * 100, "héllo ÿ", "plain",
     "ŁÓDŹ", "y" * 300, "b", 1234567890, Decimal("-0.12345"),
     Decimal("-1234567890.0123456789"), b"\x01\0\0", 65537, 255, 0, "m" * 70000,
     b"\0" * 70000),
    (2, "00:00:01.5", "01:02:03.25", "838:59:58.999", "-12:00:00.1234", "00:00:00.00001",
     "00:00:00", "1000-01-01 00:00:00.1", "9999-12-31 23:59:59.999",
     "2000-02-29 12:34:56.00001", "9999-12-31 23:59:59", "1970-01-01 05:30:01.01",
     "2038-01-19 08:44:07.9999", "1970-01-01 05:30:01", "", "", "", "", "", "a", -1,
     Decimal("0.00001"), Decimal("0.0000000001"), b"\0\0\0", 0, 0, 2155, "", b""),
]  # fmt: skip


def _raw_rows(path: Path, schema: str) -> list[tuple[bytes, int, bytes]]:
    """(Table_map body, Rows event type, row images) of every Rows event of `schema` in a
    binlog file, as MariaDB wrote them."""
    data = path.read_bytes()
    out, p, table_map = [], 4, b""
    while p + 19 <= len(data):
        kind, size = data[p + 4], struct.unpack_from("<I", data, p + 9)[0]
        body = data[p + 19 : p + size - 4]
        if kind == 19:
            table_map = body[8:]
        elif kind in (23, 24, 25) and tablemap.parse(table_map).schema == schema:
            width = body[8]
            bitmaps = (width + 7) // 8 * (2 if kind == 24 else 1)
            out.append((table_map, kind, body[9 + bitmaps :]))
        p += size
    return out


def test_rows_are_encoded_byte_for_byte_as_the_origin_wrote_them(
    origin: Server, dbname: str
) -> None:
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        file = cur.fetchone()[0]
        cur.execute(f"CREATE DATABASE {dbname}")
        cur.execute(f"USE {dbname}")
        cur.execute(f"CREATE TABLE t ({typeskit.COLUMNS})")
        cur.execute(FIDELITY)
        cur.execute(TEMPORAL)
        cur.execute("SET time_zone = '+05:30'")  # TIMESTAMPs are binlogged in UTC anyway
        for i in range(40):
            cur.execute(typeskit.INSERT, typeskit.row(i))
        cur.execute("UPDATE t SET vc = CONCAT(vc, '!'), st = 'a,c' WHERE id % 3 = 0")
        cur.execute("DELETE FROM t WHERE id % 5 = 0")
        marks = ",".join(["%s"] * len(FIDELITY_ROWS[0]))
        cur.executemany(f"INSERT INTO all_types VALUES ({marks})", FIDELITY_ROWS)
        cur.execute("UPDATE all_types SET vc = NULL, tx = '', d = 1.5, st = 'y' WHERE id = 2")
        for row in TEMPORAL_ROWS:
            cur.execute(f"INSERT INTO tm VALUES ({','.join(['%s'] * len(row))})", row)
        cur.execute("UPDATE tm SET t1 = '-00:00:00.1', u2 = 'ß' WHERE id = 2")
        cur.execute("FLUSH BINARY LOGS")  # the files are complete on disk
        cur.execute("SHOW BINARY LOGS")
        files = [name for name, *_ in cur.fetchall() if name >= file]
    # the sandbox's tiny max_binlog_size spreads them over several files
    raw = [r for name in files for r in _raw_rows(Path(origin.datadir) / name, dbname)]
    assert len(raw) >= 40 + 1 + 1 + 1 + 1 + 2 + 1
    reader = BinlogReader(
        DatabaseSettings(origin.host, origin.port, origin.user, origin.password),
        4701,
        Position(file, 4),
        TableFilter((f"{dbname}.*",)),
    )
    changes = []
    try:
        for item in reader.transactions():
            changes += [c for c in item.changes if c.kind in ("insert", "update", "delete")]
            if len(changes) >= len(raw):
                break
    finally:
        reader.close()
    assert [c.table for c in changes][:3] == ["t", "t", "t"]
    compared = 0
    for (body, kind, images), change in zip(raw, changes, strict=True):
        shape = tablemap.parse(body)
        assert (shape.schema, shape.table, shape.names) == (dbname, change.table, change.columns)
        encoder = rowencode.RowEncoder(shape)
        if change.kind == "update":
            pairs = zip(change.before, change.after, strict=True)
            ours = b"".join(encoder.row(b) + encoder.row(a) for b, a in pairs)
        else:
            ours = b"".join(map(encoder.row, change.after or change.before))
        assert ours == images, (change.table, change.kind, ours[:80].hex(), images[:80].hex())
        assert kind == {"insert": 23, "update": 24, "delete": 25}[change.kind]
        compared += 1
    assert compared == len(raw)


def test_values_that_do_not_fit_their_column_are_refused_with_the_column() -> None:
    body = tablemap.parse(_simple_map())
    encoder = rowencode.RowEncoder(body)
    assert encoder.row((1, "a", Decimal("1.5"), dt.datetime(2024, 1, 1)))
    for row, column in (
        (("x", "a", Decimal("1"), None), "id"),
        ((1, "a", Decimal("12345.1"), None), "d"),  # 5 integer digits in DECIMAL(5,1)
        ((1, "a", Decimal("1.25"), None), "d"),  # two fraction digits in DECIMAL(5,1)
        ((1, 7, Decimal("1"), None), "name"),
        ((1, "a", 1.5, None), "d"),
        ((1, "a", Decimal("1"), "not a date"), "at"),
    ):
        with pytest.raises(rowencode.EncodeError) as refused:
            encoder.row(row)
        assert f"column {column}" in refused.value.message
    with pytest.raises(rowencode.EncodeError):
        encoder.row((1, "a"))  # a row of the wrong width


def _simple_map() -> bytes:
    from servicekit import map_body

    return map_body(
        "app",
        "t",
        [
            ("id", tablemap.LONG, b"", False),
            ("name", tablemap.VARCHAR, (40).to_bytes(2, "little"), False),
            ("d", tablemap.NEWDECIMAL, bytes((5, 1)), False),
            ("at", tablemap.DATETIME2, b"\x00", False),
        ],
    )


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x03app\x00\x01t\x00",
        b"\x03app\x00\x01t\x00\x02\x03",  # types cut short
        b"\x03app\x00\x01t\x00\x01\x03\x05\x00\x00",  # metadata longer than its types need
        b"\x03app\x00\x01t\x00\x01\x03\x00\x00",  # no column names
        b"\x03app\x01t\x00\x01\x03\x00\x00",  # a name without its NUL
        b"\x03app\x00\x01t\x00\xfc\x00\x20",  # 8192 columns
    ],
)
def test_malformed_table_maps_are_refused(body: bytes) -> None:
    with pytest.raises(tablemap.MapError):
        tablemap.parse(body)
