"""Database sessions for reconciliation: PyMySQL with the settings every read needs.

Every session: utf8mb4, `time_zone = '+00:00'` (TIMESTAMP values read alike on both sides),
REPEATABLE READ (so `START TRANSACTION WITH CONSISTENT SNAPSHOT` is a snapshot), autocommit on
between explicit transactions, and a read timeout long enough for one chunk's checksum.
Connection failures become `UnreachableError` naming the server; nothing here writes.
"""

from __future__ import annotations

from typing import Any

import pymysql

from ..config import DatabaseSettings
from ..errors import UnreachableError


def connect(db: DatabaseSettings, role: str, read_timeout: int = 3600) -> pymysql.Connection:
    try:
        conn = pymysql.connect(
            **db.connect_args(),
            charset="utf8mb4",
            autocommit=True,
            connect_timeout=10,
            read_timeout=read_timeout,
        )
    except pymysql.err.MySQLError as exc:
        raise UnreachableError(
            f"the {role} database {db} cannot be reached: {_reason(exc)}",
            "check that the server runs and that the URL's host, port, user and password are right",
        ) from exc
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    return conn


def close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - already gone
        pass


def _reason(exc: BaseException) -> str:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    return str(args[1]) if len(args) > 1 else str(exc)
