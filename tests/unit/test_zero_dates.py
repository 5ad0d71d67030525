"""Zero, partial and invalid dates (zerodate.py): the value, its wire form, and what each kind of
target makes of it, without a server."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgpack
import pytest

from binlogsync import codec
from binlogsync.apply.applier import session_sql_mode
from binlogsync.apply.auditlog import encode
from binlogsync.apply.redisstore import text
from binlogsync.engines.mariadb.statements import convert, convert_row
from binlogsync.errors import ProtocolError
from binlogsync.model import Change, Transaction, body_from_wire, check_body
from binlogsync.position import Position
from binlogsync.zerodate import ZeroDate, is_zero_date_text

pytestmark = pytest.mark.unit

KEPT = [
    (ZeroDate("date"), "0000-00-00"),
    (ZeroDate("date", 2024, 0, 10), "2024-00-10"),
    (ZeroDate("date", 2024, 5, 0), "2024-05-00"),
    (ZeroDate("date", 0, 1, 1), "0000-01-01"),
    (ZeroDate("date", 2004, 4, 31), "2004-04-31"),
    (ZeroDate("datetime"), "0000-00-00 00:00:00"),
    (ZeroDate("datetime", fsp=6), "0000-00-00 00:00:00.000000"),
    (ZeroDate("datetime", 2024, 0, 10, 23, 59, 59, 500000, 1), "2024-00-10 23:59:59.5"),
    (ZeroDate("datetime", 2003, 2, 29, 0, 0, 0, 120000, 3), "2003-02-29 00:00:00.120"),
    (ZeroDate("timestamp"), "0000-00-00 00:00:00"),
    (ZeroDate("timestamp", fsp=3), "0000-00-00 00:00:00.000"),
]


@pytest.mark.parametrize(("value", "server_text"), KEPT, ids=[t for _, t in KEPT])
def test_the_text_is_the_servers_and_parses_back(value: ZeroDate, server_text: str) -> None:
    assert value.text == str(value) == server_text
    assert ZeroDate.parse(value.kind, server_text) == value
    assert is_zero_date_text(server_text)
    again = codec.unpack(codec.pack(value))
    assert again == value and type(again) is ZeroDate
    assert hash(again) == hash(value)  # a zero date may be part of a key


@pytest.mark.parametrize(
    "parts",
    [
        ("date", 2024, 5, 10),  # a real date travels as a date
        ("datetime", 2024, 2, 29, 12),
        ("timestamp", 2024, 0, 1),  # a TIMESTAMP's only non-date is zero
        ("date", 0, 0, 0, 1),  # a DATE has no time of day
        ("date", 10000, 0, 0),
        ("date", 2024, 13, 0),
        ("date", 2024, 0, 32),
        ("datetime", 0, 0, 0, 24),
        ("datetime", 0, 0, 0, 0, 60),
        ("datetime", 0, 0, 0, 0, 0, 0, 1, 5),  # more fraction digits than the column has
        ("datetime", 0, 0, 0, 0, 0, 0, 1_000_000, 6),
        ("time", 0, 0, 0),
        ("date", "0", 0, 0),
        ("date", True, 0, 0),
    ],
)
def test_values_no_server_stores_are_refused(parts: tuple[Any, ...]) -> None:
    with pytest.raises(ValueError):
        ZeroDate(*parts)


@pytest.mark.parametrize(
    "payload",
    [
        b"date:2024-05-10",
        b"date:0000-00-00 00:00:00",
        b"datetime:0000-00-00",
        b"timestamp:2024-00-10 00:00:00",
        b"datetime:0000-00-00 00:00:00.0000000",
        b"datetime:0000-00-00T00:00:00",
        b"date:0000-00-0",
        b"date: 0000-00-00",
        b"0000-00-00",
        b"date:",
        b"decimal:0000-00-00",
        b"date:\xff",
        b"",
    ],
)
def test_malformed_zero_dates_on_the_wire_are_protocol_errors(payload: bytes) -> None:
    data = msgpack.packb(msgpack.ExtType(6, payload))
    with pytest.raises(ProtocolError, match="extension type 6"):
        codec.unpack(data)
    change = ["insert", "s", "t", ["d"], [], [[msgpack.ExtType(6, payload)]], ""]
    body = msgpack.packb([["binlog.000001", 4, None], 1.0, [change]])
    for read in (body_from_wire, check_body):  # the hub refuses what a target would
        with pytest.raises(ProtocolError):
            read(codec.unpack(body))


def test_a_transaction_with_zero_dates_passes_the_hubs_checks() -> None:
    rows = tuple((i, value) for i, (value, _) in enumerate(KEPT))
    tx = Transaction(
        Position("binlog.000001", 4), 1.0, (Change("insert", "s", "t", ("i", "d"), after=rows),)
    )
    wire = codec.unpack(codec.pack(tx.to_wire()))
    assert check_body(wire).tables == (("s", "t"),)
    assert body_from_wire(wire) == tx


@pytest.mark.parametrize(
    ("raw", "converter", "expected"),
    [
        (b"0000-00-00", codec.date_raw, ZeroDate("date")),
        (b"2024-00-10", codec.date_raw, ZeroDate("date", 2024, 0, 10)),
        (b"2024-05-00", codec.date_raw, ZeroDate("date", 2024, 5, 0)),
        (b"2004-04-31", codec.date_raw, ZeroDate("date", 2004, 4, 31)),
        (b"2023-02-29", codec.date_raw, ZeroDate("date", 2023, 2, 29)),
        (b"2024-02-29", codec.date_raw, dt.date(2024, 2, 29)),
        (b"2024-01-31", codec.date_raw, dt.date(2024, 1, 31)),
        (b"0000-00-00 00:00:00.000000", codec.datetime_raw, ZeroDate("datetime", fsp=6)),
        (b"2024-05-00 10:11:12", codec.datetime_raw, ZeroDate("datetime", 2024, 5, 0, 10, 11, 12)),
        (b"2024-12-31 23:59:59.999999", codec.datetime_raw, dt.datetime(2024, 12, 31, 23, 59, 59, 999999)),
        (b"0000-00-00 00:00:00.000", codec.timestamp_raw, ZeroDate("timestamp", fsp=3)),
        (b"1970-01-01 00:00:01", codec.timestamp_raw, dt.datetime(1970, 1, 1, 0, 0, 1)),
    ],
)  # fmt: skip
def test_the_seeds_converters_keep_the_kind(raw: bytes, converter: Any, expected: Any) -> None:
    got = codec.unpack(codec.pack(converter(raw)))
    assert got == expected and type(got) is type(expected)


def test_a_mysql_target_binds_the_servers_text() -> None:
    assert convert(ZeroDate("datetime", fsp=6)) == "0000-00-00 00:00:00.000000"
    values, size = convert_row((1, ZeroDate("date", 2024, 0, 10)), [0, 1])
    assert values == [1, "2024-00-10"] and size >= 2 + 2 + 21 + 4 * 10


@pytest.mark.parametrize(
    ("server", "session"),
    [
        ("", "NO_AUTO_VALUE_ON_ZERO,ALLOW_INVALID_DATES"),
        ("STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION",
         "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION,"
         "NO_AUTO_VALUE_ON_ZERO,ALLOW_INVALID_DATES"),
        # MariaDB lists TRADITIONAL beside its members; MySQL 8's default
        ("STRICT_TRANS_TABLES,STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
         "ERROR_FOR_DIVISION_BY_ZERO,TRADITIONAL,NO_AUTO_CREATE_USER",
         "STRICT_TRANS_TABLES,STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,"
         "NO_AUTO_VALUE_ON_ZERO,ALLOW_INVALID_DATES"),
        ("ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
         "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
         "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,"
         "NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO,ALLOW_INVALID_DATES"),
        ("allow_invalid_dates,no_auto_value_on_zero", "ALLOW_INVALID_DATES,NO_AUTO_VALUE_ON_ZERO"),
    ],
)  # fmt: skip
def test_the_apply_session_allows_what_the_origin_stored(server: str, session: str) -> None:
    assert session_sql_mode(server) == session


def test_redis_and_the_audit_log_write_the_servers_text() -> None:
    assert text(ZeroDate("date", 2024, 0, 10)) == "2024-00-10"
    assert encode(ZeroDate("timestamp", fsp=6)) == ("0000-00-00 00:00:00.000000", "zero_timestamp")
    assert encode(ZeroDate("datetime", 2024, 5, 0)) == ("2024-05-00 00:00:00", "zero_datetime")
    assert encode(ZeroDate("date")) == ("0000-00-00", "zero_date")


def test_the_seeds_converters_know_the_calendar() -> None:
    """Every day 00-31 of every month 00-12 of leap and common years, century years too."""
    for year in (0, 1900, 2000, 2023, 2024, 9999):
        for month in range(13):
            for day in range(32):
                raw = f"{year:04d}-{month:02d}-{day:02d}".encode()
                got = codec.unpack(codec.pack(codec.date_raw(raw)))
                assert isinstance(got, ZeroDate) == is_zero_date_text(raw.decode()), raw
                assert (got.text if isinstance(got, ZeroDate) else got.isoformat()) == raw.decode()
