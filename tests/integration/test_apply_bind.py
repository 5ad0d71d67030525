"""The applier's binder writes exactly the literals the driver's mogrify writes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from binlogsync.engines.mariadb.pipeline import bind
from binlogsync_dev.sandbox import Server

VALUES: list[Any] = [
    None, 0, -1, 2**64 - 1, -(2**63), 1.5, -0.0, 1e300, 3.4028234663852886e38,
    Decimal("0.10"), Decimal("-12345678901234567890.123456789"), Decimal("1E+5"),
    Decimal("-0"), 5e-324, 1e16, 123.0, -2.5, "", "plain", "it's",
    'back\\slash "quoted"', "nul\x00byte", "line\nbreak\r\x1a", "ünïcødé 🚀", b"", b"\x00\xff'\\",
    bytes(range(256)), dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.date(2024, 1, 2),
]  # fmt: skip


@pytest.mark.parametrize("mode", ["", "NO_BACKSLASH_ESCAPES"])
def test_bind_equals_mogrify_and_round_trips(target: Server, mode: str) -> None:
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = %s", (mode,))
        sql = "SELECT " + ", ".join(["%s"] * len(VALUES))
        assert bind(conn, sql, VALUES) == cur.mogrify(sql, VALUES)
        # And the server reads back what was bound (text and bytes exactly).
        cur.execute(bind(conn, "SELECT %s, %s, %s", ["it's \\ 🚀", b"\x00\xff'\\", None]))
        assert cur.fetchone() == ("it's \\ 🚀", b"\x00\xff'\\", None)
    assert bind(None, "SELECT 1", None) == "SELECT 1"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), Decimal("NaN"), Decimal("-Infinity")])
def test_bind_refuses_what_the_driver_refuses(target: Server, bad: Any) -> None:
    import pymysql

    with target.connect() as conn, pytest.raises(pymysql.err.ProgrammingError):
        bind(conn, "SELECT %s", [bad])
