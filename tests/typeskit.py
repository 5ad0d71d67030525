"""A table with every MySQL/MariaDB column type, and rows for it: the end-to-end type tests
of the non-MySQL targets share it. `zero_row` holds zero and partial dates (written with
sql_mode '')."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

COLUMNS = (
    "id BIGINT UNSIGNED NOT NULL, k CHAR(3) NOT NULL, ti TINYINT, si SMALLINT UNSIGNED, "
    "mi MEDIUMINT, i INT UNSIGNED, bi BIGINT, ub BIGINT UNSIGNED, d DECIMAL(65,30), "
    "f FLOAT, db DOUBLE, b BIT(10), y YEAR, dd DATE, dtm DATETIME(6), ts TIMESTAMP(6) NULL, "
    "tm TIME(6), c CHAR(10), vc VARCHAR(100), tx TEXT, bn BINARY(4), vb VARBINARY(20), "
    "bl BLOB, e ENUM('x','y','z'), st SET('a','b','c'), j JSON, PRIMARY KEY (id, k)"
)
NAMES = [c.split()[0] for c in COLUMNS.split("PRIMARY")[0].split(", ") if c.strip()]
INSERT = f"INSERT INTO t ({', '.join(NAMES)}) VALUES ({', '.join(['%s'] * len(NAMES))})"


def row(i: int) -> tuple[Any, ...]:
    return (
        i, "k" + str(i % 7), -128 + i % 200, 65535 - i % 65535, -8388608 + i, 4294967295 - i,
        -(2**63) + i, 2**64 - 1 - i, Decimal(f"{i}.{'9' * 30}"), 1.1 * i, 2.5e300 / (i + 1),
        i % 1024, 1901 + i % 200, dt.date(1000 + i % 9000, 1, 1),
        dt.datetime(2026, 11, 24, 12, 0, 0, i % 1000000), dt.datetime(2030, 1, 1, 0, 0, i % 60),
        dt.timedelta(hours=-838 + i % 1600, microseconds=i), f"c{i}", f"héllo 𝄞 {i}", "t" * (i % 50),
        bytes([i % 256, 0, 1, 2]), bytes(range(i % 20)), b"\x00\xff" * (i % 10),
        "xyz"[i % 3], ["", "a", "b,c", "a,b,c"][i % 4], json.dumps({"n": i, "s": "ü"}),
    )  # fmt: skip


# DATE, DATETIME(6), TIMESTAMP(6) (columns dd, dtm, ts): a zero, a partial and the zero TIMESTAMP
ZERO_DATES = ("0000-00-00", "2024-00-10 10:11:12.5", "0000-00-00 00:00:00")
ZERO_TEXTS = ("0000-00-00", "2024-00-10 10:11:12.500000", "0000-00-00 00:00:00.000000")


def zero_row(i: int) -> tuple[Any, ...]:
    values = list(row(i))
    values[13:16] = ZERO_DATES
    return tuple(values)
