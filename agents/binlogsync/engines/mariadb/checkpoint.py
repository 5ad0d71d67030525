"""The apply checkpoint on a target: which origin transactions it already holds.

A small `binlogsync` schema on every target:

    checkpoint  one row per origin: the position of the last transaction applied (pos_key is
                Position.key, the order), the epoch of the hub log that delivered it, how
                many transactions were applied in total, when
    skipped     one row per explicit skip: the position the checkpoint was moved to, and why
    lane        one row per origin and apply connection that seed chunks use side by side
                (apply/core.py `repair_in_lane`): the snapshot of the last chunk it applied

The checkpoint row is written in the same target transaction as the rows it covers, and
before them, so a transaction is either applied and counted, or neither (delivery is
at-least-once, the effect exactly-once), and so the target's own binlog shows the marker
before the rows (two-way sync recognises them by it). Seed chunks applied side by side on
several connections write their `lane` row first instead, as their marker, and move the
checkpoint last: the checkpoint row's lock then serialises only their commits, not their
rows. `skip()` is the only way past a transaction that cannot be applied, and it leaves a
record.

This module is the one reader and writer of these tables: the applier, the target role's
HELLO, reconciliation and the dev harness all read checkpoints through `read`/`read_all`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from ... import mysql
from ...config import DatabaseSettings
from ...errors import ApplyError
from ...position import Position

SCHEMA = "binlogsync"

_DDL = (
    f"CREATE DATABASE IF NOT EXISTS `{SCHEMA}` CHARACTER SET utf8mb4",
    f"""CREATE TABLE IF NOT EXISTS `{SCHEMA}`.`checkpoint` (
        origin VARCHAR(64) NOT NULL PRIMARY KEY,
        pos_key BIGINT UNSIGNED NOT NULL,
        file VARCHAR(255),
        `offset` BIGINT UNSIGNED,
        gtid VARCHAR(255),
        epoch VARCHAR(64),
        scheme VARCHAR(8),
        applied_transactions BIGINT UNSIGNED NOT NULL DEFAULT 0,
        applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
    ) ENGINE=InnoDB""",
    f"""CREATE TABLE IF NOT EXISTS `{SCHEMA}`.`skipped` (
        id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        origin VARCHAR(64) NOT NULL,
        pos_key BIGINT UNSIGNED NOT NULL,
        file VARCHAR(255),
        `offset` BIGINT UNSIGNED,
        gtid VARCHAR(255),
        scheme VARCHAR(8),
        reason TEXT NOT NULL,
        skipped_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        KEY origin_pos (origin, pos_key)
    ) ENGINE=InnoDB""",
    f"""CREATE TABLE IF NOT EXISTS `{SCHEMA}`.`lane` (
        origin VARCHAR(64) NOT NULL,
        lane SMALLINT UNSIGNED NOT NULL,
        pos_key BIGINT UNSIGNED NOT NULL,
        gtid VARCHAR(255),
        applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        PRIMARY KEY (origin, lane)
    ) ENGINE=InnoDB""",
)
# Tables made by binlogsync 0.1.0 lack the epoch; adding a nullable column keeps their rows.
# Tables made before GTID positions lack `scheme` (NULL: the file scheme, which their rows are).
_MIGRATIONS = (
    ("checkpoint", "epoch", "ADD COLUMN epoch VARCHAR(64) AFTER gtid"),
    ("checkpoint", "scheme", "ADD COLUMN scheme VARCHAR(8) AFTER epoch"),
    ("skipped", "scheme", "ADD COLUMN scheme VARCHAR(8) AFTER gtid"),
)

_ANY: Any = object()
_GRANTS = (
    "the account needs SELECT, INSERT, UPDATE, DELETE on the routed tables and CREATE, "
    "ALTER, SELECT, INSERT, UPDATE on binlogsync.*"
)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One origin's row in binlogsync.checkpoint."""

    origin: str
    position: Position
    epoch: str | None
    applied_transactions: int

    def to_json(self) -> dict[str, object]:
        """The form HELLO carries: the position's JSON form plus the epoch."""
        return {**self.position.to_json(), "epoch": self.epoch}


@dataclass(frozen=True, slots=True)
class Skipped:
    """One explicit skip, as recorded in binlogsync.skipped."""

    id: int
    origin: str
    position: Position
    reason: str
    skipped_at: dt.datetime  # naive UTC


def ensure_schema(conn: Any) -> None:
    """Create the binlogsync schema and its tables if they are missing (DDL: commits)."""
    with conn.cursor() as cur:
        for statement in _DDL:
            cur.execute(statement)
        for table, column, change in _MIGRATIONS:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = %s AND COLUMN_NAME = %s",
                (SCHEMA, table, column),
            )
            if not cur.fetchone()[0]:
                cur.execute(f"ALTER TABLE `{SCHEMA}`.`{table}` {change}")


def _position(file: Any, offset: Any, gtid: Any, scheme: Any) -> Position:
    """A stored position; a row without `scheme` was written in the file scheme."""
    if scheme == "gtid":
        return Position(file or "", int(offset or 0), gtid or "", "gtid")
    return Position(file, int(offset), gtid)


def _row(row: Any) -> Checkpoint:
    origin, file, offset, gtid, epoch, scheme, count = row
    return Checkpoint(origin, _position(file, offset, gtid, scheme), epoch, int(count))


_SELECT = (
    "SELECT origin, file, `offset`, gtid, epoch, scheme, applied_transactions "
    f"FROM `{SCHEMA}`.`checkpoint`"
)


def read(cursor: Any, origin: str, lock: bool = False) -> Position | None:
    """The last applied position of `origin`, or None when nothing was applied yet."""
    cursor.execute(_SELECT + " WHERE origin = %s" + (" FOR UPDATE" if lock else ""), (origin,))
    row = cursor.fetchone()
    return None if row is None else _row(row).position


def read_all(cursor: Any) -> dict[str, Checkpoint] | None:
    """Every origin's checkpoint; None when the target has no checkpoint table at all."""
    cursor.execute(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = 'checkpoint'",
        (SCHEMA,),
    )
    columns = {str(r[0]).lower() for r in cursor.fetchall()}
    if not columns:
        return None
    # A table of an older version, not migrated yet: no epochs (0.1.0), no schemes (file).
    epoch = "epoch" if "epoch" in columns else "NULL"
    scheme = "scheme" if "scheme" in columns else "NULL"
    cursor.execute(
        f"SELECT origin, file, `offset`, gtid, {epoch}, {scheme}, applied_transactions "
        f"FROM `{SCHEMA}`.`checkpoint` ORDER BY origin"
    )
    return {c.origin: c for c in map(_row, cursor.fetchall())}


def fetch_all(db: DatabaseSettings, connect_timeout: float = 5) -> dict[str, Checkpoint]:
    """Connect to `db` and read every checkpoint (no table: none)."""
    doing = f"reading the checkpoints on target {db}"
    conn = mysql.connect(db, doing, connect_timeout=connect_timeout)
    try:
        with mysql.errors(db, doing), conn.cursor() as cur:
            return read_all(cur) or {}
    finally:
        mysql.close(conn)


def write(
    cursor: Any,
    origin: str,
    position: Position,
    count: int,
    expected: Position | None = _ANY,
    epoch: str | None = None,
) -> None:
    """Move `origin`'s checkpoint to `position`, adding `count` applied transactions.

    Runs inside the caller's transaction. With `expected` (the checkpoint the caller read,
    None for "no row yet") the write only succeeds if nobody moved the checkpoint meanwhile
    (another applier of the same origin, or a skip); otherwise ApplyError, and the caller rolls
    back. The row stays locked until the caller's transaction ends.
    """
    scheme = position.scheme if position.by_gtid else None
    values = (position.key, position.file, position.offset, position.gtid, epoch, scheme, count)
    if expected is _ANY:
        cursor.execute(
            f"INSERT INTO `{SCHEMA}`.`checkpoint` "
            "(origin, pos_key, file, `offset`, gtid, epoch, scheme, applied_transactions, "
            "applied_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, CURRENT_TIMESTAMP(6)) "
            "ON DUPLICATE KEY UPDATE "
            "pos_key = VALUES(pos_key), file = VALUES(file), `offset` = VALUES(`offset`), "
            "gtid = VALUES(gtid), epoch = COALESCE(VALUES(epoch), epoch), "
            "scheme = VALUES(scheme), "
            "applied_at = VALUES(applied_at), "
            "applied_transactions = applied_transactions + VALUES(applied_transactions)",
            (origin, *values),
        )
        return
    moved = False
    if expected is None:
        try:
            cursor.execute(
                f"INSERT INTO `{SCHEMA}`.`checkpoint` "
                "(origin, pos_key, file, `offset`, gtid, epoch, scheme, applied_transactions, "
                "applied_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, CURRENT_TIMESTAMP(6))",
                (origin, *values),
            )
        except Exception as exc:
            if mysql.code_of(exc) != 1062:
                raise
            moved = True
    else:
        moved = not cursor.execute(
            f"UPDATE `{SCHEMA}`.`checkpoint` SET pos_key = %s, file = %s, `offset` = %s, "
            "gtid = %s, epoch = COALESCE(%s, epoch), scheme = %s, "
            "applied_transactions = applied_transactions + %s, "
            "applied_at = CURRENT_TIMESTAMP(6) WHERE origin = %s AND pos_key = %s",
            (*values, origin, expected.key),
        )
    if moved:
        raise ApplyError(
            f"origin {origin}: the checkpoint on the target moved while transactions up to "
            f"{position} were being applied (expected {expected or 'no checkpoint'}); "
            "nothing of this call was kept",
            "another applier for the same origin is running, or someone skipped a transaction; "
            "run one applier per origin and target — the next attempt re-reads the checkpoint",
        )


def mark_lane(cursor: Any, origin: str, lane: int, snapshot: Position) -> None:
    """The first write of a seed chunk applied in `lane` (inside the caller's transaction): the
    marker a two-way capture recognises, on a row no other lane locks."""
    cursor.execute(
        f"INSERT INTO `{SCHEMA}`.`lane` (origin, lane, pos_key, gtid, applied_at) "
        "VALUES (%s, %s, %s, %s, CURRENT_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE "
        "pos_key = VALUES(pos_key), gtid = VALUES(gtid), applied_at = VALUES(applied_at)",
        (origin, lane, snapshot.key, snapshot.gtid),
    )


def _connect(db: DatabaseSettings, doing: str) -> Any:
    conn = mysql.connect(db, doing, autocommit=False, connect_timeout=10, grants=_GRANTS)
    with mysql.errors(db, doing, ApplyError, _GRANTS), conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
    return conn


def record_skip(cursor: Any, origin: str, position: Position, reason: str) -> None:
    """The `skipped` row of an explicit skip, in the caller's transaction (core.Target.skip)."""
    cursor.execute(
        f"INSERT INTO `{SCHEMA}`.`skipped` (origin, pos_key, file, `offset`, gtid, scheme, "
        "reason) VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (origin, position.key, position.file, position.offset, position.gtid,
         position.scheme if position.by_gtid else None, reason),
    )  # fmt: skip


def list_skipped(db: DatabaseSettings, origin: str | None = None) -> list[Skipped]:
    """The recorded skips on target `db`, oldest first; only `origin`'s when given."""
    doing = f"listing skipped transactions on target {db}"
    conn = _connect(db, doing)
    try:
        with mysql.errors(db, doing, ApplyError, _GRANTS):
            ensure_schema(conn)
            with conn.cursor() as cur:
                where, args = ("WHERE origin = %s", (origin,)) if origin is not None else ("", ())
                cur.execute(
                    f"SELECT id, origin, file, `offset`, gtid, scheme, reason, skipped_at "
                    f"FROM `{SCHEMA}`.`skipped` {where} ORDER BY id",
                    args,
                )
                rows = cur.fetchall()
            conn.rollback()
    finally:
        mysql.close(conn)
    return [Skipped(int(r[0]), r[1], _position(r[2], r[3], r[4], r[5]), r[6], r[7]) for r in rows]


def _rollback(conn: Any) -> None:
    try:
        conn.rollback()
    except Exception:  # noqa: BLE001 - the connection may be gone; nothing was committed
        pass
