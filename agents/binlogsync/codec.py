"""Column values and messages as bytes (msgpack), with exact types kept end to end.

msgpack carries None, int (up to unsigned 64-bit), float, str and bytes natively. The types
that MySQL has and msgpack has not travel as extension types whose payload is text or an
integer, never as something a receiver could evaluate:

    1 DECIMAL    str(Decimal)                  exact digits and scale
    2 DATETIME   ISO 8601, microseconds         naive; TIMESTAMP is sent in UTC
    3 DATE       ISO 8601
    4 TIME       signed microseconds (int)      TIME is a duration in MySQL (-838:59:59…)
    5 SET        list of member strings

Decoding rejects unknown extension codes and malformed payloads with ProtocolError.
"""

from __future__ import annotations

import datetime as dt
import functools
from decimal import Decimal, InvalidOperation
from typing import Any

import msgpack

from .errors import ProtocolError

_DECIMAL, _DATETIME, _DATE, _TIME, _SET = 1, 2, 3, 4, 5
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


def datetime_raw(raw: bytes) -> Any:
    """The server's DATETIME, TIMESTAMP or DATE text (bytes) as this codec's value. Zero and
    partial dates ('0000-00-00', '2024-00-10') are no datetime: text, as PyMySQL leaves them."""
    if raw[:4] == b"0000" or raw[4:8] == b"-00-" or raw[7:10] == b"-00":
        return raw.decode()
    return _ext((_DATETIME if len(raw) > 10 else _DATE, raw))


def _decimal_text(text: str) -> msgpack.ExtType:
    return decimal_raw(text.encode())


def _datetime_text(text: str) -> Any:
    return datetime_raw(text.encode())


RAW_CONVERSIONS = {_decimal_text: decimal_raw, _datetime_text: datetime_raw}


def text_conversions() -> dict[int, Any]:
    """PyMySQL converters that turn the server's DECIMAL, DATETIME, TIMESTAMP and DATE text
    straight into this codec's values, already packed-ready (a seed reads millions of rows:
    parsing each into a Python object only to print it again for msgpack was most of its
    cost). The server's text is exact (every DECIMAL digit, every fraction digit; TIMESTAMP in
    the session's time zone, which must be +00:00) and what the decoder reads back."""
    from pymysql.constants import FIELD_TYPE
    from pymysql.converters import conversions

    conv = dict(conversions)
    conv[FIELD_TYPE.DECIMAL] = conv[FIELD_TYPE.NEWDECIMAL] = _decimal_text
    for kind in (FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP, FIELD_TYPE.DATE):
        conv[kind] = _datetime_text
    return conv


def pack(obj: Any) -> bytes:
    packed: bytes = msgpack.packb(obj, default=_default, use_bin_type=True)
    return packed


def unpack(data: bytes, max_len: int = 64 * 1024 * 1024) -> Any:
    """Decode one msgpack document; anything malformed raises ProtocolError."""
    if len(data) > max_len:
        raise ProtocolError(f"payload of {len(data)} bytes is over the limit of {max_len}")
    try:
        return msgpack.unpackb(
            data,
            ext_hook=_ext_hook,
            raw=False,
            strict_map_key=True,
        )
    except ProtocolError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise ProtocolError(f"payload is not valid msgpack: {exc}") from exc
