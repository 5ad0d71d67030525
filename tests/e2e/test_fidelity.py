"""Every column type, composite keys, multi-statement transactions, rollbacks and large
statements, through the whole pipe: origin binlog → client → hub → client → target."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlogsync.devsite.sandbox import Server
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.e2e

ALL_TYPES = """CREATE TABLE all_types (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d DECIMAL(65,30), f FLOAT, db DOUBLE,
  dt DATE, tm TIME(6), dtm DATETIME(6), ts TIMESTAMP(6) NULL, yr YEAR,
  c CHAR(10), vc VARCHAR(200), tx TEXT, bn BINARY(4), vb VARBINARY(20), bl BLOB,
  js JSON, en ENUM('a','b','c'), st SET('x','y','z'), b1 BIT(1), b64 BIT(64)
) CHARSET utf8mb4"""

ROWS = [
    (
        1,
        -128,
        255,
        -32768,
        65535,
        -8388608,
        16777215,
        -2147483648,
        4294967295,
        -9223372036854775808,
        18446744073709551615,
        "-12345678901234567890123456789012345.123456789012345678901234567890",
        1.5,
        -2.5e300,
        "1000-01-01",
        "-838:59:59.000000",
        "1000-01-01 00:00:00.000000",
        "1970-01-01 05:30:01.000000",
        1901,
        "",
        "",
        "",
        b"\x00\x00\x00\x00",
        b"",
        b"",
        "[]",
        "a",
        "",
        0,
        0,
    ),
    (
        2,
        127,
        0,
        32767,
        0,
        8388607,
        0,
        2147483647,
        0,
        9223372036854775807,
        0,
        "0.000000000000000000000000000001",
        3.25,
        1e-300,
        "9999-12-31",
        "838:59:59.999999",
        "9999-12-31 23:59:59.999999",
        "2038-01-19 03:14:07.999999",
        2155,
        "héllo",
        "日本語 🚀💾",
        "emoji 🎉 text\nwith newline",
        b"\x00\xff\x00\x01",
        b"\xff\x00\xfe",
        bytes(range(256)) * 4,
        '{"b": [1, 2.5, null], "a": {"x": "🚀"}}',
        "c",
        "x,z",
        1,
        18446744073709551615,
    ),
    (
        3,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    ),
]

COMPOSITE = (
    "CREATE TABLE composite (region CHAR(2) NOT NULL, num INT NOT NULL, "
    "name VARCHAR(50), PRIMARY KEY (region, num))"
)
BIG = "CREATE TABLE big (id INT PRIMARY KEY, payload VARCHAR(100))"


def test_everything_arrives_exactly(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, ALL_TYPES, COMPOSITE, BIG)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SET time_zone = '+05:30'")  # TIMESTAMP must survive a non-UTC session
            marks = ",".join(["%s"] * len(ROWS[0]))
            cur.executemany(f"INSERT INTO all_types VALUES ({marks})", ROWS)
            cur.execute("UPDATE all_types SET vc = NULL, tx = '', d = 1.5, st = 'y' WHERE id = 2")
            cur.execute("UPDATE all_types SET id = 20 WHERE id = 1")  # primary key change
            # a multi-statement transaction
            cur.execute("BEGIN")
            cur.execute(
                "INSERT INTO composite VALUES ('de', 1, 'a'), ('de', 2, 'b'), ('fr', 1, 'c')"
            )
            cur.execute("UPDATE composite SET num = 3 WHERE region = 'de' AND num = 2")
            cur.execute("DELETE FROM composite WHERE region = 'fr'")
            cur.execute("COMMIT")
            # a rollback: nothing of it may arrive
            cur.execute("BEGIN")
            cur.execute("INSERT INTO composite VALUES ('xx', 9, 'rolled back')")
            cur.execute("DELETE FROM all_types")
            cur.execute("ROLLBACK")
            # a large multi-row statement, then a large delete
            values = ",".join(f"({i}, 'row {i}')" for i in range(5000))
            cur.execute(f"INSERT INTO big VALUES {values}")
            cur.execute("DELETE FROM big WHERE id % 3 = 0")
            cur.execute("TRUNCATE TABLE composite")
            cur.execute("INSERT INTO composite VALUES ('it', 7, 'after truncate')")
        wait_equal(s, dbname, ["all_types", "composite", "big"])
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM composite WHERE region = 'xx'")
            assert cur.fetchone()[0] == 0
            cur.execute("SELECT COUNT(*) FROM big")
            assert cur.fetchone()[0] == 5000 - 1667
