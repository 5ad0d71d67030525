"""One chunk of a table: the next rows by primary key, read in a consistent snapshot.

Each chunk has a snapshot of its own (`START TRANSACTION WITH CONSISTENT SNAPSHOT`, and the
position it holds: on MariaDB the GTID state read just before it opened, a lower bound that
costs no binlog scan; reconcile/pinning.py), so no transaction stays open longer than one
chunk's read and nothing is locked: other sessions write on. The rows are the ones with a key
above the previous chunk's last key, in key order (`ORDER BY` the primary key, `LIMIT n`), as
whole row images (FLOAT widened exactly; DECIMAL and dates as the codec carries them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..apply.statements import ident, qualified
from ..codec import pack, unpack
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


def read(conn: Any, table: SeedTable, after: Key | None, limit: int) -> Chunk:
    """The next `limit` rows after `after` (None: from the start) and the snapshot's position."""
    where, params = after_where(table.key, after)
    order = ", ".join(ident(c) for c in table.key)
    sql = (
        rows_sql(table.schema, table.table, table.columns, where, table.floats).replace(
            f"FROM {qualified(table.schema, table.table)}",
            f"FROM {qualified(table.schema, table.table)} FORCE INDEX (PRIMARY)",
        )
        + f" ORDER BY {order} LIMIT {int(limit)}"
    )
    snapshot = pinning.snapshot(conn, lower_bound=True)
    try:
        with conn.cursor() as cur:
            bound = cur.mogrify(sql, params)
        rows = fetch_all(conn, bound)
    finally:
        pinning.end(conn)
    last = None
    if rows:
        # Key values as query parameters again (the reader gives some as codec values).
        last = tuple(unpack(pack([rows[-1][table.columns.index(c)] for c in table.key])))
    return Chunk(snapshot, rows, last)
