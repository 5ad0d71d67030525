"""The hub's durable store: one log of transactions per origin, and one cursor per target.

SQLite in WAL mode with `synchronous=FULL`: when `append` returns, the transactions survive a
crash of the hub or of the machine, so the hub may acknowledge them. The log is keyed by
(origin, position key): a re-sent transaction at or below the origin's head is dropped, which
is what makes re-reading the binlog after a client restart harmless.

Tables
    origins   origin → head position (the last durable transaction), counters
    log       (origin, pos_key) → running count `seq`, commit time, payload (msgpack bytes)
    cursors   (target, origin) → last position the target has applied (as it reported)
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..model import Transaction
from ..position import Position

_SCHEMA = """
CREATE TABLE IF NOT EXISTS origins (
    origin TEXT PRIMARY KEY,
    head_key INTEGER NOT NULL,
    head TEXT NOT NULL,
    registered_at REAL NOT NULL,
    appended INTEGER NOT NULL DEFAULT 0,
    head_ts REAL
);
CREATE TABLE IF NOT EXISTS log (
    origin TEXT NOT NULL,
    pos_key INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    position TEXT NOT NULL,
    ts REAL NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (origin, pos_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cursors (
    target TEXT NOT NULL,
    origin TEXT NOT NULL,
    pos_key INTEGER NOT NULL,
    position TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (target, origin)
);
"""


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    timestamp: float
    payload: bytes
    tx: Transaction | None = None  # decoded, when at hand (not stored)


@dataclass(frozen=True, slots=True)
class OriginHead:
    origin: str
    head: Position
    head_ts: float | None
    appended: int


def _pos(text: str) -> Position:
    return Position.from_json(json.loads(text))


def _text(position: Position) -> str:
    return json.dumps(position.to_json())


class HubLog:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "hub.sqlite3"
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(_SCHEMA)
        self.heads: dict[str, OriginHead] = {
            origin: OriginHead(origin, _pos(head), ts, appended)
            for origin, head, ts, appended in self.db.execute(
                "SELECT origin, head, head_ts, appended FROM origins"
            )
        }

    def close(self) -> None:
        self.db.close()

    # -- origins ---------------------------------------------------------------------------
    def register(self, origin: str, start: Position) -> Position:
        """The first time an origin is seen, remember where its capture starts (durably)."""
        if origin not in self.heads:
            self.db.execute(
                "INSERT INTO origins (origin, head_key, head, registered_at) VALUES (?,?,?,?)",
                (origin, start.key, _text(start), time.time()),
            )
            self.heads[origin] = OriginHead(origin, start, None, 0)
        return self.heads[origin].head

    def head(self, origin: str) -> Position | None:
        known = self.heads.get(origin)
        return known.head if known else None

    def fresh(self, origin: str, entries: Iterable[Entry]) -> list[Entry]:
        """The entries above the origin's head, in order (what `append` would store)."""
        current = self.heads.get(origin)
        head_key = current.head.key if current else -1
        fresh = []
        for entry in entries:
            if entry.position.key > head_key:
                head_key = entry.position.key
                fresh.append(entry)
        return fresh

    def append(self, origin: str, entries: Iterable[Entry]) -> tuple[Position | None, int]:
        """Store what is new (position above the head) in one durable commit.

        Returns the new head and how many entries were new. Entries without changes advance
        the head without taking room in the log (`payload` empty).
        """
        current = self.heads.get(origin)
        head_key = current.head.key if current else -1
        fresh = []
        last: Entry | None = None
        for entry in entries:
            if entry.position.key <= head_key:
                continue  # a duplicate: the client re-read its binlog after a restart
            head_key = entry.position.key
            last = entry
            if entry.payload:
                fresh.append(entry)
        if last is None:
            return (current.head if current else None), 0
        before = current.appended if current else 0
        appended = before + len(fresh)
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany(
                "INSERT OR IGNORE INTO log (origin, pos_key, seq, position, ts, payload) "
                "VALUES (?,?,?,?,?,?)",
                [
                    (origin, e.position.key, before + i, _text(e.position), e.timestamp, e.payload)
                    for i, e in enumerate(fresh, 1)
                ],
            )
            self.db.execute(
                "INSERT INTO origins (origin, head_key, head, registered_at, appended, head_ts) "
                "VALUES (?,?,?,?,?,?) ON CONFLICT(origin) DO UPDATE SET head_key=excluded.head_key,"
                " head=excluded.head, appended=excluded.appended, head_ts=excluded.head_ts",
                (
                    origin,
                    last.position.key,
                    _text(last.position),
                    time.time(),
                    appended,
                    last.timestamp,
                ),
            )
        self.heads[origin] = OriginHead(origin, last.position, last.timestamp, appended)
        return last.position, len(fresh)

    def read(self, origin: str, after_key: int, limit: int) -> list[Entry]:
        rows = self.db.execute(
            "SELECT position, ts, payload FROM log WHERE origin=? AND pos_key>? "
            "ORDER BY pos_key LIMIT ?",
            (origin, after_key, limit),
        ).fetchall()
        return [Entry(_pos(p), ts, payload) for p, ts, payload in rows]

    def backlog(self, origin: str, after_key: int) -> tuple[int, float | None]:
        """How many stored transactions lie after `after_key`, and the oldest one's time.

        One index lookup, not a count: the first pending entry's running number says how many
        came after it, so a backlog of millions costs the same as one of ten.
        """
        row = self.db.execute(
            "SELECT seq, ts FROM log WHERE origin=? AND pos_key>? ORDER BY pos_key LIMIT 1",
            (origin, after_key),
        ).fetchone()
        known = self.heads.get(origin)
        if row is None or known is None:
            return 0, None
        return known.appended - row[0] + 1, row[1]

    def log_rows(self, origin: str) -> int:
        return int(
            self.db.execute("SELECT COUNT(*) FROM log WHERE origin=?", (origin,)).fetchone()[0]
        )

    # -- cursors ---------------------------------------------------------------------------
    def cursors(self) -> dict[tuple[str, str], Position | None]:
        return {
            (target, origin): (_pos(position) if position else None)
            for target, origin, position in self.db.execute(
                "SELECT target, origin, position FROM cursors"
            )
        }

    def save_cursors(self, cursors: dict[tuple[str, str], Position]) -> None:
        if not cursors:
            return
        now = time.time()
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany(
                "INSERT INTO cursors (target, origin, pos_key, position, updated_at) "
                "VALUES (?,?,?,?,?) ON CONFLICT(target, origin) DO UPDATE SET "
                "pos_key=excluded.pos_key, position=excluded.position, "
                "updated_at=excluded.updated_at",
                [(t, o, p.key, _text(p), now) for (t, o), p in cursors.items()],
            )

    def compact(self, origin: str, below_key: int) -> int:
        """Drop entries every target of `origin` has applied (at or below `below_key`)."""
        with self.db:
            cur = self.db.execute(
                "DELETE FROM log WHERE origin=? AND pos_key<=?", (origin, below_key)
            )
        return cur.rowcount
