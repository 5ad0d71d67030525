"""Is a target equal to its origin? Row-for-row comparison and "has it caught up" checks,
for the tests, the demo and the benchmarks (the Spark reconciliation is the tool for big
tables)."""

from __future__ import annotations

from typing import Any

import pymysql

from binlogsync.engines.mariadb import checkpoint as checkpoints

from .sandbox import Server


def gtid_seq(gtid: str | None, domain: int = 0) -> int:
    """Sequence number of domain `domain` in a GTID list like '0-1-57,1-2-3' (-1 if absent)."""
    for part in (gtid or "").split(","):
        bits = part.strip().split("-")
        if len(bits) == 3 and bits[0].isdigit() and int(bits[0]) == domain:
            return int(bits[2])
    return -1


def origin_gtid(origin: Server) -> str:
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        return str(cur.fetchone()[0])


def applied_gtid(target: Server, origin_name: str) -> str | None:
    """The GTID of the last origin transaction the target has applied (its checkpoint)."""
    try:
        with target.connect() as conn, conn.cursor() as cur:
            position = checkpoints.read(cur, origin_name)
            return position.gtid if position else None
    except pymysql.err.ProgrammingError:
        return None  # no checkpoint table yet


def caught_up(target: Server, origin_name: str, gtid: str) -> bool:
    return gtid_seq(applied_gtid(target, origin_name)) >= gtid_seq(gtid)


def table_rows(server: Server, schema: str, table: str) -> list[tuple[Any, ...]]:
    """Every row, ordered by the primary key (or by all columns when there is none)."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA=%s "
            "AND TABLE_NAME=%s AND CONSTRAINT_NAME='PRIMARY' ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        order = [r[0] for r in cur.fetchall()]
        cur.execute(f"SELECT * FROM `{schema}`.`{table}`")
        rows = list(cur.fetchall())
        if order:
            names = [d[0] for d in cur.description]
            idx = [names.index(c) for c in order]
            return sorted(rows, key=lambda r: tuple(r[i] for i in idx))
        return sorted(rows, key=repr)


def differences(origin: Server, target: Server, schema: str, table: str) -> str:
    """'' when equal, else a short description of the first differences."""
    a, b = table_rows(origin, schema, table), table_rows(target, schema, table)
    if a == b:
        return ""
    in_a, in_b = set(a), set(b)  # once: a test's table may have many rows
    missing = [r for r in a if r not in in_b][:3]
    extra = [r for r in b if r not in in_a][:3]
    return (
        f"{schema}.{table}: origin {len(a)} rows, target {len(b)} rows; "
        f"missing on target e.g. {missing}; extra on target e.g. {extra}"
    )
