"""The reconciliation job, a Spark application: plan on the driver, checksum and compare in
Spark, report, repair.

    1. plan (driver)      describe every table on the source and each target; refuse what
                          cannot be compared (missing table, no primary key, differing columns)
                          with one clear line each; choose each target's pin; cut every table
                          into primary-key chunks. It runs while Spark starts (sparkapp.py)
    2. checksums (Spark)  one task per group of chunks: each chunk checksummed on the source at
                          a snapshot position and on every target once it has applied that
                          position; a chunk that differs is narrowed in the same task to small
                          pieces, whose (key, row hash) rows come out of the task (tasks.py)
    3. rows (Spark SQL)   those rows as a DataFrame, source FULL OUTER JOIN target on the key;
                          the differing keys re-checked in executors while writes continue
                          (rowstage.py, recheck.py)
    4. report, repair     summary.json, and rows.parquet written by Spark (report.py);
                          repair.py

Spark parallelises the chunks; the heavy lifting (hashing every row) happens inside each
database, so a table that matches costs one pass of checksum queries and moves one row per
chunk. The number of Spark partitions per stage is `connections`, which bounds the sessions
each database sees to `connections` (source) and `connections` per target. The tasks get no
password (passwords.py); executors without binlogsync get its code (shipping.py).
"""

from __future__ import annotations

import atexit
import functools
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql

from ..errors import BinlogsyncError, ConfigError
from ..position import Position
from . import chunks as chunking
from . import dialects, passwords, pgsql, pinning, rowstage, schema, shipping, verified
from .checksums import Encoding, crc_available
from .choices import PORTABLE
from .connections import close, connect
from .pinning import Pin
from .plan import TableState
from .report import Report, TableReport
from .settings import Options
from .sparkapp import SparkStart, executors_have_binlogsync, is_local
from .taskdata import ChunkResult, Context, Leaf, TableSpec, TargetSpec, TaskError

log = logging.getLogger(__name__)


def run(options: Options, spark: Any, started: float | None = None) -> Report:
    """Compare, report (and repair when asked). `spark` is a SparkSession, or a `SparkStart`
    whose context the plan does not wait for, and whose SQL session the checksum stage does
    not. `started` is when the run began, before Spark started, so the report can give times
    with and without the wait for Spark."""
    began = time.monotonic()
    report = Report(options, started if started is not None else began, began)
    try:
        states, ctx = _plan(options, report)
    except BinlogsyncError as exc:
        report.fatal(str(exc))
        _describe_spark(report, _wait(report, spark, "context"))
        return report.finish()
    report.stage("plan", time.monotonic() - began, sum(len(s.chunks) for s in states))
    sc = _wait(report, spark, "context")
    _describe_spark(report, sc)
    connections = options.connections or max(1, min(sc.defaultParallelism, 8))
    report.spark["connections"] = connections
    secrets = passwords.Distributed(sc, ctx.passwords(), is_local(sc.master))
    try:
        _ship(sc)
        tasks = ctx.without_passwords(secrets.name)
        emitted = _checksum_stage(sc, tasks, states, connections, report)
        session = _wait(report, spark, "session")
        session.conf.set("spark.sql.shuffle.partitions", str(connections))
        frame = _rows_stage(session, tasks, emitted, report)
        _record_verified(options, report)
        if options.out is not None:
            report.write(options.out, session)
        if options.repair is not None and not report.errors_present():
            from .repair import repair

            repair(options, ctx, report)
            if options.out is not None:
                report.write_summary(options.out)
        del frame
    finally:
        secrets.remove()
    return report.finish()  # report.release() drops the persisted rows


def _wait(report: Report, spark: Any, what: str) -> Any:
    """The SparkContext or the SparkSession (`what`) of `spark`; time spent waiting for a
    starting one counts as Spark's start-up."""
    if isinstance(spark, SparkStart):
        waiting = time.monotonic()
        found = spark.context() if what == "context" else spark.session()
        report.spark_wait += time.monotonic() - waiting
        return found
    return spark.sparkContext if what == "context" else spark


def _describe_spark(report: Report, sc: Any) -> None:
    report.spark = {
        "master": sc.master,
        "app_id": sc.applicationId,
        "app_name": sc.appName,
        "version": sc.version,
        "parallelism": sc.defaultParallelism,
    }


_SHIPPED: set[str] = set()  # the applications this process has given binlogsync's code to
_SHIP_LOCK = threading.Lock()


def _ship(sc: Any) -> None:
    """binlogsync's code for executors outside this machine, once per application (the runs
    of a reconcile-server or of the DAG's jobs share one), unless spark-submit shipped it
    (shipping.py); local executors run this process's Python, which has it."""
    with _SHIP_LOCK:
        if sc.applicationId in _SHIPPED or executors_have_binlogsync(sc):
            return
        sc.addPyFile(str(shipping.build(_code_folder())))
        _SHIPPED.add(sc.applicationId)


@functools.cache
def _code_folder() -> Path:
    """Where the zip of binlogsync's code lives while this process does: executors that join
    the application later fetch it from the driver."""
    folder = Path(tempfile.mkdtemp(prefix="binlogsync-code-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


KEY_CHUNK = 2_000  # changed keys per chunk of an incremental run (a quarter for composite keys)


# -- 1. plan -----------------------------------------------------------------------------------
def _plan(options: Options, report: Report) -> tuple[list[TableState], Context]:
    source = connect(options.source, "source")
    targets: dict[int, Any] = {}
    pins: dict[int, Pin] = {}
    try:
        for i, db in enumerate(options.targets):
            label = options.target_label(i)
            side = dialects.of(db)
            try:
                conn = side.connect(db, f"target {label}")
                try:
                    pins[i] = side.detect(conn, options.pin, options.origin, f"target {label}")
                except BaseException:
                    side.close(conn)
                    raise
                targets[i] = conn
            except BinlogsyncError as exc:
                report.target_error(i, str(exc))
        servers = {"source": source} | {
            f"target {options.target_label(t)}": conn
            for t, conn in targets.items()
            if not dialects.of(options.targets[t]).portable
        }
        portable = any(dialects.of(db).portable for db in options.targets)
        report.hash = PORTABLE if portable else _choose_hash(options.hash, servers)
        states = [TableState(i, name) for i, name in enumerate(options.tables)]
        with source.cursor() as src:
            for state in states:
                _describe(options, state, src, targets, report.hash)
        if any(p.mode != "none" for p in pins.values()):
            # Fails early when the source cannot give a position; every chunk is read at or
            # after it, so it is what a run that finds a table equal records (verified.py).
            report.position = pinning.snapshot(source)
            pinning.end(source)
        for state in states:
            if state.spec is None:
                continue
            if options.since_last and _since_last(options, state, targets, pins, report):
                continue
            cursors = [
                (targets[t].cursor(), dialects.of(options.targets[t]).quote) for t in state.pairs
            ]
            try:
                with source.cursor() as src:
                    state.chunks = chunking.plan(
                        state.index, state.pairs[min(state.pairs)], src, cursors, options.chunk_rows
                    )
            finally:
                for cur, _quote in cursors:
                    cur.close()
    finally:
        close(source)
        for t, conn in targets.items():
            dialects.of(options.targets[t]).close(conn)
    target_specs = tuple(
        TargetSpec(db, options.target_label(i), pins.get(i, Pin("none")))
        for i, db in enumerate(options.targets)
    )
    ctx = Context(
        options.source,
        target_specs,
        tuple(
            s.spec
            if s.spec is not None
            else TableSpec(
                s.index,
                s.name,
                ("", ""),
                (None,) * len(options.targets),
                (),
                (),
                Encoding((), (), ()),
            )
            for s in states
        ),
        options.wait_timeout,
        options.confirm,
        options.max_rounds,
        options.max_task_rows,
        any(p.mode == "gtid" for p in pins.values()),
        any(p.mode != "none" for p in pins.values()),
        show=options.show,
    )
    for state in states:
        for t in range(len(options.targets)):
            entry = TableReport.planned(state.name, options.target_label(t), state, t, pins.get(t))
            entry.error = report.target_errors.get(t, "") or entry.error
            report.tables.append(entry)
    report.plan = states
    report.add_plan(states)
    return states, ctx


def _since_last(
    options: Options,
    state: TableState,
    targets: Mapping[int, Any],
    pins: Mapping[int, Pin],
    report: Report,
) -> bool:
    """Plan the table by the keys changed since its last equal run (True), or say why it is
    compared whole (False, with a note)."""
    spec, position = state.spec, report.position
    assert spec is not None
    state.mode = "full"
    if position is None or any(pins[t].mode == "none" for t in state.pairs):
        state.notes.append("--since-last: compared whole (a target is not pinned)")
        return False
    since: Position | None = None
    for t in sorted(state.pairs):
        side = dialects.of(options.targets[t])
        last = side.read_verified(targets[t], state.name, _target_table(state, t))
        if last is None:
            state.notes.append(
                f"--since-last: compared whole (no earlier run found it equal on target "
                f"{options.target_label(t)})"
            )
            return False
        since = last if since is None or last.key < since.key else since
    assert since is not None
    from .changed import changed_keys  # reads the binlog (python-mysql-replication)

    found = changed_keys(options.source, *spec.source, spec.key, since, position)
    if found.keys is None:
        state.notes.append(f"--since-last: compared whole ({found.why})")
        return False
    size = min(KEY_CHUNK if len(spec.key) == 1 else KEY_CHUNK // 4, options.max_task_rows)
    state.chunks = chunking.by_keys(state.index, found.keys, size)
    state.mode = "since-last"
    state.notes.append(f"--since-last: {found.why}")
    return True


def _target_table(state: TableState, t: int) -> str:
    pair = state.pairs[t]
    return f"{pair.target.schema}.{pair.target.table}"


def _record_verified(options: Options, report: Report) -> None:
    """Each pinned table and target: its position when found equal, else forget it."""
    if report.position is None:
        return
    by_target: dict[int, list[TableReport]] = {}
    for r in report.tables:
        if r.pin and not r.pin.startswith("none") and r.target_table:
            by_target.setdefault(r.target_index, []).append(r)
    for t, entries in by_target.items():
        side = dialects.of(options.targets[t])
        try:
            conn = side.connect(options.targets[t], f"target {options.target_label(t)}")
        except BinlogsyncError as exc:
            for r in entries:
                r.notes.append(f"the verified position was not recorded: {exc}")
            continue
        try:
            for r in entries:
                equal = r.status == "equal" and not report.errors
                try:
                    side.write_verified(
                        conn, r.table, r.target_table, report.position if equal else None
                    )
                except side.errors() as exc:
                    reason = exc.args[-1] if isinstance(exc, pymysql.err.MySQLError) else exc
                    r.notes.append(
                        f"the verified position was not recorded in {verified.TABLE} "
                        f"({str(reason).strip()}); the next --since-last run compares it whole"
                    )
        finally:
            side.close(conn)


def _choose_hash(requested: str, servers: Mapping[str, Any]) -> str:
    """The per-row hash: `requested`, or for auto `crc` when every server has it."""
    if requested in ("sha1", PORTABLE):
        return requested
    for label, conn in servers.items():
        with conn.cursor() as cur:
            if crc_available(cur):
                continue
        if requested == "auto":
            return "sha1"
        raise ConfigError(
            f"--hash crc needs CRC32C (MariaDB 10.8 or later), which the {label} lacks",
            "use --hash auto (it takes sha1 there) or --hash sha1",
        )
    return "crc"


def _describe(
    options: Options, state: TableState, src: Any, targets: Mapping[int, Any], hash: str
) -> None:
    schema_name, table_name = state.name.split(".")
    try:
        schema.check_name(schema_name, table_name)
        source = schema.describe(src, schema_name, table_name)
    except BinlogsyncError as exc:
        state.errors[None] = str(exc)
        return
    if source is None:
        state.errors[None] = (
            f"there is no table {state.name} on the source {options.source}: nothing compared"
        )
        return
    target_schema = options.renames.get(schema_name, schema_name)
    defs: dict[int, schema.TableDef] = {}
    pg_types: dict[int, dict[str, str]] = {}
    for t, conn in targets.items():
        label = options.target_label(t)
        with conn.cursor() as cur:
            try:
                found = dialects.of(options.targets[t]).describe(cur, target_schema, table_name)
            except BinlogsyncError as exc:
                state.errors[t] = str(exc)
                continue
        if found is None:
            state.errors[t] = (
                f"there is no table {target_schema}.{table_name} on target {label}: "
                "nothing compared there"
            )
            continue
        defs[t] = found
        if dialects.of(options.targets[t]).portable:  # PostgreSQL: its types pick pgsql's SQL
            pg_types[t] = {c.name: c.data_type for c in found.columns}
    left_out: dict[int, list[str]] = {}
    if options.common_columns and defs:
        shared = {c.name for c in source.columns}
        for d in defs.values():
            shared &= {c.name for c in d.columns}
        for t, d in defs.items():
            left_out[t] = sorted(
                {c.name for c in source.columns} ^ {c.name for c in d.columns}
                | ({c.name for c in source.columns} - shared)
            )
            defs[t] = replace(d, columns=tuple(c for c in d.columns if c.name in shared))
        source = replace(source, columns=tuple(c for c in source.columns if c.name in shared))
    for t, found in defs.items():
        label = f"target {options.target_label(t)}"
        try:
            pair = schema.pair(source, found, label)
        except BinlogsyncError as exc:
            state.errors[t] = str(exc)
            continue
        if t in pg_types:
            # Its types are PostgreSQL's, never the source's: pgsql.unsupported says below
            # whether they are the ones the source's map to.
            pair = replace(pair, notes=())
        if left_out.get(t):
            note = f"compared only the shared columns; not compared: {', '.join(left_out[t])}"
            pair = replace(pair, notes=(*pair.notes, note))
        state.pairs[t] = pair
    if not state.pairs:
        return
    pairs = [state.pairs[t] for t in sorted(state.pairs)]
    encoding = Encoding.of(pairs, options.json, hash)
    for t in sorted(pg_types):
        why = pgsql.unsupported(encoding, pg_types[t]) if t in state.pairs else ""
        if why:
            state.errors[t] = f"{state.name} on target {options.target_label(t)}: {why}"
            del state.pairs[t]
    if not state.pairs:
        return
    pairs = [state.pairs[t] for t in sorted(state.pairs)]
    state.spec = TableSpec(
        state.index,
        state.name,
        (source.schema, source.table),
        tuple(
            (state.pairs[t].target.schema, state.pairs[t].target.table)
            if t in state.pairs
            else None
            for t in range(len(options.targets))
        ),
        pairs[0].key,
        pairs[0].columns,
        encoding,
        chunking.first_key_is_integer(pairs[0]),
        tuple(pg_types.get(t) for t in range(len(options.targets))),
        tuple(source.column(c).data_type in schema.INTEGER_TYPES for c in pairs[0].key),
    )


# -- 2. checksums, 3. rows ----------------------------------------------------------------------------
def _checksum_stage(sc: Any, ctx: Context, states: list[TableState], n: int, report: Report) -> Any:
    """Checksum every chunk (and narrow those that differ): the task results, persisted,
    their checksums, leaves and errors already in the report."""
    from pyspark import StorageLevel

    from .taskdata import is_row_hash
    from .tasks import checksum_partition

    items = [(c, tuple(sorted(s.pairs))) for s in states if s.spec is not None for c in s.chunks]
    started = time.monotonic()
    groups = _partitions(items, n)
    if not groups:
        report.stage("checksums", 0.0, 0)
        return None
    emitted = sc.parallelize(groups, len(groups)).mapPartitions(
        lambda part: checksum_partition(ctx, [x for g in part for x in g])
    )
    emitted = emitted.persist(StorageLevel.MEMORY_AND_DISK)
    meta = emitted.filter(lambda r: not is_row_hash(r)).collect()
    report.stage("checksums", time.monotonic() - started, len(items))
    results = [r for r in meta if isinstance(r, ChunkResult)]
    report.add_checksums([r for r in results if "." not in r.chunk.number], level=1)
    report.add_checksums([r for r in results if "." in r.chunk.number], level=2)
    report.add_leaves([r for r in meta if isinstance(r, Leaf)])
    for r in meta:
        if isinstance(r, TaskError):
            report.task_error(r)
    if not any(isinstance(r, Leaf) for r in meta):
        emitted.unpersist()
        return None
    return emitted


def _rows_stage(session: Any, ctx: Context, emitted: Any, report: Report) -> Any:
    """Join the differing pieces' rows in Spark SQL and re-check the candidates: the report's
    rows as a DataFrame (None when no chunk differed)."""
    if emitted is None:
        return None
    started = time.monotonic()
    try:
        found = rowstage.candidates(session, emitted)
        results, rechecked, errors = rowstage.recheck(session, ctx, found)
    finally:
        emitted.unpersist()
    for e in errors:
        report.task_error(e)
    report.add_rechecked(rechecked)
    frame = rowstage.diffs(session, results)
    report.add_diffs(frame, results)
    report.stage("rows", time.monotonic() - started, sum(r.candidates for r in rechecked))
    return frame


def _partitions(items: list[Any], n: int) -> list[list[Any]]:
    """Deal `items` (largest first) round-robin into at most `n` groups."""
    ordered = sorted(items, key=lambda item: -item[0].estimate)
    groups = [ordered[i::n] for i in range(min(n, len(ordered)))]
    return [g for g in groups if g]
