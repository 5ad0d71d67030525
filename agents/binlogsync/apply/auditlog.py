"""The audit-log target: the exactly-once core (core.py) over the audit-log engine
(engines/auditlog.py, which says what the files hold). A log is a record, so it is never
reduced, and a repair, which would rewind it, is refused; a seed may start an empty log."""

from __future__ import annotations

from pathlib import Path

from ..engines.auditlog import AuditLogEngine, checkpoints, encode, lines
from ..errors import ApplyError
from ..model import Transaction
from ..position import Position
from .core import Target

__all__ = ["AuditLogStore", "checkpoints", "encode", "lines"]


class AuditLogStore(Target):
    """The target store of one origin's audit log."""

    engine: AuditLogEngine

    def __init__(self, path: Path, origin: str, rotate_bytes: int, epoch: str | None = None):
        super().__init__(AuditLogEngine(path, origin, rotate_bytes), origin, epoch=epoch,
                         reduce=False)  # fmt: skip

    def repair(
        self, transaction: Transaction, snapshot: Position, seed: bool = False, reset: bool = False
    ) -> Position:
        if not seed or self.checkpoint() is not None:
            raise ApplyError(
                f"the audit log of {self.origin} is a record and is not repaired or reseeded "
                "in place",
                "start a new audit log (a new target.path) and seed it",
            )
        self.engine.snapshot = True
        try:
            at = Transaction(snapshot, transaction.timestamp, transaction.changes)
            return super().repair(at, snapshot, seed=True, reset=reset)
        finally:
            self.engine.snapshot = False
