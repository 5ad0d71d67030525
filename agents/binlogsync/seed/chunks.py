"""One chunk of a table: the next rows by primary key, read in a consistent snapshot; and where
the next chunk ends, for readers that read several chunks of a table at once (readers.py).

Each chunk has a snapshot of its own (`START TRANSACTION WITH CONSISTENT SNAPSHOT`, and the
position it holds: on MariaDB the GTID state read just before it opened, a lower bound that
costs no binlog scan; reconcile/pinning.py), so no transaction stays open longer than one
chunk's read and nothing is locked: other sessions write on. The rows are the ones with a key
above the previous chunk's last key, in key order (`ORDER BY` the primary key, `LIMIT n`), as
whole row images (FLOAT widened exactly; DECIMAL and dates as the codec carries them); or, for
a key range found before (`bound`), every row of the range `after < key <= upto`.

A table whose description is exact is read as text (`text_sql`): the server writes each row
as one line of LOAD DATA's text, in the form rowtext.py defines per column type, and Python
only collects the lines. Its rows then cost no Python work per value on the way to a MariaDB
target (rowtext.py says why). Any other table is read as values, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..codec import pack, shortest_float32, unpack
from ..mysql import ident, qualified
from ..position import Position
from ..reconcile import pinning
from ..reconcile.checksums import after_where, rows_sql
from ..rowtext import NEEDS_ESCAPE, TextRows
from ..tabledef import INTEGER_TYPES, ColumnDef, TableDef
from .rowread import fetch_all
from .tables import SeedTable

Key = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Chunk:
    snapshot: Position
    rows: list[tuple[Any, ...]] | TextRows
    last_key: Key | None  # of the last row; None when there are no rows


# Each column type's form in the rows text (rowtext.py).
_FORMS = {
    **dict.fromkeys((*INTEGER_TYPES, "year"), "int"),
    **{t: t for t in ("bit", "decimal", "double", "date", "datetime", "timestamp", "time")},
    "float": "float32",
    **dict.fromkeys(
        ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "json"), "text"
    ),
    "set": "set",
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"), "bytes"),
}
# LOAD DATA's escapes, backslash first, as binary hex literals: the same in every sql_mode, and
# REPLACE over bytes is a byte search (a third of the server's cost for the text form over
# utf8mb4 characters). utf8 never has these bytes inside a character.
_ESCAPES = (("5C", "5C5C"), ("09", "5C74"), ("0A", "5C6E"), ("0D", "5C72"), ("00", "5C30"))


def text_forms(definition: TableDef) -> tuple[str, ...] | None:
    """Each column's form when the table's rows can be read as text; None when not (its
    description is not exact: a column type or attribute outside the closed list)."""
    if definition.unsupported is not None:
        return None
    forms = tuple(_FORMS.get(c.type) for c in definition.columns)
    return None if None in forms else forms  # type: ignore[return-value]


def _field_sql(column: ColumnDef, form: str) -> str:
    value = ident(column.name)
    if form == "float32":
        value = f"({value} + 0e0)"  # widened: exact (rows_sql says why)
    elif form == "bit":
        value = f"({value} + 0)"
    elif form == "bytes":
        value = f"HEX({value})"
    elif form in ("text", "set"):
        if column.charset != "utf8mb4":
            value = f"CONVERT({value} USING utf8mb4)"
        # An ENUM's or SET's values need no escape when none of its members does.
        if not column.values or NEEDS_ESCAPE.search("".join(column.values)):
            value = f"CAST({value} AS BINARY)"
            for raw, escaped in _ESCAPES:
                value = f"REPLACE({value}, X'{raw}', X'{escaped}')"
    return f"IFNULL({value}, X'5C4E')"


def text_sql(table: SeedTable, forms: tuple[str, ...], where: str) -> str:
    """One column: each row as a line of the rows text (without its newline), in bytes."""
    columns = table.definition.columns
    fields = ", ".join(_field_sql(c, f) for c, f in zip(columns, forms, strict=True))
    return (
        f"SELECT CAST(CONCAT_WS(X'09', {fields}) AS BINARY) "
        f"FROM {qualified(table.schema, table.table)} WHERE {where}"
    )


def _bit(value: Any) -> Any:
    return int.from_bytes(value, "big") if isinstance(value, bytes) else value


def _set(value: Any) -> Any:
    return (set(value.split(",")) if value else set()) if isinstance(value, str) else value


def like_capture(table: SeedTable, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows with the values capture gives for the same columns: BIT as an integer (the text
    protocol sends its bytes), SET as a set of members (it sends "a,b"), FLOAT as the shortest
    decimal of the same float32 (it is read widened, `c + 0e0`: 1.100000023841858). A MySQL target
    takes either; a target that stores values as they come (Redis, an audit log, PostgreSQL)
    must not hold a seeded row differently from a streamed one."""
    by_type = {"bit": _bit, "set": _set, "float": shortest_float32}
    fixes = [
        (i, by_type[c.type]) for i, c in enumerate(table.definition.columns) if c.type in by_type
    ]
    if not fixes:
        return rows
    out = []
    for row in rows:
        values = list(row)
        for i, fix in fixes:
            values[i] = fix(values[i])
        out.append(tuple(values))
    return out


def read(
    conn: Any, table: SeedTable, after: Key | None, limit: int, upto: Key | None = None
) -> Chunk:
    """The next `limit` rows after `after` (None: from the start), or with `upto` every row of
    `after < key <= upto`; and the snapshot's position. Rows as text where the table allows
    (`text_forms`), else as values."""
    where, params = after_where(table.key, after)
    order = ", ".join(ident(c) for c in table.key)
    tail = f" ORDER BY {order} LIMIT {int(limit)}"
    if upto is not None:
        beyond, more = after_where(table.key, upto)
        where, params, tail = f"{where} AND NOT {beyond}", [*params, *more], f" ORDER BY {order}"
    forms = text_forms(table.definition)
    snapshot = pinning.snapshot(conn, lower_bound=True)
    try:
        text = None if forms is None else _text_rows(conn, table, forms, where, params, tail)
        image = (
            text
            if text is not None
            else like_capture(table, _rows(conn, table, where, params, tail))
        )
    finally:
        pinning.end(conn)
    return Chunk(snapshot, image, key_of(table, image[-1]) if image else None)


def _query(conn: Any, table: SeedTable, select: str, params: list[Any], tail: str) -> str:
    source = f"FROM {qualified(table.schema, table.table)}"
    with conn.cursor() as cur:
        bound = cur.mogrify(select.replace(source, f"{source} FORCE INDEX (PRIMARY)", 1), params)
    return str(bound) + tail


def _rows(conn: Any, table: SeedTable, where: str, params: list[Any], tail: str) -> list[Any]:
    select = rows_sql(table.schema, table.table, table.columns, where, table.floats)
    return fetch_all(conn, _query(conn, table, select, params, tail))


def _text_rows(
    conn: Any, table: SeedTable, forms: tuple[str, ...], where: str, params: list[Any], tail: str
) -> TextRows | None:
    """The rows as text; None when the server could not write one of them (a value whose text
    is longer than its max_allowed_packet: HEX, REPLACE or CONCAT_WS then give NULL with a
    warning), so that the chunk is read as values instead, in the same snapshot."""
    lines = [
        r[0]
        for r in fetch_all(conn, _query(conn, table, text_sql(table, forms, where), params, tail))
    ]
    with conn.cursor() as cur:
        cur.execute("SELECT @@warning_count")
        (warnings,) = cur.fetchone()
    if warnings or None in lines:
        return None
    return TextRows(lines, forms)


def key_of(table: SeedTable, row: tuple[Any, ...]) -> Key:
    """A row's key as query parameters (the reader gives some values as codec values)."""
    return tuple(unpack(pack([row[table.columns.index(c)] for c in table.key])))


def bound(conn: Any, table: SeedTable, after: Key | None, rows: int) -> Key | None:
    """The key of the `rows`-th row after `after` (None: fewer rows are left): where a chunk
    of `rows` rows ends. Reads the primary key's index only, no row leaves the server; `conn`
    converts values as PyMySQL does, so the key goes back as query parameters."""
    where, params = after_where(table.key, after)
    order = ", ".join(ident(c) for c in table.key)
    sql = (
        f"SELECT {order} FROM {qualified(table.schema, table.table)} FORCE INDEX (PRIMARY) "
        f"WHERE {where} ORDER BY {order} LIMIT 1 OFFSET {max(0, int(rows) - 1)}"
    )
    with conn.cursor() as cur:
        cur.execute(sql, params)
        found = cur.fetchone()
    return None if found is None else tuple(found)
