"""The SQL a PostgreSQL target runs: the source's canonical row encoding, byte for byte.

checksums.py defines the encoding as MariaDB computes it (its `sha256`, portable form). Here the
same bytes are built from the PostgreSQL columns the apply side maps each MySQL/MariaDB type
to (docs/targets.md), as `bytea`, so that SHA-256 over them gives the source's digest:

    integers, DECIMAL, BIT   `c::text` (numeric(p,s) keeps every digit of its scale, as
                             MariaDB prints DECIMAL; BIT is a bigint, as MariaDB's `c + 0`)
    YEAR                     the smallint padded to four digits (MariaDB prints 0 as 0000)
    DOUBLE, FLOAT            `e:m` of the float8 (real widened), as checksums.portable_double
    DATE, DATETIME(n),       to_char with exactly n fraction digits (FF1 … FF6); TIMESTAMP is
    TIMESTAMP(n)             timestamptz, read in the session's time zone, which is UTC
    TIME(n)                  the interval as MariaDB prints a TIME: [-]HH:MM:SS[.f…], hours
                             not wrapped at 24 (838:59:59)
    strings (text, varchar)  the UTF-8 bytes and their count (the source reads a column in
                             another character set, latin1, as utf8mb4: Encoding.converted)
    bytes (bytea)            the bytes and their count

A column that may be NULL gets its flag, and NULL fields are skipped as CONCAT_WS skips them.
The digest's first 64 bits are summed as an unsigned number, as MariaDB's CONV gives them.

What cannot be matched byte for byte is refused before anything runs (`unsupported`): jsonb
(PostgreSQL rewrites the document, so its text is not the source's), JSON compared by value
(MariaDB's JSON_NORMALIZE has no PostgreSQL twin), and a column whose PostgreSQL type is not one
the source type maps to.

Identifiers are double-quoted; values are `%s` parameters (psycopg), so no '%' appears in the
SQL text itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .checksums import Encoding

# PostgreSQL types (information_schema data_type) each source type may be held in.
_INTEGER = ("smallint", "integer", "bigint", "numeric")
ACCEPTED: dict[str, tuple[str, ...]] = {
    "number": _INTEGER,
    "double": ("double precision", "real"),
    "float": ("real", "double precision"),
    "bit": ("bigint", "numeric", "integer"),
    "date": ("date",),
    "datetime": ("timestamp without time zone",),
    "timestamp": ("timestamp with time zone", "timestamp without time zone"),
    "time": ("interval",),
    "text": ("text", "character varying"),
    "bytes": ("bytea",),
}
_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})


def quote(name: str) -> str:
    """A PostgreSQL identifier for a statement with `%s` parameters."""
    return '"' + name.replace('"', '""').replace("%", "%%") + '"'


def qualified(schema: str, table: str) -> str:
    return f"{quote(schema)}.{quote(table)}"


def family(source_type: str, kind: str) -> str:
    """Which entry of ACCEPTED a source column belongs to."""
    if kind in ("number", "double", "float", "bit"):
        return kind
    if kind == "temporal":
        return source_type
    return "bytes" if source_type in _BINARY else "text"


def unsupported(encoding: Encoding, types: Mapping[str, str]) -> str:
    """Why this table cannot be compared on PostgreSQL ('' when it can)."""
    if encoding.json:
        return (
            "--json value compares JSON by MariaDB's JSON_NORMALIZE, which PostgreSQL does not "
            "have; compare PostgreSQL targets with --json text"
        )
    for name, kind, source_type in zip(
        encoding.columns, encoding.kinds, encoding.types, strict=True
    ):
        held = types.get(name, "")
        if held == "jsonb" or held == "json":
            return (
                f"column {name} is {held} on PostgreSQL, which rewrites the document (key order, "
                "spacing), so it cannot equal the source's text byte for byte; make it text "
                "(binlogsync's own mapping of MariaDB JSON)"
            )
        if held not in ACCEPTED[family(source_type, kind)]:
            return (
                f"column {name} is {source_type} on the source but {held} on PostgreSQL, which "
                "binlogsync does not map it to (docs/targets.md); values cannot be compared "
                "exactly"
            )
    return ""


# -- the encoding -------------------------------------------------------------------------------
def _utf8(expression: str) -> str:
    return f"convert_to({expression}, 'UTF8')"


def portable_double(v: str) -> str:
    """checksums.portable_double in PostgreSQL: `e:m` of a float8, '0' for both zeros."""
    e0 = f"least(greatest(floor(ln(abs({v})) / ln(2::float8)), -1074), 1023)"
    q = f"(abs({v}) / power(2::float8, {e0}))"
    e = f"({e0} + ({q} >= 2)::int - ({q} < 1)::int)"
    return (
        f"CASE WHEN {v} = 0 THEN '0' "
        f"ELSE ({e})::bigint::text || ':' "
        f"|| (({v}) / power(2::float8, {e}) * 4503599627370496)::bigint::text END"
    )


def _two(expression: str) -> str:
    """An integer below 100 with at least two digits (lpad would cut longer text)."""
    return f"CASE WHEN {expression} < 10 THEN '0' ELSE '' END || ({expression})::text"


def time_text(c: str, fraction: int) -> str:
    """An interval as MariaDB prints a TIME(fraction)."""
    a = f"abs(extract(epoch FROM {c}))"
    whole = f"floor({a})"
    text = (
        f"CASE WHEN extract(epoch FROM {c}) < 0 THEN '-' ELSE '' END || "
        f"{_two(f'floor({a} / 3600)')} || ':' || "
        f"{_two(f'floor(mod({whole}, 3600) / 60)')} || ':' || {_two(f'mod({whole}, 60)')}"
    )
    if fraction:
        digits = f"floor(({a} - {whole}) * {10**fraction})::bigint::text"
        text += f" || '.' || lpad({digits}, {fraction}, '0')"
    return text


Field = tuple[str, bool]  # an SQL expression, and whether it is bytea (else text)


def _fields(encoding: Encoding, i: int, held: str) -> list[Field]:
    """Column i's fields, as the MariaDB side's (checksums.Encoding)."""
    name, kind, source_type = encoding.columns[i], encoding.kinds[i], encoding.types[i]
    c = quote(name)
    if kind in ("double", "float"):
        return [(portable_double(f"({c})::float8"), False)]
    if kind == "number" and source_type == "year":
        return [(f"lpad(({c})::text, 4, '0')", False)]
    if kind in ("number", "bit"):
        return [(f"({c})::text", False)]
    if kind == "temporal":
        fraction = encoding.fractions[i]
        if source_type == "time":
            return [(time_text(c, fraction), False)]
        pattern = "YYYY-MM-DD"
        if source_type != "date":
            pattern += " HH24:MI:SS" + (f".FF{fraction}" if fraction else "")
        return [(f"to_char({c}, '{pattern}')", False)]
    if held == "bytea":
        return [(f"length({c})::text", False), (c, True)]
    return [(f"octet_length({c})::text", False), (c, False)]


def _bytea(field: Field) -> str:
    expression, raw = field
    return expression if raw else _utf8(expression)


def row(encoding: Encoding, types: Mapping[str, str]) -> str:
    """The canonical encoding of a row as one bytea expression.

    Runs of text fields are joined by one `concat_ws` (which skips NULLs as CONCAT_WS does)
    and converted once: joining every field as bytea cost 2.4 µs per row of 7 columns, most of
    it copying. A run is '' only when all its fields are NULL (it always holds a number or a
    length, which are never ''), so `nullif` turns that back into a skipped NULL."""
    fields: list[Field] = []
    for i, name in enumerate(encoding.columns):
        fields.extend(_fields(encoding, i, types.get(name, "")))
    if encoding.nullable:
        flags = " || ".join(f"({quote(c)} IS NULL)::int::text" for c in encoding.nullable)
        fields.append((flags, False))
    parts: list[str] = []
    run: list[str] = []
    for expression, raw in [*fields, ("", True)]:
        if not raw:
            run.append(expression)
            continue
        if run:
            parts.append(_utf8(f"nullif(concat_ws(',', {', '.join(run)}), '')"))
            run = []
        if expression:
            parts.append(expression)
    if len(parts) == 1:
        return f"coalesce({parts[0]}, ''::bytea)"
    joined = " || ".join(f"coalesce('\\x2c'::bytea || {p}, ''::bytea)" for p in parts)
    return f"substr({joined}, 2)"


def _signed64(encoded: str) -> str:
    """The digest's first 64 bits as a signed bigint (what `bit(64)` gives; the unsigned value
    MariaDB's CONV gives is this plus 2**64 when negative)."""
    return f"('x' || left(encode(sha256({encoded}), 'hex'), 16))::bit(64)::bigint"


_TWO_64 = 18446744073709551616
# OFFSET 0 keeps the subquery whole: pulled up, its `h` would be computed once per use.


def checksum_sql(
    schema: str, table: str, encoding: Encoding, types: Mapping[str, str], where: str
) -> str:
    return (
        f"SELECT count(*), coalesce(sum(r.h), 0) + {_TWO_64} * count(*) FILTER (WHERE r.h < 0) "
        f"FROM (SELECT {_signed64(row(encoding, types))} AS h FROM {qualified(schema, table)} "
        f"WHERE {where} OFFSET 0) AS r"
    )


def row_hashes_sql(
    schema: str,
    table: str,
    key: Sequence[str],
    encoding: Encoding,
    types: Mapping[str, str],
    where: str,
) -> str:
    keys = ", ".join(f"r.k{i}" for i in range(len(key)))
    inner = ", ".join(f"{quote(c)} AS k{i}" for i, c in enumerate(key))
    return (
        f"SELECT {keys}, r.h::numeric + CASE WHEN r.h < 0 THEN {_TWO_64} ELSE 0 END FROM "
        f"(SELECT {inner}, {_signed64(row(encoding, types))} AS h FROM {qualified(schema, table)} "
        f"WHERE {where} OFFSET 0) AS r"
    )


def column_hashes_sql(
    schema: str,
    table: str,
    key: Sequence[str],
    encoding: Encoding,
    types: Mapping[str, str],
    where: str,
) -> str:
    """SHA-256 hex of 'V' + each column's last field, as Encoding.column_hashes (portable)."""
    keys = ", ".join(quote(c) for c in key)
    hashes = ", ".join(
        "encode(sha256('\\x56'::bytea || "
        f"{_bytea(_fields(encoding, i, types.get(name, ''))[-1])}), 'hex')"
        for i, name in enumerate(encoding.columns)
    )
    return f"SELECT {keys}, {hashes} FROM {qualified(schema, table)} WHERE {where}"


def rows_sql(
    schema: str, table: str, columns: Sequence[str], where: str, floats: Sequence[str] = ()
) -> str:
    """Whole row images; a real is widened to float8, so it reads as the exact float32."""
    cols = ", ".join(f"({quote(c)})::float8" if c in floats else quote(c) for c in columns)
    return f"SELECT {cols} FROM {qualified(schema, table)} WHERE {where}"
