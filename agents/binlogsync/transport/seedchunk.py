"""A seed chunk as it travels: the `seed` map of a REPAIR (docs/protocol.md), sent by
`binlogsync seed` (seed/) and checked field by field by the hub (hub/seeds.py, hub/repairs.py),
which trusts none of it blindly:

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

from dataclasses import dataclass
from typing import Any

from ..errors import ProtocolError
from ..tabledef import MAX_IDENTIFIER

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
