"""Seeds through the hub: where each seed of a target stands, kept durably on the hub.

A seed (`binlogsync seed`, seed/run.py) sends a table's rows as chunks of full row images read
in consistent snapshots; each chunk is a REPAIR with a `seed` map and is applied like a
repair (hub/repairs.py). When the target has applied a chunk, the hub records it here, in its
own SQLite file, before telling the requester. So the record never runs ahead of the target: a
`seed` that was killed asks the hub (`status`) where each table stands and goes on after the
last chunk recorded (a chunk applied but not yet recorded is sent again, which is safe). The
same records are what `status` shows as the seed's progress.

The `seed` map of a REPAIR is `SeedChunk` (transport/seedchunk.py, which says every field).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from ..transport.seedchunk import SeedChunk

_SCHEMA = """
CREATE TABLE IF NOT EXISTS seeds (
    origin TEXT NOT NULL, target TEXT NOT NULL, schema_name TEXT NOT NULL,
    table_name TEXT NOT NULL, run TEXT NOT NULL, done_rows INTEGER NOT NULL,
    total_rows INTEGER NOT NULL, last_key BLOB, done INTEGER NOT NULL, started REAL NOT NULL,
    updated REAL NOT NULL, snapshot TEXT NOT NULL,
    PRIMARY KEY (origin, target, schema_name, table_name)
);
"""


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
