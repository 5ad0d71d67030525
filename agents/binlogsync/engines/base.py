"""What an engine adapter gives the exactly-once core (apply/core.py), whatever the engine.

The core decides which transactions are new, moves the checkpoint, reduces groups to their net
change, replays a failed group unreduced to name the one transaction that fails, streams large
transactions and follows the origin's DDL. An adapter knows its engine: how to connect, its
errors, its catalog, its `binlogsync` tables and how it writes rows. The core drives it through
two small faces:

    Engine      checkpoint()       the origin's checkpoint, read now
                begin(base, known) one target transaction (a Session)
                follow_schema()    run the origin's DDL as this engine's own statements
                note_ddl()         remember DDL (its messages name what the origin ran)
                forget()           after an error: read definitions and the checkpoint again
                replayable(error)  whether a reduced group that failed so is worth a replay
                streams            parts go into one open transaction as they arrive (else the
                                   core holds them and applies the transaction whole)
                                   (`takes_open_parts(kind)`: which kinds take them before
                                   the hub has the transaction's end)
                close()
                begin_lane(lane, snapshot)   (optional: an engine that has it takes seed chunks
                                   side by side, each on its own connection, a LaneSession:
                                   its lane's marker row first, no checkpoint read yet)

    Session     base               the checkpoint at the start of the transaction
                set_checkpoint()   the new checkpoint, compared with `base` or what this
                                   session last wrote (another writer's move is an error) and
                                   written before the rows where the engine can (a two-way
                                   capture sees the marker first); a transaction in parts whose
                                   end is not known yet writes it twice: unchanged, then its end
                plan(change)       how the reducer keys this table (None: never reduce it,
                                   e.g. foreign keys or triggers on the target)
                add(changes, at, timestamp, streamed)
                                   the changes of the transaction at `at` (committed at
                                   `timestamp`; `streamed`: one part of it, more may follow);
                                   an engine may merge them with the previous transaction's
                                   until `flush()`
                record_skip(at, reason)   the record of an explicit skip (binlogsync skip)
                finish(commit)     run what is pending; commit, or roll back (a dry run)
                abort()            roll back after an error
                lock_checkpoint()  (LaneSession) read the checkpoint now, locked until the
                                   transaction ends; it becomes `base`

A failure is raised as one of our errors (errors.py) naming the origin, the transaction, the
table and the fix; a statement that carries several transactions and fails on their data is
raised as `Ambiguous`, and the core then finds which transaction it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..errors import BinlogsyncError
from ..model import Change
from ..position import Position


class Ambiguous(Exception):
    """A statement that carries several origin transactions failed on its data (internal:
    the core replays them one by one, never committing, to name the one that fails)."""

    def __init__(self, error: BinlogsyncError) -> None:
        super().__init__(str(error))
        self.error = error


class StaleStream(Exception):
    """A part that does not continue the transaction being streamed (a re-send is coming)."""


class KeyPlan(Protocol):
    """How the reducer keys one table's rows (apply/reduce.py)."""

    @property
    def key(self) -> tuple[int, ...]:
        """Indices in the change's columns of the target's primary key."""
        ...

    @property
    def unique_keys(self) -> bool:
        """The target table has unique keys other than its primary key."""
        ...


def takes_open_parts(kind: str) -> bool:
    """Whether a target of `kind` takes a transaction's parts before the hub has stored its
    last part, so before its end is known (the target agent's HELLO tells the hub; the core
    refuses such a part elsewhere). Streamed (MariaDB/MySQL), the checkpoint row is marked with
    the first write and moved with the last; held (PostgreSQL, Redis), the transaction is
    applied with the last part, which carries the end. Not the audit log: each of its lines
    names the transaction's end."""
    return kind != "auditlog"


class Session(Protocol):
    base: Position | None
    span_from: Position | None  # set by the core for a reduced group: its first transaction

    def set_checkpoint(self, new: Position, count: int, epoch: str | None) -> None: ...

    def plan(self, change: Change, position: Position) -> KeyPlan | None: ...

    def add(
        self,
        changes: Sequence[Change],
        position: Position,
        timestamp: float | None = None,
        streamed: bool = False,
    ) -> None: ...

    def record_skip(self, position: Position, reason: str) -> None: ...

    def flush(self) -> None: ...

    def finish(self, commit: bool) -> None: ...

    def abort(self) -> None: ...


class Engine(Protocol):
    kind: str
    streams: bool

    def checkpoint(self) -> Position | None: ...

    def begin(self, base: Position | None, known: bool) -> Session: ...

    def follow_schema(self, change: Change, position: Position, mode: str) -> list[str]: ...

    def note_ddl(self, position: Position, change: Change) -> None: ...

    def forget(self) -> None: ...

    def replayable(self, error: BaseException) -> bool: ...

    def close(self) -> None: ...


class LaneSession(Session, Protocol):
    def lock_checkpoint(self) -> Position | None: ...


class LaneEngine(Engine, Protocol):
    def begin_lane(self, lane: int, snapshot: Position) -> LaneSession: ...
