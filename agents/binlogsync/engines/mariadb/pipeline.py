"""Run one target transaction's statements in order, overlapping building with executing.

The next statement is built and bound (escaped by the driver) on the caller's thread while the
server executes the previous one on a worker thread: the two halves of the work overlap. Every
other use of the connection waits for the running statement first (`wait`).

A statement of fewer than `HANDOVER_ROWS` rows runs on the caller's thread: there is little to
overlap, and handing it over costs more than that (a future, waking the worker thread, the GIL
going back and forth): a one-row upsert cost the agent 132-160 µs of CPU handed over against
73-85 µs run in place, measured here.

A LOAD DATA statement runs on the caller's thread too when that thread has idle work
(binlogsync/idle.py: a draining target decodes its next group while the server loads the rows
just sent): that work, not the building of the next statement, fills the wait.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pymysql
from pymysql import converters
from pymysql.constants import SERVER_STATUS

from ... import idle
from . import loaddata
from .statements import Statement


class StatementFailed(Exception):
    """A statement failed: the driver error and the statement (internal to apply/)."""

    def __init__(self, cause: BaseException, statement: Statement) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.statement = statement


def execute(cursor: Any, statement: Statement) -> None:
    if statement.load is not None:
        loaddata.execute(cursor, statement.sql, *statement.load)
    else:
        cursor.execute(statement.sql, statement.params)


_TABLE = converters._escape_table  # what the driver's escape_string translates with


def bind(connection: Any, sql: str, params: Sequence[Any] | None) -> str:
    """`sql` with `params` as literals, exactly as the driver's `mogrify` writes them, for the
    value types `statements.convert` leaves (str, int, None, bytes, Decimal, float): a seed or
    a catch-up binds millions of values, and the driver's generic escape (isinstance chains,
    an encoder lookup per value) was half of the target agent's time. Other types go to the
    driver's own escape."""
    if params is None:
        return sql
    if connection.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES:
        return sql % tuple(map(connection.escape, params))
    translate = _TABLE
    out = []
    for value in params:
        kind = type(value)
        if kind is str:
            out.append("'" + value.translate(translate) + "'")
        elif kind is int:
            out.append(str(value))
        elif value is None:
            out.append("NULL")
        elif kind is bytes:
            out.append("X'" + value.hex() + "'")
        elif kind is Decimal and value.is_finite():
            out.append(format(value, "f"))
        elif kind is float and math.isfinite(value):
            text = repr(value)
            out.append(text if "e" in text else text + "e0")
        else:
            out.append(connection.escape(value))  # and the driver's error for NaN or infinity
    return sql % tuple(out)


HANDOVER_ROWS = 100


class Pipeline:
    """One statement at a time on `cursor`, run by `worker` (a one-thread executor) with
    `run` (`execute` unless a test records statements)."""

    def __init__(
        self,
        cursor: Any,
        worker: ThreadPoolExecutor,
        run: Callable[[Any, Statement], None] = execute,
    ) -> None:
        self.cursor = cursor
        self.worker = worker
        self.run = run
        self.running: Future[None] | None = None
        self.statement: Statement | None = None

    def submit(self, statement: Statement) -> None:
        if statement.rows < HANDOVER_ROWS or (statement.load is not None and idle.available()):
            # A LOAD DATA on a thread with idle work runs here, that work filling its wait
            # (idle.py) instead of the building of the next statement.
            self.run_here(statement)
            return
        bound = replace(
            statement,
            sql=bind(self.cursor.connection, statement.sql, statement.params),
            params=None,
        )
        self.wait()
        self.statement = statement
        self.running = self.worker.submit(self.run, self.cursor, bound)

    def run_here(self, statement: Statement) -> None:
        """Run `statement` on the calling thread, after the running one: with nothing left to
        overlap, a hand-over to the worker thread would only add latency."""
        self.wait()
        try:
            self.run(self.cursor, statement)
        except (pymysql.err.MySQLError, OSError) as exc:
            raise StatementFailed(exc, statement) from exc

    def wait(self) -> None:
        """Wait for the running statement; its driver error is raised as StatementFailed."""
        running, statement = self.running, self.statement
        self.running = self.statement = None
        if running is None or statement is None:
            return
        try:
            running.result()
        except (pymysql.err.MySQLError, OSError) as exc:
            raise StatementFailed(exc, statement) from exc

    def settle(self) -> None:
        """Wait for the running statement and ignore how it ended (an error is being raised)."""
        running, self.running, self.statement = self.running, None, None
        if running is not None:
            wait([running])
