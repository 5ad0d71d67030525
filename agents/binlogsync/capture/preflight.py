"""Check, before streaming, that an origin server can be captured from (Debezium's preflight).

`check_origin` raises PreflightError for the first setting that makes capture impossible, with
the setting's name, its current value and the change that fixes it; it raises UnreachableError
when the server cannot be reached. Problems that do not stop capture come back as warnings.
"""

from __future__ import annotations

import re
from typing import Any

from .. import mysql
from ..config import DatabaseSettings
from ..errors import PreflightError
from ..position import Position, file_number, missing_from
from ..tables import SYSTEM_SCHEMAS, TableFilter
from .positions import has_gtid, oldest

_REQUIRED = (
    ("binlog_format", "ROW"),
    ("binlog_row_image", "FULL"),
    ("binlog_row_metadata", "FULL"),
)
GRANTS = (
    "GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO the capture user "
    "(MySQL: REPLICATION SLAVE, REPLICATION CLIENT, SELECT)"
)
_GLOBAL_GRANT = re.compile(r"^GRANT\s+(?P<privs>.+?)\s+ON\s+\*\.\*\s+TO\s", re.I | re.S)
_ROLE_GRANT = re.compile(r"^GRANT\s+[`'\"]?[\w$-]+[`'\"]?\s+TO\s", re.I)


def check_origin(
    db: DatabaseSettings, server_id: int, tables: TableFilter, resume: Position | None
) -> list[str]:
    """Raise PreflightError/UnreachableError if capture cannot work; return warnings."""
    where = f"{db.host}:{db.port}"
    doing = "preflight of the origin"
    conn = mysql.connect(db, doing, refused=PreflightError, grants=GRANTS)
    try:
        with mysql.errors(db, doing, PreflightError, GRANTS), conn.cursor() as cur:
            warnings: list[str] = []
            _check_settings(cur, where, server_id)
            warnings += _check_privileges(cur, where, db.user)
            if resume is not None:
                _check_resume(cur, where, resume)
            warnings += _check_tables(cur, where, tables)
            return warnings
    finally:
        mysql.close(conn)


def _variables(cur: Any, names: tuple[str, ...]) -> dict[str, str]:
    marks = ", ".join(["%s"] * len(names))
    cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({marks})", names)
    return {str(name).lower(): str(value) for name, value in cur.fetchall()}


def _check_settings(cur: Any, where: str, server_id: int) -> None:
    values = _variables(cur, ("log_bin", "server_id", *(name for name, _ in _REQUIRED)))
    log_bin = values.get("log_bin", "OFF").upper()
    if log_bin not in ("ON", "1"):
        raise PreflightError(
            f"log_bin is {log_bin} on {where}; capture reads the binary log",
            "set log_bin=binlog (with binlog_format=ROW) in my.cnf and restart the server",
        )
    for name, wanted in _REQUIRED:
        value = values.get(name)
        if value is None:
            raise PreflightError(
                f"{name} does not exist on {where}: the server is too old for capture",
                "use MariaDB >= 10.5 or MySQL >= 8.0.14 (they write column names in the binlog)",
            )
        if value.upper() != wanted:
            raise PreflightError(
                f"{name} is {value} on {where}; capture needs {wanted}",
                f"set {name}={wanted} in my.cnf and restart (or SET GLOBAL {name}={wanted} and "
                "reconnect the applications); events written before that cannot be captured",
            )
    origin_id = int(values.get("server_id", "0"))
    if origin_id == 0:
        raise PreflightError(
            f"server_id is 0 on {where}; a server with server_id 0 refuses replicas",
            "set server_id to a unique positive number in my.cnf and restart",
        )
    if origin_id == server_id:
        raise PreflightError(
            f"server_id of the origin {where} is {origin_id}, the same as origin.server_id of "
            "this client; the binlog reader is a replica and needs an id of its own",
            "set origin.server_id in the client config to a number no server or replica uses",
        )


def _check_privileges(cur: Any, where: str, user: str) -> list[str]:
    cur.execute("SHOW GRANTS")
    lines = [str(row[0]) for row in cur.fetchall()]
    privileges: set[str] = set()
    for line in lines:
        match = _GLOBAL_GRANT.match(line)
        if match:
            privs = re.sub(r"\s+", " ", match.group("privs").upper())
            privileges.update(p.strip() for p in privs.split(","))
    if "ALL PRIVILEGES" in privileges or "ALL" in privileges:
        return []
    missing = []
    if "REPLICATION SLAVE" not in privileges and "REPLICATION REPLICA" not in privileges:
        missing.append("REPLICATION SLAVE")
    if not privileges & {"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"}:
        missing.append("BINLOG MONITOR (MySQL: REPLICATION CLIENT)")
    if not missing:
        return []
    has_roles = any(_ROLE_GRANT.match(line) for line in lines)
    message = (
        f"user {user!r} on {where} lacks {' and '.join(missing)} ON *.* "
        f"(SHOW GRANTS: {'; '.join(lines)})"
    )
    if has_roles:  # the privilege may come from a role that we cannot see from here
        return [message + " — unless a role grants it"]
    raise PreflightError(
        message,
        f"GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO {user!r}@'<client host>' "
        "(MySQL: REPLICATION SLAVE, REPLICATION CLIENT, SELECT)",
    )


def _check_resume(cur: Any, where: str, resume: Position) -> None:
    if resume.by_gtid:
        _check_gtid_resume(cur, where, resume)
        return
    cur.execute("SHOW BINARY LOGS")
    logs = {str(row[0]): int(row[1]) for row in cur.fetchall()}
    fix = (
        "the target must be reseeded: copy the tables from the origin, then capture from the "
        "current position (and keep binlog retention above the slowest acknowledged position)"
    )
    if resume.file not in logs:
        names = sorted(logs, key=file_number)
        span = f"{names[0]} … {names[-1]}" if names else "none"
        older = bool(names) and file_number(resume.file) < file_number(names[0])
        why = "was purged" if older else "does not exist (was RESET MASTER run?)"
        raise PreflightError(
            f"the stored position {resume} is in binlog file {resume.file}, which {why} on "
            f"{where} (binary logs there: {span})",
            fix,
        )
    if resume.offset > logs[resume.file]:
        raise PreflightError(
            f"the stored position {resume} lies beyond the end of {resume.file} "
            f"({logs[resume.file]} bytes) on {where}",
            fix,
        )


def _check_gtid_resume(cur: Any, where: str, resume: Position) -> None:
    """The server holds every GTID of `resume` (the same history), and its binlog still has
    everything after it."""
    if not has_gtid(cur):
        raise PreflightError(
            f"the stored position is the GTID state {resume}, but {where} is not MariaDB "
            "(no MariaDB GTIDs); a position cannot move back from GTIDs to binlog files",
            "point the origin at the MariaDB server (or a replica holding its GTIDs), or "
            "reseed the targets and start a new hub log for this origin",
        )
    cur.execute("SELECT @@gtid_binlog_pos, @@gtid_binlog_state")
    have, written = (str(v or "") for v in cur.fetchone())
    lacking = missing_from(have, resume.gtid or "", written)
    if lacking:
        raise PreflightError(
            f"{where} does not hold the GTIDs capture resumes from ({resume}): it lacks "
            f"{', '.join(lacking[:5])} (its @@gtid_binlog_pos is {have or 'empty'}); it is "
            "another server, behind, or its history diverged",
            "point the origin at the server that wrote them, or at a replica that has them "
            "(`candidates`); if they are lost for good, reseed the targets",
        )
    start = oldest(cur, where)
    for domain, (server, seq) in sorted(start.state.items()):
        got = resume.state.get(domain)
        if got is None or got[1] < seq:
            raise PreflightError(
                f"the binlog of {where} no longer has what follows {resume}: its oldest binlog "
                f"starts at {start}, after GTID {domain}-{server}-{seq} (purged)",
                "the targets must be reseeded: copy the tables from the origin, then capture "
                "from the current position (and keep binlog retention above the slowest "
                "acknowledged position)",
            )


def _check_tables(cur: Any, where: str, tables: TableFilter) -> list[str]:
    system = tuple(sorted(SYSTEM_SCHEMAS))
    marks = ", ".join(["%s"] * len(system))
    # STATISTICS, not TABLE_CONSTRAINTS: MariaDB 10.11 shows a user with only a global SELECT
    # no rows in TABLE_CONSTRAINTS, and every table would look keyless. Two flat queries joined
    # here, not an EXISTS subquery per table: MariaDB 10.11.19 crashed (signal 11, in
    # create_tmp_table_for_schema's cleanup) on that correlated subquery over
    # information_schema on an origin with many databases, twice in our test runs.
    cur.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.STATISTICS "
        f"WHERE INDEX_NAME = 'PRIMARY' AND TABLE_SCHEMA NOT IN ({marks})",
        system,
    )
    keyed = {(str(s), str(t)) for s, t in cur.fetchall()}
    cur.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME, ENGINE FROM information_schema.TABLES "
        f"WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN ({marks}) "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME",
        system,
    )
    rows = [(s, t, engine, (str(s), str(t)) in keyed) for s, t, engine in cur.fetchall()]
    routed = [row for row in rows if tables.matches(str(row[0]), str(row[1]))]
    if not routed:
        return [
            f"no existing table on {where} matches {', '.join(tables.patterns)} (or the user "
            "cannot see them): nothing will be captured until such tables exist"
        ]
    no_key = [f"{schema}.{table}" for schema, table, _engine, has_key in routed if not has_key]
    if no_key:
        raise PreflightError(
            f"routed table(s) without a PRIMARY KEY on {where}: {', '.join(no_key)}; their rows "
            "cannot be addressed on the target",
            "add a primary key to each, or exclude them from origin.tables",
        )
    warnings = []
    plain = [
        f"{schema}.{table} ({engine})"
        for schema, table, engine, _ in routed
        if engine and str(engine).upper() not in ("INNODB", "ROCKSDB", "TOKUDB")
    ]
    if plain:
        warnings.append(
            f"routed table(s) on {where} use a non-transactional engine: {', '.join(plain)}; "
            "their changes are captured, but a rollback there does not undo them"
        )
    return warnings
