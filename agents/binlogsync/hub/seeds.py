"""Seeds through the hub: where each seed of a target stands, kept durably on the hub.

A seed (`binlogsync seed`, seed/run.py) sends a table's rows as chunks of full row images read
in consistent snapshots; each chunk is a REPAIR with a `seed` map (below) and is applied like a
repair (hub/repairs.py). When the target has applied a chunk, the hub records it here, in its
own SQLite file, before telling the requester. So the record never runs ahead of the target: a
`seed` that was killed asks the hub (`status`) where each table stands and goes on after the
last chunk recorded (a chunk applied but not yet recorded is sent again, which is safe). The
same records are what `status` shows as the seed's progress.

The `seed` map of a REPAIR (every field checked here; the hub trusts none of it blindly):

    run         id of the seed run (one `binlogsync seed` invocation and its resumptions)
    schema      the origin's schema and table of this chunk (the hub applies its route's
    table       renames to the chunk, and refuses a table its routes do not send the target)
    first       True: this chunk starts the table (it empties the target's table first)
    reset       True: the first chunk of a run over every table the target gets from the
                origin: the target's checkpoint is set to the chunk's snapshot even when that
                is ahead (a target too far behind, or one that never applied anything)
    last_key    codec-packed key tuple of the chunk's last row (nil: the table is empty)
    rows        rows in this chunk
    done_rows   rows of this table sent so far, this chunk included
    total_rows  the origin's estimate of the table's rows (information_schema), for ETA
    done        True: the table's last chunk
    started     when the table's seed started (UNIX time, the seed's clock)
    after       (optional) codec-packed key the chunk's rows start after (nil: the table's
                start): with it, a chunk is recorded only when it continues the record (its
                `after` is the recorded `last_key`, same run), so a chunk applied after an
                earlier one was lost (a hub killed with chunks queued in memory) never moves
                the record past the rows that are missing
    rewind      (optional) True: the chunk starts again from a key the seed had confirmed
                (after a timeout, a lost chunk, or on resuming): it is recorded whatever the
                record says, moving it back if it was ahead
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from ..errors import ProtocolError
from ..tabledef import MAX_IDENTIFIER

_SCHEMA = """
CREATE TABLE IF NOT EXISTS seeds (
    origin TEXT NOT NULL, target TEXT NOT NULL, schema_name TEXT NOT NULL,
    table_name TEXT NOT NULL, run TEXT NOT NULL, done_rows INTEGER NOT NULL,
    total_rows INTEGER NOT NULL, last_key BLOB, done INTEGER NOT NULL, started REAL NOT NULL,
    updated REAL NOT NULL, snapshot TEXT NOT NULL,
    PRIMARY KEY (origin, target, schema_name, table_name)
);
"""
MAX_KEY_BYTES = 64 * 1024  # a key is at most 16 columns of at most 3072 bytes in InnoDB
MAX_ROWS = 1 << 62


@dataclass(frozen=True, slots=True)
class SeedChunk:
    run: str
    schema: str
    table: str
    first: bool
    reset: bool
    last_key: bytes | None
    rows: int
    done_rows: int
    total_rows: int
    done: bool
    started: float
    after: bytes | None = None
    chained: bool = False  # `after` was sent (a seed that sends none is recorded as before)
    rewind: bool = False

    def continues(self, record: tuple[str, bytes | None] | None) -> bool:
        """Whether this chunk, applied, moves the record (`(run, last_key)` or None)."""
        if self.first or self.rewind or not self.chained:
            return True
        return record is not None and record == (self.run, self.after)

    @classmethod
    def from_wire(cls, data: Any) -> SeedChunk:
        """The `seed` map of a REPAIR, checked; ProtocolError naming the bad field."""
        if not isinstance(data, dict):
            raise ProtocolError("REPAIR field 'seed' must be a map")

        def field(name: str, kind: type | tuple[type, ...]) -> Any:
            value = data.get(name)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ProtocolError(f"REPAIR seed field {name!r} is missing or mistyped")
            return value

        def name(key: str) -> str:
            value = field(key, str)
            if not value or len(value) > MAX_IDENTIFIER:
                raise ProtocolError(f"REPAIR seed field {key!r} is not a table name")
            return str(value)

        def count(key: str) -> int:
            value = field(key, int)
            if not 0 <= value <= MAX_ROWS:
                raise ProtocolError(f"REPAIR seed field {key!r} is out of range")
            return int(value)

        run = field("run", str)
        if not run or len(run) > 64:
            raise ProtocolError("REPAIR seed field 'run' must be a short id")
        last_key = data.get("last_key")
        if last_key is not None and (
            not isinstance(last_key, bytes) or len(last_key) > MAX_KEY_BYTES
        ):
            raise ProtocolError("REPAIR seed field 'last_key' must be packed bytes or nil")
        started = field("started", (int, float))
        if isinstance(started, bool) or not 0 <= started <= 1e12:
            raise ProtocolError("REPAIR seed field 'started' is out of range")
        chained = "after" in data
        after = data.get("after")
        if after is not None and (not isinstance(after, bytes) or len(after) > MAX_KEY_BYTES):
            raise ProtocolError("REPAIR seed field 'after' must be packed bytes or nil")
        rewind = data.get("rewind", False)
        if not isinstance(rewind, bool):
            raise ProtocolError("REPAIR seed field 'rewind' must be true or false")
        return cls(
            run,
            name("schema"),
            name("table"),
            bool(field("first", bool)),
            bool(field("reset", bool)),
            last_key,
            count("rows"),
            count("done_rows"),
            count("total_rows"),
            bool(field("done", bool)),
            float(started),
            after,
            chained,
            rewind,
        )

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run": self.run,
            "schema": self.schema,
            "table": self.table,
            "first": self.first,
            "reset": self.reset,
            "last_key": self.last_key,
            "rows": self.rows,
            "done_rows": self.done_rows,
            "total_rows": self.total_rows,
            "done": self.done,
            "started": self.started,
        }
        if self.chained:
            out["after"] = self.after
            out["rewind"] = self.rewind
        return out


class SeedRecords:
    """The hub's durable record of seeds: one row per (origin, target, origin table)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.db.executescript(_SCHEMA)

    def applied(self, origin: str, target: str, chunk: SeedChunk, snapshot: str) -> bool:
        """Record a chunk the target applied; False (nothing recorded) when it does not
        continue the record (see `after` above)."""
        now = time.time()
        found = self.db.execute(
            "SELECT run, last_key FROM seeds WHERE origin = ? AND target = ? AND schema_name = ? "
            "AND table_name = ?",
            (origin, target, chunk.schema, chunk.table),
        ).fetchone()
        if not chunk.continues(None if found is None else (found[0], found[1])):
            return False
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT OR REPLACE INTO seeds (origin, target, schema_name, table_name, run, "
                "done_rows, total_rows, last_key, done, started, updated, snapshot) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    origin,
                    target,
                    chunk.schema,
                    chunk.table,
                    chunk.run,
                    chunk.done_rows,
                    chunk.total_rows,
                    chunk.last_key,
                    int(chunk.done),
                    chunk.started,
                    now,
                    snapshot,
                ),
            )
        return True

    def status(self) -> list[dict[str, Any]]:
        """Every table's record, for STATUS (keys as hex of their packed form)."""
        now = time.time()
        out = []
        for row in self.db.execute(
            "SELECT origin, target, schema_name, table_name, run, done_rows, total_rows, "
            "last_key, done, started, updated, snapshot FROM seeds "
            "ORDER BY origin, target, schema_name, table_name"
        ):
            origin, target, schema, table, run, rows, total, key, done, started, updated, snap = row
            elapsed = max(updated - started, 1e-3)
            rate = rows / elapsed
            left = max(total - rows, 0)
            out.append(
                {
                    "origin": origin,
                    "target": target,
                    "table": f"{schema}.{table}",
                    "schema_name": schema,
                    "table_name": table,
                    "run": run,
                    "rows": rows,
                    "total_rows": total,
                    "last_key": key.hex() if key is not None else None,
                    "done": bool(done),
                    "started": started,
                    "updated": updated,
                    "seconds_since_update": round(now - updated, 3),
                    "rows_per_second": round(rate, 1),
                    "eta_seconds": None if done or rate <= 0 else round(left / rate, 1),
                    "snapshot": snap,
                }
            )
        return out
