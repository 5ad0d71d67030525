"""Apply origin transactions to a target database, exactly once.

One `apply()` call is one target transaction: transactions at or below the checkpoint are
skipped; the checkpoint row moves to the last applied position (or `upto`, when the caller
knows that nothing up to there concerns this target) first, then the rest are applied in order
with merged, parameterized statements (`statements.py`, run by `pipeline.py`), and then it
commits. Any failure rolls the whole call back and raises an ApplyError subclass (or
UnreachableError) that names the origin, the failing transaction's position, the table, the
cause and the fix (`failures.py`). Nothing is skipped silently; retrying is the caller's job,
and a retry re-reads the checkpoint and the target's table definitions (`targettables.py`), so
it resumes by itself once the cause is fixed.

A transaction that travels in parts is streamed: `apply_part` opens one target transaction
at its first part, applies each part as it arrives, and commits with the last one, so memory
holds one part at a time and no reader of the target ever sees part of it.

The checkpoint row is written first in every target transaction: it locks the row against a
concurrent skip, and in the target's own binlog it comes before the rows, so that a two-way
capture recognises our transactions from their first event (loop prevention).

Sessions on the target: time_zone '+00:00' (TIMESTAMPs travel as naive UTC), the server's
sql_mode plus NO_AUTO_VALUE_ON_ZERO (id 0 replays as 0) and with zero dates allowed
(`session_sql_mode`), autocommit off, utf8mb4.

Net-change apply: a group of two or more transactions is first reduced to its net effect per
table and primary key (`reduce.py`: a few multi-row deletes and upserts per table instead of a
statement per run of equal operations). Groups that the reducer is not sure about go the
unreduced way in the same target transaction: DDL in the group, a table with foreign keys or
triggers on the target (it reacts to each row), a table whose rows arrive with different column lists, a table the applier cannot
apply to (its error is then raised by the unreduced path, precisely). When the reduced group
fails on the target for any reason other than a lost connection or a transient lock error, it
is rolled back and applied again unreduced, which either succeeds (logged as a warning) or
finds the exact failing transaction as before: reduction never changes what is reported.

DDL is never executed: a "ddl" change only drops the cached definition of its table (or of
its whole schema when it names no table) and is remembered, so that a later MissingTableError
or SchemaMismatchError can say what the origin ran.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import pymysql

from .. import mysql
from ..config import DatabaseSettings
from ..errors import (
    ApplyError,
    BinlogsyncError,
    ConfigError,
    SchemaMismatchError,
    UnreachableError,
)
from ..model import ROW_KINDS, Change, Part, Transaction
from ..position import Position, comparable
from ..tabledef import describe
from . import checkpoint as checkpoints
from . import failures
from .pipeline import Pipeline, StatementFailed, execute
from .reduce import NotReducible, Reducer
from .schemachange import Mode, plan_ddl
from .statements import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, Statement, StatementBuilder
from .targettables import TargetTables, context

log = logging.getLogger("binlogsync.apply")


# Modes that refuse dates the origin stored: zero dates, dates with a zero part, and (strict
# mode without ALLOW_INVALID_DATES) a day past its month's end. TRADITIONAL is listed beside
# its members on MariaDB, and setting it again would bring them back.
_REFUSING_DATES = frozenset({"NO_ZERO_DATE", "NO_ZERO_IN_DATE", "TRADITIONAL"})
_ADDED_MODES = ("NO_AUTO_VALUE_ON_ZERO", "ALLOW_INVALID_DATES")


def session_sql_mode(server_mode: str) -> str:
    """The apply session's sql_mode from the server's global one: the same modes, plus
    NO_AUTO_VALUE_ON_ZERO (an id 0 replays as 0) and ALLOW_INVALID_DATES, without the modes
    that refuse zero, partial or invalid dates. What the origin stored lands as it is, as a
    replica applies row events whatever its sql_mode; the applications' own sessions on the
    target keep the server's rules."""
    modes = [m for m in server_mode.upper().split(",") if m and m not in _REFUSING_DATES]
    return ",".join([*modes, *(m for m in _ADDED_MODES if m not in modes)])


def _scheme_back(origin: str, base: Position | None, position: Position) -> ApplyError:
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


def failed_at(error: BaseException) -> Position | None:
    """The origin position of the transaction an ApplyError is about, when one is to blame.

    Set for errors caused by one transaction's data or table (not for lost connections, lock
    waits or a moved checkpoint). A run loop can apply the transactions before it on their own,
    so that `checkpoint.skip(…, position, …)` skips exactly that one transaction.
    """
    position = getattr(error, "position", None)
    return position if isinstance(position, Position) else None


def _defines(transaction: Transaction) -> bool:
    """Whether a transaction is the origin's DDL of routed tables (followed when asked)."""
    return any(c.kind == "ddl" and c.table for c in transaction.changes)


def _unwrapped(exc: BaseException) -> BaseException:
    return exc.error if isinstance(exc, _Ambiguous) else exc


def _replay_unreduced(error: BaseException) -> bool:
    """Whether a group that failed as its net change is worth applying again unreduced: not
    when the target was unreachable or a lock wait or deadlock struck (the caller retries)."""
    if isinstance(error, UnreachableError):
        return False
    cause = error.__cause__
    return not (isinstance(cause, pymysql.err.MySQLError) and mysql.kind_of(cause) == "transient")


class _ReducedFailed(Exception):
    """Running a group's net change failed (internal): `apply` replays it unreduced."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class StaleStream(Exception):
    """A part that does not continue the transaction being streamed (a re-send is coming)."""


class _Ambiguous(Exception):
    """A statement carrying several transactions failed on its data (internal)."""

    def __init__(self, error: BinlogsyncError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class _Session:
    """One open target transaction: its cursor, statements in flight, and checkpoints."""

    cursor: Any
    pipeline: Pipeline
    builder: StatementBuilder
    base: Position | None  # the checkpoint when it began


@dataclass
class _Stream:
    """A transaction arriving in parts: which one, which part comes next."""

    end: Position
    next: int
    session: _Session | None  # None: already applied, its parts are skipped


class Applier:
    """Applies one origin's transactions to one target database.

    Connects lazily, checks the connection at the start of every call and reconnects if it
    was lost. Not thread-safe: one applier per (origin, target), used by one thread.
    `epoch` (the hub log's identity, from WELCOME) is written with every checkpoint.
    """

    def __init__(
        self,
        db: DatabaseSettings,
        origin: str,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        connect_timeout: float = 10.0,
        epoch: str | None = None,
        reduce: bool = True,
        schema_changes: Mode = "off",
    ) -> None:
        if not origin or len(origin) > 64:
            raise ConfigError(
                f"origin name {origin!r} must be 1 to 64 characters",
                "it is the key of the target's binlogsync.checkpoint row",
            )
        self.db = db
        self.origin = origin
        self.epoch = epoch
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.connect_timeout = connect_timeout
        self.reduce = reduce  # apply groups as their net change (reduce.py)
        self.schema_changes = schema_changes  # follow the origin's DDL (schemachange.py)
        self.tables = TargetTables(origin, db)
        self._conn: Any = None
        self._packet_bytes = max_bytes
        self._strict = True  # the session's sql_mode is strict (decides the upsert guard)
        self._schema_ready = False
        self._checkpoint: Position | None = None
        self._checkpoint_known = False
        self._doing = ""  # what the current call is doing, for messages
        self._executor: ThreadPoolExecutor | None = None
        self._session: _Session | None = None
        self._stream: _Stream | None = None

    # -- public ------------------------------------------------------------------------------
    @property
    def connection_id(self) -> int | None:
        """The server's id of the current connection (None when not connected)."""
        return None if self._conn is None else int(self._conn.thread_id())

    @property
    def streaming(self) -> Position | None:
        """The end of the transaction being streamed in parts, if one is open."""
        return self._stream.end if self._stream is not None else None

    def checkpoint(self) -> Position | None:
        """The target's checkpoint for this origin, read now (None: nothing applied yet)."""
        self.abort_stream()
        try:
            conn = self._connection()
            with conn.cursor() as cur:
                self._doing = "reading the checkpoint"
                position = checkpoints.read(cur, self.origin)
            conn.rollback()
        except (pymysql.err.MySQLError, OSError) as exc:
            self._forget()
            raise self._translate(exc, None, None, None) from exc
        except BaseException:
            self._forget()
            raise
        self._checkpoint, self._checkpoint_known = position, True
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
                # The target's DDL commits implicitly: the transactions before it are applied
                # and committed first, then the DDL, then its checkpoint (a crash in between
                # replays it, and the plan then finds nothing left to do).
                if at:
                    self._apply(transactions[:at], None)
                self._follow_schema(transactions[at])
                self._apply(transactions[at : at + 1], None)
                rest = transactions[at + 1 :]
                return self.apply(rest, upto) if rest or upto else self._checkpoint
        return self._apply(transactions, upto)

    def _apply(self, transactions: Sequence[Transaction], upto: Position | None) -> Position | None:
        try:
            if self.reduce:
                try:
                    return self._run(transactions, upto, across=True, commit=True, reduce=True)
                except _ReducedFailed as failed:
                    reduced_error = _unwrapped(failed.error)
                    if not _replay_unreduced(reduced_error):
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
                    mysql.describe(cause) if cause is not None else reduced_error,
                )
                return new
            return self._run_unreduced(transactions, upto)
        except BaseException:
            self._forget()
            raise

    def _follow_schema(self, transaction: Transaction, force: bool = False) -> None:
        """Make the target's tables match the definitions in `transaction`'s DDL changes, with
        statements built here (schemachange.py), or stop with what differs and what to run.
        `force`: a seed's definition, current whatever the checkpoint says."""
        checkpoint = self.checkpoint()
        if not force and checkpoint is not None and transaction.position <= checkpoint:
            return  # applied before: never replay an old definition over newer ones
        try:
            conn = self._connection()
            for change in transaction.changes:
                if change.kind != "ddl" or not change.table:
                    continue
                with conn.cursor() as cur:
                    self._doing = "reading the table definition"
                    steps = plan_ddl(change, self.schema_changes, partial(describe, cur))
                    if steps.refused:
                        raise SchemaMismatchError(
                            context(
                                self.origin, self.tables.target, transaction.position, change.schema,
                                change.table,
                            )
                            + f"the origin's DDL ({change.statement[:300]}) cannot be followed "
                            f"under apply_schema_changes = \"{self.schema_changes}\": "
                            + "; ".join(steps.refused),
                            "run the matching DDL on the target yourself (apply resumes by "
                            "itself), or set apply_schema_changes = \"all\" where that is "
                            "wanted, or `binlogsync skip` this DDL transaction",
                        )  # fmt: skip
                    for sql, params in steps.statements:
                        self._doing = f"changing the table as the origin did: {sql[:200]}"
                        cur.execute(sql, params or None)
                    for what in steps.changes:
                        log.info(
                            "origin %s: %s.%s follows the origin's DDL at %s: %s",
                            self.origin, change.schema, change.table, transaction.position, what,
                        )  # fmt: skip
                self.tables.note_ddl(transaction.position, change)
        except (pymysql.err.MySQLError, OSError) as exc:
            self._forget()
            raise self._translate(exc, None, transaction.position, None) from exc
        except BaseException:
            self._forget()
            raise

    def _run_unreduced(
        self, transactions: Sequence[Transaction], upto: Position | None
    ) -> Position | None:
        """Apply as `apply`, statement runs merged in order; finds the failing transaction."""
        try:
            return self._run(transactions, upto, across=True, commit=True)
        except _Ambiguous as ambiguous:
            # Find the one transaction that fails: replay without merging across
            # transactions, never committing. A precise error propagates from here.
            self._run(transactions, upto, across=False, commit=False)
            error = ambiguous.error
            raise error from error.__cause__

    def repair(
        self, transaction: Transaction, snapshot: Position, seed: bool = False, reset: bool = False
    ) -> Position:
        """Apply a repair (source row images read at `snapshot`) and set the checkpoint to
        min(checkpoint, `snapshot`), in one target transaction; returns the new checkpoint.

        A seed's chunk (`seed`) is a repair that may also start a target: with no checkpoint
        yet, the checkpoint becomes `snapshot`; its DDL changes carry the origin's table
        definition, followed first (when apply_schema_changes allows) so that a table the
        target lacks is made. `reset` (the first chunk of a reseed of every table) sets the
        checkpoint to `snapshot` even when that is ahead: whatever the target missed before it
        is replaced by the seed.

        Going back is what orders the repair with live changes: the hub then re-sends the
        origin's transactions after the new checkpoint. Every change writes whole row images
        by key, so the last change to a row decides its final state: replaying changes over
        the repaired rows (even ones older than the snapshot, when the target was behind it)
        ends in the origin's current state, and no change the target had not applied is
        skipped.
        """
        self.abort_stream()
        if seed:
            ddl = tuple(c for c in transaction.changes if c.kind == "ddl")
            if ddl and self.schema_changes != "off":
                self._follow_schema(Transaction(snapshot, transaction.timestamp, ddl), force=True)
            rows = tuple(c for c in transaction.changes if c.kind != "ddl")
            transaction = Transaction(transaction.position, transaction.timestamp, rows)
        try:
            result = self._run(
                [transaction],
                None,
                across=True,
                commit=True,
                rewind=snapshot,
                start=seed,
                reset=reset,
            )
        except _Ambiguous as ambiguous:
            error = ambiguous.error
            self._forget()
            raise error from error.__cause__
        except BaseException:
            self._forget()
            raise
        assert result is not None
        return result

    def apply_part(self, part: Part, end: Position) -> Position | None:
        """Apply one part of the transaction that ends at `end`; the last part commits.

        Part 1 opens a target transaction (or, when `end` is at or below the checkpoint, notes
        that the parts are to be skipped); each later part must continue it, else StaleStream.
        Returns the new checkpoint after the last part, None before. On any error the target
        transaction is rolled back and the error names `end`; the parts must then be sent
        again from part 1.
        """
        if part.number == 1:
            self.abort_stream()
        stream = self._stream
        if part.number != 1 and (stream is None or stream.end != end or stream.next != part.number):
            raise StaleStream(f"part {part.number} of {end} does not continue the stream")
        try:
            if stream is None:
                stream = self._stream = self._begin_stream(end)
            stream.next += 1
            if stream.session is not None:
                self._add(stream.session, [part.changes], end, across=True)
            if not part.last:
                return None
            self._stream = None
            if stream.session is None:
                return self._checkpoint
            self._finish(stream.session)
            self._checkpoint = end
            return end
        except _Ambiguous as ambiguous:  # one transaction: the error is precise already
            self._fail_stream()
            error = ambiguous.error
            raise error from error.__cause__
        except BaseException as exc:
            self._fail_stream()
            if isinstance(exc, ApplyError) and exc.position is None:
                exc.position = end
            raise

    def abort_stream(self) -> None:
        """Roll back a transaction being streamed (its parts will be sent again)."""
        stream, self._stream = self._stream, None
        if stream is not None and stream.session is not None:
            self._end_session(stream.session)
            self._rollback()

    def close(self) -> None:
        self.abort_stream()
        self._drop()
        worker, self._executor = self._executor, None
        if worker is not None:
            worker.shutdown(wait=True)

    def __enter__(self) -> Applier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one target transaction --------------------------------------------------------------
    def _open_session(self) -> _Session:
        conn = self._connection()
        cur = conn.cursor()
        try:
            if not self._checkpoint_known:
                self._doing = "reading the checkpoint"
                self._checkpoint = checkpoints.read(cur, self.origin)
                self._checkpoint_known = True
        except BaseException:
            cur.close()
            raise
        session = _Session(
            cur,
            Pipeline(cur, self._worker(), self._execute),
            StatementBuilder(self.max_rows, self._packet_bytes),
            self._checkpoint,
        )
        self._session = session
        self.tables.before_query = session.pipeline.wait  # one statement at a time
        return session

    def _end_session(self, session: _Session) -> None:
        session.pipeline.settle()
        try:
            session.cursor.close()
        except (pymysql.err.MySQLError, OSError):
            pass
        if self._session is session:
            self._session = None

    def _write_checkpoint(self, session: _Session, new: Position, count: int) -> None:
        self._doing = "moving the checkpoint"
        checkpoints.write(
            session.cursor, self.origin, new, count, expected=session.base, epoch=self.epoch
        )

    def _add(
        self,
        session: _Session,
        changesets: Sequence[tuple[Change, ...]],
        position: Position,
        across: bool,
    ) -> None:
        """Queue the statements of `changesets` (all of the transaction at `position`)."""
        cur, builder, pipeline = session.cursor, session.builder, session.pipeline
        change: Change | None = None
        statement: Statement | None = None
        try:
            for changes in changesets:
                for change in changes:
                    if change.kind == "ddl":
                        self._doing = "reading the table definition"
                        self.tables.check_ddl(cur, position, change)
                        self.tables.note_ddl(position, change)
                        self._doing = ""
                        continue
                    self._doing = "reading the table definition"
                    if change.kind == "truncate":
                        self.tables.table(cur, position, change.schema, change.table)
                        ready = builder.truncate(change.schema, change.table, position)
                    else:
                        layout = self.tables.layout(cur, position, change, self._strict)
                        ready = builder.add(change, layout, position)
                    self._doing = ""
                    for statement in ready:
                        pipeline.submit(statement)
                    statement = None
            change = None
            if not across:
                for statement in builder.flush():
                    pipeline.submit(statement)
                statement = None
        except StatementFailed as failed:
            raise self._statement_failed(failed) from failed.cause
        except (pymysql.err.MySQLError, OSError) as exc:
            pipeline.settle()
            raise self._failure(exc, statement, position, change) from exc
        except ApplyError as exc:
            if exc.position is None:
                exc.position = position
            raise

    def _finish(self, session: _Session, commit: bool = True) -> None:
        """Run what is left, then commit (or roll back, for a dry run)."""
        builder, pipeline = session.builder, session.pipeline
        try:
            final = builder.flush()
            for statement in final[:-1]:
                pipeline.submit(statement)
            if final:
                pipeline.run_here(final[-1])
            pipeline.wait()
            if commit:
                self._doing = "committing"
                self._conn.commit()
            else:
                self._conn.rollback()
        except StatementFailed as failed:
            raise self._statement_failed(failed) from failed.cause
        except (pymysql.err.MySQLError, OSError) as exc:
            raise self._failure(exc, None, None, None) from exc
        finally:
            self._end_session(session)

    def _statement_failed(self, failed: StatementFailed) -> BaseException:
        statement = failed.statement
        if self._session is not None:
            self._session.pipeline.settle()
        self._doing = f"running a {statement.rows}-row {statement.kind}"
        return self._failure(failed.cause, statement, None, None)

    def _begin_stream(self, end: Position) -> _Stream:
        session = self._open_session()
        try:
            base = session.base
            if not comparable(base, end):
                raise _scheme_back(self.origin, base, end)
            if base is not None and end.key <= base.key:
                self._end_session(session)
                self._rollback()
                return _Stream(end, 1, None)
            self._write_checkpoint(session, end, 1)
            return _Stream(end, 1, session)
        except (pymysql.err.MySQLError, OSError) as exc:
            self._end_session(session)
            raise self._failure(exc, None, end, None) from exc
        except BaseException:
            self._end_session(session)
            self._rollback()
            raise

    def _fail_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and stream.session is not None:
            self._end_session(stream.session)
        self._rollback()
        self._forget()

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
        session = self._open_session()
        try:
            base = session.base
            if transactions and not comparable(base, transactions[-1].position):
                raise _scheme_back(self.origin, base, transactions[-1].position)
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
                # Replay must start at or before both the snapshot and what is applied now:
                # changes the target has not applied yet must not be skipped (see `repair`).
                if reset or (base is None and start):
                    new = rewind
                elif base is None:
                    raise ApplyError(
                        f"target has applied nothing of {self.origin} yet; a repair needs a "
                        "checkpoint",
                        "wait until the target has caught up, then repair",
                    )
                else:
                    new = rewind if rewind.key < base.key else base
            moves = new is not None and (base is None or new.key > base.key or rewind is not None)
            reduced = self._reduce(session, fresh) if reduce and len(fresh) > 1 else None
            if commit and moves:
                assert new is not None
                self._write_checkpoint(session, new, len(fresh))
            if reduced is not None:
                # Every statement carries the whole group: an error here is never reported as
                # it is, `apply` replays the group unreduced to find the culprit.
                session.builder.span_from = fresh[0].position
                try:
                    self._add(session, [reduced], fresh[-1].position, across=True)
                    self._finish(session, commit=commit and moves)
                except Exception as exc:
                    raise _ReducedFailed(exc) from exc
            else:
                for transaction in fresh:
                    self._add(session, [transaction.changes], transaction.position, across)
                self._finish(session, commit=commit and moves)
            if commit:
                self._checkpoint = new
            return new
        except (pymysql.err.MySQLError, OSError) as exc:
            self._end_session(session)
            raise self._failure(exc, None, None, None) from exc
        except BaseException:
            self._end_session(session)
            self._rollback()
            raise

    def _reduce(
        self, session: _Session, transactions: Sequence[Transaction]
    ) -> tuple[Change, ...] | None:
        """The net change of `transactions` (reduce.py), or None: apply them unreduced.

        Reads the target's table definitions it needs (as the unreduced path would, in the same
        order) and runs no statement, so the caller can still choose either path.
        """
        reducer = Reducer()
        out: list[Change] = []
        cur, strict, layout_of = session.cursor, self._strict, self.tables.layout
        self._doing = "reading the table definition"
        try:
            for transaction in transactions:
                position = transaction.position
                for change in transaction.changes:
                    kind = change.kind
                    if kind in ROW_KINDS:
                        layout = layout_of(cur, position, change, strict)
                        if layout.foreign_keys or layout.triggers:
                            return None
                        reducer.add(change, layout)
                    elif kind == "truncate":
                        out.extend(reducer.flush())
                        out.append(change)
                    else:  # DDL changes what the table definitions say: keep the order
                        return None
        except (ApplyError, NotReducible):
            return None  # the unreduced path meets (and reports) the same again, precisely
        finally:
            self._doing = ""
        out.extend(reducer.flush())
        return tuple(out)

    def _failure(
        self,
        exc: BaseException,
        statement: Statement | None,
        position: Position | None,
        change: Change | None,
    ) -> BaseException:
        """Roll back after a driver error and say what to raise (internal _Ambiguous, or ours)."""
        error = self._translate(exc, statement, position, change)
        self._rollback()
        error.__cause__ = exc
        transient = mysql.kind_of(exc) == "transient"
        if (
            statement is not None
            and statement.first != statement.last
            and not isinstance(error, UnreachableError)
            and not transient
        ):
            ambiguous = _Ambiguous(error)
            ambiguous.__cause__ = exc
            return ambiguous
        if statement is not None and statement.first == statement.last:
            position = statement.first
        if position is not None and isinstance(error, ApplyError) and not transient:
            error.position = position
        return error

    def _execute(self, cursor: Any, statement: Statement) -> None:
        """Run one statement (on the worker thread; its parameters are already bound)."""
        execute(cursor, statement)

    def _worker(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"apply-{self.origin}")
        return self._executor

    # -- connection --------------------------------------------------------------------------
    def _connection(self) -> Any:
        if self._conn is not None:
            try:
                self._conn.ping(reconnect=False)
            except (pymysql.err.MySQLError, OSError):
                self._drop()
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def _open(self) -> Any:
        self._doing = "connecting"
        try:
            conn = mysql.open_connection(
                self.db,
                charset="utf8mb4",
                autocommit=False,
                connect_timeout=self.connect_timeout,
            )
        except (pymysql.err.MySQLError, OSError) as exc:
            raise self._translate(exc, None, None, None) from exc
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@GLOBAL.sql_mode")
                found = cur.fetchone()
                mode = session_sql_mode(str(found[0] if found else ""))
                cur.execute("SET SESSION time_zone = '+00:00', sql_mode = %s", (mode,))
                cur.execute("SELECT @@max_allowed_packet, @@SESSION.sql_mode")
                row = cur.fetchone()
            packet = int(row[0]) if row else 16 * 1024 * 1024
            modes = set(str(row[1] if row else "").upper().split(","))
            strict = bool(modes & {"STRICT_TRANS_TABLES", "STRICT_ALL_TABLES"})
            if strict != self._strict:
                self.tables.forget()
            self._strict = strict
            # Estimates are upper bounds; keep a margin for the statement's own text.
            room = packet - 64 * 1024 if packet > 128 * 1024 else packet // 2
            self._packet_bytes = max(1024, min(self.max_bytes, room))
            if not self._schema_ready:
                self._doing = "creating the binlogsync schema"
                checkpoints.ensure_schema(conn)
                self._schema_ready = True
            conn.commit()
        except (pymysql.err.MySQLError, OSError) as exc:
            error = self._translate(exc, None, None, None)
            mysql.close(conn)
            raise error from exc
        return conn

    def _rollback(self) -> None:
        if self._conn is None:
            return
        try:
            self._conn.rollback()
        except (pymysql.err.MySQLError, OSError):
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        mysql.close(conn)

    def _forget(self) -> None:
        """After an error: re-read the checkpoint and table definitions next time."""
        self._checkpoint_known = False
        self.tables.forget()

    # -- errors ------------------------------------------------------------------------------
    def _translate(
        self,
        exc: BaseException,
        statement: Statement | None,
        position: Position | None,
        change: Change | None,
    ) -> BinlogsyncError:
        """A PyMySQL (or socket) exception as one of our errors, with the whole story."""
        if statement is not None:
            where: Position | str | None = statement.where
            schema, table = statement.schema, statement.table
        else:
            where = position
            schema = change.schema if change else ""
            table = change.table if change else ""
        if mysql.kind_of(exc) in ("unreachable", "too_large"):
            self._drop()
        return failures.translate(
            exc,
            origin=self.origin,
            target=self.db,
            doing=self._doing,
            where=where,
            schema=schema,
            table=table,
            statement_kind=statement.kind if statement is not None else None,
            with_ddl=self.tables.with_ddl,
        )
