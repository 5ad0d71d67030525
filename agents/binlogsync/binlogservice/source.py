"""The hub's log as the binlog service reads it: on its own SQLite connection, read only.

The hub's loop owns `hub.sqlite3` and writes it (hub/log.py describes its tables); the
service's threads read committed transactions from it over their own connections (WAL: a
reader never blocks the writer, and sees only what was committed, which is durable). Each
thread that reads makes its own `LogSource`.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..codec import unpack
from ..errors import ProtocolError
from ..model import Change
from ..position import Position
from .tablemap import MapError

Tables = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Stored:
    """A transaction as the hub's log holds it."""

    key: int
    position_text: str  # JSON (`position` parses it: rarely needed, so not done for all)
    timestamp: float
    payload: bytes  # empty when stored in parts
    parts: int
    begin_key: int | None
    tables: Tables | None

    @property
    def position(self) -> Position:
        return Position.from_json(json.loads(self.position_text))


@functools.lru_cache(maxsize=1024)
def _tables(text: str | None) -> Tables | None:
    return None if text is None else tuple((s, t) for s, t in json.loads(text))


class LogSource:
    def __init__(self, path: Path) -> None:
        # Opened read only: the service never writes the hub's log.
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self.db.execute("PRAGMA query_only=ON")

    def close(self) -> None:
        self.db.close()

    def after(self, origin: str, key: int, limit: int) -> list[Stored]:
        rows = self.db.execute(
            "SELECT pos_key, position, ts, payload, parts, begin_key, tables FROM log "
            "WHERE origin=? AND pos_key>? ORDER BY pos_key LIMIT ?",
            (origin, key, limit),
        ).fetchall()
        return [_stored(r) for r in rows]

    def at(self, origin: str, key: int) -> Stored | None:
        row = self.db.execute(
            "SELECT pos_key, position, ts, payload, parts, begin_key, tables FROM log "
            "WHERE origin=? AND pos_key=?",
            (origin, key),
        ).fetchone()
        return None if row is None else _stored(row)

    def many(self, origin: str, keys: list[int]) -> dict[int, Stored]:
        """The transactions with these keys (at most a few hundred), by key: a dump reads
        ahead in one query."""
        marks = ",".join("?" * len(keys))
        rows = self.db.execute(
            "SELECT pos_key, position, ts, payload, parts, begin_key, tables FROM log "
            f"WHERE origin=? AND pos_key IN ({marks})",
            (origin, *keys),
        ).fetchall()
        return {int(r[0]): _stored(r) for r in rows}

    def floor(self, origin: str) -> int | None:
        """The key after which the log holds everything of `origin` (None: never seen)."""
        row = self.db.execute("SELECT floor_key FROM origins WHERE origin=?", (origin,)).fetchone()
        return None if row is None else int(row[0])

    def part_tables(self, origin: str, begin_key: int) -> list[Tables | None]:
        rows = self.db.execute(
            "SELECT tables FROM parts WHERE origin=? AND begin_key=? ORDER BY number",
            (origin, begin_key),
        ).fetchall()
        return [_tables(r[0]) for r in rows]

    def bodies(self, origin: str, stored: Stored) -> Iterator[tuple[Change, ...]]:
        """The changes of each stored body of a transaction, in order (parts read one at a
        time). Raises LookupError when a part is gone (compacted since)."""
        if not stored.parts:
            yield _changes(stored.payload)
            return
        for number in range(1, stored.parts + 1):
            row = self.db.execute(
                "SELECT payload FROM parts WHERE origin=? AND begin_key=? AND number=?",
                (origin, stored.begin_key, number),
            ).fetchone()
            if row is None:
                raise LookupError(
                    f"part {number} of {origin}'s transaction {stored.position} is gone"
                )
            yield _changes(bytes(row[0]))


def _stored(row: Any) -> Stored:
    key, position, ts, payload, parts, begin_key, tables = row
    return Stored(
        int(key),
        str(position),
        float(ts),
        bytes(payload),
        int(parts),
        None if begin_key is None else int(begin_key),
        _tables(tables),
    )


def _changes(payload: bytes) -> tuple[Change, ...]:
    """The changes of a stored body. The hub checked every body as a target checks it when
    it arrived (model.check_body), so they are built here without checking them again; what
    does not have the shape of a body is refused (a damaged log)."""
    try:
        data = unpack(payload)
        changes = data[2] if len(data) == 3 else data[5]
        return tuple(
            Change(c[0], c[1], c[2], tuple(c[3]), tuple(map(tuple, c[4])),
                   tuple(map(tuple, c[5])), c[6], c[7] if len(c) == 8 else None)
            for c in changes
        )  # fmt: skip
    except (TypeError, IndexError, KeyError, ValueError, ProtocolError) as exc:
        raise MapError(f"a stored transaction cannot be read: {exc}") from exc
