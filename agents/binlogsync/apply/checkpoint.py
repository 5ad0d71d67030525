"""The apply checkpoint on a target: which origin transactions it already holds.

A small `binlogsync` schema on every target:

    checkpoint  one row per origin: the position of the last transaction applied (pos_key is
                Position.key, the order), how many transactions were applied in total, when
    skipped     one row per explicit skip: the position the checkpoint was moved to, and why

The checkpoint row is written in the same target transaction as the rows it covers, so a
transaction is either applied and counted, or neither: delivery is at-least-once, the effect
exactly-once. `skip()` is the only way past a transaction that cannot be applied, and it leaves
a record.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import pymysql

from ..config import DatabaseSettings
from ..errors import ApplyError, UnreachableError
from ..position import Position

SCHEMA = "binlogsync"

_DDL = (
    f"CREATE DATABASE IF NOT EXISTS `{SCHEMA}` CHARACTER SET utf8mb4",
    f"""CREATE TABLE IF NOT EXISTS `{SCHEMA}`.`checkpoint` (
        origin VARCHAR(64) NOT NULL PRIMARY KEY,
        pos_key BIGINT UNSIGNED NOT NULL,
        file VARCHAR(255),
        `offset` BIGINT UNSIGNED,
        gtid VARCHAR(255),
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
        reason TEXT NOT NULL,
        skipped_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        KEY origin_pos (origin, pos_key)
    ) ENGINE=InnoDB""",
)

# Lost or refused connections: the server is unreachable now, try again later.
CONNECTION_ERRORS = frozenset(
    {
        1040,
        1053,
        1152,
        1154,
        1155,
        1156,
        1157,
        1158,
        1159,
        1160,
        1161,
        1927,
        2002,
        2003,
        2005,
        2006,
        2012,
        2013,
        2014,
        2026,
        2055,
    }
)

_ANY: Any = object()


@dataclass(frozen=True, slots=True)
class Skipped:
    """One explicit skip, as recorded in binlogsync.skipped."""

    id: int
    origin: str
    position: Position
    reason: str
    skipped_at: dt.datetime  # naive UTC


def ensure_schema(conn: pymysql.connections.Connection) -> None:
    """Create the binlogsync schema and its tables if they are missing (DDL: commits)."""
    with conn.cursor() as cur:
        for statement in _DDL:
            cur.execute(statement)


def read(cursor: pymysql.cursors.Cursor, origin: str) -> Position | None:
    """The last applied position of `origin`, or None when nothing was applied yet."""
    cursor.execute(
        f"SELECT file, `offset`, gtid FROM `{SCHEMA}`.`checkpoint` WHERE origin = %s", (origin,)
    )
    row = cursor.fetchone()
    return None if row is None else Position(row[0], int(row[1]), row[2])


def write(
    cursor: pymysql.cursors.Cursor,
    origin: str,
    position: Position,
    count: int,
    expected: Position | None = _ANY,
) -> None:
    """Move `origin`'s checkpoint to `position`, adding `count` applied transactions.

    Runs inside the caller's transaction. With `expected` (the checkpoint the caller read,
    None for "no row yet") the write only succeeds if nobody moved the checkpoint meanwhile
    (another applier of the same origin, or a skip); otherwise ApplyError, and the caller rolls
    back.
    """
    values = (position.key, position.file, position.offset, position.gtid, count)
    if expected is _ANY:
        cursor.execute(
            f"INSERT INTO `{SCHEMA}`.`checkpoint` "
            "(origin, pos_key, file, `offset`, gtid, applied_transactions, applied_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, CURRENT_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE "
            "pos_key = VALUES(pos_key), file = VALUES(file), `offset` = VALUES(`offset`), "
            "gtid = VALUES(gtid), applied_at = VALUES(applied_at), "
            "applied_transactions = applied_transactions + VALUES(applied_transactions)",
            (origin, *values),
        )
        return
    moved = False
    if expected is None:
        try:
            cursor.execute(
                f"INSERT INTO `{SCHEMA}`.`checkpoint` "
                "(origin, pos_key, file, `offset`, gtid, applied_transactions, applied_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, CURRENT_TIMESTAMP(6))",
                (origin, *values),
            )
        except pymysql.err.IntegrityError as exc:
            if exc.args[0] != 1062:
                raise
            moved = True
    else:
        moved = not cursor.execute(
            f"UPDATE `{SCHEMA}`.`checkpoint` SET pos_key = %s, file = %s, `offset` = %s, "
            "gtid = %s, applied_transactions = applied_transactions + %s, "
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


def connect_args(db: DatabaseSettings) -> dict[str, Any]:
    """PyMySQL arguments for `db`."""
    return db.connect_args()


def _connect(db: DatabaseSettings) -> pymysql.connections.Connection:
    try:
        conn = pymysql.connect(
            **connect_args(db), charset="utf8mb4", autocommit=False, connect_timeout=10
        )
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
        return conn
    except pymysql.err.MySQLError as exc:
        raise _unreachable(db, exc) from exc


def _unreachable(db: DatabaseSettings, exc: BaseException) -> UnreachableError:
    return UnreachableError(
        f"target database {db} cannot be reached: {exc}",
        "check that the server runs and that host, port, user and password are right",
    )


def skip(db: DatabaseSettings, origin: str, position: Position, reason: str) -> Position:
    """Move `origin`'s checkpoint on the target `db` past `position`, on purpose, with a record.

    Everything up to and including `position` then counts as applied, so skip the transaction
    that an ApplyError names (`applier.failed_at`) once the transactions before it are applied.
    Refused (ApplyError) when `position` is at or below the checkpoint: that transaction is
    already applied. One target transaction: the `skipped` row and the checkpoint move commit
    together; a running applier notices the moved checkpoint at its next write.
    """
    if not reason.strip():
        raise ApplyError("a skip needs a reason", "say why the transaction is skipped")
    conn = _connect(db)
    try:
        ensure_schema(conn)
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT file, `offset`, gtid FROM `{SCHEMA}`.`checkpoint` "
                "WHERE origin = %s FOR UPDATE",
                (origin,),
            )
            row = cur.fetchone()
            current = None if row is None else Position(row[0], int(row[1]), row[2])
            if current is not None and position.key <= current.key:
                raise ApplyError(
                    f"origin {origin}: transaction {position} is already applied on target "
                    f"{db} (checkpoint {current}); nothing skipped",
                    "skip only the transaction that fails to apply, as its error names it",
                )
            cur.execute(
                f"INSERT INTO `{SCHEMA}`.`skipped` (origin, pos_key, file, `offset`, gtid, reason) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (origin, position.key, position.file, position.offset, position.gtid, reason),
            )
            write(cur, origin, position, 0, expected=current)
        conn.commit()
        return position
    except pymysql.err.MySQLError as exc:
        _rollback(conn)
        if exc.args and exc.args[0] in CONNECTION_ERRORS:
            raise _unreachable(db, exc) from exc
        raise ApplyError(f"origin {origin}: cannot skip {position} on target {db}: {exc}") from exc
    except BaseException:
        _rollback(conn)
        raise
    finally:
        conn.close()


def list_skipped(db: DatabaseSettings, origin: str | None = None) -> list[Skipped]:
    """The recorded skips on target `db`, oldest first; only `origin`'s when given."""
    conn = _connect(db)
    try:
        ensure_schema(conn)
        with conn.cursor() as cur:
            where, args = ("WHERE origin = %s", (origin,)) if origin is not None else ("", ())
            cur.execute(
                f"SELECT id, origin, file, `offset`, gtid, reason, skipped_at "
                f"FROM `{SCHEMA}`.`skipped` {where} ORDER BY id",
                args,
            )
            rows = cur.fetchall()
        conn.rollback()
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in CONNECTION_ERRORS:
            raise _unreachable(db, exc) from exc
        raise ApplyError(f"cannot list skipped transactions on target {db}: {exc}") from exc
    finally:
        conn.close()
    return [Skipped(int(r[0]), r[1], Position(r[2], int(r[3]), r[4]), r[5], r[6]) for r in rows]


def _rollback(conn: pymysql.connections.Connection) -> None:
    try:
        conn.rollback()
    except (pymysql.err.MySQLError, OSError):
        pass
