"""Where each table was last found equal on each target: the state of `--since-last`.

One row per (source table, target table) in the target's `binlogsync.reconcile_verified`,
written by every pinned run: the source position P1 from which the table was compared (the
earliest source snapshot of its chunks) when it was found equal, and deleted when it was not
(different, unsettled or not compared), so that an incremental run never starts from a state
that was not verified. A run pinned `none` writes nothing (a static comparison proves nothing
about a position).

The row is written with the binlog off for the session where the account may (a target that is
itself an origin must not send it on); it is ours, like `binlogsync.checkpoint`. An account
that may not write there makes the run say so in a note; the comparison itself stands.
"""

from __future__ import annotations

import json
from typing import Any

import pymysql

from ..errors import ProtocolError
from ..position import Position

TABLE = "binlogsync.reconcile_verified"
_DDL = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    source_table VARCHAR(200) NOT NULL,
    target_table VARCHAR(200) NOT NULL,
    pos_key BIGINT UNSIGNED NOT NULL,
    position VARCHAR(600) NOT NULL,
    verified_at DATETIME(6) NOT NULL,
    PRIMARY KEY (source_table, target_table)
) ENGINE=InnoDB"""


def read(conn: Any, source_table: str, target_table: str) -> Position | None:
    """P1 of the last run that found the table equal there; None when there is none (never
    verified, not equal last time, the state table missing, or unreadable)."""
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT position FROM {TABLE} WHERE source_table = %s AND target_table = %s",
                (source_table, target_table),
            )
            row = cur.fetchone()
    except pymysql.err.MySQLError:  # no such table yet (or no grant): a full run rebuilds it
        return None
    if row is None:
        return None
    try:
        return Position.from_json(json.loads(row[0]))
    except (ValueError, ProtocolError):
        return None


def write(conn: Any, source_table: str, target_table: str, position: Position | None) -> None:
    """Record P1 (or, with None, forget the table). pymysql errors go to the caller."""
    with conn.cursor() as cur:
        try:
            cur.execute("SET SESSION sql_log_bin = 0")
        except pymysql.err.MySQLError:
            pass  # no BINLOG ADMIN: the row goes to the target's binlog, which is harmless
        cur.execute("CREATE DATABASE IF NOT EXISTS binlogsync")
        cur.execute(_DDL)
        if position is None:
            cur.execute(
                f"DELETE FROM {TABLE} WHERE source_table = %s AND target_table = %s",
                (source_table, target_table),
            )
        else:
            cur.execute(
                f"REPLACE INTO {TABLE} VALUES (%s, %s, %s, %s, UTC_TIMESTAMP(6))",
                (
                    source_table,
                    target_table,
                    position.key,
                    json.dumps(position.to_json()),
                ),
            )
    conn.commit()
