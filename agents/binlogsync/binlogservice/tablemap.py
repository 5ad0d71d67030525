"""The origin's Table_map body read back: what the service needs to write rows like the origin.

Capture sends the body of each table's Table_map event (hub/tablemaps.py): schema and table
names, the column types and their metadata, the null bitmap and the optional metadata
(binlog_row_metadata=FULL: names, signedness, character sets, ENUM/SET members, primary key).
The service sends that body again in its own Table_map events, unchanged, and reads it here
to encode values (rowencode.py): the real type of each column, its metadata, the character
set of text columns and the members of ENUM and SET columns.

The body comes from the network (an origin agent's BATCH), so it is read defensively: any
inconsistency raises MapError, and the transaction that needs the map is refused to the
subscriber with the reason instead of being sent wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BinlogsyncError

# MySQL column types (binlog codes)
DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP, LONGLONG, INT24 = range(10)
DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR, BIT = range(10, 17)
TIMESTAMP2, DATETIME2, TIME2 = 17, 18, 19
JSON, NEWDECIMAL, ENUM, SET = 245, 246, 247, 248
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = range(249, 256)

_META_BYTES = {
    FLOAT: 1, DOUBLE: 1, BLOB: 1, GEOMETRY: 1, JSON: 1,
    TIMESTAMP2: 1, DATETIME2: 1, TIME2: 1,
    VARCHAR: 2, VAR_STRING: 2, BIT: 2, NEWDECIMAL: 2, STRING: 2, ENUM: 2, SET: 2,
}  # fmt: skip
NUMERIC = frozenset({TINY, SHORT, INT24, LONG, LONGLONG, NEWDECIMAL, FLOAT, DOUBLE, YEAR})
CHARACTER = frozenset({STRING, VAR_STRING, VARCHAR, BLOB, GEOMETRY})  # GEOMETRY: MariaDB's way
# optional metadata fields
SIGNEDNESS, DEFAULT_CHARSET, COLUMN_CHARSET, COLUMN_NAME = 1, 2, 3, 4
SET_STR_VALUE, ENUM_STR_VALUE, GEOMETRY_TYPE = 5, 6, 7
SIMPLE_PRIMARY_KEY, PRIMARY_KEY_WITH_PREFIX = 8, 9
ENUM_AND_SET_DEFAULT_CHARSET, ENUM_AND_SET_COLUMN_CHARSET = 10, 11


class MapError(BinlogsyncError):
    """A Table_map body the service cannot read or cannot write rows for."""


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: int  # the real type: ENUM and SET rather than the STRING they travel as
    meta: int  # the type's metadata as one number (see `_meta`)
    nullable: bool
    unsigned: bool = False
    collation: int | None = None  # text, ENUM and SET columns
    members: tuple[str, ...] = ()  # ENUM and SET


@dataclass(frozen=True, slots=True)
class TableShape:
    schema: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[int, ...]
    body: bytes  # as capture sent it: what the service's Table_map events carry

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.p = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.p + n > len(self.data):
            raise MapError("a Table_map body ends too early")
        out = self.data[self.p : self.p + n]
        self.p += n
        return out

    def byte(self) -> int:
        return self.take(1)[0]

    def lenenc(self) -> int:
        first = self.byte()
        if first < 251:
            return first
        size = {252: 2, 253: 3, 254: 8}.get(first)
        if size is None:
            raise MapError(f"a Table_map body has a bad length byte {first}")
        return int.from_bytes(self.take(size), "little")

    def counted(self) -> bytes:
        return self.take(self.lenenc())

    def name(self) -> str:
        raw = self.take(self.byte())
        if self.byte() != 0:
            raise MapError("a Table_map name is not NUL-terminated")
        return _text(raw)

    @property
    def left(self) -> int:
        return len(self.data) - self.p


def _text(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise MapError(f"a Table_map holds a name that is not UTF-8: {raw[:40]!r}") from exc


def parse(body: bytes) -> TableShape:
    """The shape of a Table_map body (after the table id and flags). Raises MapError."""
    r = _Reader(body)
    schema, table = r.name(), r.name()
    count = r.lenenc()
    if not 0 < count <= 4096:
        raise MapError(f"a Table_map of {schema}.{table} with {count} columns")
    types = list(r.take(count))
    meta = _Reader(r.counted())
    metas = [_meta(kind, meta) for kind in types]
    if meta.left:
        raise MapError(f"the Table_map of {schema}.{table} has {meta.left} metadata bytes too many")
    nulls = int.from_bytes(r.take((count + 7) // 8), "little")
    real = [_real_type(kind, m) for kind, m in zip(types, metas, strict=True)]
    fields: dict[int, bytes] = {}
    while r.left:
        kind = r.byte()
        fields[kind] = r.counted()
    names = _names(fields.get(COLUMN_NAME), count, schema, table)
    unsigned = _signedness(fields.get(SIGNEDNESS), real)
    text = [i for i, kind in enumerate(real) if kind in CHARACTER]
    listed = [i for i, kind in enumerate(real) if kind in (ENUM, SET)]
    collations = {
        **_charsets(fields, DEFAULT_CHARSET, COLUMN_CHARSET, text),
        **_charsets(fields, ENUM_AND_SET_DEFAULT_CHARSET, ENUM_AND_SET_COLUMN_CHARSET, listed),
    }
    members = {
        **_members(fields.get(ENUM_STR_VALUE), [i for i in listed if real[i] == ENUM]),
        **_members(fields.get(SET_STR_VALUE), [i for i in listed if real[i] == SET]),
    }
    key = _ints(fields.get(SIMPLE_PRIMARY_KEY, b""))
    prefixed = _ints(fields.get(PRIMARY_KEY_WITH_PREFIX, b""))
    key += prefixed[0::2]
    if any(not 0 <= k < count for k in key):
        raise MapError(f"the Table_map of {schema}.{table} names a key column out of range")
    columns = tuple(
        Column(
            names[i],
            real[i],
            metas[i],
            bool(nulls >> i & 1),
            unsigned[i],
            collations.get(i),
            members.get(i, ()),
        )
        for i in range(count)
    )
    return TableShape(schema, table, columns, tuple(key), body)


def _meta(kind: int, r: _Reader) -> int:
    size = _META_BYTES.get(kind, 0)
    raw = r.take(size)
    if kind in (STRING, ENUM, SET, NEWDECIMAL, BIT):
        return raw[0] << 8 | raw[1]  # two separate bytes, the first the high one
    return int.from_bytes(raw, "little")


def _real_type(kind: int, meta: int) -> int:
    if kind == STRING:
        real = meta >> 8
        if real in (ENUM, SET):
            return real
    return kind


def string_length(meta: int) -> int:
    """The byte length of a CHAR/BINARY column from its STRING metadata (MySQL packs two high
    bits of lengths above 255 into the real type byte)."""
    real, low = meta >> 8, meta & 0xFF
    if real & 0x30 != 0x30:
        return low | (((real & 0x30) ^ 0x30) << 4)
    return low


def _names(raw: bytes | None, count: int, schema: str, table: str) -> list[str]:
    if raw is None:
        raise MapError(
            f"the Table_map of {schema}.{table} carries no column names",
            "set binlog_row_metadata=FULL on the origin",
        )
    r = _Reader(raw)
    names = [_text(r.counted()) for _ in range(count)]
    if r.left:
        raise MapError(f"the Table_map of {schema}.{table} has more column names than columns")
    return names


def _signedness(raw: bytes | None, real: list[int]) -> list[bool]:
    out = [False] * len(real)
    numeric = [i for i, kind in enumerate(real) if kind in NUMERIC]
    if raw is None:
        return out
    if len(raw) < (len(numeric) + 7) // 8:
        raise MapError("a Table_map's signedness does not cover its numeric columns")
    for bit, i in enumerate(numeric):
        out[i] = bool(raw[bit // 8] & (0x80 >> (bit % 8)))
    return out


def _ints(raw: bytes) -> list[int]:
    r = _Reader(raw)
    out = []
    while r.left:
        out.append(r.lenenc())
    return out


def _charsets(
    fields: dict[int, bytes], default: int, each: int, columns: list[int]
) -> dict[int, int]:
    if each in fields:
        values = _ints(fields[each])
        if len(values) != len(columns):
            raise MapError("a Table_map's column character sets do not match its columns")
        return dict(zip(columns, values, strict=True))
    if default in fields:
        values = _ints(fields[default])
        if not values or len(values) % 2 != 1:
            raise MapError("a Table_map's default character set is malformed")
        out = dict.fromkeys(columns, values[0])
        for at, collation in zip(values[1::2], values[2::2], strict=True):
            if not 0 <= at < len(columns):
                raise MapError("a Table_map's character set names a column out of range")
            out[columns[at]] = collation
        return out
    return {}


def _members(raw: bytes | None, columns: list[int]) -> dict[int, tuple[str, ...]]:
    """ENUM or SET members, decoded as the library that capture uses decodes them."""
    if raw is None:
        return {}
    r = _Reader(raw)
    out: dict[int, tuple[str, ...]] = {}
    for i in columns:
        values = []
        for _ in range(r.lenenc()):
            value = r.counted()
            try:
                values.append(value.decode())
            except UnicodeDecodeError:
                values.append("")
        out[i] = tuple(values)
    if r.left:
        raise MapError("a Table_map's ENUM/SET members do not match its columns")
    return out
