"""What travels between the reconciliation's driver and its Spark tasks, both ways: what the
driver sends (the targets, the tables, the `Context` of a run, passwords left out) and what the
tasks send back (chunk sums, errors, leaves of narrowed chunks, rows of the row stage). Plain,
picklable data: the executors import it without the driver's modules (tasks.py runs there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from ..config import DatabaseSettings
from ..position import Position
from . import dialects, passwords, pinning
from .checksums import Encoding
from .chunks import Chunk
from .pinning import Pin


# -- what the driver sends ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TargetSpec:
    db: DatabaseSettings
    label: str
    pin: Pin

    @property
    def dialect(self) -> dialects.Dialect:
        return dialects.of(self.db)


@dataclass(frozen=True, slots=True)
class TableSpec:
    index: int
    name: str  # source schema.table, for messages
    source: tuple[str, str]
    targets: tuple[tuple[str, str] | None, ...]  # per target index; None: not compared there
    key: tuple[str, ...]
    columns: tuple[str, ...]
    encoding: Encoding
    integer_key: bool = False
    # per target index: its column types where it is PostgreSQL (pgsql.py), else None
    target_types: tuple[Mapping[str, str] | None, ...] = ()
    integer_columns: tuple[bool, ...] = ()  # per key column: an integer on the source

    def types(self, t: int) -> Mapping[str, str]:
        found = self.target_types[t] if t < len(self.target_types) else None
        return found or {}


@dataclass(frozen=True, slots=True)
class Context:
    source: DatabaseSettings
    targets: tuple[TargetSpec, ...]
    tables: tuple[TableSpec, ...]
    wait_timeout: float = 300.0
    confirm: int = 2
    max_rounds: int = 6
    max_task_rows: int = 50_000
    gtid: bool = False  # some target is pinned by GTID: snapshots need their GTID position
    pinned: bool = True  # some target is pinned at all: snapshots need a binlog position
    secrets: str = ""  # the run's secrets file (passwords.py); "": passwords are in place
    show: int = 20  # differing keys each table and target keeps for the summary

    def snapshot(self, conn: Any) -> Position:
        return pinning.snapshot(conn, self.gtid, self.pinned)

    def resolved(self) -> Context:
        """This context with the databases' passwords (read from the secrets file)."""
        if not self.secrets:
            return self
        return replace(
            self,
            source=replace(self.source, password=passwords.password(self.secrets, "source")),
            targets=tuple(
                replace(
                    t,
                    db=replace(t.db, password=passwords.password(self.secrets, f"target{i}")),
                )
                for i, t in enumerate(self.targets)
            ),
            secrets="",
        )

    def without_passwords(self, secrets: str) -> Context:
        """This context for the executors: no password, the secrets file's name instead."""
        return replace(
            self,
            source=replace(self.source, password=""),
            targets=tuple(replace(t, db=replace(t.db, password="")) for t in self.targets),
            secrets=secrets,
        )

    def passwords(self) -> dict[str, str]:
        """What `without_passwords` leaves out, by the keys `resolved` reads."""
        return {"source": self.source.password} | {
            f"target{i}": t.db.password for i, t in enumerate(self.targets)
        }


# -- what comes back ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TaskError:
    table: int | None
    target: int | None
    message: str


@dataclass(frozen=True, slots=True)
class SideSum:
    count: int
    total: Decimal


@dataclass(frozen=True, slots=True)
class ChunkResult:
    chunk: Chunk
    position: Position
    source: SideSum
    targets: tuple[tuple[int, SideSum], ...]
    seconds: float


@dataclass(frozen=True, slots=True)
class Leaf:
    """A piece of a differing chunk whose rows went to the row stage."""

    table: int
    target: int
    chunk: str
    source_rows: int
    target_rows: int


# A row of the row stage: (table, target, chunk, side (0 source, 1 target), key, key_pickle,
# hash). `key` is the key's repr, equal on both sides for equal keys (dialects.key makes a
# PostgreSQL target's values the source driver's types); `key_pickle` gives the key back to the
# re-check; the 64-bit hash is stored as a signed long, as Spark's LongType holds it.
RowHash = tuple[int, int, str, int, str, bytes, int]
SOURCE, TARGET = 0, 1


def is_row_hash(item: Any) -> bool:
    return type(item) is tuple
