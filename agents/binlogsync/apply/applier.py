"""Apply origin transactions to a target database, exactly once.

One `apply()` call is one target transaction: transactions at or below the checkpoint are
skipped, the rest are applied in order with merged, parameterized statements
(`statements.py`), the checkpoint row moves to the last applied position (or `upto`, when the
caller knows that nothing up to there concerns this target) in the same transaction, and then
it commits. Any failure rolls the whole call back and raises an ApplyError subclass (or
UnreachableError) that names the origin, the failing transaction's position, the table, the
cause and the fix. Nothing is skipped silently; retrying is the caller's job, and a retry
re-reads the checkpoint and the target's table definitions, so it resumes by itself once the
cause is fixed.

Sessions on the target: time_zone '+00:00' (TIMESTAMPs travel as naive UTC), the server's
sql_mode plus NO_AUTO_VALUE_ON_ZERO (id 0 replays as 0), autocommit off, utf8mb4.

DDL is never executed: a "ddl" change only drops the cached definition of its table (or of
its whole schema when it names no table) and is remembered, so that a later MissingTableError
or SchemaMismatchError can say what the origin ran.

PyMySQL's exceptions are translated here, at the module edge.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import Any

import pymysql

from ..config import DatabaseSettings
from ..errors import (
    ApplyError,
    BinlogsyncError,
    ConfigError,
    ConstraintError,
    MissingTableError,
    SchemaMismatchError,
    UnreachableError,
)
from ..model import Change, Transaction
from ..position import Position
from . import checkpoint as checkpoints
from .checkpoint import connect_args
from .statements import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    Layout,
    Statement,
    StatementBuilder,
    TableInfo,
    is_generated,
)

# MySQL/MariaDB error codes, by what they mean for a row that the origin accepted.
_MISSING_TABLE = frozenset({1049, 1146})
_MISSING_COLUMN = frozenset({1054})
_NO_DEFAULT = frozenset({1364})
_VALUE = frozenset({1138, 1264, 1265, 1292, 1366, 1367, 1406, 1411, 1690, 3140, 4078})
_CONSTRAINT = frozenset({1048, 1062, 1216, 1217, 1451, 1452, 1557, 1586, 1761, 1762, 3819, 4025})
_TRANSIENT = frozenset({1205, 1213})
_DENIED = frozenset({1044, 1045, 1142, 1143, 1227})
_PACKET_TOO_LARGE = 1153

_SHOW_DDL = 500  # characters of a DDL statement quoted in messages


def failed_at(error: BaseException) -> Position | None:
    """The origin position of the transaction an ApplyError is about, when one is to blame.

    Set for errors caused by one transaction's data or table (not for lost connections, lock
    waits or a moved checkpoint). A run loop can apply the transactions before it on their own,
    so that `checkpoint.skip(…, position, …)` skips exactly that one transaction.
    """
    position = getattr(error, "position", None)
    return position if isinstance(position, Position) else None


class _Ambiguous(Exception):
    """A statement carrying several transactions failed on its data (internal)."""

    def __init__(self, error: BinlogsyncError) -> None:
        super().__init__(str(error))
        self.error = error


class _StatementFailed(Exception):
    """A statement failed on the worker thread (internal): the driver error and the statement."""

    def __init__(self, cause: BaseException, statement: Statement) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.statement = statement


class _Pipeline:
    """Runs one call's statements in order on the applier's worker thread, one at a time.

    The next statement is built and bound (escaped by the driver) on the caller's thread while
    the server executes the previous one: the two halves of the work overlap. Every other use
    of the connection waits for the running statement first.
    """

    def __init__(self, applier: Applier, cursor: Any) -> None:
        self.applier = applier
        self.cursor = cursor
        self.running: Future[None] | None = None
        self.statement: Statement | None = None

    def submit(self, statement: Statement) -> None:
        bound = replace(
            statement, sql=self.cursor.mogrify(statement.sql, statement.params), params=None
        )
        self.wait()
        self.statement = statement
        self.running = self.applier._worker().submit(self.applier._execute, self.cursor, bound)

    def run_here(self, statement: Statement) -> None:
        """Run `statement` on the calling thread, after the running one."""
        self.wait()
        try:
            self.applier._execute(self.cursor, statement)
        except (pymysql.err.MySQLError, OSError) as exc:
            raise _StatementFailed(exc, statement) from exc

    def wait(self) -> None:
        """Wait for the running statement; its driver error is raised as _StatementFailed."""
        running, statement = self.running, self.statement
        self.running = self.statement = None
        if running is None or statement is None:
            return
        try:
            running.result()
        except (pymysql.err.MySQLError, OSError) as exc:
            raise _StatementFailed(exc, statement) from exc

    def settle(self) -> None:
        """Wait for the running statement and ignore how it ended (an error is being raised)."""
        running, self.running, self.statement = self.running, None, None
        if running is not None:
            wait([running])


class Applier:
    """Applies one origin's transactions to one target database.

    Connects lazily, checks the connection at the start of every call and reconnects if it
    was lost. Not thread-safe: one applier per (origin, target), used by one thread.
    """

    def __init__(
        self,
        db: DatabaseSettings,
        origin: str,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        connect_timeout: float = 10.0,
    ) -> None:
        if not origin or len(origin) > 64:
            raise ConfigError(
                f"origin name {origin!r} must be 1 to 64 characters",
                "it is the key of the target's binlogsync.checkpoint row",
            )
        self.db = db
        self.origin = origin
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.connect_timeout = connect_timeout
        self._conn: Any = None
        self._packet_bytes = max_bytes
        self._strict = True  # the session's sql_mode is strict (decides the upsert guard)
        self._schema_ready = False
        self._checkpoint: Position | None = None
        self._checkpoint_known = False
        self._tables: dict[tuple[str, str], TableInfo] = {}
        self._layouts: dict[tuple[str, str, tuple[str, ...]], Layout] = {}
        self._ddl: dict[tuple[str, str], tuple[Position, str]] = {}
        self._doing = ""  # what the current call is doing, for messages
        self._executor: ThreadPoolExecutor | None = None
        self._pipeline: _Pipeline | None = None

    # -- public ------------------------------------------------------------------------------
    @property
    def connection_id(self) -> int | None:
        """The server's id of the current connection (None when not connected)."""
        return None if self._conn is None else int(self._conn.thread_id())

    def checkpoint(self) -> Position | None:
        """The target's checkpoint for this origin, read now (None: nothing applied yet)."""
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
        try:
            try:
                return self._run(transactions, upto, across=True, commit=True)
            except _Ambiguous as ambiguous:
                # Find the one transaction that fails: replay without merging across
                # transactions, never committing. A precise error propagates from here.
                self._run(transactions, upto, across=False, commit=False)
                error = ambiguous.error
                raise error from error.__cause__
        except BaseException:
            self._forget()
            raise

    def repair(self, transaction: Transaction, snapshot: Position) -> Position:
        """Apply a repair (source row images read at `snapshot`) and set the checkpoint to
        min(checkpoint, `snapshot`), in one target transaction; returns the new checkpoint.

        Going back is what orders the repair with live changes: the hub then re-sends the
        origin's transactions after the new checkpoint. Every change writes whole row images
        by key, so the last change to a row decides its final state: replaying changes over
        the repaired rows (even ones older than the snapshot, when the target was behind it)
        ends in the origin's current state, and no change the target had not applied is
        skipped.
        """
        try:
            result = self._run([transaction], None, across=True, commit=True, rewind=snapshot)
        except _Ambiguous as ambiguous:
            error = ambiguous.error
            self._forget()
            raise error from error.__cause__
        except BaseException:
            self._forget()
            raise
        assert result is not None
        return result

    def close(self) -> None:
        self._drop()
        worker, self._executor = self._executor, None
        if worker is not None:
            worker.shutdown(wait=True)

    def __enter__(self) -> Applier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one call ----------------------------------------------------------------------------
    def _run(
        self,
        transactions: Sequence[Transaction],
        upto: Position | None,
        across: bool,
        commit: bool,
        rewind: Position | None = None,
    ) -> Position | None:
        conn = self._connection()
        cur = conn.cursor()
        pipeline = self._pipeline = _Pipeline(self, cur)
        position: Position | None = None
        change: Change | None = None
        statement: Statement | None = None
        try:
            if not self._checkpoint_known:
                self._doing = "reading the checkpoint"
                self._checkpoint = checkpoints.read(cur, self.origin)
                self._checkpoint_known = True
            base = self._checkpoint
            last_key = -1 if base is None or rewind is not None else base.key
            last: Position | None = None
            count = 0
            builder = StatementBuilder(self.max_rows, self._packet_bytes)
            for transaction in transactions:
                position = transaction.position
                if position.key <= last_key:
                    continue
                for change in transaction.changes:
                    if change.kind == "ddl":
                        self._note_ddl(position, change)
                        continue
                    if change.kind == "truncate":
                        self._table(cur, position, change.schema, change.table)
                        ready = builder.truncate(change.schema, change.table, position)
                    else:
                        layout = self._layout(cur, position, change)
                        ready = builder.add(change, layout, position)
                    for statement in ready:
                        pipeline.submit(statement)
                    statement = None
                change = None
                if not across:
                    for statement in builder.flush():
                        pipeline.submit(statement)
                    statement = None
                last_key, last, count = position.key, position, count + 1
            position = None
            final = builder.flush()
            for statement in final[:-1]:
                pipeline.submit(statement)
            if final:
                # The last one runs on this thread: nothing is left to overlap with, and a
                # hand-over to the worker thread would only add latency.
                pipeline.run_here(final[-1])
            statement = None
            pipeline.wait()

            new = last if last is not None else base
            if upto is not None and (new is None or upto.key > new.key):
                new = upto
            if rewind is not None:
                # Replay must start at or before both the snapshot and what is applied now:
                # changes the target has not applied yet must not be skipped (see `repair`).
                if base is None:
                    raise ApplyError(
                        f"target has applied nothing of {self.origin} yet; a repair needs a "
                        "checkpoint", "wait until the target has caught up, then repair",
                    )
                new = rewind if rewind.key < base.key else base
            if not commit:
                conn.rollback()
                return new
            if new is not None and (base is None or new.key > base.key or rewind is not None):
                self._doing = "moving the checkpoint"
                checkpoints.write(cur, self.origin, new, count, expected=base)
                self._doing = "committing"
                conn.commit()
            else:
                conn.rollback()
            self._checkpoint = new
            return new
        except _StatementFailed as failed:
            pipeline.settle()
            self._doing = f"running a {failed.statement.rows}-row {failed.statement.kind}"
            raise self._failure(failed.cause, failed.statement, None, None) from failed.cause
        except (pymysql.err.MySQLError, OSError) as exc:
            pipeline.settle()
            raise self._failure(exc, statement, position, change) from exc
        except ApplyError as exc:
            pipeline.settle()
            self._rollback()
            if position is not None and exc.position is None:
                exc.position = position
            raise
        except BaseException:
            pipeline.settle()
            self._rollback()
            raise
        finally:
            self._pipeline = None
            cur.close()

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
        code = exc.args[0] if exc.args else None
        if (
            statement is not None
            and statement.first != statement.last
            and not isinstance(error, UnreachableError)
            and code not in _TRANSIENT
        ):
            ambiguous = _Ambiguous(error)
            ambiguous.__cause__ = exc
            return ambiguous
        if statement is not None and statement.first == statement.last:
            position = statement.first
        if position is not None and isinstance(error, ApplyError) and code not in _TRANSIENT:
            error.position = position
        return error

    def _execute(self, cursor: Any, statement: Statement) -> None:
        """Run one statement (on the worker thread; its parameters are already bound)."""
        cursor.execute(statement.sql, statement.params)

    def _worker(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"apply-{self.origin}")
        return self._executor

    # -- target tables -----------------------------------------------------------------------
    def _table(self, cursor: Any, position: Position, schema: str, table: str) -> TableInfo:
        info = self._tables.get((schema, table))
        if info is not None:
            return info
        if self._pipeline is not None:
            self._pipeline.wait()  # one statement at a time on the connection
        self._doing = "reading the table definition"
        cursor.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, EXTRA FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        rows = [r for r in cursor.fetchall() if r[0] == schema and r[1] == table]
        if not rows:
            raise MissingTableError(
                self._context(position, schema, table)
                + f"the target has no table `{schema}`.`{table}`",
                self._with_ddl(
                    schema,
                    table,
                    "create it on the target as the origin defines it, or exclude it from the "
                    "route; apply resumes by itself",
                ),
            )
        cursor.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' "
            "ORDER BY SEQ_IN_INDEX",
            (schema, table),
        )
        key = tuple(r[2] for r in cursor.fetchall() if r[0] == schema and r[1] == table)
        info = TableInfo(
            schema,
            table,
            tuple(r[2] for r in rows),
            key,
            frozenset(r[2].lower() for r in rows if is_generated(r[3])),
        )
        self._tables[(schema, table)] = info
        return info

    def _layout(self, cursor: Any, position: Position, change: Change) -> Layout:
        cache_key = (change.schema, change.table, change.columns)
        layout = self._layouts.get(cache_key)
        if layout is not None:
            return layout
        info = self._table(cursor, position, change.schema, change.table)
        try:
            layout = Layout.build(info, change.columns, guard=self._strict)
        except ApplyError as exc:
            fix = exc.fix
            if isinstance(exc, SchemaMismatchError):
                fix = self._with_ddl(change.schema, change.table, f"{fix}; apply resumes by itself")
            raise type(exc)(
                self._context(position, change.schema, change.table) + exc.message, fix
            ) from None
        self._layouts[cache_key] = layout
        return layout

    def _note_ddl(self, position: Position, change: Change) -> None:
        """Remember the origin's DDL and forget what we knew of the tables it touches."""
        self._ddl[(change.schema, change.table)] = (position, change.statement)
        for key in list(self._tables):
            if (not change.schema or key[0] == change.schema) and (
                not change.table or key[1] == change.table
            ):
                del self._tables[key]
        for layout_key in list(self._layouts):
            if (not change.schema or layout_key[0] == change.schema) and (
                not change.table or layout_key[1] == change.table
            ):
                del self._layouts[layout_key]

    def _with_ddl(self, schema: str, table: str, fix: str) -> str:
        """`fix`, preceded by the origin's DDL that most likely explains the difference."""
        found = self._ddl.get((schema, table))
        if found is None:
            # DDL of the schema that names no table, or names this one (RENAME, CREATE … LIKE).
            named = re.compile(rf"(?<![\w$]){re.escape(table)}(?![\w$])", re.IGNORECASE)
            related = [
                v
                for (s, t), v in self._ddl.items()
                if s == schema and (not t or named.search(v[1]))
            ]
            found = max(related, key=lambda v: v[0].key) if related else None
        if found is None:
            return fix
        position, text = found
        if len(text) > _SHOW_DDL:
            text = text[:_SHOW_DDL] + "…"
        return (
            f"the origin ran: {text} (at {position}); run the same on the target, "
            "apply resumes by itself"
        )

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
            conn = pymysql.connect(
                **connect_args(self.db),
                charset="utf8mb4",
                autocommit=False,
                connect_timeout=self.connect_timeout,
            )
        except (pymysql.err.MySQLError, OSError) as exc:
            raise self._translate(exc, None, None, None) from exc
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SET SESSION time_zone = '+00:00', sql_mode = CONCAT_WS(',', "
                    "NULLIF(@@GLOBAL.sql_mode, ''), 'NO_AUTO_VALUE_ON_ZERO')"
                )
                cur.execute("SELECT @@max_allowed_packet, @@SESSION.sql_mode")
                row = cur.fetchone()
            packet = int(row[0]) if row else 16 * 1024 * 1024
            modes = set(str(row[1] if row else "").upper().split(","))
            strict = bool(modes & {"STRICT_TRANS_TABLES", "STRICT_ALL_TABLES"})
            if strict != self._strict:
                self._layouts.clear()
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
            try:
                conn.close()
            except (pymysql.err.MySQLError, OSError):
                pass
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
        if conn is not None:
            try:
                conn.close()
            except (pymysql.err.MySQLError, OSError):
                pass

    def _forget(self) -> None:
        """After an error: re-read the checkpoint and table definitions next time."""
        self._checkpoint_known = False
        self._tables.clear()
        self._layouts.clear()

    # -- errors ------------------------------------------------------------------------------
    def _context(self, position: Position | str | None, schema: str, table: str) -> str:
        where = f" transaction {position}" if position is not None else ""
        return (
            f"origin {self.origin}: cannot apply{where} to `{schema}`.`{table}` "
            f"on target {self.db}: "
        )

    def _translate(
        self,
        exc: BaseException,
        statement: Statement | None,
        position: Position | None,
        change: Change | None,
    ) -> BinlogsyncError:
        """A PyMySQL (or socket) exception as one of our errors, with the whole story."""
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        detail = exc.args[1] if len(exc.args) > 1 else str(exc)
        cause = f"MySQL error {code}: {detail}" if code else f"{type(exc).__name__}: {exc}"
        if statement is not None:
            where: Position | str | None = statement.where
            schema, table = statement.schema, statement.table
        else:
            where = position
            schema = change.schema if change else ""
            table = change.table if change else ""

        if (
            isinstance(exc, OSError | pymysql.err.InterfaceError)
            or code in checkpoints.CONNECTION_ERRORS
            or code == _PACKET_TOO_LARGE
        ):
            self._drop()
        if code == _PACKET_TOO_LARGE:
            return ApplyError(
                self._context(where, schema, table) + f"a statement is too large: {cause}",
                "raise max_allowed_packet on the target (SET GLOBAL max_allowed_packet=…) "
                "to at least the size of the largest row",
            )
        if (
            isinstance(exc, OSError | pymysql.err.InterfaceError)
            or code in checkpoints.CONNECTION_ERRORS
        ):
            during = f" while {self._doing}" if self._doing else ""
            on = f" (transaction {where}, `{schema}`.`{table}`)" if schema else ""
            fix = (
                "check that the target server runs and is reachable; nothing of this call "
                "was kept, apply retries from the checkpoint"
            )
            if self._doing == "committing":
                fix = (
                    "check that the target server runs and is reachable; whether the last "
                    "commit happened is unknown, so the next attempt re-reads the checkpoint "
                    "and skips whatever was committed"
                )
            return UnreachableError(
                f"origin {self.origin}: lost or refused connection to target {self.db}{during}"
                f"{on}: {cause}",
                fix,
            )
        if not schema:  # checkpoint table, session setup
            return ApplyError(
                f"origin {self.origin}: target {self.db} failed while {self._doing}: {cause}",
                "the account needs SELECT, INSERT, UPDATE, DELETE on the routed tables and "
                "CREATE, SELECT, INSERT, UPDATE on binlogsync.*"
                if code in _DENIED
                else "see the MySQL error; apply retries from the checkpoint",
            )
        context = self._context(where, schema, table)
        if code in _MISSING_TABLE:
            return MissingTableError(
                context + cause,
                self._with_ddl(
                    schema,
                    table,
                    "create the table on the target as the origin "
                    "defines it, or exclude it from the route; apply resumes by itself",
                ),
            )
        if code in _MISSING_COLUMN or code in _NO_DEFAULT:
            return SchemaMismatchError(
                context + cause,
                self._with_ddl(
                    schema,
                    table,
                    "make the target table's columns match the "
                    "origin's (extra target columns need a default); "
                    "apply resumes by itself",
                ),
            )
        if code in _VALUE:
            return SchemaMismatchError(
                context + f"a value does not fit the target column: {cause}",
                self._with_ddl(
                    schema,
                    table,
                    "give the target column the origin's type "
                    "(ALTER TABLE … MODIFY); apply resumes by itself",
                ),
            )
        if code in _CONSTRAINT:
            if code == 1048 and statement is not None and statement.kind == "upsert":
                cause += (
                    " (on an upsert this also means: the row clashes with a different row on "
                    "another unique key of the target)"
                )
            return ConstraintError(
                context + f"the target refused a row: {cause}",
                "the target's constraints or data differ from the origin's: compare the table "
                "on both sides (reconcile), fix the target, or skip this transaction on purpose "
                "(checkpoint.skip, recorded in binlogsync.skipped)",
            )
        if code in _TRANSIENT:
            return ApplyError(
                context + f"{cause} (another session holds the rows)",
                "transient: apply retries from the checkpoint",
            )
        if code in _DENIED:
            return ApplyError(
                context + cause,
                "grant the applier's account SELECT, INSERT, UPDATE, DELETE on the routed tables",
            )
        return ApplyError(context + cause, "see the MySQL error; apply retries from the checkpoint")
