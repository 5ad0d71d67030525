"""Database sessions for reconciliation: PyMySQL with the settings every read needs.

Every session: utf8mb4, `time_zone = '+00:00'` (TIMESTAMP values read alike on both sides),
REPEATABLE READ (so `START TRANSACTION WITH CONSISTENT SNAPSHOT` is a snapshot), autocommit on
between explicit transactions, and a read timeout long enough for one chunk's checksum.
Connection failures become `UnreachableError` naming the server; nothing here writes.
"""

from __future__ import annotations

from typing import Any

import pymysql

from .. import mysql
from ..config import DatabaseSettings
from ..errors import UnreachableError

close = mysql.close


def connect(
    db: DatabaseSettings, role: str, read_timeout: int = 3600, **extra: Any
) -> pymysql.Connection:
    conn = mysql.connect(
        db,
        f"reading the {role} database {db}",
        connect_timeout=10,
        read_timeout=read_timeout,
        refused=UnreachableError,
        **extra,
    )
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    return conn
