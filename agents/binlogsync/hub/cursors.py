"""Where each target stands with each origin: applied (reported), sent (in flight), errors.

A cursor moves forward only when the target reports what it has durably applied (APPLIED).
What was sent but not reported is in flight, at most `window` batches; when the target goes
offline or reconnects, the in-flight part is forgotten and sending restarts after `applied`.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from ..position import Position


@dataclass
class Repair:
    """Source row images read at `snapshot`, to be applied on one target (reconciliation)."""

    requester: bytes  # routing id of the connection that asked, for the answer
    id: str
    snapshot: Position
    body: bytes


@dataclass
class Cursor:
    target: str
    origin: str
    applied: Position | None = None
    sent_key: int = -1
    inflight: deque[tuple[int, int]] = field(default_factory=deque)  # (seq, upto key)
    next_seq: int = 1
    dirty: bool = False
    applied_at: float | None = None
    last_error: str = ""
    error_position: Position | None = None
    error_at: float | None = None
    retry_in: float | None = None
    repairs: deque[Repair] = field(default_factory=deque)  # waiting, first one maybe in flight
    repair_seq: int | None = None  # seq of the DELIVER that carries repairs[0]

    @property
    def applied_key(self) -> int:
        return self.applied.key if self.applied else -1

    def rewind(self) -> None:
        """Forget what is in flight: it will be sent again from `applied`."""
        self.inflight.clear()
        self.sent_key = self.applied_key
        self.repair_seq = None  # a repair in flight is sent again (applying it twice is safe)

    def repaired(self, snapshot: Position) -> Repair:
        """The target applied repairs[0] and set its checkpoint back to `snapshot`."""
        self.applied = snapshot
        self.dirty = True
        self.rewind()
        return self.repairs.popleft()

    def reset_to(self, position: Position | None) -> None:
        """The target says where its checkpoint is; that is the truth."""
        if position is not None:
            self.applied = position
            self.dirty = True
        self.rewind()

    def sent(self, upto_key: int) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.inflight.append((seq, upto_key))
        self.sent_key = upto_key
        return seq

    def acknowledge(self, seq: int, upto: Position) -> None:
        while self.inflight and self.inflight[0][0] <= seq:
            self.inflight.popleft()
        if upto.key > self.applied_key:
            self.applied = upto
            self.applied_at = time.time()
            self.dirty = True
        # A success clears the error; the target reports errors again while they last.
        self.last_error, self.error_position, self.error_at, self.retry_in = "", None, None, None
