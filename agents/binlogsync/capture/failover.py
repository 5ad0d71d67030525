"""Which server capture reads: the origin's primary, among the configured candidates.

With `origin.candidates` (replicas of the origin with `log_slave_updates=ON`), capture is not
tied to one server. Whenever it (re)starts — at start-up, and after every lost connection —
it checks the servers, the current one first, and reads the first that is all of:

- reachable;
- writable (`@@read_only = 0`) and not a running replica (no replication thread running):
  a promoted replica, never one still following the old primary;
- holding every GTID of the position capture resumes from, the hub's acknowledged state
  (`position.missing_from` on its `@@gtid_binlog_pos` and `@@gtid_binlog_state`: each
  domain's sequence number at least ours, and our server's GTIDs in its binlog up to ours).
  The server checks the rest of the history when capture connects by GTID in strict mode.

A candidate that fails is logged with its reason and passed over; when none qualifies capture
waits and checks again (UnreachableError: retried). Nothing is assumed: a replica that has not
been promoted, an old primary that came back with fewer transactions, or a server that lacks
what the hub already stored is never read. Only GTID positions move between servers; a file
position (a server without MariaDB GTIDs) stays on the server that wrote it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .. import mysql
from ..config import DatabaseSettings
from ..errors import BinlogsyncError, PreflightError, UnreachableError
from ..position import Position, missing_from

log = logging.getLogger("binlogsync.failover")


def problem(db: DatabaseSettings, resume: Position) -> str | None:
    """Why capture cannot read `db` as the origin's primary after `resume`; None: it can."""
    doing = "checking a failover candidate"
    try:
        conn = mysql.connect(db, doing, refused=PreflightError, connect_timeout=3)
    except BinlogsyncError as exc:
        return f"unreachable ({exc.message})"
    try:
        with mysql.errors(db, doing, PreflightError), conn.cursor() as cur:
            cur.execute("SELECT @@read_only, @@gtid_binlog_pos, @@gtid_binlog_state")
            read_only, have, written = cur.fetchone()
            if int(read_only):
                return "read_only is ON (not promoted)"
            following = _replicating(cur)
            if following:
                return f"it is a running replica of {following}"
            if not resume.by_gtid:
                return f"the resume position {resume} is a binlog file position (no GTIDs)"
            lacking = missing_from(str(have or ""), resume.gtid or "", str(written or ""))
            if lacking:
                return (
                    f"it lacks GTID(s) {', '.join(lacking[:5])} that the hub already holds "
                    f"(its @@gtid_binlog_pos is {have or 'empty'})"
                )
            return None
    except BinlogsyncError as exc:
        return exc.message
    finally:
        mysql.close(conn)


def _replicating(cur: Any) -> str:
    """'host:port' of a source this server replicates from now, or ''."""
    cur.execute("SHOW ALL SLAVES STATUS")
    names = [d[0] for d in cur.description or ()]
    for row in cur.fetchall():
        info = dict(zip(names, row, strict=False))
        if "Yes" in (info.get("Slave_IO_Running"), info.get("Slave_SQL_Running")):
            return f"{info.get('Master_Host')}:{info.get('Master_Port')}"
    return ""


def choose(
    servers: Sequence[DatabaseSettings], current: DatabaseSettings, resume: Position
) -> DatabaseSettings:
    """The server to capture from after `resume`: `current` if it still qualifies, else the
    first candidate that does; UnreachableError (retried) naming each one's reason if none."""
    ordered = [current, *(s for s in servers if s != current)]
    reasons = []
    for db in ordered:
        why = problem(db, resume)
        if why is None:
            if db != current:
                log.warning(
                    "capture moves from %s:%s to %s:%s, the writable primary that holds %s",
                    current.host,
                    current.port,
                    db.host,
                    db.port,
                    resume,
                )
            return db
        reasons.append(f"{db.host}:{db.port}: {why}")
    raise UnreachableError(
        f"no origin server can be captured from after {resume}: " + "; ".join(reasons),
        "capture checks again; promote a replica that holds these GTIDs (STOP SLAVE; RESET "
        "SLAVE ALL; SET GLOBAL read_only=0) or bring the primary back",
    )
