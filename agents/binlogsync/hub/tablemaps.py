"""What each origin's tables looked like in its binlog: the Table_map bodies capture sends.

A transaction in the hub's log carries column names and values, not column types. The binlog
service (binlogservice/) needs the types to describe a table to a subscriber as the origin
did, so the origin agent sends, with a BATCH, the body of the Table_map event in force for
each table whose changes it carries (header `maps`: `[body index, schema, table, body]`), once
per capture run and again whenever the body changes (DDL).

Each one is stored as a fact about the origin's binlog: "from the transaction that ends at
`key` on, `schema.table` has this map" (for a part of a large transaction the key is just
above where the transaction begins, which is above the transaction before it). The map in
force for a transaction is the newest stored at or below its key. A fact never becomes false,
so facts about re-sent transactions the log already holds are stored like any other, and
nothing here depends on the log's commits: they are stored before the batch that carries
them, in a commit of their own.

    table_maps   (origin, schema, tbl, from_key) -> body
"""

from __future__ import annotations

import bisect
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ProtocolError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS table_maps (
    origin TEXT NOT NULL,
    schema TEXT NOT NULL,
    tbl TEXT NOT NULL,
    from_key INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (origin, schema, tbl, from_key)
) WITHOUT ROWID;
"""
MAX_BODY = 1 << 20  # a Table_map of 4096 columns with long ENUM lists stays far below
MAX_NAME = 64

Fact = tuple[str, str, int, bytes]  # schema, table, from_key, body


def create(db: sqlite3.Connection) -> None:
    db.executescript(_SCHEMA)


def facts(header: dict[str, Any], keys: list[int]) -> list[Fact]:
    """BATCH's `maps`, checked (it comes from the network), as facts keyed by `keys`: the key
    of each body of the batch (see the module doc)."""
    found = header.get("maps")
    if found is None:
        return []
    out: list[Fact] = []
    for item in found:
        if not isinstance(item, list) or len(item) != 4:
            raise ProtocolError("BATCH maps: each item must be [index, schema, table, body]")
        index, schema, table, body = item
        if type(index) is not int or not 0 <= index < len(keys):
            raise ProtocolError(f"BATCH maps: body index {str(index)[:20]} is out of range")
        if not all(isinstance(n, str) and 0 < len(n) <= MAX_NAME for n in (schema, table)):
            raise ProtocolError("BATCH maps: schema and table must be names of 1-64 characters")
        if not isinstance(body, bytes) or not 0 < len(body) <= MAX_BODY:
            raise ProtocolError(f"BATCH maps: a Table_map body must be 1 to {MAX_BODY} bytes")
        out.append((schema, table, keys[index], body))
    return out


class TableMaps:
    """The hub's side: store facts (on the hub's loop, on its connection to the log)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        create(db)
        # (origin, schema, table) -> the body stored last: an unchanged map re-sent by a new
        # capture run costs no write when it continues where the last one stopped
        self._last: dict[tuple[str, str, str], tuple[int, bytes]] = {}
        self.version = 0  # how many commits added facts (MapReader's cache key)

    def add(self, origin: str, found: Iterable[Fact]) -> None:
        rows = []
        for schema, table, key, body in found:
            name = (origin, schema, table)
            last = self._last.get(name)
            if last is not None and last[1] == body and last[0] <= key:
                continue
            rows.append((origin, schema, table, key, body))
            if last is None or key >= last[0]:
                self._last[name] = (key, body)
        if not rows:
            return
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO table_maps VALUES (?,?,?,?,?)", rows)
        self.version += 1


class MapReader:
    """The binlog service's side: the map in force for a transaction, on its own connection.

    `version` tells when facts were added (TableMaps.version, same process); the cache of what
    was read is dropped then. Without it every look-up asks the database."""

    def __init__(self, db: sqlite3.Connection, version: Callable[[], int] | None = None) -> None:
        self.db = db
        self.version = version
        self._seen = -1
        self._cache: dict[tuple[str, str, str], tuple[list[int], list[bytes]]] = {}

    def at(self, origin: str, schema: str, table: str, key: int) -> bytes | None:
        """The body in force for the transaction whose key is `key` (None: never sent)."""
        now = self.version() if self.version is not None else -2
        if now != self._seen or now == -2:
            self._cache.clear()
            self._seen = now
        name = (origin, schema, table)
        known = self._cache.get(name)
        if known is None:
            rows = self.db.execute(
                "SELECT from_key, body FROM table_maps WHERE origin=? AND schema=? AND tbl=? "
                "ORDER BY from_key",
                name,
            ).fetchall()
            known = self._cache[name] = ([int(k) for k, _ in rows], [bytes(b) for _, b in rows])
        at = bisect.bisect_right(known[0], key)
        return known[1][at - 1] if at else None
