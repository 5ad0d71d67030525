"""Repairs for the differences a reconciliation found.

For every differing key (missing, extra, changed; never unsettled ones) the source's *current*
row is read, in a consistent snapshot pinned to a binlog position P:

    the source has the key    upsert of the source's whole row image (compared columns)
    the source lacks it       delete by primary key (the target's row image is sent along)

`--repair` (mode "hub") sends these through the hub (`binlogsync.hubcommands.send_repair`): the
target applies them by the normal apply path and sets its checkpoint back to P, and the hub
re-sends the origin's transactions after P. So the repair is ordered with live changes and
applied exactly once in effect, even while the origin keeps writing. Batches of
`repair_batch` keys, each with its own snapshot. Schema names are the source's (the hub applies
its route's renames).

`--repair=sql` (mode "sql") writes `repair-<target>.sql` into the output folder for a DBA to
review: one transaction of DELETEs and INSERT … ON DUPLICATE KEY UPDATE statements with
literal values, the target's schema names, and a header that says which source position the
images were read at. Applying it by hand on a target that binlogsync keeps applying changes to
is only right when nothing writes those rows meanwhile; `--repair` has no such caveat.
"""

from __future__ import annotations

import datetime as dt
import pickle
from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pymysql

from ..errors import BinlogsyncError, RepairError
from ..model import Change, time_text
from ..mysql import ident, qualified
from ..position import Position
from . import checksums, dialects, pinning
from .connections import close, connect
from .dialects import MySQL
from .recheck import KEY_BATCH
from .taskdata import Context, TableSpec

if TYPE_CHECKING:
    from .report import Report
    from .settings import Options

REPAIRABLE = ("missing", "extra", "changed")


def repair(options: Options, ctx: Context, report: Report) -> None:
    keys = _keys(options, report)
    if keys is None:
        return
    summary: dict[str, Any] = {"mode": "hub" if options.repair == "hub" else "sql", "targets": {}}
    report.repair = summary
    try:
        for t in range(len(options.targets)):
            wanted = {i: k for (i, tt), k in keys.items() if tt == t}
            label = options.target_label(t)
            if options.repair == "sql":
                assert options.out is not None
                path = options.out / f"repair-{_file_name(label)}.sql"
                counts = write_sql(options, ctx, t, wanted, path)
                report.files[f"repair {label}"] = str(path)
                summary["targets"][label] = {**counts, "file": str(path)}
            else:
                summary["targets"][label] = send(options, ctx, t, wanted)
    except BinlogsyncError as exc:
        summary["error"] = str(exc)
        report.errors.append(f"repair failed: {exc}")
    parts = []
    for label, counts in summary["targets"].items():
        parts.append(
            f"{label}: {counts['upserts']} upserts, {counts['deletes']} deletes"
            + (f" in {counts['file']}" if "file" in counts else " applied through the hub")
        )
    summary["summary"] = "; ".join(parts) or "nothing to repair"


def _keys(options: Options, report: Report) -> dict[tuple[int, int], list[tuple[Any, ...]]] | None:
    frame = report.rows
    out: dict[tuple[int, int], list[tuple[Any, ...]]] = defaultdict(list)
    if frame is None:
        return out
    limit = options.max_repair_rows
    found = [
        (row[0], row[1], pickle.loads(row[2]))
        for row in frame.where(frame.kind.isin(*REPAIRABLE))
        .select("table_index", "target_index", "key_pickle")
        .limit(limit + 1)
        .collect()
    ]
    if len(found) > limit:
        message = (
            f"more than {limit:,} rows differ: a repair that size should be a reseed of the "
            "target (dump and load), not row images; nothing was repaired"
        )
        report.repair = {"error": message}
        report.errors.append(message + " — or raise --max-repair-rows")
        return None
    for table, target, key in found:
        out[(table, target)].append(tuple(key))
    return out


def _images(
    conn: Any,
    side: tuple[str, str],
    table: TableSpec,
    keys: Sequence[tuple[Any, ...]],
    dialect: dialects.Dialect = MySQL,
) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    n = len(table.key)
    columns = [*table.key, *(c for c in table.columns if c not in table.key)]
    order = [columns.index(c) for c in table.columns]
    out = {}
    with conn.cursor() as cur:
        for start in range(0, len(keys), KEY_BATCH):
            batch = keys[start : start + KEY_BATCH]
            where, params = checksums.keys_where(table.key, batch, dialect.quote)
            cur.execute(dialect.rows_sql(side, columns, where, table.encoding.floats), params)
            for r in cur.fetchall():
                key = dialect.key(tuple(r[:n]), table.integer_columns)
                values = (*key, *r[n:])
                out[key] = tuple(values[i] for i in order)
    return out


def _plan_batch(
    ctx: Context,
    t: int,
    table: TableSpec,
    keys: Sequence[tuple[Any, ...]],
    source: Any,
    target: Any,
    pinned: bool,
) -> tuple[Position, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(P, source images to upsert, target images to delete) for `keys`, read at P (the hub
    needs P; a SQL file only notes it, when the source has one)."""
    position = pinning.snapshot(source, required=pinned)
    try:
        upserts = _images(source, table.source, table, keys)
    finally:
        pinning.end(source)
    gone = [k for k in keys if k not in upserts]
    side = table.targets[t]
    assert side is not None
    dialect = ctx.targets[t].dialect
    deletes = list(_images(target, side, table, gone, dialect).values()) if gone else []
    return position, list(upserts.values()), deletes


def send(
    options: Options, ctx: Context, t: int, keys: dict[int, list[tuple[Any, ...]]]
) -> dict[str, Any]:
    from ..hubcommands import send_repair

    assert options.via and options.origin
    host = options.target_hosts[t]
    counts: dict[str, Any] = {"upserts": 0, "deletes": 0, "batches": 0, "snapshots": []}
    source = connect(ctx.source, "source")
    dialect = ctx.targets[t].dialect
    target = dialect.connect(ctx.targets[t].db, f"target {ctx.targets[t].label}")
    try:
        for i, table_keys in keys.items():
            table = ctx.tables[i]
            schema, name = table.source
            for start in range(0, len(table_keys), options.repair_batch):
                batch = table_keys[start : start + options.repair_batch]
                position, upserts, deletes = _plan_batch(ctx, t, table, batch, source, target, True)
                changes = []
                if deletes:
                    changes.append(
                        Change("delete", schema, name, table.columns, tuple(deletes), ())
                    )
                if upserts:
                    changes.append(
                        Change(
                            "insert", schema, name, table.columns, (), tuple(map(_wire, upserts))
                        )
                    )
                if not changes:
                    continue
                send_repair(options.via, options.origin, host, position, changes)
                counts["upserts"] += len(upserts)
                counts["deletes"] += len(deletes)
                counts["batches"] += 1
                counts["snapshots"].append(str(position))
    except dialects.query_errors() as exc:
        raise RepairError(f"reading row images for the repair of {host} failed: {exc}") from exc
    finally:
        close(source)
        dialect.close(target)
    return counts


def _wire(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """Values as the codec carries them (PyMySQL gives SET members as a set of str)."""
    return tuple(set(v) if isinstance(v, frozenset) else v for v in row)


def write_sql(
    options: Options, ctx: Context, t: int, keys: dict[int, list[tuple[Any, ...]]], path: Path
) -> dict[str, Any]:
    counts: dict[str, Any] = {"upserts": 0, "deletes": 0}
    source = connect(ctx.source, "source")
    target = connect(ctx.targets[t].db, f"target {ctx.targets[t].label}")
    label = ctx.targets[t].label
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("w", encoding="utf-8") as out:
            out.write(
                f"-- binlogsync reconcile repair for target {label}\n"
                f"-- source {ctx.source}; written {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC\n"
                "-- Source row images were read in consistent snapshots at the binlog positions\n"
                "-- noted per batch. Review before applying. If binlogsync applies changes to\n"
                "-- this target, apply this only while nothing writes these rows (or use\n"
                "-- `binlogsync reconcile --repair`, which goes through the hub and is ordered\n"
                "-- with live changes).\n"
                "SET NAMES utf8mb4;\nSET time_zone = '+00:00';\nSTART TRANSACTION;\n"
            )
            for i, table_keys in keys.items():
                table = ctx.tables[i]
                side = table.targets[t]
                assert side is not None
                for start in range(0, len(table_keys), options.repair_batch):
                    batch = table_keys[start : start + options.repair_batch]
                    position, upserts, deletes = _plan_batch(
                        ctx, t, table, batch, source, target, False
                    )
                    out.write(f"\n-- {table.name}: source images at {position}\n")
                    for row in deletes:
                        out.write(_delete_sql(side, table, row) + "\n")
                    for row in upserts:
                        out.write(_upsert_sql(side, table, row) + "\n")
                    counts["upserts"] += len(upserts)
                    counts["deletes"] += len(deletes)
            out.write("\nCOMMIT;\n")
    except pymysql.err.MySQLError as exc:
        raise RepairError(f"reading row images for the repair of {label} failed: {exc}") from exc
    finally:
        close(source)
        close(target)
    return counts


def _sql_ident(schema: str, table: str) -> str:
    return qualified(schema, table).replace("%%", "%")


def _delete_sql(side: tuple[str, str], table: TableSpec, row: tuple[Any, ...]) -> str:
    where = " AND ".join(
        f"{ident(c).replace('%%', '%')} = {literal(row[table.columns.index(c)])}" for c in table.key
    )
    return f"DELETE FROM {_sql_ident(*side)} WHERE {where};"


def _upsert_sql(side: tuple[str, str], table: TableSpec, row: tuple[Any, ...]) -> str:
    names = [ident(c).replace("%%", "%") for c in table.columns]
    values = ", ".join(literal(v) for v in row)
    updates = (
        ", ".join(
            f"{n} = VALUES({n})"
            for c, n in zip(table.columns, names, strict=True)
            if c not in table.key
        )
        or f"{names[0]} = {names[0]}"
    )
    return (
        f"INSERT INTO {_sql_ident(*side)} ({', '.join(names)}) VALUES ({values}) "
        f"ON DUPLICATE KEY UPDATE {updates};"
    )


def literal(value: Any) -> str:
    """A value as an exact SQL literal (binary as X'…', text escaped, times in full)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes | bytearray):
        return f"X'{bytes(value).hex()}'"
    if isinstance(value, dt.datetime):
        return f"'{value.isoformat(' ')}'"
    if isinstance(value, dt.date):
        return f"'{value.isoformat()}'"
    if isinstance(value, dt.timedelta):
        return f"'{time_text(value)}'"
    if isinstance(value, set | frozenset):
        value = ",".join(sorted(value))
    escaped: str = pymysql.converters.escape_string(str(value))
    return "'" + escaped + "'"


def _file_name(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)[:80]
