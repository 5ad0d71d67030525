"""The SQL that each database runs: chunk checksums, per-row hashes, per-column hashes.

Canonical encoding of a row (the same on both sides: its form is chosen per column from the
source's definition, and a column that may be NULL on either side gets a NULL flag on both):

    CONCAT_WS(',', enc(c1), enc(c2), …, CONCAT(c_i IS NULL, c_j IS NULL, …))

    number   (integers, DECIMAL, DOUBLE, YEAR)   the server's text: DECIMAL keeps every digit of
             its scale (1.50 in DECIMAL(10,2)); DOUBLE is printed shortest-round-trip, so exact
    float    FLOAT                               `c + 0e0`: the float32 widened to a double and
             printed exactly (MariaDB prints a FLOAT itself with 6 digits, which would hide a
             change in the 7th)
    temporal DATE, DATETIME(n), TIMESTAMP(n), TIME(n)   the server's text with all n fraction
             digits; TIMESTAMP in the session time zone, which is always +00:00 here
    bit      BIT(n)                              `c + 0`, the number
    bytes    everything else (CHAR, VARCHAR, TEXT, BLOB, BINARY, ENUM, SET, JSON, geometry)
             `LENGTH(c), c`: the byte length, then the bytes as stored, so a ',' inside a value
             cannot shift the fields and 'ab','c' differs from 'a','bc'. The last such column
             of the row is `c` alone (except in the portable encoding, below): every field
             after it contains no ',' and the flags say which are present, so it is what
             lies between the fields read from the left and those read from the right
             (one LENGTH fewer: 0.03-0.05 µs a row in MariaDB)

CONCAT_WS skips NULL arguments; the trailing flags say which columns were NULL, so NULL and ''
differ and a NULL cannot shift the fields either. Number and temporal text never contains ','.
The encoding is therefore injective: two rows encode alike only if every column is alike.

Per-row hash, one of three (`--hash`; `auto` takes `sha256` when a target is PostgreSQL, else
`crc` when every server has CRC32C, which MariaDB has from 10.8, and `sha1` otherwise):

    crc    a·(b + 1) with a = CRC32(enc) and b = CRC32C(enc): two CRCs of different
           polynomials, mixed by a product so the hash is not linear. The encoding is built
           once per row (a user variable holds it for the second CRC): building it costs more
           than either CRC, and computing it twice made two CRCs as slow as SHA-1. The value
           is below 2**64 ((2**32 - 1) · 2**32), so BIGINT UNSIGNED holds it without overflow.
           Each CRC is computed once and the variable read once (the earlier a·b + a + b read
           it three times and computed each CRC twice: 0.94 against 0.86 µs a row here).
    sha1   the first 64 bits of SHA-1 of the encoding, as an unsigned integer:
           `CAST(CONV(SUBSTRING(SHA1(enc), 1, 16), 16, 10) AS UNSIGNED)`.
    sha256 the same of SHA-256 (`SHA2(enc, 256)`): a strong hash PostgreSQL has without an
           extension (MD5 is the other; MariaDB's MD5 costs 0.7 µs a row, SHA2 0.16). It
           also makes the encoding *portable* (pgsql.py computes it byte for byte in
           PostgreSQL): DOUBLE and FLOAT are encoded as `e:m`, the binary exponent and the
           53-bit integer mantissa (v = m * 2**(e-52)), computed by IEEE arithmetic that both
           servers do alike, instead of as text, whose exponent form and, at the rounding
           boundary, digits differ between the two; per-column hashes are SHA-256 too.

A chunk's checksum is `COUNT(*)` and a fold of the row hashes: for `crc`, `BIT_XOR` (a 64-bit
XOR, the cheapest aggregate MariaDB has: SUM of BIGINT UNSIGNED accumulates in DECIMAL, which
cost 0.07 µs a row more); for `sha1` and `sha256`, `SUM` (an exact DECIMAL, as PostgreSQL's
side computes it too). pt-table-checksum's `BIT_XOR(CRC32(…))` cannot see two rows swap
values because a CRC is linear over XOR, so the XOR-fold of the CRCs of a swap cancels (and
the plain pair a·2**32 + b misses about 2**-32 of swaps even in a sum). The product makes
each row's hash a non-linear function of its bytes, so a swap, or any set of changed rows,
cancels in the XOR only by chance (about 2**-64). Rows never cancel in pairs either: two rows
of one side are different keys, so equal hashes are a collision, and a missing or extra row
changes COUNT(*). The chance that a differing chunk still matches is in docs/reconcile.md.

JSON: with `json="text"` (the default) a JSON column is compared as the text the server returns,
so '{"a":1,"b":2}' and '{"b":2,"a":1}' differ — on MariaDB, where JSON is text, that is what an
application reads back. With `json="value"` MariaDB's JSON_NORMALIZE is applied first, so key
order, white space and number spelling (1 vs 1.0) are not differences. (MySQL stores JSON
binary and already returns a normalised text.)

Identifiers are backtick-quoted; every value (range bounds, keys) is a `%s` parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from ..mysql import ident, qualified
from .choices import HASHES, JSON_MODES, PORTABLE
from .schema import TablePair

UTF8_CHARSETS = frozenset({"utf8mb4", "utf8mb3", "utf8", "ascii", "binary"})
_ROW = "@binlogsync_row"  # the session variable that holds a row's encoding for its second CRC


@dataclass(frozen=True, slots=True)
class Encoding:
    """How one table pair's rows are encoded and hashed (the same SQL on both sides)."""

    columns: tuple[str, ...]
    kinds: tuple[str, ...]
    nullable: tuple[str, ...]  # columns with a NULL flag, in column order
    json: tuple[str, ...] = ()  # JSON columns normalised (json="value")
    hash: str = "sha1"  # the per-row hash (HASHES)
    types: tuple[str, ...] = ()  # the source's DATA_TYPE per column (for pgsql.py)
    fractions: tuple[int, ...] = ()  # fraction digits of temporal columns, else 0
    # Portable only: text columns in a character set other than UTF-8, read as utf8mb4 so their
    # bytes are what PostgreSQL (UTF-8) holds
    converted: tuple[str, ...] = ()

    @property
    def portable(self) -> bool:
        return self.hash == PORTABLE

    @classmethod
    def of(cls, pairs: Sequence[TablePair], json: str = "text", hash: str = "sha1") -> Encoding:
        """The encoding of one source table against all its targets (a column gets a NULL flag
        when it may be NULL on any side, so one source checksum serves every target)."""
        if json not in JSON_MODES:
            raise ValueError(f"json mode must be one of {JSON_MODES}, not {json!r}")
        if hash not in HASHES:
            raise ValueError(f"hash must be one of {HASHES}, not {hash!r}")
        pair = pairs[0]
        kinds = tuple(pair.source.column(c).kind for c in pair.columns)
        nullable = tuple(c for c in pair.columns if any(c in p.nullable for p in pairs))
        normalised = (
            tuple(c for c in pair.columns if pair.source.column(c).json) if json == "value" else ()
        )
        columns = [pair.source.column(c) for c in pair.columns]
        types = tuple(c.data_type for c in columns)
        fractions = tuple(c.fraction for c in columns)
        converted = tuple(
            c.name
            for c in columns
            if hash == PORTABLE and c.charset and c.charset not in UTF8_CHARSETS
        )
        return cls(pair.columns, kinds, nullable, normalised, hash, types, fractions, converted)

    def _value(self, name: str) -> str:
        col = ident(name)
        if name in self.converted:
            return f"CONVERT({col} USING utf8mb4)"
        return f"JSON_NORMALIZE({col})" if name in self.json else col

    def _fields(self, name: str, kind: str) -> list[str]:
        value = self._value(name)
        if kind in ("double", "float") and self.portable:
            return [portable_double(f"({value} + 0e0)")]
        if kind in ("number", "temporal", "double"):
            return [value]
        if kind == "float":
            return [f"({value} + 0e0)"]
        if kind == "bit":
            return [f"({value} + 0)"]
        return [f"LENGTH({value})", value]

    def row(self) -> str:
        """The canonical encoding of a row, as one SQL expression."""
        fields = [self._fields(n, k) for n, k in zip(self.columns, self.kinds, strict=True)]
        if not self.portable:
            # The last length-prefixed value needs no length (module doc); the portable
            # encoding is PostgreSQL's too (pgsql.py), byte for byte, and keeps every length.
            prefixed = [i for i, f in enumerate(fields) if len(f) == 2]
            if prefixed:
                fields[prefixed[-1]] = fields[prefixed[-1]][1:]
        parts = [part for f in fields for part in f]
        if self.nullable:
            parts.append("CONCAT(" + ", ".join(f"{ident(c)} IS NULL" for c in self.nullable) + ")")
        return "CONCAT_WS(',', " + ", ".join(parts) + ")"

    def row_hash(self) -> str:
        return hash64(self.row(), self.hash)

    @property
    def floats(self) -> tuple[str, ...]:
        return tuple(c for c, k in zip(self.columns, self.kinds, strict=True) if k == "float")

    def column_hashes(self) -> list[str]:
        """One expression per column: SHA-1 (portable: SHA-256) hex of 'V' + value, NULL for
        NULL."""
        out = []
        for name, kind in zip(self.columns, self.kinds, strict=True):
            value = f"CONCAT('V', {self._fields(name, kind)[-1]})"
            out.append(f"SHA2({value}, 256)" if self.portable else f"SHA1({value})")
        return out


def hash64(expression: str, hash: str = "sha1") -> str:
    """The per-row hash of an encoding (module doc). For `crc` the operands of `*` and `+` are
    evaluated left to right, so the variable is set before it is read; a test holds MariaDB to
    that (tests/integration/test_reconcile_hash.py)."""
    if hash == "crc":
        return f"(CRC32({_ROW} := {expression}) * (CRC32C({_ROW}) + 1))"
    digest = f"SHA2({expression}, 256)" if hash == PORTABLE else f"SHA1({expression})"
    return f"CAST(CONV(SUBSTRING({digest}, 1, 16), 16, 10) AS UNSIGNED)"


def portable_double(v: str) -> str:
    """A double as `e:m` (module doc), '0' for both zeros (MariaDB's `c + 0e0` turns -0 into
    0, so the sign of a zero cannot be told on the source anyway). LOG2 only estimates the exponent
    (kept within a double's, -1074 … 1023: LOG2 of the largest double rounds to 1024, whose
    power of two overflows); the quotient then corrects it by one either way, and division by
    a power of two is exact."""
    e0 = f"LEAST(GREATEST(FLOOR(LOG2(ABS({v}))), -1074), 1023)"
    q = f"(ABS({v}) / POW(2, {e0}))"
    e = f"({e0} + ({q} >= 2) - ({q} < 1))"
    return (
        f"IF({v} = 0, '0', CONCAT({e}, ':', CAST({v} / POW(2, {e}) * 4503599627370496 AS SIGNED)))"
    )


def crc_available(cur: Any) -> bool:
    """Whether this server has what the `crc` hash needs (CRC32C: MariaDB 10.8 and later)."""
    try:
        cur.execute("SELECT CRC32C('')")
        cur.fetchall()
    except pymysql.err.MySQLError:  # FUNCTION does not exist
        return False
    return True


Bound = tuple[Any, ...]  # a key prefix: values of the first len(bound) key columns
Quote = Callable[[str], str]  # quotes an identifier for one dialect


def range_where(
    key: Sequence[str], lower: Bound | None, upper: Bound | None, quote: Quote = ident
) -> tuple[str, list[Any]]:
    """WHERE text and parameters for `lower <= key < upper` in key order.

    Bounds may be prefixes of the key (`(5,)` of a key (a, b) means a >= 5). The comparison is
    written as pt-table-checksum writes it, `a > 5 OR (a = 5 AND b >= 7)`, which MariaDB's range
    optimizer turns into index ranges (row constructors like `(a, b) >= (5, 7)` it does not).
    """
    clauses: list[str] = []
    params: list[Any] = []
    if lower is not None:
        sql, p = _compare(key, lower, ">", quote=quote)
        clauses.append(sql)
        params.extend(p)
    if upper is not None:
        sql, p = _compare(key, upper, "<", quote=quote)
        clauses.append(sql)
        params.extend(p)
    return (" AND ".join(clauses) if clauses else "TRUE"), params


def after_where(
    key: Sequence[str], after: Bound | None, quote: Quote = ident
) -> tuple[str, list[Any]]:
    """WHERE text and parameters for `key > after` in key order (keyset paging)."""
    if after is None:
        return "TRUE", []
    return _compare(key, after, ">", strict=True, quote=quote)


def _compare(
    key: Sequence[str], bound: Bound, op: str, strict: bool = False, quote: Quote = ident
) -> tuple[str, list[Any]]:
    """key >= bound (op '>', or key > bound when `strict`) or key < bound (op '<'), for a
    bound that is a key prefix."""
    terms: list[str] = []
    params: list[Any] = []
    n = len(bound)
    for i in range(n):
        eqs = [f"{quote(key[j])} = %s" for j in range(i)]
        last = i == n - 1
        comparison = op + ("=" if last and op == ">" and not strict else "")
        terms.append(" AND ".join([*eqs, f"{quote(key[i])} {comparison} %s"]))
        params.extend(bound[: i + 1])
    return "(" + " OR ".join(f"({t})" for t in terms) + ")", params


def keys_where(
    key: Sequence[str], keys: Sequence[tuple[Any, ...]], quote: Quote = ident
) -> tuple[str, list[Any]]:
    """WHERE text and parameters matching exactly `keys` (full key tuples)."""
    if not keys:
        return "FALSE", []
    if len(key) == 1:
        marks = ", ".join(["%s"] * len(keys))
        return f"{quote(key[0])} IN ({marks})", [k[0] for k in keys]
    one = "(" + " AND ".join(f"{quote(c)} = %s" for c in key) + ")"
    return "(" + " OR ".join([one] * len(keys)) + ")", [v for k in keys for v in k]


def fold(encoding: Encoding) -> str:
    """The aggregate that folds a chunk's row hashes (module doc)."""
    return "BIT_XOR" if encoding.hash == "crc" else "SUM"


def checksum_sql(schema: str, table: str, encoding: Encoding, where: str) -> str:
    return (
        f"SELECT COUNT(*), COALESCE({fold(encoding)}({encoding.row_hash()}), 0) "
        f"FROM {qualified(schema, table)} FORCE INDEX (PRIMARY) WHERE {where}"
    )


def bucket_sql(schema: str, table: str, column: str, encoding: Encoding, where: str) -> str:
    """Per-bucket checksums of a chunk in one pass: `COUNT(*)` and the fold of the row hashes
    for each of `n` buckets of an integer first key column, bucket `i` holding
    `low + i·width <= column < low + (i+1)·width`, the first also everything below and the last
    everything above. Parameters, in order: low, low + (n-1)·width, n - 1, low, width. The
    difference `column - low` is only taken inside [low, low + (n-1)·width), so it never
    overflows."""
    col = ident(column)
    return (
        f"SELECT CASE WHEN {col} < %s THEN 0 WHEN {col} >= %s THEN %s "
        f"ELSE ({col} - %s) DIV %s END AS bucket, "
        f"COUNT(*), COALESCE({fold(encoding)}({encoding.row_hash()}), 0) "
        f"FROM {qualified(schema, table)} FORCE INDEX (PRIMARY) WHERE {where} GROUP BY bucket"
    )


def row_hashes_sql(
    schema: str, table: str, key: Sequence[str], encoding: Encoding, where: str
) -> str:
    keys = ", ".join(ident(c) for c in key)
    return (
        f"SELECT {keys}, {encoding.row_hash()} "
        f"FROM {qualified(schema, table)} FORCE INDEX (PRIMARY) WHERE {where}"
    )


def column_hashes_sql(
    schema: str, table: str, key: Sequence[str], encoding: Encoding, where: str
) -> str:
    keys = ", ".join(ident(c) for c in key)
    return (
        f"SELECT {keys}, {', '.join(encoding.column_hashes())} "
        f"FROM {qualified(schema, table)} WHERE {where}"
    )


def rows_sql(
    schema: str, table: str, columns: Sequence[str], where: str, floats: Sequence[str] = ()
) -> str:
    """Whole row images (for repair and for showing differing values). Columns named in
    `floats` (FLOAT) are read as `c + 0e0`: the text protocol sends a FLOAT with 6 digits,
    which would not write back the same float32; widened to a double it is exact."""
    cols = ", ".join(f"({ident(c)} + 0e0)" if c in floats else ident(c) for c in columns)
    return f"SELECT {cols} FROM {qualified(schema, table)} WHERE {where}"
