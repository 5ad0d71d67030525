"""The one small interface the target role drives, whatever the kind of target.

    checkpoint()            the position applied so far (None: nothing yet), read now
    apply(txs, upto)        apply what is new in `txs` together with the new checkpoint,
                            atomically; return the checkpoint
    apply_part(part, end)   one part of a large transaction; the last part commits
    abort_stream()          drop a transaction being streamed (its parts come again)
    repair(tx, snapshot, seed=, reset=)   source rows read at `snapshot` (reconcile, seed)
    close()

Kinds (`[target] kind`): `mysql` (MariaDB/MySQL, apply/applier.py), `postgresql`
(apply/postgres.py), `redis` (a hash per row, apply/redisstore.py) and `auditlog` (JSON lines,
apply/auditlog.py). `open_store` makes the one a target config names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..config import TargetConfig
from ..engines.base import StaleStream
from ..errors import ApplyError, ConfigError
from ..model import Change, Part, Transaction
from ..position import Position, comparable


class TargetStore(Protocol):
    epoch: str | None

    def checkpoint(self) -> Position | None: ...

    def apply(
        self, transactions: Sequence[Transaction], upto: Position | None = None
    ) -> Position | None: ...

    def apply_part(self, part: Part, end: Position) -> Position | None: ...

    def abort_stream(self) -> None: ...

    def repair(
        self, transaction: Transaction, snapshot: Position, seed: bool = False, reset: bool = False
    ) -> Position: ...

    def close(self) -> None: ...


def plan_group(
    origin: str,
    base: Position | None,
    transactions: Sequence[Transaction],
    upto: Position | None,
    force: Position | None = None,
) -> tuple[list[Transaction], Position] | None:
    """What a store applies of a group: the transactions after its checkpoint `base`, and the
    checkpoint after them (max of the last one and `upto`; `force`, a repair's, as given).
    None when the checkpoint would not move."""
    if transactions and not comparable(base, transactions[-1].position):
        raise ApplyError(f"{origin}'s positions went back from GTIDs to binlog files")
    last = -1 if base is None or force is not None else base.key
    fresh = []
    for tx in transactions:
        if tx.position.key > last:
            fresh.append(tx)
            last = tx.position.key
    new = force if force is not None else (fresh[-1].position if fresh else base)
    if force is None and upto is not None and (new is None or upto.key > new.key):
        new = upto
    if new is None or (force is None and base is not None and new.key <= base.key):
        return None
    return fresh, new


def repair_checkpoint(
    origin: str, base: Position | None, snapshot: Position, seed: bool, reset: bool
) -> Position:
    """The checkpoint after a repair read at `snapshot` (apply/applier.py's `repair` says why):
    min(checkpoint, snapshot); a seed starts an empty target there, a reset moves it there."""
    if reset or (base is None and seed):
        return snapshot
    if base is None:
        raise ApplyError(
            f"target has applied nothing of {origin} yet; a repair needs a checkpoint",
            "wait until the target has caught up, then repair",
        )
    return snapshot if snapshot.key < base.key else base


class HeldParts:
    """A large transaction's parts, held until the last one, for stores that apply it whole."""

    def __init__(self) -> None:
        self.drop()

    def drop(self) -> None:
        self._end: Position | None = None
        self._next = 0
        self._changes: list[Change] = []

    def add(self, part: Part, end: Position) -> Transaction | None:
        """The whole transaction with its last part; None before. StaleStream when `part`
        does not continue what is held (its parts are then sent again from part 1)."""
        if part.number == 1:
            self._end, self._next, self._changes = end, 1, []
        if self._end != end or self._next != part.number:
            raise StaleStream(f"part {part.number} of {end} does not continue the stream")
        self._changes.extend(part.changes)
        self._next += 1
        if not part.last:
            return None
        whole = Transaction(end, part.timestamp, tuple(self._changes))
        self.drop()
        return whole


EXTRAS = {"postgresql": ("psycopg", "postgresql"), "redis": ("redis", "redis")}


def require(kind: str) -> None:
    """ConfigError naming the extra to install when `kind`'s client library is missing."""
    if kind not in EXTRAS:
        return
    module, extra = EXTRAS[kind]
    try:
        __import__(module)
    except ImportError as exc:
        raise ConfigError(
            f"target.kind {kind!r} needs the Python package {module!r}, which is not installed",
            f"pip install 'binlogsync[{extra}]'",
        ) from exc


def open_store(config: TargetConfig, origin: str, epoch: str | None) -> TargetStore:
    require(config.kind)
    if config.kind == "auditlog":
        from .auditlog import AuditLogStore

        assert config.path is not None  # checked with the config
        return AuditLogStore(config.path, origin, config.rotate_bytes, epoch)
    if config.kind == "postgresql":
        from .postgres import PostgresStore

        return PostgresStore(
            config.url,
            origin,
            config.create_tables,
            config.database.password,
            epoch,
            tls=config.database.tls,
            zero_dates=config.zero_dates,
            schema_changes=config.apply_schema_changes,  # type: ignore[arg-type]  # checked
        )
    if config.kind == "redis":
        from .redisstore import RedisStore

        return RedisStore(
            config.url,
            origin,
            config.key_pattern,
            config.ttl,
            config.database.password,
            epoch,
            tls=config.database.tls,
            schema_changes=config.apply_schema_changes,  # type: ignore[arg-type]  # checked
        )
    from .applier import Applier

    return Applier(
        config.database,
        origin,
        epoch=epoch,
        schema_changes=config.apply_schema_changes,  # type: ignore[arg-type]  # checked
    )
