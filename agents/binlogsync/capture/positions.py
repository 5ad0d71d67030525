"""Where an origin's binary log stands: its end now, and the oldest position it still has."""

from __future__ import annotations

from .. import mysql
from ..config import DatabaseSettings
from ..errors import PreflightError
from ..position import Position

_NO_BINLOG = "set log_bin=binlog (and binlog_format=ROW) in my.cnf and restart"


def current_position(db: DatabaseSettings) -> Position:
    """Where the origin's binlog ends now (SHOW MASTER STATUS), with its GTID when unambiguous.

    The GTID is given when @@gtid_binlog_pos holds exactly one GTID and it belongs to the
    server's own @@gtid_domain_id; the status is read twice around it so the two agree.
    """
    doing = "reading the origin's binlog position"
    conn = mysql.connect(db, doing, refused=PreflightError)
    try:
        with mysql.errors(db, doing, PreflightError), conn.cursor() as cur:
            for _attempt in range(5):
                cur.execute("SHOW MASTER STATUS")
                first = cur.fetchone()
                if first is None:
                    raise PreflightError(
                        f"binary logging is off on {db.host}:{db.port} (SHOW MASTER STATUS "
                        "is empty)",
                        _NO_BINLOG,
                    )
                cur.execute("SELECT @@gtid_binlog_pos, @@gtid_domain_id")
                gtid_pos, domain = cur.fetchone()
                cur.execute("SHOW MASTER STATUS")
                second = cur.fetchone()
                if second is not None and tuple(second[:2]) == tuple(first[:2]):
                    return Position(first[0], int(first[1]), _single_gtid(gtid_pos, domain))
            return Position(first[0], int(first[1]), None)
    finally:
        mysql.close(conn)


def _single_gtid(gtid_pos: object, domain: object) -> str | None:
    if not isinstance(gtid_pos, str) or not gtid_pos or "," in gtid_pos:
        return None
    parts = gtid_pos.strip().split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts) or int(parts[0]) != domain:
        return None
    return gtid_pos.strip()


def earliest_position(db: DatabaseSettings) -> Position:
    """The start of the oldest binlog file the origin still has (SHOW BINARY LOGS)."""
    doing = "listing the origin's binary logs"
    conn = mysql.connect(db, doing, refused=PreflightError)
    try:
        with mysql.errors(db, doing, PreflightError), conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            row = cur.fetchone()
    finally:
        mysql.close(conn)
    if row is None:
        raise PreflightError(f"the origin {db.host}:{db.port} has no binary logs", _NO_BINLOG)
    return Position(row[0], 4, None)
