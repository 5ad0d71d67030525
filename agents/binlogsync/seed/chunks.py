"""One chunk of a table: the next rows by primary key, read in a consistent snapshot; and where
the next chunk ends, for readers that read several chunks of a table at once (readers.py).

Each chunk has a snapshot of its own (`START TRANSACTION WITH CONSISTENT SNAPSHOT`, and the
position it holds: on MariaDB the GTID state read just before it opened, a lower bound that
costs no binlog scan; reconcile/pinning.py), so no transaction stays open longer than one
chunk's read and nothing is locked: other sessions write on. The rows are the ones with a key
above the previous chunk's last key, in key order (`ORDER BY` the primary key, `LIMIT n`), as
whole row images (FLOAT widened exactly; DECIMAL and dates as the codec carries them); or, for
a key range found before (`bound`), every row of the range `after < key <= upto`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..codec import pack, unpack
from ..model import shortest_float32
from ..mysql import ident, qualified
from ..position import Position
from ..reconcile import pinning
from ..reconcile.checksums import after_where, rows_sql
from .rowread import fetch_all
from .tables import SeedTable

Key = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Chunk:
    snapshot: Position
    rows: list[tuple[Any, ...]]
    last_key: Key | None  # of the last row; None when there are no rows


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
    `after < key <= upto`; and the snapshot's position."""
    where, params = after_where(table.key, after)
    order = ", ".join(ident(c) for c in table.key)
    tail = f" ORDER BY {order} LIMIT {int(limit)}"
    if upto is not None:
        beyond, more = after_where(table.key, upto)
        where, params, tail = f"{where} AND NOT {beyond}", [*params, *more], f" ORDER BY {order}"
    sql = (
        rows_sql(table.schema, table.table, table.columns, where, table.floats).replace(
            f"FROM {qualified(table.schema, table.table)}",
            f"FROM {qualified(table.schema, table.table)} FORCE INDEX (PRIMARY)",
        )
        + tail
    )
    snapshot = pinning.snapshot(conn, lower_bound=True)
    try:
        with conn.cursor() as cur:
            bound = cur.mogrify(sql, params)
        rows = fetch_all(conn, bound)
    finally:
        pinning.end(conn)
    rows = like_capture(table, rows)
    last = None
    if rows:
        # Key values as query parameters again (the reader gives some as codec values).
        last = tuple(unpack(pack([rows[-1][table.columns.index(c)] for c in table.key])))
    return Chunk(snapshot, rows, last)


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
