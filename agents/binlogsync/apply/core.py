"""Apply origin transactions to a target exactly once, whatever the engine (engines/).

One `apply()` call is one target transaction: transactions at or below the checkpoint are
skipped; the checkpoint moves to the last applied position (or `upto`, when the caller knows
that nothing up to there concerns this target), compared with what it was at the start (a
second writer's move is an error), then the rest are applied in order, and then it commits.
Any failure rolls the whole call back and raises an ApplyError subclass (or UnreachableError)
that names the origin, the failing transaction's position, the table, the cause and the fix.
Nothing is skipped silently; retrying is the caller's job, and a retry re-reads the checkpoint
and the target's table definitions, so it resumes by itself once the cause is fixed.

Net-change apply: a group of two or more transactions is first reduced to its net effect per
table and primary key (reduce.py). Groups the reducer is not sure about go the unreduced way
in the same target transaction (DDL in the group, a table with foreign keys or triggers on the
target, rows of one table with different column lists, a table the engine cannot apply to).
When the reduced group fails for any reason other than a lost connection or a transient lock
error, it is rolled back and applied again unreduced, which either succeeds (logged as a
warning) or names the exact failing transaction: an engine merges statements across
transactions, and a merged statement that fails is `Ambiguous`, so the group is replayed
transaction by transaction, never committed, to find the one. Reduction never changes what is
reported.

A transaction that travels in parts is streamed where the engine `streams` (one target
transaction opened at its first part, each part applied as it arrives, committed with the
last: memory holds one part at a time and no reader sees part of it); elsewhere its parts are
held and it is applied whole with its last part.

Schema following (`schema_changes` = "additive" or "all"): a transaction with the origin's DDL
is applied on its own, after the transactions before it are committed, and the engine runs the
origin's definition as its own statements (never the origin's SQL text).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal, cast

from ..engines.base import (
    Ambiguous,
    Engine,
    LaneEngine,
    Session,
    StaleStream,
    takes_open_parts,
)
from ..errors import ApplyError, ConfigError, SchemaMismatchError
from ..model import ROW_KINDS, Change, Part, Transaction
from ..position import Position, comparable
from .reduce import KeyPlan, NotReducible, Reducer

log = logging.getLogger("binlogsync.apply")

Mode = Literal["off", "additive", "all"]


def failed_at(error: BaseException) -> Position | None:
    """The origin position of the transaction an ApplyError is about, when one is to blame.

    Set for errors caused by one transaction's data or table (not for lost connections, lock
    waits or a moved checkpoint). A run loop can apply the transactions before it on their own,
    so that `skip(…, position, …)` skips exactly that one transaction.
    """
    position = getattr(error, "position", None)
    return position if isinstance(position, Position) else None


def scheme_back(origin: str, base: Position | None, position: Position) -> ApplyError:
    """A file position delivered to a checkpoint in the GTID scheme: its key would read as
    "already applied" (position.py), so it is refused instead."""
    return ApplyError(
        f"origin {origin}: the target's checkpoint is the GTID state {base}, but the hub "
        f"delivers binlog file positions ({position}); they cannot be ordered against it, "
        "nothing was applied",
        "the origin's capture moved back from GTIDs to binlog files (a hub log restarted "
        "against a server without MariaDB GTIDs?): point the origin at the MariaDB server, or "
        "reseed this target and delete its binlogsync.checkpoint row for the origin",
    )


def _defines(transaction: Transaction) -> bool:
    """Whether a transaction is the origin's DDL of routed tables (followed when asked)."""
    return any(c.kind == "ddl" and c.table for c in transaction.changes)


class _ReducedFailed(Exception):
    """Running a group's net change failed (internal): `apply` replays it unreduced."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class _Stream:
    """A transaction arriving in parts, known by where it begins (its parts' id): its end once
    known, which part comes next, the digest of each part applied (to tell a re-send of the
    same parts from parts cut anew); `marked`: the checkpoint row holds `end` already;
    `epoch`: the hub whose log the parts come from; `again`: while the hub sends the parts
    from the first one again, the number of the next one it sends (None otherwise)."""

    def __init__(
        self,
        begin: Position,
        end: Position | None,
        session: Session | None,
        epoch: str | None = None,
    ) -> None:
        self.begin, self.end, self.next, self.session = begin, end, 1, session  # None: applied
        self.epoch = epoch
        self.again: int | None = None
        self.digests: list[bytes] = []
        self.marked = False


class Target:
    """One origin's transactions on one target, exactly once, through an engine adapter.
    Not thread-safe: one per (origin, target), used by one thread."""

    def __init__(
        self,
        engine: Engine,
        origin: str,
        *,
        epoch: str | None = None,
        reduce: bool = True,
        schema_changes: Mode = "off",
    ) -> None:
        if not origin or len(origin) > 64:
            raise ConfigError(
                f"origin name {origin!r} must be 1 to 64 characters",
                "it is the key of the target's binlogsync.checkpoint row",
            )
        self.engine = engine
        self.origin = origin
        self.epoch = epoch
        self.reduce = reduce  # apply groups as their net change (reduce.py)
        self.schema_changes = schema_changes
        self._checkpoint: Position | None = None
        self._known = False
        self._stream: _Stream | None = None
        self._held: list[Change] = []  # parts held for an engine that does not stream

    # -- the store protocol -------------------------------------------------------------------
    @property
    def streaming(self) -> Position | None:
        """The end of the transaction arriving in parts, if one is open (its begin while its
        end is not known yet)."""
        stream = self._stream
        return None if stream is None else stream.end or stream.begin

    def checkpoint(self) -> Position | None:
        """The target's checkpoint for this origin, read now (None: nothing applied yet)."""
        self.abort_stream()
        try:
            position = self.engine.checkpoint()
        except BaseException:
            self._forget()
            raise
        self._checkpoint, self._known = position, True
        return position

    def apply(
        self, transactions: Sequence[Transaction], upto: Position | None = None
    ) -> Position | None:
        """Apply what is new in `transactions` in one target transaction; return the checkpoint.

        The checkpoint becomes max(checkpoint, last applied position, upto). Raises an
        ApplyError subclass or UnreachableError after rolling everything of this call back.
        """
        self.abort_stream()
        if self.schema_changes != "off":
            at = next((i for i, t in enumerate(transactions) if _defines(t)), None)
            if at is not None:
                # The target's DDL commits implicitly on some engines: the transactions before
                # it are applied and committed first, then the DDL, then its checkpoint (a
                # crash in between replays it, and the plan then finds nothing left to do).
                if at:
                    self._apply(transactions[:at], None)
                self._follow_schema(transactions[at])
                self._apply(transactions[at : at + 1], None)
                rest = transactions[at + 1 :]
                return self.apply(rest, upto) if rest or upto else self._checkpoint
        return self._apply(transactions, upto)

    def repair(
        self, transaction: Transaction, snapshot: Position, seed: bool = False, reset: bool = False
    ) -> Position:
        """Apply a repair (source row images read at `snapshot`) and set the checkpoint to
        min(checkpoint, `snapshot`), in one target transaction; returns the new checkpoint.

        A seed's chunk (`seed`) is a repair that may also start a target: with no checkpoint
        yet, the checkpoint becomes `snapshot`; its DDL changes carry the origin's table
        definition, followed first (when schema following allows) so that a table the target
        lacks is made. `reset` (the first chunk of a reseed of every table) sets the checkpoint
        to `snapshot` even when that is ahead: whatever the target missed before it is replaced
        by the seed.

        Going back is what orders the repair with live changes: the hub then re-sends the
        origin's transactions after the new checkpoint. Every change writes whole row images by
        key, so the last change to a row decides its final state, and no change the target had
        not applied is skipped.
        """
        self.abort_stream()
        if seed:
            # The seed's definitions first: followed (a table the target lacks is made) where
            # schema following is on, else only kept (an engine that keys rows by the
            # definition, as Redis does, needs it); then the rows.
            ddl = tuple(c for c in transaction.changes if c.kind == "ddl")
            if ddl and self.schema_changes != "off":
                self._follow_schema(Transaction(snapshot, transaction.timestamp, ddl), force=True)
            else:
                for change in ddl:
                    self.engine.note_ddl(snapshot, change)
            rows = tuple(c for c in transaction.changes if c.kind != "ddl")
            transaction = Transaction(transaction.position, transaction.timestamp, rows)
        try:
            result = self._run(
                [transaction], None, across=True, commit=True, rewind=snapshot, start=seed,
                reset=reset,
            )  # fmt: skip
        except Ambiguous as ambiguous:
            self._forget()
            raise ambiguous.error from ambiguous.error.__cause__
        assert result is not None
        return result

    @property
    def lanes(self) -> bool:
        """Whether seed chunks may be applied side by side (`repair_in_lane`) on this engine."""
        return hasattr(self.engine, "begin_lane")

    def checkpoint_moved(self) -> None:
        """Another Target of this origin moved the checkpoint (a lane): read it again next."""
        self._known = False

    def repair_in_lane(self, transaction: Transaction, snapshot: Position, lane: int) -> Position:
        """Apply a seed chunk of rows only (no DDL, not a reset) while other Targets of the
        same origin apply others, each on its own connection (`lane`); returns the checkpoint
        as this transaction left it.

        The same result as `repair(…, seed=True)`: the rows and checkpoint := min(checkpoint,
        `snapshot`) in one target transaction. The order differs: the lane's own marker row
        first (what a two-way capture recognises; no other lane locks it), then the rows, then
        the checkpoint is read under its lock and moved. So the lanes' rows are written at the
        same time and only their commits wait for each other, and min() gives the same
        checkpoint whatever order they commit in.
        """
        self.abort_stream()
        if any(c.kind not in ROW_KINDS for c in transaction.changes):
            raise ApplyError(
                f"origin {self.origin}: a seed chunk with DDL or TRUNCATE at {snapshot} cannot "
                "be applied beside others",
                "apply it alone (Target.repair)",
            )
        session = cast(LaneEngine, self.engine).begin_lane(lane, snapshot)
        try:
            session.add(transaction.changes, transaction.position, transaction.timestamp)
            session.flush()
            base = session.lock_checkpoint()
            if not comparable(base, snapshot):
                raise scheme_back(self.origin, base, snapshot)
            new = self._rewound(base, snapshot, start=True, reset=False)
            session.set_checkpoint(new, 1, self.epoch)
            session.finish(commit=True)
        except BaseException as exc:
            session.abort()
            self._forget()
            if isinstance(exc, Ambiguous):
                raise exc.error from exc.error.__cause__
            raise
        self._known = False  # the other lanes move it too
        return new

    def apply_part(self, part: Part, end: Position | None, digest: bytes = b"") -> Position | None:
        """Apply one part of a transaction in parts; the last part commits.

        `end`: the transaction's end, None while the hub has not stored its last part yet
        (an open transaction, sent only to kinds that `takes_open_parts`); the last part carries
        it. `digest`: the part's bytes' digest, which tells parts sent again from parts cut
        anew. Part 1 opens a target transaction (or, when the transaction is at or below the
        checkpoint, notes that its parts are to be skipped); each later part must continue it,
        else StaleStream. Returns the new checkpoint after the last part, None before. On any
        error the target transaction is rolled back and the parts must be sent again from
        part 1. Part 1 of the open transaction sent again by the same hub, with the same
        bytes, continues it instead (`_resent`).
        """
        stream = self._stream
        if part.number == 1 and self._resent(stream, part, digest):
            assert stream is not None
            stream.again = 1
        elif part.number == 1:
            self.abort_stream()
            stream = None
        if stream is not None and stream.again is not None:
            if part.number != stream.again:
                raise StaleStream(f"part {part.number} of {part.begin} does not continue")
            if part.number < stream.next:
                # Applied already in the open target transaction (see _resent), unless the
                # origin cut the transaction anew: then it starts over from part 1.
                if digest != stream.digests[part.number - 1]:
                    self.abort_stream()
                    raise StaleStream(f"part {part.number} of {part.begin} was cut anew")
                stream.again += 1
                return None
            stream.again = None
        if part.number != 1 and (
            stream is None or stream.begin != part.begin or stream.next != part.number
        ):
            raise StaleStream(f"part {part.number} of {part.begin} does not continue the stream")
        end = end or part.end or (stream.end if stream is not None else None)
        if end is None and not takes_open_parts(self.engine.kind):
            raise ApplyError(
                f"a part of the transaction at {part.begin} came before its end was known, "
                f"and a {self.engine.kind} target takes a transaction's parts only once the "
                "hub has stored the last one",
                "the target agent says so in its HELLO; restart it so that the hub knows",
            )
        if not self.engine.streams:
            return self._held_part(part, end)
        try:
            if stream is None:
                stream = self._stream = self._begin_stream(part.begin, end)
            stream.next += 1
            stream.digests.append(digest)
            stream.end = end
            if stream.session is not None:
                # Until the end is known, the lines name the transaction by its begin.
                stream.session.add(part.changes, end or part.begin, part.timestamp, streamed=True)
            if not part.last:
                return None
            self._stream = None
            assert end is not None  # the last part carries it
            if stream.session is None:
                return self._checkpoint
            if not stream.marked:
                stream.session.set_checkpoint(end, 1, self.epoch)
            stream.session.finish(commit=True)
            self._checkpoint = end
            return end
        except Ambiguous as ambiguous:  # one transaction: the error is precise already
            self._fail_stream()
            raise ambiguous.error from ambiguous.error.__cause__
        except BaseException as exc:
            self._fail_stream()
            if isinstance(exc, ApplyError) and exc.position in (None, part.begin):
                exc.position = end  # None while the end is unknown: no transaction to skip yet
            raise

    def skip(self, position: Position, reason: str) -> Position:
        """Move the checkpoint past `position` on purpose, with a record (`binlogsync skip`).

        Everything up to and including `position` then counts as applied: skip the transaction
        that an ApplyError names (`failed_at`) once the transactions before it are applied.
        Refused when `position` is at or below the checkpoint (that transaction is applied
        already) or in the other position scheme. One target transaction: the record and the
        checkpoint move commit together; a running agent notices the moved checkpoint at its
        next write (the compare-and-set) and re-reads it.
        """
        if not reason.strip():
            raise ApplyError("a skip needs a reason", "say why the transaction is skipped")
        self.abort_stream()
        session = self.engine.begin(None, False)
        try:
            base = session.base
            if not comparable(base, position):
                raise ApplyError(
                    f"origin {self.origin}: the checkpoint on the {self.engine.kind} target is "
                    f"the GTID state {base}, and {position} is a binlog file position; nothing "
                    "skipped",
                    "give the transaction's GTID state, as its error and `binlogsync status` "
                    "name it (e.g. 0-1-100)",
                )
            if base is not None and position.key <= base.key:
                raise ApplyError(
                    f"origin {self.origin}: transaction {position} is already applied on the "
                    f"{self.engine.kind} target (checkpoint {base}); nothing skipped",
                    "skip only the transaction that fails to apply, as its error names it",
                )
            session.set_checkpoint(position, 0, None)
            session.record_skip(position, reason)
            session.finish(commit=True)
        except BaseException:
            session.abort()
            self._forget()
            raise
        self._checkpoint, self._known = position, True
        log.warning("origin %s: transaction %s skipped on purpose: %s", self.origin, position,
                    reason)  # fmt: skip
        return position

    def _resent(self, stream: _Stream | None, part: Part, digest: bytes) -> bool:
        """Is part 1 of `part.begin` the hub sending again, from the first part, the very
        transaction that is open here? It does after the link went down and came back (the
        target's HELLO reports its committed checkpoint, and the hub rewinds its cursor there),
        and after the origin sent the transaction again from its first part (the hub rewinds
        the targets it had sent parts of it before its end was known). Parts of the same bytes
        (the digests) are the same parts: those applied already in the open target transaction
        are dropped as they come again, and the rest continues it. Rolling back and applying
        again a transaction of a million rows costs minutes, and on a busy machine the link may
        drop again meanwhile. A part that failed, a re-send the target asked for, another hub
        (epoch), or parts cut anew (another digest) still start again from nothing."""
        return (
            stream is not None
            and stream.session is not None
            and stream.begin == part.begin
            and stream.next > 1
            and bool(digest)
            and stream.digests[0] == digest
            and stream.epoch == self.epoch
            and self.epoch is not None
        )

    def abort_stream(self) -> None:
        """Drop a transaction arriving in parts (its parts will be sent again)."""
        stream, self._stream = self._stream, None
        self._held = []
        if stream is not None and stream.session is not None:
            stream.session.abort()

    def close(self) -> None:
        self.abort_stream()
        self.engine.close()

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- groups -------------------------------------------------------------------------------
    def _apply(self, transactions: Sequence[Transaction], upto: Position | None) -> Position | None:
        try:
            if self.reduce:
                try:
                    return self._run(transactions, upto, across=True, commit=True, reduce=True)
                except _ReducedFailed as failed:
                    reduced_error = failed.error
                    if isinstance(reduced_error, Ambiguous):
                        reduced_error = reduced_error.error
                    if not self.engine.replayable(reduced_error):
                        raise reduced_error from reduced_error.__cause__
                self._forget()
                new = self._run_unreduced(transactions, upto)
                cause = reduced_error.__cause__
                log.warning(
                    "origin %s: a group of %d transactions (up to %s) failed on the target as "
                    "its net change and was applied unreduced (%s)",
                    self.origin,
                    len(transactions),
                    transactions[-1].position if transactions else None,
                    cause if cause is not None else reduced_error,
                )
                return new
            return self._run_unreduced(transactions, upto)
        except BaseException:
            self._forget()
            raise

    def _run_unreduced(
        self, transactions: Sequence[Transaction], upto: Position | None
    ) -> Position | None:
        """Apply as `apply`, statement runs merged in order; finds the failing transaction."""
        try:
            return self._run(transactions, upto, across=True, commit=True)
        except Ambiguous as ambiguous:
            # Find the one transaction that fails: replay without merging across
            # transactions, never committing. A precise error propagates from here.
            self._forget()
            self._run(transactions, upto, across=False, commit=False)
            raise ambiguous.error from ambiguous.error.__cause__

    def _run(
        self,
        transactions: Sequence[Transaction],
        upto: Position | None,
        across: bool,
        commit: bool,
        rewind: Position | None = None,
        reduce: bool = False,
        start: bool = False,
        reset: bool = False,
    ) -> Position | None:
        session = self.engine.begin(self._checkpoint, self._known)
        try:
            base = session.base
            self._checkpoint, self._known = base, True
            if transactions and not comparable(base, transactions[-1].position):
                raise scheme_back(self.origin, base, transactions[-1].position)
            last_key = -1 if base is None or rewind is not None else base.key
            fresh: list[Transaction] = []
            for transaction in transactions:
                if transaction.position.key > last_key:
                    fresh.append(transaction)
                    last_key = transaction.position.key
            new = fresh[-1].position if fresh else base
            if upto is not None and (new is None or upto.key > new.key):
                new = upto
            if rewind is not None:
                new = self._rewound(base, rewind, start, reset)
            moves = new is not None and (base is None or new.key > base.key or rewind is not None)
            reduced = self._reduce(session, fresh) if reduce and len(fresh) > 1 else None
            if commit and moves:
                assert new is not None
                session.set_checkpoint(new, len(fresh), self.epoch)
            if reduced is not None:
                # Every statement carries the whole group: an error here is never reported as
                # it is, `apply` replays the group unreduced to find the culprit.
                session.span_from = fresh[0].position
                try:
                    session.add(reduced, fresh[-1].position, fresh[-1].timestamp)
                    session.finish(commit=commit and moves)
                except Exception as exc:
                    raise _ReducedFailed(exc) from exc
            else:
                for transaction in fresh:
                    session.add(transaction.changes, transaction.position, transaction.timestamp)
                    if not across:
                        session.flush()
                session.finish(commit=commit and moves)
            if commit:
                self._checkpoint = new
            return new
        except BaseException:
            session.abort()
            raise

    def _rewound(
        self, base: Position | None, snapshot: Position, start: bool, reset: bool
    ) -> Position:
        """The checkpoint after a repair read at `snapshot`: replay must start at or before
        both the snapshot and what is applied now, so that changes the target has not applied
        yet are not skipped (see `repair`)."""
        if reset or (base is None and start):
            return snapshot
        if base is None:
            raise ApplyError(
                f"target has applied nothing of {self.origin} yet; a repair needs a checkpoint",
                "wait until the target has caught up, then repair",
            )
        return snapshot if snapshot.key < base.key else base

    def _reduce(
        self, session: Session, transactions: Sequence[Transaction]
    ) -> tuple[Change, ...] | None:
        """The net change of `transactions` (reduce.py), or None: apply them unreduced.

        Asks the engine how each table is keyed (as the unreduced path would, in the same
        order) and runs no statement, so the caller can still choose either path. The answer
        for a table and its columns holds for the whole group (a DDL change ends reducing), so
        it is asked again only when a table comes with other columns, not for every change (a
        backlog's group holds thousands of changes to a few tables).
        """
        reducer = Reducer()
        out: list[Change] = []
        # table → (schema, columns, plan) last asked for it
        plans: dict[str, tuple[str, tuple[str, ...], KeyPlan]] = {}
        try:
            for transaction in transactions:
                position = transaction.position
                for change in transaction.changes:
                    kind = change.kind
                    if kind in ROW_KINDS:
                        known = plans.get(change.table)
                        if known is None or known[0] != change.schema or known[1] != change.columns:
                            plan = session.plan(change, position)
                            if plan is None:
                                return None
                            known = plans[change.table] = (change.schema, change.columns, plan)
                        reducer.add(change, known[2])
                    elif kind == "truncate":
                        out.extend(reducer.flush())
                        out.append(change)
                    else:  # DDL changes what the table definitions say: keep the order
                        return None
        except (ApplyError, NotReducible):
            return None  # the unreduced path meets (and reports) the same again, precisely
        out.extend(reducer.flush())
        return tuple(out)

    # -- schema following ---------------------------------------------------------------------
    def _follow_schema(self, transaction: Transaction, force: bool = False) -> None:
        """Make the target's tables match the definitions in `transaction`'s DDL changes, with
        statements the engine builds, or stop with what differs and what to run. `force`: a
        seed's definition, current whatever the checkpoint says."""
        checkpoint = self.checkpoint()
        if not force and checkpoint is not None and transaction.position <= checkpoint:
            return  # applied before: never replay an old definition over newer ones
        try:
            for change in transaction.changes:
                if change.kind != "ddl" or not change.table:
                    continue
                for what in self.engine.follow_schema(
                    change, transaction.position, self.schema_changes
                ):
                    log.info(
                        "origin %s: %s.%s follows the origin's DDL at %s: %s",
                        self.origin, change.schema, change.table, transaction.position, what,
                    )  # fmt: skip
                self.engine.note_ddl(transaction.position, change)
        except SchemaMismatchError:
            self._forget()
            raise
        except BaseException:
            self._forget()
            raise

    # -- streams ------------------------------------------------------------------------------
    def _begin_stream(self, begin: Position, end: Position | None) -> _Stream:
        """Open the target transaction of a transaction in parts. Its first write is the
        checkpoint row (the marker a two-way capture knows as ours): moved to `end` when that
        is known; otherwise written unchanged now and moved with the last part. No checkpoint
        lies strictly between a transaction's begin and its end, so one above `begin` means
        the transaction is applied."""
        session = self.engine.begin(self._checkpoint, self._known)
        try:
            base = session.base
            self._checkpoint, self._known = base, True
            if not comparable(base, end or begin):
                raise scheme_back(self.origin, base, end or begin)
            if base is not None and (
                end.key <= base.key if end is not None else begin.key < base.key
            ):
                session.abort()
                return _Stream(begin, end, None)
            session.set_checkpoint(end or base or begin, 0 if end is None else 1, self.epoch)
            stream = _Stream(begin, end, session, self.epoch)
            stream.marked = end is not None
            return stream
        except BaseException:
            session.abort()
            raise

    def _fail_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and stream.session is not None:
            stream.session.abort()
        self._forget()

    def _held_part(self, part: Part, end: Position | None) -> Position | None:
        """An engine that does not stream: hold the parts, apply the transaction whole."""
        if part.number == 1:
            self._stream = _Stream(part.begin, end, None)
            self._held = []
        assert self._stream is not None
        self._stream.next += 1
        self._held.extend(part.changes)
        if not part.last:
            return None
        assert end is not None  # the last part carries it
        whole = Transaction(end, part.timestamp, tuple(self._held))
        self._stream, self._held = None, []
        return self.apply([whole])

    def _forget(self) -> None:
        """After an error: read the checkpoint and table definitions again next time."""
        self._known = False
        self.engine.forget()
