"""Row images as a Rows event carries them: the inverse of capture's decoding.

Capture decodes each value of a Rows event into a Python value (capture/rowdecode.py and
values.py); `RowEncoder` writes such a value back in the column's binlog format, so that a
row captured from the origin and encoded here is byte for byte the row the origin wrote
(tests/integration/test_binlog_service_events.py holds the two to that). What decoding
changed is undone here: a FLOAT that became the shortest decimal of its float32 is packed as
that float32 again, BINARY(n) loses the zero padding capture added, YEAR 0 is 0, an ENUM
member becomes its index, a SET its bit mask, TIMESTAMP the seconds of its UTC time.

A value that does not fit its column (a string for an INT, a DECIMAL with more digits than
the column holds) raises EncodeError naming the column: the service refuses to send that
transaction rather than send it wrong.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from . import charsets
from . import tablemap as t
from .tablemap import Column, MapError, TableShape, string_length

Encode = Callable[[Any], bytes]
_F32 = struct.Struct("<f").pack
_F64 = struct.Struct("<d").pack
_EPOCH = dt.datetime(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a DECIMAL group of 0-9 digits
_INTEGER_BYTES = {t.TINY: 1, t.SHORT: 2, t.INT24: 3, t.LONG: 4, t.LONGLONG: 8}
_TEMPORAL_BYTES = {t.TIME2: 3, t.DATETIME2: 5, t.TIMESTAMP2: 4}


class EncodeError(MapError):
    """A value that cannot be written in its column's binlog format."""


class RowEncoder:
    """Encodes rows of one table shape (a parsed Table_map).

    `row` runs a function generated for the shape (straight-line code, integers and text
    packed inline, the other types through their encoders): most of the service's time goes
    here. When it raises, the slow loop over the encoders names the value that does not fit
    (or encodes a value the fast path does not take, such as bytes for a text column)."""

    def __init__(self, shape: TableShape) -> None:
        self.shape = shape
        self.width = len(shape.columns)
        self._null_bytes = (self.width + 7) // 8
        # MariaDB sets the bitmap's bits past the last column (and so do we: byte for byte)
        self._padding = ((1 << (8 * self._null_bytes)) - 1) ^ ((1 << self.width) - 1)
        self._encoders = tuple(_make(c) for c in shape.columns)
        self._fast = _generate(shape, self._encoders, self._padding, self._null_bytes)

    def row(self, values: Sequence[Any]) -> bytes:
        """One row image: the null bitmap, then the values that are not NULL."""
        try:
            return self._fast(values)
        except (*_MISFITS, UnicodeError):
            return self._slow(values)

    def _slow(self, values: Sequence[Any]) -> bytes:
        if len(values) != self.width:
            raise EncodeError(
                f"a row of {self.width} columns for {self.shape.schema}.{self.shape.table} "
                f"has {len(values)} values"
            )
        nulls = self._padding
        parts = [b""]
        append = parts.append
        bit = 1
        try:
            for value, encode in zip(values, self._encoders, strict=True):
                if value is None:
                    nulls |= bit
                else:
                    append(encode(value))
                bit <<= 1
        except _MISFITS as exc:
            raise self._refusal(values, exc) from exc
        parts[0] = nulls.to_bytes(self._null_bytes, "little")
        return b"".join(parts)

    def _refusal(self, values: Sequence[Any], exc: Exception) -> EncodeError:
        """The error naming the first value that does not fit (found again, one by one)."""
        for value, column, encode in zip(values, self.shape.columns, self._encoders, strict=True):
            if value is None:
                continue
            try:
                encode(value)
            except _MISFITS as found:
                return EncodeError(
                    f"column {column.name}: the value {str(value)[:60]!r} "
                    f"({type(value).__name__}) does not fit its binlog type {column.type}: "
                    f"{found}"
                )
        return EncodeError(f"a row of {self.shape.schema}.{self.shape.table}: {exc}")


_PACK = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}


def _generate(
    shape: TableShape, encoders: tuple[Encode, ...], padding: int, null_bytes: int
) -> Callable[[Sequence[Any]], bytes]:
    """The fast row function of a shape (compiled once per shape: shapes are cached)."""
    names: dict[str, Any] = {}
    lines = ["v = tuple(values)", f"{', '.join(f'v{i}' for i in range(len(encoders)))}, = v"]
    lines += [f"nulls = {padding}", "parts = [b'']", "add = parts.append"]
    for i, (column, encode) in enumerate(zip(shape.columns, encoders, strict=True)):
        kind = column.type
        lines.append(f"if v{i} is None:")
        lines.append(f"    nulls |= {1 << i}")
        lines.append("else:")
        if kind in _INTEGER_BYTES and _INTEGER_BYTES[kind] in _PACK:
            size = _INTEGER_BYTES[kind]
            names[f"p{i}"] = struct.Struct(_PACK[size]).pack
            lines.append(f"    if type(v{i}) is not int: raise TypeError")
            lines.append(f"    add(p{i}(v{i} & {(1 << (8 * size)) - 1}))")
            continue
        codec = charsets.codec(column.collation)
        text = kind in (t.STRING, t.VARCHAR, t.VAR_STRING, t.BLOB)
        if text and codec not in (charsets.BINARY, charsets.RAW):
            if kind == t.BLOB:
                prefix = column.meta
            else:
                length = string_length(column.meta) if kind == t.STRING else column.meta
                prefix = 1 if length <= 255 else 2
            if prefix in _PACK:
                names[f"p{i}"] = struct.Struct(_PACK[prefix]).pack
                lines.append(f"    r = v{i}.encode({codec!r})")
                lines.append(f"    add(p{i}(len(r)) + r)")
                continue
        names[f"e{i}"] = encode
        lines.append(f"    add(e{i}(v{i}))")
    lines.append(f"parts[0] = nulls.to_bytes({null_bytes}, 'little')")
    lines.append("return b''.join(parts)")
    source = "def row(values):\n" + "".join(f"    {line}\n" for line in lines)
    scope: dict[str, Any] = {}
    exec(compile(source, f"<rowencode {shape.schema}.{shape.table}>", "exec"), names, scope)  # noqa: S102 - our own code
    fast: Callable[[Sequence[Any]], bytes] = scope["row"]
    return fast


_MISFITS = (TypeError, ValueError, OverflowError, AttributeError, KeyError)


def _make(column: Column) -> Encode:
    kind, meta = column.type, column.meta
    if kind in _INTEGER_BYTES:
        size = _INTEGER_BYTES[kind]
        mask = (1 << (8 * size)) - 1
        return lambda v: _int(v).__and__(mask).to_bytes(size, "little")
    if kind == t.FLOAT:
        return lambda v: _F32(float(_number(v)))
    if kind == t.DOUBLE:
        return lambda v: _F64(float(_number(v)))
    if kind == t.NEWDECIMAL:
        return _decimal(meta >> 8, meta & 0xFF)
    if kind == t.YEAR:
        return lambda v: bytes((0 if _int(v) == 0 else _int(v) - 1900,))
    if kind == t.BIT:
        bits = (meta & 0xFF) * 8 + (meta >> 8)
        size = (bits + 7) // 8
        return lambda v: _int(v).to_bytes(size, "big")
    if kind == t.DATE:
        return _date
    if kind in _TEMPORAL_BYTES:
        if not 0 <= meta <= 6:
            raise MapError(f"column {column.name}: fractional seconds {meta}")
        return {t.TIME2: _time2, t.DATETIME2: _datetime2, t.TIMESTAMP2: _timestamp2}[kind](meta)
    if kind == t.ENUM:
        return _enum(column)
    if kind == t.SET:
        return _set(column)
    if kind in (t.STRING, t.VARCHAR, t.VAR_STRING):
        length = string_length(meta) if kind == t.STRING else meta
        return _string(column, 1 if length <= 255 else 2, pad=kind == t.STRING)
    if kind in (t.BLOB, t.GEOMETRY):
        if not 1 <= meta <= 4:
            raise MapError(f"column {column.name}: a BLOB length of {meta} bytes")
        return _string(column, meta, pad=False)
    if kind == t.JSON:
        raise MapError(
            f"column {column.name} is MySQL's binary JSON, which the service does not write",
            "the binlog service serves MariaDB origins (JSON is text there)",
        )
    raise MapError(
        f"column {column.name} has the binlog type {kind}, which the service does not write"
    )


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError("not an integer")
    return value


def _number(value: Any) -> float | int:
    if not isinstance(value, float | int) or isinstance(value, bool):
        raise TypeError("not a number")
    return value


def _decimal(precision: int, scale: int) -> Encode:
    if not (0 < precision <= 65 and 0 <= scale <= 38 and scale <= precision):
        raise MapError(f"DECIMAL({precision},{scale})")
    digits = precision - scale
    lead = digits % 9
    whole_frac, trail = divmod(scale, 9)
    lead_bytes, trail_bytes = _DIG2BYTES[lead], _DIG2BYTES[trail]

    def encode(value: Any) -> bytes:
        if not isinstance(value, Decimal) or not value.is_finite():
            raise TypeError("not a finite Decimal")
        sign, numbers, exponent = value.as_tuple()
        assert isinstance(exponent, int)
        text = "".join(map(str, numbers))
        if exponent >= 0:
            whole, fraction = text + "0" * exponent, ""
        elif len(text) > -exponent:
            whole, fraction = text[:exponent], text[exponent:]
        else:
            whole, fraction = "", text.rjust(-exponent, "0")
        whole = whole.lstrip("0")
        if len(fraction) > scale:
            if fraction[scale:].strip("0"):
                raise ValueError(f"more than {scale} fraction digits")
            fraction = fraction[:scale]
        if len(whole) > digits:
            raise ValueError(f"more than {digits} integer digits")
        whole, fraction = whole.rjust(digits, "0"), fraction.ljust(scale, "0")
        out = bytearray()
        if lead:
            out += int(whole[:lead]).to_bytes(lead_bytes, "big")
        for at in range(lead, digits, 9):
            out += int(whole[at : at + 9]).to_bytes(4, "big")
        for at in range(0, whole_frac * 9, 9):
            out += int(fraction[at : at + 9]).to_bytes(4, "big")
        if trail:
            out += int(fraction[whole_frac * 9 :]).to_bytes(trail_bytes, "big")
        if sign and (whole.strip("0") or fraction.strip("0")):
            out = bytearray(b ^ 0xFF for b in out)
        out[0] ^= 0x80
        return bytes(out)

    return encode


def _fraction(micros: int, fsp: int) -> bytes:
    if fsp == 0:
        return b""
    if fsp <= 2:
        return (micros // 10000).to_bytes(1, "big")
    if fsp <= 4:
        return (micros // 100).to_bytes(2, "big")
    return micros.to_bytes(3, "big")


def _parts(value: Any) -> tuple[int, int, int, int, int, int, int]:
    """(year, month, day, hour, minute, second, microsecond) of a date, datetime, or the text
    capture keeps for zero and partial dates ('0000-00-00 00:00:00')."""
    if isinstance(value, dt.datetime):
        return (value.year, value.month, value.day, value.hour, value.minute, value.second,
                value.microsecond)  # fmt: skip
    if isinstance(value, dt.date):
        return value.year, value.month, value.day, 0, 0, 0, 0
    if isinstance(value, str):
        date, _, time = value.partition(" ")
        y, m, d = (int(p) for p in date.split("-"))
        clock, _, fraction = time.partition(".")
        hh, mm, ss = (int(p) for p in clock.split(":")) if clock else (0, 0, 0)
        return y, m, d, hh, mm, ss, int(fraction.ljust(6, "0")) if fraction else 0
    raise TypeError("not a date")


def _date(value: Any) -> bytes:
    y, m, d, *_ = _parts(value)
    return (y << 9 | m << 5 | d).to_bytes(3, "little")


def _datetime2(fsp: int) -> Encode:
    def encode(value: Any) -> bytes:
        y, m, d, hh, mm, ss, us = _parts(value)
        packed = (y * 13 + m) << 22 | d << 17 | hh << 12 | mm << 6 | ss
        return (packed | 1 << 39).to_bytes(5, "big") + _fraction(us, fsp)

    return encode


def _timestamp2(fsp: int) -> Encode:
    def encode(value: Any) -> bytes:
        if isinstance(value, str):  # the zero TIMESTAMP, as text
            seconds, micros = 0, 0
        elif isinstance(value, dt.datetime):
            naive = value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value
            micros_total = (naive - _EPOCH) // _MICRO
            seconds, micros = divmod(micros_total, 1_000_000)
        else:
            raise TypeError("not a datetime")
        return seconds.to_bytes(4, "big") + _fraction(micros, fsp)

    return encode


def _time2(fsp: int) -> Encode:
    """MySQL's TIME2: the packed time (hms << 24 | microseconds, negated when negative),
    stored as its integer part and fraction as my_time_packed_to_binary does."""

    def encode(value: Any) -> bytes:
        if not isinstance(value, dt.timedelta):
            raise TypeError("not a timedelta")
        total = value // _MICRO
        negative = total < 0
        seconds, micros = divmod(abs(total), 1_000_000)
        hours, rest = divmod(seconds, 3600)
        hms = hours << 12 | (rest // 60) << 6 | rest % 60
        packed = hms << 24 | micros
        if negative:
            packed = -packed
        if fsp >= 5:
            return (packed + (1 << 47)).to_bytes(6, "big")
        whole = (packed >> 24) + (1 << 23)  # floor, as C's >> on a negative number
        if fsp == 0:
            return whole.to_bytes(3, "big")
        fraction = -(abs(packed) & 0xFFFFFF) if negative else packed & 0xFFFFFF  # C's %
        if fsp <= 2:
            return whole.to_bytes(3, "big") + (int(fraction / 10000) & 0xFF).to_bytes(1, "big")
        return whole.to_bytes(3, "big") + (int(fraction / 100) & 0xFFFF).to_bytes(2, "big")

    return encode


def _enum(column: Column) -> Encode:
    size = column.meta & 0xFF
    if size not in (1, 2):
        raise MapError(f"column {column.name}: an ENUM of {size} bytes")
    index = {member: i + 1 for i, member in enumerate(column.members)}
    index[""] = 0  # the error value MariaDB stores for an invalid member

    def encode(value: Any) -> bytes:
        if not isinstance(value, str):
            raise TypeError("not an ENUM member")
        return index[value].to_bytes(size, "little")

    return encode


def _set(column: Column) -> Encode:
    size = column.meta & 0xFF
    if not 1 <= size <= 8:
        raise MapError(f"column {column.name}: a SET of {size} bytes")
    bits = {member: 1 << i for i, member in enumerate(column.members)}

    def encode(value: Any) -> bytes:
        if isinstance(value, str):
            value = {m for m in value.split(",") if m}
        if not isinstance(value, set | frozenset):
            raise TypeError("not a SET value")
        mask = 0
        for member in value:
            mask |= bits[member]
        return mask.to_bytes(size, "little")

    return encode


def _string(column: Column, prefix: int, pad: bool) -> Encode:
    codec = charsets.codec(column.collation)
    binary = codec in (charsets.BINARY, charsets.RAW)
    strip = pad and codec == charsets.BINARY  # BINARY(n): the binlog holds it unpadded

    def encode(value: Any) -> bytes:
        if isinstance(value, str):
            if binary and value:
                raise TypeError("text for a binary column")
            raw = value.encode(codec) if not binary else b""
        elif isinstance(value, bytes | bytearray):
            raw = bytes(value)
        else:
            raise TypeError("not a string")
        if strip:
            raw = raw.rstrip(b"\0")
        return len(raw).to_bytes(prefix, "little") + raw

    return encode
