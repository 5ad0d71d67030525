"""The MariaDB/MySQL engine adapter: what the exactly-once core (apply/core.py) needs of a
MariaDB or MySQL target, and nothing the core decides.

    connection   PyMySQL through mysql.py (TLS, timeouts); sessions at time_zone '+00:00'
                 (TIMESTAMPs travel as naive UTC), the server's sql_mode without the modes
                 that refuse dates the origin stored, plus NO_AUTO_VALUE_ON_ZERO (an id 0
                 replays as 0) and ALLOW_INVALID_DATES; autocommit off; utf8mb4. A
                 connection the server closed is found at the start of every call (from its
                 socket: mysql.still_open) and opened again
    binlogsync   the checkpoint and skipped tables (checkpoint.py), made on first use
    catalog      the target's tables, keys and columns (targettables.py), read once and
                 again after any error; the origin's DDL noted for messages
    writes       merged, parameterized statements (statements.py; a change of many rows
                 written column by column, already bound: literals.py) run one at a time on
                 a worker thread while the next is built (pipeline.py); a statement
                 spanning several origin transactions that fails on its data is `Ambiguous`
    schema       the origin's DDL followed as statements built here (schemachange.py)
    errors       PyMySQL's, told as ours with origin, transaction, table and fix (failures.py)

The checkpoint row is written first in every target transaction: it locks the row against a
concurrent skip, and in the target's own binlog it comes before the rows, so a two-way capture
recognises our transactions from their first event (loop prevention). A seed chunk applied in
a lane (`begin_lane`, one of several connections side by side) writes its lane's row first
instead, and reads and moves the checkpoint under its lock last (`lock_checkpoint`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pymysql
from pymysql.constants import SERVER_STATUS

from ... import mysql
from ...config import DatabaseSettings
from ...errors import ApplyError, BinlogsyncError, SchemaMismatchError, UnreachableError
from ...model import Change, coalesced
from ...position import Position
from ...tabledef import describe
from ..base import Ambiguous, KeyPlan
from . import checkpoint as checkpoints
from . import failures, loaddata
from .pipeline import Pipeline, StatementFailed, execute
from .schemachange import plan_ddl
from .statements import (
    BULK_ROWS,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    Statement,
    StatementBuilder,
)
from .targettables import TargetTables, context

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


def replayable(error: BaseException) -> bool:
    """Whether a group that failed as its net change is worth applying again unreduced: not
    when the target was unreachable or a lock wait or deadlock struck (the caller retries)."""
    if isinstance(error, UnreachableError):
        return False
    cause = error.__cause__
    return not (isinstance(cause, pymysql.err.MySQLError) and mysql.kind_of(cause) == "transient")


class MariaDBEngine:
    """One origin's view of one MariaDB/MySQL target. Connects lazily and checks the
    connection at the start of every transaction."""

    kind = "mysql"
    streams = True

    def __init__(
        self,
        db: DatabaseSettings,
        origin: str,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        connect_timeout: float = 10.0,
        execute: Callable[[Any, Statement], None] | None = None,
    ) -> None:
        self.db = db
        self.origin = origin
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.connect_timeout = connect_timeout
        self.tables = TargetTables(origin, db)
        self.execute = execute or _execute
        self._conn: Any = None
        self._packet_bytes = max_bytes
        self._strict = True  # the session's sql_mode is strict (decides the upsert guard)
        self._load_data = False  # the server takes LOAD DATA LOCAL (@@local_infile)
        self._schema_ready = False
        self._doing = ""  # what the current call is doing, for messages
        self._executor: ThreadPoolExecutor | None = None

    @property
    def connection_id(self) -> int | None:
        """The server's id of the current connection (None when not connected)."""
        return None if self._conn is None else int(self._conn.thread_id())

    # -- the engine face ----------------------------------------------------------------------
    def checkpoint(self) -> Position | None:
        try:
            conn = self._connection()
            with conn.cursor() as cur:
                self._doing = "reading the checkpoint"
                position = checkpoints.read(cur, self.origin)
            conn.rollback()
        except (pymysql.err.MySQLError, OSError) as exc:
            raise self.translate(exc, None, None, None) from exc
        return position

    def begin(self, base: Position | None, known: bool) -> MariaDBSession:
        conn = self._connection()
        cur = conn.cursor()
        try:
            if not known:
                self._doing = "reading the checkpoint"
                base = checkpoints.read(cur, self.origin)
        except (pymysql.err.MySQLError, OSError) as exc:
            cur.close()
            raise self.translate(exc, None, None, None) from exc
        except BaseException:
            cur.close()
            raise
        return MariaDBSession(self, cur, base)

    def begin_lane(self, lane: int, snapshot: Position) -> MariaDBSession:
        """A target transaction for a seed chunk applied beside others: its lane's marker row
        first; the checkpoint is read (locked) and moved only at its end (`lock_checkpoint`)."""
        conn = self._connection()
        cur = conn.cursor()
        try:
            self._doing = "marking the lane"
            checkpoints.mark_lane(cur, self.origin, lane, snapshot)
        except (pymysql.err.MySQLError, OSError) as exc:
            cur.close()
            self.rollback()
            raise self.translate(exc, None, None, None) from exc
        except BaseException:
            cur.close()
            raise
        return MariaDBSession(self, cur, None)

    def follow_schema(self, change: Change, position: Position, mode: str) -> list[str]:
        try:
            conn = self._connection()
            with conn.cursor() as cur:
                self._doing = "reading the table definition"
                steps = plan_ddl(change, mode, partial(describe, cur))  # type: ignore[arg-type]
                if steps.refused:
                    raise SchemaMismatchError(
                        context(self.origin, self.tables.target, position, change.schema,
                                change.table)
                        + f"the origin's DDL ({change.statement[:300]}) cannot be followed "
                        f"under apply_schema_changes = \"{mode}\": " + "; ".join(steps.refused),
                        "run the matching DDL on the target yourself (apply resumes by "
                        "itself), or set apply_schema_changes = \"all\" where that is wanted, "
                        "or `binlogsync skip` this DDL transaction",
                    )  # fmt: skip
                for sql, params in steps.statements:
                    self._doing = f"changing the table as the origin did: {sql[:200]}"
                    cur.execute(sql, params or None)
            return list(steps.changes)
        except (pymysql.err.MySQLError, OSError) as exc:
            raise self.translate(exc, None, position, None) from exc

    def note_ddl(self, position: Position, change: Change) -> None:
        self.tables.note_ddl(position, change)

    def forget(self) -> None:
        self.tables.forget()

    replayable = staticmethod(replayable)

    def close(self) -> None:
        self._drop()
        worker, self._executor = self._executor, None
        if worker is not None:
            worker.shutdown(wait=True)

    # -- connection ---------------------------------------------------------------------------
    def _connection(self) -> Any:
        if self._conn is not None and not mysql.still_open(self._conn):
            self._drop()
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def _open(self) -> Any:
        self._doing = "connecting"
        loaddata.install()
        try:
            conn = mysql.open_connection(
                self.db,
                charset="utf8mb4",
                autocommit=False,
                connect_timeout=self.connect_timeout,
                # large upserts may go as LOAD DATA LOCAL, whose rows come only from memory
                # (loaddata.py refuses any file the server names)
                local_infile=True,
            )
        except (pymysql.err.MySQLError, OSError) as exc:
            raise self.translate(exc, None, None, None) from exc
        loaddata.mark(conn)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@GLOBAL.sql_mode")
                found = cur.fetchone()
                mode = session_sql_mode(str(found[0] if found else ""))
                cur.execute("SET SESSION time_zone = '+00:00', sql_mode = %s", (mode,))
                cur.execute("SELECT @@max_allowed_packet, @@SESSION.sql_mode, @@local_infile")
                row = cur.fetchone()
            packet = int(row[0]) if row else 16 * 1024 * 1024
            modes = set(str(row[1] if row else "").upper().split(","))
            # MariaDB only: MySQL turns a value strict mode refuses into a warning under
            # LOAD DATA LOCAL, where the upsert fails (loaddata.py)
            self._load_data = bool(row and int(row[2])) and "mariadb" in (
                conn.get_server_info().lower()
            )
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
            error = self.translate(exc, None, None, None)
            mysql.close(conn)
            raise error from exc
        return conn

    def _worker(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"apply-{self.origin}")
        return self._executor

    def rollback(self) -> None:
        if self._conn is None:
            return
        try:
            self._conn.rollback()
        except (pymysql.err.MySQLError, OSError):
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        mysql.close(conn)

    # -- errors -------------------------------------------------------------------------------
    def translate(
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

    def failure(
        self,
        exc: BaseException,
        statement: Statement | None,
        position: Position | None,
        change: Change | None,
    ) -> BaseException:
        """Roll back after a driver error and say what to raise (Ambiguous, or ours)."""
        error = self.translate(exc, statement, position, change)
        self.rollback()
        error.__cause__ = exc
        transient = mysql.kind_of(exc) == "transient"
        if (
            statement is not None
            and statement.first != statement.last
            and not isinstance(error, UnreachableError)
            and not transient
        ):
            ambiguous = Ambiguous(error)
            ambiguous.__cause__ = exc
            return ambiguous
        if statement is not None and statement.first == statement.last:
            position = statement.first
        if position is not None and isinstance(error, ApplyError) and not transient:
            error.position = position
        return error


def _execute(cursor: Any, statement: Statement) -> None:
    """Run one statement: a bulk one on the pipeline's worker thread, its parameters bound
    already; one of few rows on the calling thread (pipeline.py)."""
    execute(cursor, statement)


class MariaDBSession:
    """One open target transaction: its cursor, the statements in flight, its checkpoint."""

    def __init__(self, engine: MariaDBEngine, cursor: Any, base: Position | None) -> None:
        self.engine = engine
        self.cursor = cursor
        self.base = base
        self.pipeline = Pipeline(cursor, engine._worker(), engine.execute)
        # Values written as literals in bulk need the backslash escapes (as `bind` does).
        escapes = (
            not cursor.connection.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES
        )
        self.builder = StatementBuilder(
            engine.max_rows, engine._packet_bytes, bulk=escapes, load=engine._load_data
        )
        engine.tables.before_query = self.pipeline.wait  # one statement at a time
        self._open = True

    @property
    def span_from(self) -> Position | None:
        return self.builder.span_from

    @span_from.setter
    def span_from(self, position: Position | None) -> None:
        self.builder.span_from = position

    def set_checkpoint(self, new: Position, count: int, epoch: str | None) -> None:
        """Move the checkpoint, compared with the one this transaction read or last wrote (a
        transaction in parts marks it with its first write and moves it with its last)."""
        self.engine._doing = "moving the checkpoint"
        try:
            self.pipeline.wait()
            checkpoints.write(
                self.cursor, self.engine.origin, new, count, expected=self.base, epoch=epoch
            )
        except StatementFailed as failed:
            raise self._statement_failed(failed) from failed.cause
        except (pymysql.err.MySQLError, OSError) as exc:
            self._end()
            raise self.engine.failure(exc, None, None, None) from exc
        self.base = new

    def lock_checkpoint(self) -> Position | None:
        """Read the checkpoint now, locked until this transaction ends (a lane's chunk, after
        its rows: it waits here for another lane's commit); it becomes `base`."""
        self.engine._doing = "reading the checkpoint"
        try:
            self.pipeline.wait()
            self.base = checkpoints.read(self.cursor, self.engine.origin, lock=True)
        except StatementFailed as failed:
            raise self._statement_failed(failed) from failed.cause
        except (pymysql.err.MySQLError, OSError) as exc:
            self._end()
            raise self.engine.failure(exc, None, None, None) from exc
        return self.base

    def record_skip(self, position: Position, reason: str) -> None:
        self.engine._doing = "recording the skip"
        try:
            checkpoints.record_skip(self.cursor, self.engine.origin, position, reason)
        except (pymysql.err.MySQLError, OSError) as exc:
            self._end()
            raise self.engine.failure(exc, None, None, None) from exc

    def plan(self, change: Change, position: Position) -> KeyPlan | None:
        engine = self.engine
        engine._doing = "reading the table definition"
        try:
            layout = engine.tables.layout(self.cursor, position, change, engine._strict)
        except (pymysql.err.MySQLError, OSError) as exc:
            raise engine.failure(exc, None, position, change) from exc
        finally:
            engine._doing = ""
        return None if layout.foreign_keys or layout.triggers else layout

    def add(
        self,
        changes: Sequence[Change],
        position: Position,
        timestamp: float | None = None,
        streamed: bool = False,
    ) -> None:
        """Queue the statements of `changes` (all of the transaction at `position`)."""
        engine, cur = self.engine, self.cursor
        builder, pipeline = self.builder, self.pipeline
        change: Change | None = None
        statement: Statement | None = None
        try:
            for change in coalesced(changes, BULK_ROWS):  # large runs of a table: in bulk
                if change.kind == "ddl":
                    engine._doing = "reading the table definition"
                    engine.tables.check_ddl(cur, position, change)
                    engine.tables.note_ddl(position, change)
                    engine._doing = ""
                    continue
                engine._doing = "reading the table definition"
                if change.kind == "truncate":
                    engine.tables.table(cur, position, change.schema, change.table)
                    ready = builder.truncate(change.schema, change.table, position)
                else:
                    layout = engine.tables.layout(cur, position, change, engine._strict)
                    ready = builder.add(change, layout, position)
                engine._doing = ""
                for statement in ready:
                    pipeline.submit(statement)
                statement = None
        except StatementFailed as failed:
            raise self._statement_failed(failed) from failed.cause
        except (pymysql.err.MySQLError, OSError) as exc:
            pipeline.settle()
            raise engine.failure(exc, statement, position, change) from exc
        except ApplyError as exc:
            if exc.position is None:
                exc.position = position
            raise

    def flush(self) -> None:
        """Send what is built so far: nothing merges across this point."""
        statement: Statement | None = None
        try:
            for statement in self.builder.flush():
                self.pipeline.submit(statement)
        except StatementFailed as failed:
            raise self._statement_failed(failed) from failed.cause
        except (pymysql.err.MySQLError, OSError) as exc:
            self.pipeline.settle()
            raise self.engine.failure(exc, statement, None, None) from exc

    def finish(self, commit: bool) -> None:
        """Run what is left, then commit (or roll back, for a dry run)."""
        engine, builder, pipeline = self.engine, self.builder, self.pipeline
        try:
            final = builder.flush()
            for statement in final[:-1]:
                pipeline.submit(statement)
            if final:
                pipeline.run_here(final[-1])
            pipeline.wait()
            if commit:
                engine._doing = "committing"
                engine._conn.commit()
            else:
                engine._conn.rollback()
        except StatementFailed as failed:
            raise self._statement_failed(failed) from failed.cause
        except (pymysql.err.MySQLError, OSError) as exc:
            raise engine.failure(exc, None, None, None) from exc
        finally:
            self._end()

    def abort(self) -> None:
        self._end()
        self.engine.rollback()

    def _statement_failed(self, failed: StatementFailed) -> BaseException:
        statement = failed.statement
        self.pipeline.settle()
        self.engine._doing = f"running a {statement.rows}-row {statement.kind}"
        return self.engine.failure(failed.cause, statement, None, None)

    def _end(self) -> None:
        if not self._open:
            return
        self._open = False
        self.pipeline.settle()
        try:
            self.cursor.close()
        except (pymysql.err.MySQLError, OSError):
            pass
