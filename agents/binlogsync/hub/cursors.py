"""Where each target stands with each origin: applied (reported), sent (in flight), errors.

A cursor moves forward only when the target reports what it has durably applied (APPLIED).
What was sent but not reported is in flight, at most `window` batches; when the target goes
offline or reconnects, the in-flight part is forgotten and sending restarts after `applied`.
A transaction stored in parts is sent one part per DELIVER; `parts_sent` says how many parts
of the entry after `sent_key` are out. A target that has everything before it gets the parts
of a transaction still arriving as they are stored (`open_parts` says which: delivery.py).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from ..position import Position
from ..transport.seedchunk import SeedChunk


@dataclass
class Repair:
    """Source row images read at `snapshot`, to be applied on one target (reconciliation)."""

    requester: bytes  # routing id of the connection that asked, for the answer
    id: str
    snapshot: Position
    body: bytes
    seed: SeedChunk | None = None  # a seed's chunk (hub/seeds.py)
    tables: tuple[tuple[str, str], ...] = ()  # the (schema, table)s its changes touch


@dataclass
class Cursor:
    target: str
    origin: str
    applied: Position | None = None
    epoch: str | None = None  # the hub epoch the target's checkpoint came from
    sent_key: int = -1
    sent_position: Position | None = None  # the `upto` of the last whole DELIVER sent
    parts_sent: int = 0
    # (begin_key, stage) of the transaction whose parts went out before its end was stored;
    # `parts_sent` counts them (hub/log.py `arriving`)
    open_parts: tuple[int, int] | None = None
    inflight: deque[tuple[int, int, int]] = field(default_factory=deque)  # (seq, upto key, bytes)
    inflight_bytes: int = 0  # the bodies of the DELIVERs in flight
    next_seq: int = 1
    dirty: bool = False
    applied_at: float | None = None
    last_error: str = ""
    error_position: Position | None = None
    error_at: float | None = None
    retry_in: float | None = None
    blocked: str = ""  # nothing is delivered while set: the reason
    blocked_by: str = ""  # "floor": the log lacks what it needs; "size": a message too large
    repairs: deque[Repair] = field(default_factory=deque)  # waiting, first one maybe in flight
    # seqs of the DELIVERs that carry repairs[0], repairs[1], …: the ones in flight
    repair_seqs: deque[int] = field(default_factory=deque)
    seed_hold: Position | None = None  # a seed runs: compaction stays below this (repairs.py)
    seed_hold_until: float = 0.0  # monotonic time when the hold lapses

    @property
    def applied_key(self) -> int:
        return self.applied.key if self.applied else -1

    def rewind(self) -> None:
        """Forget what is in flight: it will be sent again from `applied`."""
        self.inflight.clear()
        self.inflight_bytes = 0
        self.sent_key, self.sent_position = self.applied_key, self.applied
        self.parts_sent, self.open_parts = 0, None
        self.repair_seqs.clear()  # repairs in flight are sent again (applying twice is safe)

    def repaired(self, snapshot: Position) -> Repair:
        """The target applied repairs[0] and set its checkpoint back to `snapshot`; the
        repairs sent after it stay in flight."""
        self.applied = snapshot
        self.dirty = True
        self.repair_seqs.popleft()
        ahead = list(self.repair_seqs)
        self.rewind()
        self.repair_seqs.extend(ahead)
        return self.repairs.popleft()

    def reset_to(self, position: Position | None, epoch: str | None = None) -> None:
        """The target says where its checkpoint is (None: nothing applied); that is the truth."""
        self.applied, self.epoch = position, epoch
        self.dirty = position is not None
        self.rewind()

    def sent(self, upto_key: int, part: bool = False, size: int = 0) -> int:
        """Record one DELIVER of `size` bytes of bodies: a whole batch up to `upto_key`, or one
        part of the entry there (the entry counts as sent with its last part: the caller
        passes part=False then)."""
        seq = self.next_seq
        self.next_seq += 1
        self.inflight.append((seq, upto_key, size))
        self.inflight_bytes += size
        if part:
            self.parts_sent += 1
        else:
            self.sent_key, self.parts_sent, self.open_parts = upto_key, 0, None
        return seq

    def acknowledge(self, seq: int, upto: Position | None) -> None:
        while self.inflight and self.inflight[0][0] <= seq:
            self.inflight_bytes -= self.inflight.popleft()[2]
        if upto is not None and upto.key > self.applied_key:
            self.applied = upto
            self.applied_at = time.time()
            self.dirty = True
            # A success clears the error; the target reports errors again while they last.
            self.last_error, self.error_position, self.error_at, self.retry_in = (
                "",
                None,
                None,
                None,
            )
