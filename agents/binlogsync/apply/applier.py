"""`Applier`: the exactly-once core (core.py) over the MariaDB/MySQL engine (engines/mariadb/),
with the arguments a MariaDB/MySQL target takes. The guarantee lives in the core; what is
MariaDB's (sessions, statements, errors, DDL) in the adapter.
"""

from __future__ import annotations

from typing import Any

from ..config import DatabaseSettings
from ..engines.base import StaleStream
from ..engines.mariadb.engine import MariaDBEngine, session_sql_mode
from ..engines.mariadb.pipeline import execute
from ..engines.mariadb.statements import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, Statement
from ..engines.mariadb.targettables import TargetTables
from ..position import Position
from .core import Mode, Target, failed_at

__all__ = ["Applier", "StaleStream", "failed_at", "session_sql_mode"]


class Applier(Target):
    """Applies one origin's transactions to one MariaDB/MySQL target database. Connects
    lazily, checks the connection at the start of every call and reconnects if it was lost.
    `epoch` (the hub log's identity, from WELCOME) is written with every checkpoint."""

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
        engine = MariaDBEngine(
            db,
            origin,
            max_rows=max_rows,
            max_bytes=max_bytes,
            connect_timeout=connect_timeout,
            execute=self._execute,
        )
        super().__init__(engine, origin, epoch=epoch, reduce=reduce, schema_changes=schema_changes)
        self.db = db
        self.mariadb = engine

    @property
    def tables(self) -> TargetTables:
        return self.mariadb.tables

    @property
    def connection_id(self) -> int | None:
        """The server's id of the current connection (None when not connected)."""
        return self.mariadb.connection_id

    def _execute(self, cursor: Any, statement: Statement) -> None:
        """Run one statement: a bulk one on the pipeline's worker thread, its parameters bound
        already; one of few rows on the calling thread (pipeline.py)."""
        execute(cursor, statement)


def skip(db: DatabaseSettings, origin: str, position: Position, reason: str) -> Position:
    """Move `origin`'s checkpoint on the MySQL target `db` past `position`, with a record
    (core.Target.skip says what is refused)."""
    with Applier(db, origin) as applier:
        return applier.skip(position, reason)
