"""Column values and messages as bytes (msgpack), with exact types kept end to end.

msgpack carries None, int (up to unsigned 64-bit), float, str and bytes natively. The types
that MySQL has and msgpack has not travel as extension types whose payload is text or an
integer, never as something a receiver could evaluate:

    1 DECIMAL    str(Decimal)                  exact digits and scale
    2 DATETIME   ISO 8601, microseconds         naive; TIMESTAMP is sent in UTC
    3 DATE       ISO 8601
    4 TIME       signed microseconds (int)      TIME is a duration in MySQL (-838:59:59…)
    5 SET        list of member strings
    6 ZERO DATE  "<kind>:<text>"                a zero, partial or invalid DATE / DATETIME /
                                                TIMESTAMP (zerodate.py), as the server's text

Decoding rejects unknown extension codes and malformed payloads with ProtocolError.
"""

from __future__ import annotations

import datetime as dt
import functools
import struct
from decimal import Decimal, InvalidOperation
from typing import Any

import msgpack

from .errors import ProtocolError
from .zerodate import ZeroDate

_DECIMAL, _DATETIME, _DATE, _TIME, _SET, _ZERO_DATE = 1, 2, 3, 4, 5, 6
_MICROS = dt.timedelta(microseconds=1)


def _default(value: Any) -> msgpack.ExtType:
    # datetime before date: a datetime is also a date.
    if isinstance(value, Decimal):
        return msgpack.ExtType(_DECIMAL, str(value).encode())
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return msgpack.ExtType(_DATETIME, value.isoformat().encode())
    if isinstance(value, dt.date):
        return msgpack.ExtType(_DATE, value.isoformat().encode())
    if isinstance(value, dt.timedelta):
        return msgpack.ExtType(_TIME, msgpack.packb(value // _MICROS))
    if isinstance(value, set | frozenset):
        return msgpack.ExtType(_SET, msgpack.packb(sorted(value)))
    if isinstance(value, ZeroDate):
        return msgpack.ExtType(_ZERO_DATE, f"{value.kind}:{value.text}".encode())
    raise TypeError(f"cannot encode a value of type {type(value).__name__}")


def _ext_hook(code: int, data: bytes) -> Any:
    try:
        if code == _DECIMAL:
            return Decimal(data.decode())
        if code == _DATETIME:
            return dt.datetime.fromisoformat(data.decode())
        if code == _DATE:
            return dt.date.fromisoformat(data.decode())
        if code == _TIME:
            micros = msgpack.unpackb(data)
            if not isinstance(micros, int):
                raise ValueError("TIME payload is not an integer")
            return dt.timedelta(microseconds=micros)
        if code == _SET:
            members = msgpack.unpackb(data)
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                raise ValueError("SET payload is not a list of strings")
            return set(members)
        if code == _ZERO_DATE:
            kind, _, text = data.decode().partition(":")
            return ZeroDate.parse(kind, text)
    except (ValueError, InvalidOperation, UnicodeDecodeError, msgpack.UnpackException) as exc:
        raise ProtocolError(f"malformed value of extension type {code}: {exc}") from exc
    raise ProtocolError(f"unknown value extension type {code}")


# ExtType is a namedtuple whose __new__ checks its arguments; the raw converters below build
# it directly (their code and payload are right by construction): a seed makes millions.
_ext = functools.partial(tuple.__new__, msgpack.ExtType)


def decimal_raw(raw: bytes) -> msgpack.ExtType:
    """The server's DECIMAL text (bytes) as this codec's DECIMAL value."""
    ext: msgpack.ExtType = _ext((_DECIMAL, raw))
    return ext


_THIRTY_DAYS = frozenset({b"04", b"06", b"09", b"11"})


def _past_month_end(raw: bytes) -> bool:
    """Whether the server's date text, whose day is after the 28th, has a day its month lacks
    (only written under ALLOW_INVALID_DATES)."""
    day, month = raw[8:10], raw[5:7]
    if month == b"02":
        year = int(raw[:4])
        return day > b"29" or not (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0))
    return day == b"31" and month in _THIRTY_DAYS


def _temporal_raw(kind: bytes) -> Any:
    """A converter of the server's text of one kind of column (bytes) into this codec's value;
    a zero, partial or invalid date (zerodate.py) becomes extension type 6, which carries the
    kind, since the text alone does not tell DATETIME from TIMESTAMP. The byte comparisons keep
    the usual value cheap (a seed converts millions): only a day after the 28th is looked at
    more closely."""
    code = _DATE if kind == b"date" else _DATETIME
    prefix = kind + b":"

    def convert(raw: bytes) -> msgpack.ExtType:
        if (
            raw[:4] == b"0000"
            or raw[4:8] == b"-00-"
            or raw[7:10] == b"-00"
            or (raw[8:10] > b"28" and _past_month_end(raw))
        ):
            zero: msgpack.ExtType = _ext((_ZERO_DATE, prefix + raw))
            return zero
        ext: msgpack.ExtType = _ext((code, raw))
        return ext

    return convert


date_raw = _temporal_raw(b"date")
datetime_raw = _temporal_raw(b"datetime")
timestamp_raw = _temporal_raw(b"timestamp")


def raw_value(raw: msgpack.ExtType) -> Any:
    """A raw converter's value as the decoder reads it back (what a target holds)."""
    return _ext_hook(raw.code, raw.data)


def _decimal_text(text: str) -> msgpack.ExtType:
    return decimal_raw(text.encode())


def _date_text(text: str) -> Any:
    return date_raw(text.encode())


def _datetime_text(text: str) -> Any:
    return datetime_raw(text.encode())


def _timestamp_text(text: str) -> Any:
    return timestamp_raw(text.encode())


RAW_CONVERSIONS = {
    _decimal_text: decimal_raw,
    _date_text: date_raw,
    _datetime_text: datetime_raw,
    _timestamp_text: timestamp_raw,
}


def text_conversions() -> dict[int, Any]:
    """PyMySQL converters that turn the server's DECIMAL, DATETIME, TIMESTAMP and DATE text
    straight into this codec's values, already packed-ready (a seed reads millions of rows:
    parsing each into a Python object only to print it again for msgpack was most of its
    cost). The server's text is exact (every DECIMAL digit, every fraction digit; TIMESTAMP in
    the session's time zone, which must be +00:00; zero and partial dates as they are) and what
    the decoder reads back."""
    from pymysql.constants import FIELD_TYPE
    from pymysql.converters import conversions

    conv = dict(conversions)
    conv[FIELD_TYPE.DECIMAL] = conv[FIELD_TYPE.NEWDECIMAL] = _decimal_text
    conv[FIELD_TYPE.DATE] = _date_text
    conv[FIELD_TYPE.DATETIME] = _datetime_text
    conv[FIELD_TYPE.TIMESTAMP] = _timestamp_text
    return conv


def pack(obj: Any) -> bytes:
    packed: bytes = msgpack.packb(obj, default=_default, use_bin_type=True)
    return packed


def unpack(data: bytes, max_len: int | None = None, tuples: bool = False) -> Any:
    """Decode one msgpack document; anything malformed raises ProtocolError. `max_len` refuses
    a longer payload (what arrives over the network: transport/limits.py); None for what
    binlogsync stored itself. `tuples`: arrays as tuples, not lists (a target's bodies, read
    by model.py's `from_wire`s, which take either: rows then need no copy into tuples)."""
    if max_len is not None and len(data) > max_len:
        raise ProtocolError(f"payload of {len(data)} bytes is over the limit of {max_len}")
    try:
        return msgpack.unpackb(
            data,
            ext_hook=_ext_hook,
            raw=False,
            strict_map_key=True,
            use_list=not tuples,
        )
    except ProtocolError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise ProtocolError(f"payload is not valid msgpack: {exc}") from exc


_F32 = struct.Struct("<f")
_FLT_MAX = 3.4028234663852886e38


def shortest_float32(value: Any) -> Any:
    """A FLOAT column's value as the shortest decimal that is the same float32 (the binlog
    and the server give the float32 widened to a double); capture and seed both use it. Never
    beyond FLT_MAX: 3.4028235e38 is FLT_MAX's float32, but a server reading it as a double
    finds it out of a FLOAT column's range."""
    if not isinstance(value, float):
        return value
    try:
        bits = _F32.pack(value)
        # 6 digits first: shorter forms are found by %g's trailing-zero stripping already.
        for digits in range(6, 10):
            shorter = float(f"{value:.{digits}g}")
            if _F32.pack(shorter) == bits and abs(shorter) <= _FLT_MAX:
                return shorter
    except (OverflowError, struct.error):
        pass
    return value
