"""Every column type, composite keys, multi-statement transactions, rollbacks and large
statements, through the whole pipe: origin binlog → client → hub → client → target. Zero,
partial and invalid dates too (a legacy origin's, written with sql_mode ''), in the primary key
as well, onto a target whose own sql_mode forbids them (TRADITIONAL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlogsync_dev.sandbox import Server
from sitekit import create, site, target_sql_mode, wait_equal

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

# Zero and partial dates in DATE, DATETIME(6) and TIMESTAMP(6): captured as NULL and
# 1970-01-01 00:00:00 once, which the target refused for the TIMESTAMP (error 1292).
ZERO_ROWS = [
    (
        4,
        *[None] * 13,
        "0000-00-00",
        None,
        "0000-00-00 00:00:00",
        "0000-00-00 00:00:00",
        *[None] * 12,
    ),
    (5, *[None] * 13, "2024-00-10", None, "2024-05-00 10:11:12.5", None, *[None] * 12),
    (
        6,
        *[None] * 13,
        "0000-01-01",
        None,
        "2024-00-00 00:00:00",
        "1970-01-01 05:30:01",
        *[None] * 12,
    ),
]
ZERO_KEY = (
    "CREATE TABLE zero_key (d DATE NOT NULL, n INT NOT NULL, v VARCHAR(10), PRIMARY KEY (d, n))"
)

COMPOSITE = (
    "CREATE TABLE composite (region CHAR(2) NOT NULL, num INT NOT NULL, "
    "name VARCHAR(50), PRIMARY KEY (region, num))"
)
BIG = "CREATE TABLE big (id INT PRIMARY KEY, payload VARCHAR(100))"


def test_everything_arrives_exactly(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, ALL_TYPES, COMPOSITE, BIG, ZERO_KEY)
    with target_sql_mode(target, "TRADITIONAL"), site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SET time_zone = '+05:30'")  # TIMESTAMP must survive a non-UTC session
            marks = ",".join(["%s"] * len(ROWS[0]))
            cur.executemany(f"INSERT INTO all_types VALUES ({marks})", ROWS)
            cur.execute("SET SESSION sql_mode = ''")  # a legacy application's zero dates
            cur.executemany(f"INSERT INTO all_types VALUES ({marks})", ZERO_ROWS)
            cur.execute("UPDATE all_types SET dt = '2024-05-00', ts = '0000-00-00' WHERE id = 3")
            cur.execute("INSERT INTO zero_key VALUES ('0000-00-00', 1, 'a'), ('2024-00-10', 1, "
                        "'b'), ('2024-05-00', 2, 'c'), ('0000-00-00', 3, 'd')")  # fmt: skip
            cur.execute("UPDATE zero_key SET d = '0000-01-00' WHERE n = 2")  # the key changes
            cur.execute("UPDATE zero_key SET v = 'e' WHERE d = '0000-00-00'")
            cur.execute("DELETE FROM zero_key WHERE d = '2024-00-10'")
            cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
            cur.execute("INSERT INTO zero_key VALUES ('2004-04-31', 4, 'invalid')")
            cur.execute("SET SESSION sql_mode = DEFAULT")
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
        wait_equal(s, dbname, ["all_types", "composite", "big", "zero_key"])
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SELECT id, CAST(dt AS CHAR), CAST(dtm AS CHAR), CAST(ts AS CHAR) FROM "
                        "all_types WHERE id BETWEEN 3 AND 6 ORDER BY id")  # fmt: skip
            zero = "0000-00-00 00:00:00"
            assert cur.fetchall() == (
                (3, "2024-05-00", None, zero + ".000000"),
                (4, "0000-00-00", zero + ".000000", zero + ".000000"),
                (5, "2024-00-10", "2024-05-00 10:11:12.500000", None),
                (6, "0000-01-01", "2024-00-00 00:00:00.000000", "1970-01-01 00:00:01.000000"),
            )
            cur.execute("SELECT CAST(d AS CHAR), n, v FROM zero_key ORDER BY n")
            assert cur.fetchall() == (
                ("0000-00-00", 1, "e"),
                ("0000-01-00", 2, "c"),
                ("0000-00-00", 3, "e"),
                ("2004-04-31", 4, "invalid"),
            )
            cur.execute("SELECT COUNT(*) FROM composite WHERE region = 'xx'")
            assert cur.fetchone()[0] == 0
            cur.execute("SELECT COUNT(*) FROM big")
            assert cur.fetchone()[0] == 5000 - 1667
