"""Rows events decoded by straight-line code generated once per parsed table.

python-mysql-replication decodes a row column by column through a chain of method calls and
a type dispatch per value; `TableShape.row` (values.py) then corrects what it got wrong. A
`RowsDecoder` is built from the library's parsed Table_map (`pymysqlreplication.table.Table`)
and produces the same row tuples, corrections included, from the event's raw bytes: one
Python function, generated and compiled once per column layout (cached, so a table map
parsed again costs a look-up), reads a row with `struct.unpack_from` and slices at running
offsets, one branch per column on the null bitmap and no per-value dispatch. 1.3-2.5 µs
per one-row event of sysbench's table against 23-41 µs for the library + values.py
(bench/rowdecode_rate.py, two runs on a 2-core EPYC VM).

Each column type is read as the library reads it (row_event.py of mysql-replication 1.0.17),
and its value then corrected as values.py corrects it, so the two paths agree value for value
and type for type; tests/integration/test_rowdecode.py checks that differentially against a
real MariaDB. In particular:

- integers by the signedness in the table map's optional metadata;
- DECIMAL through the library's own string construction (`Decimal('1.10')` keeps its digits);
- FLOAT as the shortest decimal of the float32 (codec.py's `shortest_float32`), DOUBLE as is;
- strings decoded with the codec the library picks for the column's character set; binary
  strings as bytes (BINARY(n) padded back to n, empty ones b''); a character set Python has
  no codec for keeps its bytes (and an empty value is '', as in the library);
- TIME(n) negative with values.py's fix; YEAR 0000: 0; ENUM index 0: ''; an empty SET: set();
  BIT: int; GEOMETRY: bytes; MariaDB's JSON (a LONGTEXT): str.
- what makes the library raise (an ENUM index past its values, bytes its codec rejects)
  raises ValueError here.

Except for dates that are no calendar date, where the library loses the value (a zero or
partial DATE / DATETIME(n) comes out as None, the zero TIMESTAMP(n) as 1970-01-01 00:00:00,
and a DATE like 2004-04-31, written under ALLOW_INVALID_DATES, makes it raise): here each is a
`ZeroDate` of its stored parts (zerodate.py), as SELECT shows it. Where the library lost the
value, values.py marks it `LOST` and reader.py takes this decoder's rows instead.

Truncated or corrupt events raise ValueError. Values are read up to `end`; a row that runs
past it may have looked at the bytes after it (the checksum) before the check at the row's
end raises, but nothing read there is ever returned.

`RowsDecoder.of` returns None (the caller leaves that table to the library) for a column
without a name and for what it does not read: MySQL's binary JSON, the pre-5.6 temporal
types (TIME, DATETIME, TIMESTAMP without the "2"), the old DECIMAL, VAR_STRING, and
metadata outside what the server writes (a length size outside 1-4, an ENUM/SET width
outside 1-2/1-8 bytes).
"""

from __future__ import annotations

import codecs
import datetime
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent

from ..codec import shortest_float32
from ..model import Row
from ..zerodate import ZeroDate
from .values import _fix_negative_time

_V1 = (BINLOG.WRITE_ROWS_EVENT_V1, BINLOG.UPDATE_ROWS_EVENT_V1, BINLOG.DELETE_ROWS_EVENT_V1)
_V2 = (BINLOG.WRITE_ROWS_EVENT_V2, BINLOG.UPDATE_ROWS_EVENT_V2, BINLOG.DELETE_ROWS_EVENT_V2)
_WRITE = (BINLOG.WRITE_ROWS_EVENT_V1, BINLOG.WRITE_ROWS_EVENT_V2)
_UPDATE = (BINLOG.UPDATE_ROWS_EVENT_V1, BINLOG.UPDATE_ROWS_EVENT_V2)

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from

_INTEGERS = {FIELD_TYPE.SHORT: (2, "h"), FIELD_TYPE.LONG: (4, "i"), FIELD_TYPE.LONGLONG: (8, "q")}
_EPOCH = datetime.datetime(1970, 1, 1)
_SCALE = (1_000_000, 100_000, 10_000, 1_000, 100, 10, 1)  # microseconds per unit of fsp n
_COMPRESSED_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a DECIMAL group of 0-9 digits

RowReader = Callable[[bytes, int], tuple[Row, int]]


class _Unsupported(Exception):
    """A column this decoder leaves to the library."""


# -- readers of the values that take more than an expression ------------------------------


def _decimal_reader(precision: int, scale: int) -> tuple[Callable[[bytes, int], Decimal], int]:
    """A reader of NEWDECIMAL(precision, scale) and its size, built as the library builds it:
    sign from the first byte's top bit, groups read as signed big-endian and xor'ed with the
    sign mask, the text handed to Decimal."""
    integral = precision - scale
    whole_int, part_int = divmod(integral, 9)
    whole_frac, part_frac = divmod(scale, 9)
    size_int = _COMPRESSED_BYTES[part_int]
    size_frac = _COMPRESSED_BYTES[part_frac]
    size = size_int + 4 * (whole_int + whole_frac) + size_frac
    # (offset, length, format) of each group after the first byte's sign bit is flipped
    groups: list[tuple[int, int, str]] = []
    offset = 0
    if size_int:
        groups.append((offset, size_int, "{}"))
        offset += size_int
    for _ in range(whole_int):
        groups.append((offset, 4, "{:09d}"))
        offset += 4
    dot = len(groups)
    for _ in range(whole_frac):
        groups.append((offset, 4, "{:09d}"))
        offset += 4
    if size_frac:
        groups.append((offset, size_frac, f"{{:0{part_frac}d}}"))
    from_bytes = int.from_bytes

    def read(data: bytes, p: int) -> Decimal:
        raw = bytearray(data[p : p + size])
        if len(raw) != size:
            raise ValueError("a DECIMAL value runs past the end of the event")
        if raw[0] & 0x80:
            mask, text = 0, ""
        else:
            mask, text = -1, "-"
        raw[0] ^= 0x80
        parts = [text]
        for index, (at, length, form) in enumerate(groups):
            if index == dot:
                parts.append(".")
            parts.append(form.format(from_bytes(raw[at : at + length], "big", signed=True) ^ mask))
        if dot == len(groups):
            parts.append(".")
        return Decimal("".join(parts))

    return read, size


def _fsp_size(fsp: int) -> int:
    return (fsp + 1) // 2


def _fsp_value(raw: int, fsp: int) -> int:
    """The library's __read_fsp on the signed big-endian integer `raw`."""
    if fsp % 2:
        raw = int(raw / 10)
    return raw * _SCALE[fsp]


def _time2_reader(fsp: int) -> Callable[[bytes, int], datetime.timedelta]:
    size = _fsp_size(fsp)
    from_bytes = int.from_bytes
    timedelta = datetime.timedelta

    def read(data: bytes, p: int) -> datetime.timedelta:
        value = from_bytes(data[p : p + 3], "big", signed=True)
        sign = 1 if (value >> 23) & 1 else -1
        if sign == -1:
            value = ~value + 1
        micros = 0
        if size:
            micros = _fsp_value(from_bytes(data[p + 3 : p + 3 + size], "big", signed=True), fsp)
        t = (
            timedelta(
                hours=(value >> 12) & 0x3FF,
                minutes=(value >> 6) & 0x3F,
                seconds=value & 0x3F,
                microseconds=micros,
            )
            * sign
        )
        return _fix_negative_time(t) if fsp else t

    return read


def _datetime2_reader(fsp: int) -> Callable[[bytes, int], datetime.datetime | ZeroDate]:
    size = _fsp_size(fsp)
    from_bytes = int.from_bytes
    make = datetime.datetime

    def read(data: bytes, p: int) -> datetime.datetime | ZeroDate:
        value = from_bytes(data[p : p + 5], "big")
        year_month = (value >> 22) & 0x1FFFF
        parts = (
            year_month // 13,
            year_month % 13,
            (value >> 17) & 0x1F,
            (value >> 12) & 0x1F,
            (value >> 6) & 0x3F,
            value & 0x3F,
        )
        micros = 0
        if size:
            micros = _fsp_value(from_bytes(data[p + 5 : p + 5 + size], "big", signed=True), fsp)
        try:
            t = make(*parts)
        except ValueError:
            return ZeroDate("datetime", *parts, max(micros, 0), fsp)
        if micros > 0:
            t = t.replace(microsecond=micros)
        return t

    return read


def _timestamp2_reader(fsp: int) -> Callable[[bytes, int], datetime.datetime | ZeroDate]:
    size = _fsp_size(fsp)
    from_bytes = int.from_bytes
    timedelta = datetime.timedelta
    zero = ZeroDate("timestamp", fsp=fsp)

    def read(data: bytes, p: int) -> datetime.datetime | ZeroDate:
        seconds = from_bytes(data[p : p + 4], "big", signed=True)
        micros = 0
        if size:
            micros = _fsp_value(from_bytes(data[p + 4 : p + 4 + size], "big", signed=True), fsp)
        if not seconds and micros <= 0:  # a TIMESTAMP's range starts one second later
            return zero
        t = _EPOCH + timedelta(seconds=seconds)
        if micros > 0:
            t = t.replace(microsecond=micros)
        return t

    return read


def _read_date(data: bytes, p: int) -> datetime.date | ZeroDate:
    value = data[p] | data[p + 1] << 8 | data[p + 2] << 16
    year, month, day = value >> 9 & 0x7FFF, value >> 5 & 0xF, value & 0x1F
    try:
        return datetime.date(year, month, day)
    except ValueError:
        return ZeroDate("date", year, month, day)


# -- code generation -----------------------------------------------------------------------


class _Builder:
    """Collects the generated lines of one row reader and the names they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {
            "_u16": _U16,
            "_u32": _U32,
            "_u64": _U64,
            "_from_bytes": int.from_bytes,
            "_str": str,
            "_fix_float": shortest_float32,
            "_read_date": _read_date,
        }

    def name(self, prefix: str, i: int, value: Any) -> str:
        key = f"_{prefix}{i}"
        self.names[key] = value
        return key

    def fixed(self, i: int, size: int, expression: str) -> list[str]:
        return [f"v{i} = {expression}", f"p += {size}"]

    def length(self, size: int) -> list[str]:
        """Lines that read a little-endian length of `size` bytes into n and skip it."""
        if size == 1:
            return ["n = data[p]", "p += 1"]
        if size == 2:
            return ["n = _u16(data, p)[0]", "p += 2"]
        if size == 4:
            return ["n = _u32(data, p)[0]", "p += 4"]
        return [f"n = _from_bytes(data[p:p + {size}], 'little')", f"p += {size}"]

    def column(self, i: int, column: Any) -> list[str]:
        kind = column.type
        unsigned = bool(getattr(column, "unsigned", False))
        if kind == FIELD_TYPE.TINY:
            if unsigned:
                return self.fixed(i, 1, "data[p]")
            return self.fixed(
                i, 1, f"{self.name('int', i, struct.Struct('<b').unpack_from)}(data, p)[0]"
            )
        if kind in _INTEGERS:
            size, code = _INTEGERS[kind]
            unpack = struct.Struct("<" + (code.upper() if unsigned else code)).unpack_from
            return self.fixed(i, size, f"{self.name('int', i, unpack)}(data, p)[0]")
        if kind == FIELD_TYPE.INT24:
            signed = "False" if unsigned else "True"
            return self.fixed(i, 3, f"_from_bytes(data[p:p + 3], 'little', signed={signed})")
        if kind == FIELD_TYPE.FLOAT:
            f32 = self.name("float", i, struct.Struct("<f").unpack_from)
            return self.fixed(i, 4, f"_fix_float({f32}(data, p)[0])")
        if kind == FIELD_TYPE.DOUBLE:
            f64 = self.name("double", i, struct.Struct("<d").unpack_from)
            return self.fixed(i, 8, f"{f64}(data, p)[0]")
        if kind == FIELD_TYPE.NEWDECIMAL:
            precision, scale = int(column.precision), int(column.decimals)
            if not (0 < precision <= 65 and 0 <= scale <= 38 and scale <= precision):
                raise _Unsupported(f"DECIMAL({precision},{scale})")
            read_decimal, size = _decimal_reader(precision, scale)
            return self.fixed(i, size, f"{self.name('dec', i, read_decimal)}(data, p)")
        if kind == FIELD_TYPE.DATE:
            return self.fixed(i, 3, "_read_date(data, p)")
        if kind in (FIELD_TYPE.TIME2, FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP2):
            fsp = int(column.fsp)
            if not 0 <= fsp <= 6:
                raise _Unsupported(f"fractional seconds {fsp}")
            base, make = {
                FIELD_TYPE.TIME2: (3, _time2_reader),
                FIELD_TYPE.DATETIME2: (5, _datetime2_reader),
                FIELD_TYPE.TIMESTAMP2: (4, _timestamp2_reader),
            }[kind]
            read_time = self.name("time", i, make(fsp))
            return self.fixed(i, base + _fsp_size(fsp), f"{read_time}(data, p)")
        if kind == FIELD_TYPE.YEAR:
            return [f"v{i} = data[p] + 1900 if data[p] else 0", "p += 1"]
        if kind == FIELD_TYPE.BIT:
            size, bits = int(column.bytes), int(column.bits)
            if not 1 <= size <= 8:
                raise _Unsupported(f"BIT of {size} bytes")
            mask = (1 << bits) - 1
            return self.fixed(i, size, f"_from_bytes(data[p:p + {size}], 'big') & {mask}")
        if kind == FIELD_TYPE.ENUM:
            size = int(column.size)
            if size not in (1, 2):
                raise _Unsupported(f"ENUM of {size} bytes")
            index = "data[p]" if size == 1 else "_u16(data, p)[0]"
            if not column.enum_values:
                return self.fixed(i, size, "None")
            values = self.name("enum", i, tuple(column.enum_values))
            return self.fixed(i, size, f"{values}[{index}]")
        if kind == FIELD_TYPE.SET:
            size = int(column.size)
            if not 1 <= size <= 8:
                raise _Unsupported(f"SET of {size} bytes")
            if not column.set_values:
                return self.fixed(i, size, "set()")
            members = self.name(
                "set", i, tuple((1 << bit, value) for bit, value in enumerate(column.set_values))
            )
            return [
                f"m = _from_bytes(data[p:p + {size}], 'little')",
                f"v{i} = {{value for bit, value in {members} if m & bit}}",
                f"p += {size}",
            ]
        if kind in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
            return self.string(i, column, 2 if column.max_length > 255 else 1)
        if kind == FIELD_TYPE.BLOB:
            return self.string(i, column, self.length_size(column))
        if kind == FIELD_TYPE.GEOMETRY:
            return [*self.length(self.length_size(column)), f"v{i} = data[p:p + n]", "p += n"]
        raise _Unsupported(f"column type {kind}")

    @staticmethod
    def length_size(column: Any) -> int:
        size = int(column.length_size)
        if not 1 <= size <= 4:
            raise _Unsupported(f"length size {size}")
        return size

    def string(self, i: int, column: Any, size: int) -> list[str]:
        lines = self.length(size)
        charset = column.character_set_name
        value = "data[p:p + n]"
        if charset == "binary":
            if column.type == FIELD_TYPE.STRING:  # BINARY(n): the binlog strips the padding
                expression = f"{value}.ljust({int(column.max_length)}, b'\\x00')"
            else:
                expression = value
        else:
            encoding = "utf-8" if charset is None else RowsEvent.charset_to_encoding(charset)
            try:
                codecs.lookup(encoding)
            except LookupError:  # the library keeps the bytes (and b'' decodes to '')
                expression = f"({value} or '')"
            else:
                expression = f"_str({value}, {self.name('enc', i, encoding)})"
        return [*lines, f"v{i} = {expression}", "p += n"]

    def build(self, columns: list[Any], keep: frozenset[int] | None = None) -> RowReader:
        """The reader of rows of `columns`; with `keep`, only those columns' values are made
        (the others are stepped over, by their stored size, and come out as None)."""
        count = len(columns)
        null_bytes = (count + 7) // 8
        body = [
            "nulls = data[p]"
            if null_bytes == 1
            else f"nulls = _from_bytes(data[p:p + {null_bytes}], 'little')",
            f"p += {null_bytes}",
        ]
        for i, column in enumerate(columns):
            lines = self.column(i, column)
            if keep is not None and i not in keep:
                value = f"v{i} = "
                lines = [
                    f"{value}None" if line.startswith(value) else line
                    for line in lines
                    if not line.startswith("m = ")  # a SET's bits, only read for its value
                ]
            body.append(f"if nulls & {1 << i}:")
            body.append(f"    v{i} = None")
            body.append("else:")
            body.extend(f"    {line}" for line in lines)
        values = "".join(f"v{i}, " for i in range(count))
        body.append(f"return ({values}), p")
        source = "def read_row(data, p):\n" + "".join(f"    {line}\n" for line in body)
        scope: dict[str, Any] = {}
        exec(compile(source, "<rowdecode>", "exec"), self.names, scope)  # noqa: S102 - our own code
        reader: RowReader = scope["read_row"]
        return reader


# The generated readers by the column attributes they depend on (names do not matter), so a
# table map parsed again (another table id, the Table_map cache off, a second stream) costs a
# look-up, not a compile (~130 µs for four columns).
_READERS: dict[tuple[Any, ...], RowReader] = {}
_READERS_LIMIT = 1024
_ATTRIBUTES = (
    "type", "unsigned", "character_set_name", "max_length", "length_size", "precision",
    "decimals", "fsp", "bits", "bytes", "size",
)  # fmt: skip


def _layout(column: Any) -> tuple[Any, ...]:
    """Everything `_Builder.column` reads of a column."""
    enum_values = getattr(column, "enum_values", None)
    set_values = getattr(column, "set_values", None)
    return (
        *(getattr(column, name, None) for name in _ATTRIBUTES),
        None if enum_values is None else tuple(enum_values),
        None if set_values is None else tuple(set_values),
    )


# -- the decoder ---------------------------------------------------------------------------


class RowsDecoder:
    """The rows of a Rows event of one parsed table, as `TableShape.row` has them."""

    __slots__ = ("columns", "name", "_count", "_bitmap", "_read_row")

    columns: tuple[str, ...]

    def __init__(self, name: str, columns: tuple[str, ...], read_row: RowReader) -> None:
        self.name = name
        self.columns = columns
        self._count = len(columns)
        self._bitmap = ((1 << self._count) - 1).to_bytes((self._count + 7) // 8, "little")
        self._read_row = read_row

    @classmethod
    def of(cls, table: Any, only: frozenset[str] | None = None) -> RowsDecoder | None:
        """The decoder of a parsed Table_map, None when a column is one it leaves to the
        library or has no name. With `only` (column names), the values of the other columns
        are not made: they come out as None (for readers that need the keys alone, such as
        reconcile's changed.py; never for what is applied)."""
        columns = list(table.columns)
        if not columns or any(not column.name for column in columns):
            return None
        keep = None
        if only is not None:
            keep = frozenset(i for i, column in enumerate(columns) if column.name in only)
        try:
            layout = (tuple(_layout(column) for column in columns), keep)
            read_row = _READERS.get(layout)
            if read_row is None:
                read_row = _Builder().build(columns, keep)
                if len(_READERS) >= _READERS_LIMIT:
                    _READERS.clear()
                _READERS[layout] = read_row
        except (_Unsupported, AttributeError, TypeError, KeyError, ValueError):
            return None
        name = f"{table.schema}.{table.table}"
        return cls(name, tuple(column.name for column in columns), read_row)

    def decode(
        self, event_type: int, data: bytes, start: int, end: int
    ) -> tuple[tuple[Row, ...], tuple[Row, ...]] | None:
        """(before images, after images) of the Rows event whose post-header starts at
        data[start] and whose body ends before data[end] (the checksum excluded); None for a
        partial row image or a column count other than the table map's."""
        if not 0 <= start <= end <= len(data):
            raise ValueError(f"rows event of {self.name}: bounds {start}..{end} outside the data")
        try:
            return self._decode(event_type, data, start, end)
        except (struct.error, IndexError) as exc:
            raise ValueError(f"rows event of {self.name}: truncated or corrupt ({exc})") from exc

    def _decode(
        self, event_type: int, data: bytes, start: int, end: int
    ) -> tuple[tuple[Row, ...], tuple[Row, ...]] | None:
        if event_type in _V1:
            p = start + 8  # table id, flags
        elif event_type in _V2:
            extra = _U16(data, start + 8)[0]  # the extra data's length includes its own 2 bytes
            if extra < 2:
                raise ValueError(f"rows event of {self.name}: extra data length {extra} < 2")
            p = start + 8 + extra
        else:
            raise ValueError(f"event type {event_type} is not a Rows event")
        if p >= end:
            raise ValueError(f"rows event of {self.name}: truncated before the column count")
        count = data[p]
        p += 1
        if count >= 251:
            if count == 252:
                count, p = _U16(data, p)[0], p + 2
            elif count == 253:
                count, p = int.from_bytes(data[p : p + 3], "little"), p + 3
            elif count == 254:
                count, p = _U64(data, p)[0], p + 8
            else:
                raise ValueError(f"rows event of {self.name}: bad column count byte {count}")
        if count != self._count:
            return None
        update = event_type in _UPDATE
        bitmap = self._bitmap
        width = len(bitmap)
        if p + (2 * width if update else width) > end:
            raise ValueError(f"rows event of {self.name}: truncated in the column bitmaps")
        if data[p : p + width] != bitmap:
            return None
        p += width
        if update:
            if data[p : p + width] != bitmap:
                return None
            p += width
        read_row = self._read_row
        rows: list[Row] = []
        append = rows.append
        while p < end:
            row, p = read_row(data, p)
            append(row)
        if p > end:
            raise ValueError(
                f"rows event of {self.name}: a row runs {p - end} bytes past the event's end"
            )
        if update:
            if len(rows) % 2:
                raise ValueError(f"rows event of {self.name}: an update without its after image")
            return tuple(rows[0::2]), tuple(rows[1::2])
        if event_type in _WRITE:
            return (), tuple(rows)
        return tuple(rows), ()
