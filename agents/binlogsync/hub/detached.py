"""Detached targets: ones the hub stopped holding changes for (DETACH, an admin command).

A target whose backlog grew past what the operator allows (the outbox job's limits, or by hand
with `binlogsync detach`) is detached from an origin: nothing more is delivered to it, and its
cursor no longer holds back compaction, so one dead host cannot fill the hub's disk. The record
is durable (this table in the hub's SQLite file). Only a whole reseed brings the target back
(`binlogsync seed` without --tables: its first chunk resets the target's checkpoint into the
log, and the hub then drops the record).
"""

from __future__ import annotations

import sqlite3
import time

_SCHEMA = """
CREATE TABLE IF NOT EXISTS detached (
    target TEXT NOT NULL, origin TEXT NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (target, origin)
);
"""


class Detachments:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.db.executescript(_SCHEMA)

    def all(self) -> dict[tuple[str, str], tuple[str, float]]:
        """(target, origin) → (reason, when)."""
        return {(t, o): (r, at) for t, o, r, at in self.db.execute("SELECT * FROM detached")}

    def add(self, target: str, origin: str, reason: str) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT OR REPLACE INTO detached VALUES (?, ?, ?, ?)",
                (target, origin, reason, time.time()),
            )

    def remove(self, target: str, origin: str) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "DELETE FROM detached WHERE target = ? AND origin = ?", (target, origin)
            )
