"""Where an origin's binary log stands: its end now, and the oldest position it still has.

On MariaDB both are GTID positions (position.py): `@@gtid_binlog_pos` for the end, the GTID
state at the start of the oldest binlog file (`BINLOG_GTID_POS(file, 4)`) for the oldest. On
a server without MariaDB GTIDs (MySQL) they are binlog file positions.
"""

from __future__ import annotations

from typing import Any

from .. import mysql
from ..config import DatabaseSettings
from ..errors import PreflightError
from ..position import Position

_NO_BINLOG = "set log_bin=binlog (and binlog_format=ROW) in my.cnf and restart"


def has_gtid(cur: Any) -> bool:
    """Whether the server writes MariaDB GTIDs (every MariaDB does; MySQL's are another kind,
    and a MySQL origin keeps file positions)."""
    cur.execute("SELECT @@version")
    return "mariadb" in str(cur.fetchone()[0]).lower()


def current_position(db: DatabaseSettings) -> Position:
    """Where the origin's binlog ends now: its GTID state (MariaDB) with the SHOW MASTER
    STATUS it was read between (read twice around it, so that the two agree), else the file
    position with its GTID when unambiguous."""
    doing = "reading the origin's binlog position"
    conn = mysql.connect(db, doing, refused=PreflightError)
    try:
        with mysql.errors(db, doing, PreflightError), conn.cursor() as cur:
            gtid = has_gtid(cur)
            for _attempt in range(20):
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
                    if gtid:
                        return Position.of_state(str(gtid_pos or ""), first[0], int(first[1]))
                    return Position(first[0], int(first[1]), _single_gtid(gtid_pos, domain))
            if gtid:
                raise PreflightError(
                    f"the origin {db.host}:{db.port} writes too fast to read its GTID state "
                    "and binlog position together",
                    "capture retries; this passes when the load drops for a moment",
                )
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
    """The start of the oldest binlog file the origin still has (SHOW BINARY LOGS): on
    MariaDB the GTID state there."""
    doing = "listing the origin's binary logs"
    conn = mysql.connect(db, doing, refused=PreflightError)
    try:
        with mysql.errors(db, doing, PreflightError), conn.cursor() as cur:
            return oldest(cur, f"{db.host}:{db.port}")
    finally:
        mysql.close(conn)


def oldest(cur: Any, where: str) -> Position:
    cur.execute("SHOW BINARY LOGS")
    row = cur.fetchone()
    cur.fetchall()
    if row is None:
        raise PreflightError(f"the origin {where} has no binary logs", _NO_BINLOG)
    if has_gtid(cur):
        cur.execute("SELECT BINLOG_GTID_POS(%s, 4)", (row[0],))
        state = cur.fetchone()[0]
        if state is None:  # purged between the two statements: the next one is older
            raise PreflightError(f"the oldest binlog of {where} changed while reading it", "")
        return Position.of_state(str(state), row[0], 4)
    return Position(row[0], 4, None)


def gtid_at(db: DatabaseSettings, position: Position) -> Position | None:
    """The GTID position of a file position on the server that wrote it (BINLOG_GTID_POS),
    checked against the transaction's own GTID when the position carries one. None when the
    server has no MariaDB GTIDs (the position stays a file position); PreflightError when the
    file and offset are not there (purged, or another server) or hold another transaction."""
    where = f"{db.host}:{db.port}"
    doing = f"converting {position} into a GTID state"
    conn = mysql.connect(db, doing, refused=PreflightError)
    try:
        with mysql.errors(db, doing, PreflightError), conn.cursor() as cur:
            if not has_gtid(cur):
                return None
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.offset))
            state = cur.fetchone()[0]
    finally:
        mysql.close(conn)
    fix = (
        "the position was stored by an older binlogsync in binlog-file form and can only be "
        "converted on the server that wrote it: point origin.host/port at that server once "
        "(capture then continues by GTID, also on replicas), or, if it is gone, reseed the "
        "targets and move this hub's data_dir aside"
    )
    if state is None:
        raise PreflightError(
            f"{where} has no binlog event at {position} to convert into a GTID state (the "
            "file was purged, or this is not the server that wrote it)",
            fix,
        )
    converted = Position.of_state(str(state), position.file, position.offset)
    if position.gtid is not None and "," not in position.gtid:
        domain, server, seq = (int(p) for p in position.gtid.split("-"))
        if converted.state.get(domain) != (server, seq):
            raise PreflightError(
                f"{position} on {where} is not the end of GTID {position.gtid} (the state "
                f"there is {state or 'empty'}): this is not the server that wrote it",
                fix,
            )
    return converted
