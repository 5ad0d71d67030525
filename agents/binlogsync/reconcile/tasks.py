"""What runs inside Spark tasks: chunk checksums, row-level comparison, re-check rounds.

Each task holds one source session and one session per target (so a job opens at most
`connections x (1 + targets)` sessions), and works through its items in order. The source is
read in the calling thread; each target in a thread of its own, so the target's read of a chunk
overlaps the source's: the target only has to wait for the source's snapshot *position*, which
is known as soon as the snapshot is opened, not for the source's query.

Per chunk (level 1 and after splits):

    source   snapshot at P, COUNT(*) and SUM(row hash) over the chunk
    target   wait until applied(P), snapshot, the same query

Per differing chunk that is small enough (`max_task_rows`), the row level:

    source   snapshot at P, (key, row hash) of every row of the chunk
    target   wait until applied(P), snapshot, the same
    → candidate keys: present on one side only, or with different hashes

Re-check rounds on the candidates (per-column hashes, by key):

    source at P1 → target after applied(P1) → source again at P2 (P2 is after the target's read)
    for each key:  source image changed between P1 and P2  → changed by a live write; next round
                   source image == target image            → equal: not a difference
                   otherwise                               → differs in this round

A key is reported when it differs in `confirm` consecutive rounds (default 2); a key still
being rewritten after `max_rounds` rounds is reported as unsettled, never as a difference.

Expected failures (a server unreachable, a target that does not catch up) come back as
`TaskError` items rather than exceptions, so the driver can name them in one clear line.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from ..config import DatabaseSettings
from ..errors import BinlogsyncError
from ..position import Position
from . import checksums, dialects, pinning
from . import chunks as chunking
from .checksums import Encoding
from .chunks import Chunk
from .connections import close, connect
from .dialects import MySQL
from .pinning import Pin, Waiter

KEY_BATCH = 500  # keys per by-key query
VALUE_CHARS = 200  # differing values shown in the report are cut to this length


# -- what the driver sends ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TargetSpec:
    db: DatabaseSettings
    label: str
    pin: Pin

    @property
    def dialect(self) -> dialects.Dialect:
        return dialects.of(self.db)


@dataclass(frozen=True, slots=True)
class TableSpec:
    index: int
    name: str  # source schema.table, for messages
    source: tuple[str, str]
    targets: tuple[tuple[str, str] | None, ...]  # per target index; None: not compared there
    key: tuple[str, ...]
    columns: tuple[str, ...]
    encoding: Encoding
    integer_key: bool = False
    # per target index: its column types where it is PostgreSQL (pgsql.py), else None
    target_types: tuple[Mapping[str, str] | None, ...] = ()
    integer_columns: tuple[bool, ...] = ()  # per key column: an integer on the source

    def types(self, t: int) -> Mapping[str, str]:
        found = self.target_types[t] if t < len(self.target_types) else None
        return found or {}


@dataclass(frozen=True, slots=True)
class Context:
    source: DatabaseSettings
    targets: tuple[TargetSpec, ...]
    tables: tuple[TableSpec, ...]
    wait_timeout: float = 300.0
    confirm: int = 2
    max_rounds: int = 6
    max_task_rows: int = 50_000
    gtid: bool = False  # some target is pinned by GTID: snapshots need their GTID position
    pinned: bool = True  # some target is pinned at all: snapshots need a binlog position

    def snapshot(self, conn: Any) -> Position:
        return pinning.snapshot(conn, self.gtid, self.pinned)


# -- what comes back ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TaskError:
    table: int | None
    target: int | None
    message: str


@dataclass(frozen=True, slots=True)
class SideSum:
    count: int
    total: Decimal


@dataclass(frozen=True, slots=True)
class ChunkResult:
    chunk: Chunk
    position: Position
    source: SideSum
    targets: tuple[tuple[int, SideSum], ...]
    seconds: float


@dataclass(frozen=True, slots=True)
class Diff:
    table: int
    target: int
    key: tuple[Any, ...]
    kind: str  # missing | extra | changed | unsettled
    columns: tuple[str, ...] = ()
    source_values: str = ""  # JSON object of the differing columns (cut), changed rows only
    target_values: str = ""


@dataclass(frozen=True, slots=True)
class RowResult:
    table: int
    target: int
    chunk: Chunk
    source_rows: int
    target_rows: int
    candidates: int
    rounds: int
    diffs: tuple[Diff, ...] = field(default=())
    counts: tuple[tuple[str, int], ...] = ()  # kind -> rows, over all diffs

    def summary(self, show: int) -> RowResult:
        """This result with at most `show` diffs (the counts stay whole), for the driver."""
        return replace(self, diffs=self.diffs[:show])


# -- sessions of one task ----------------------------------------------------------------------
class _Sessions:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.source = connect(ctx.source, "source")
        self.targets: dict[int, tuple[Any, Waiter]] = {}
        self.pools: dict[int, ThreadPoolExecutor] = {}

    def target(self, index: int) -> tuple[Any, Waiter]:
        if index not in self.targets:
            spec = self.ctx.targets[index]
            conn = spec.dialect.connect(spec.db, f"target {spec.label}")
            waiter = Waiter(
                spec.pin,
                conn,
                f"target {spec.label}",
                self.ctx.wait_timeout,
                lambda: connect(self.ctx.source, "source"),
                spec.dialect.applied,
            )
            self.targets[index] = (conn, waiter)
        return self.targets[index]

    def begin(self, index: int) -> None:
        """Open a snapshot on target `index` (after its wait)."""
        conn = self.targets[index][0]
        with conn.cursor() as cur:
            cur.execute(self.ctx.targets[index].dialect.snapshot)

    def pool(self, index: int) -> ThreadPoolExecutor:
        if index not in self.pools:
            self.pools[index] = ThreadPoolExecutor(1, thread_name_prefix=f"target{index}")
        return self.pools[index]

    def close(self) -> None:
        for pool in self.pools.values():
            pool.shutdown(wait=True)
        close(self.source)
        for index, (conn, waiter) in self.targets.items():
            waiter.close()
            self.ctx.targets[index].dialect.close(conn)


def _guard(ctx: Context, run: Callable[[_Sessions], Iterator[Any]]) -> Iterator[Any]:
    """Run one partition's work; expected failures become a TaskError item."""
    sessions = None
    try:
        sessions = _Sessions(ctx)
        yield from run(sessions)
    except BinlogsyncError as exc:
        yield TaskError(getattr(exc, "table", None), getattr(exc, "target", None), str(exc))
    finally:
        if sessions is not None:
            sessions.close()


class _Failed(BinlogsyncError):
    """A failure tied to one table and target (carried into TaskError)."""

    def __init__(self, exc: BaseException, table: int, target: int | None) -> None:
        super().__init__(str(exc))
        self.table, self.target = table, target


def _query_error(exc: BaseException, label: str, table: TableSpec) -> BinlogsyncError:
    if isinstance(exc, BinlogsyncError):
        return exc
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    reason = args[1] if len(args) > 1 else str(exc).strip()
    return BinlogsyncError(f"{table.name} on {label}: {reason}")


# -- level 1: chunk checksums ------------------------------------------------------------------
def checksum_partition(
    ctx: Context, items: Iterable[tuple[Chunk, tuple[int, ...]]]
) -> Iterator[ChunkResult | TaskError]:
    """Checksum each chunk on the source once and on each of its targets."""
    work = list(items)
    if not work:
        return iter(())

    def run(s: _Sessions) -> Iterator[ChunkResult | TaskError]:
        for chunk, targets in work:
            try:
                yield _checksum_chunk(ctx, s, chunk, targets)
            except _Failed as exc:
                yield TaskError(exc.table, exc.target, str(exc))

    return _guard(ctx, run)


def _checksum_chunk(
    ctx: Context, s: _Sessions, chunk: Chunk, targets: tuple[int, ...]
) -> ChunkResult:
    table = ctx.tables[chunk.table]
    started = time.monotonic()
    try:
        position = ctx.snapshot(s.source)
    except Exception as exc:
        raise _Failed(_query_error(exc, "the source", table), table.index, None) from exc
    futures: list[tuple[int, Future[SideSum]]] = []
    try:
        for t in targets:
            conn, waiter = s.target(t)
            futures.append(
                (
                    t,
                    s.pool(t).submit(
                        _target_checksum, ctx, conn, waiter, table, t, chunk, position
                    ),
                )
            )
        source = _checksum(s.source, MySQL, table.source, table, chunk, {})
    except _Failed:
        raise
    except Exception as exc:
        raise _Failed(_query_error(exc, "the source", table), table.index, None) from exc
    finally:
        pinning.end(s.source)
        results = [(t, f.exception() or f.result()) for t, f in futures]
    sums = []
    for t, result in results:
        if isinstance(result, BaseException):
            raise result
        sums.append((t, result))
    return ChunkResult(chunk, position, source, tuple(sums), time.monotonic() - started)


def _checksum(
    conn: Any,
    dialect: dialects.Dialect,
    side: tuple[str, str],
    table: TableSpec,
    chunk: Chunk,
    types: Mapping[str, str],
) -> SideSum:
    where, params = chunk.where(table.key, dialect.quote)
    with conn.cursor() as cur:
        cur.execute(dialect.checksum_sql(side, table.encoding, types, where), params)
        count, total = cur.fetchone()
    return SideSum(int(count), Decimal(total))


def _target_checksum(
    ctx: Context,
    conn: Any,
    waiter: Waiter,
    table: TableSpec,
    t: int,
    chunk: Chunk,
    position: Position,
) -> SideSum:
    side = table.targets[t]
    assert side is not None
    label = f"target {ctx.targets[t].label}"
    dialect = ctx.targets[t].dialect
    try:
        waiter.wait(position)
        with conn.cursor() as cur:
            cur.execute(dialect.snapshot)
        try:
            return _checksum(conn, dialect, side, table, chunk, table.types(t))
        finally:
            pinning.end(conn)
    except Exception as exc:
        raise _Failed(_query_error(exc, label, table), table.index, t) from exc


# -- level 2: rows of differing chunks, then re-check rounds -----------------------------------
def rows_partition(
    ctx: Context, items: Iterable[tuple[Chunk, int, int, int]]
) -> Iterator[RowResult | TaskError]:
    """Each item: a chunk that differs on target t, with its rows on the source and there."""
    work = list(items)
    if not work:
        return iter(())

    def run(s: _Sessions) -> Iterator[RowResult | TaskError]:
        for chunk, t, source_rows, target_rows in work:
            table = ctx.tables[chunk.table]
            try:
                yield from _compare_chunk(ctx, s, table, t, chunk, source_rows, target_rows)
            except _Failed as exc:
                yield TaskError(exc.table, exc.target, str(exc))
            except (BinlogsyncError, OSError) as exc:
                yield TaskError(table.index, t, str(_query_error(exc, "a database", table)))
            except Exception as exc:
                if isinstance(exc, dialects.query_errors()):
                    label = f"target {ctx.targets[t].label} or the source"
                    yield TaskError(table.index, t, str(_query_error(exc, label, table)))
                else:
                    raise

    return _guard(ctx, run)


def _compare_chunk(
    ctx: Context,
    s: _Sessions,
    table: TableSpec,
    t: int,
    chunk: Chunk,
    source_rows: int,
    target_rows: int,
    depth: int = 0,
) -> Iterator[RowResult]:
    """Rows of a differing chunk; one with more than `max_task_rows` rows on either side is
    first cut into pieces that are checksummed again (pinned as level 1 is), and only the
    differing pieces are compared row by row, so a task never holds more than that many rows.
    Done here rather than in a stage of its own: a Spark job costs a second of scheduling."""
    if max(source_rows, target_rows) <= ctx.max_task_rows or depth >= 32:
        yield _compare_rows(ctx, s, table, t, chunk)
        return
    # The walk and the extent run on the fuller side; a PostgreSQL target's key order may
    # differ from MariaDB's collation, so its chunks are always cut on the source.
    on_target = target_rows > source_rows and ctx.targets[t].dialect is MySQL
    conn = s.target(t)[0] if on_target else s.source
    side = table.targets[t] if on_target else table.source
    assert side is not None
    with conn.cursor() as cur:
        pieces = chunking.split(
            chunk,
            table.key,
            table.integer_key,
            max(source_rows, target_rows),
            ctx.max_task_rows,
            cur,
            side,
        )
    for piece in pieces:
        result = _checksum_chunk(ctx, s, piece, (t,))
        source, target = result.source, result.targets[0][1]
        if (source.count, source.total) != (target.count, target.total):
            yield from _compare_chunk(
                ctx, s, table, t, piece, source.count, target.count, depth + 1
            )


def _row_hashes(
    conn: Any,
    dialect: dialects.Dialect,
    side: tuple[str, str],
    table: TableSpec,
    chunk: Chunk,
    types: Mapping[str, str],
) -> dict[tuple[Any, ...], int]:
    where, params = chunk.where(table.key, dialect.quote)
    n = len(table.key)
    with conn.cursor() as cur:
        cur.execute(dialect.row_hashes_sql(side, table.key, table.encoding, types, where), params)
        return {dialect.key(tuple(r[:n]), table.integer_columns): int(r[n]) for r in cur.fetchall()}


def _compare_rows(ctx: Context, s: _Sessions, table: TableSpec, t: int, chunk: Chunk) -> RowResult:
    side = table.targets[t]
    assert side is not None
    conn, waiter = s.target(t)
    position = ctx.snapshot(s.source)

    def target_side() -> dict[tuple[Any, ...], int]:
        waiter.wait(position)
        s.begin(t)
        try:
            return _row_hashes(conn, ctx.targets[t].dialect, side, table, chunk, table.types(t))
        finally:
            pinning.end(conn)

    future = s.pool(t).submit(target_side)
    try:
        source = _row_hashes(s.source, MySQL, table.source, table, chunk, {})
    finally:
        pinning.end(s.source)
    target = future.result()
    candidates = sorted(
        (k for k in source.keys() | target.keys() if source.get(k) != target.get(k)), key=repr
    )
    diffs, rounds = _recheck(ctx, s, table, t, candidates) if candidates else ((), 0)
    counts = tuple(sorted(Counter(d.kind for d in diffs).items()))
    return RowResult(
        table.index, t, chunk, len(source), len(target), len(candidates), rounds, diffs, counts
    )


Image = tuple[str | None, ...] | None  # per-column hashes of a row; None = no such row


def _images(
    conn: Any,
    side: tuple[str, str],
    table: TableSpec,
    keys: Sequence[tuple[Any, ...]],
    dialect: dialects.Dialect = MySQL,
    types: Mapping[str, str] | None = None,
) -> dict[tuple[Any, ...], Image]:
    """Per-column hashes of `keys` (in the caller's transaction); absent keys map to None."""
    out: dict[tuple[Any, ...], Image] = dict.fromkeys(keys)
    n = len(table.key)
    with conn.cursor() as cur:
        for start in range(0, len(keys), KEY_BATCH):
            batch = keys[start : start + KEY_BATCH]
            where, params = checksums.keys_where(table.key, batch, dialect.quote)
            cur.execute(
                dialect.column_hashes_sql(side, table.key, table.encoding, types or {}, where),
                params,
            )
            for r in cur.fetchall():
                key = dialect.key(tuple(r[:n]), table.integer_columns)
                if key in out:
                    out[key] = tuple(r[n:])
    return out


def _source_images(
    ctx: Context, s: _Sessions, table: TableSpec, keys: Sequence[tuple[Any, ...]]
) -> tuple[Position, dict[tuple[Any, ...], Image]]:
    position = ctx.snapshot(s.source)
    try:
        return position, _images(s.source, table.source, table, keys)
    finally:
        pinning.end(s.source)


def _recheck(
    ctx: Context, s: _Sessions, table: TableSpec, t: int, candidates: list[tuple[Any, ...]]
) -> tuple[tuple[Diff, ...], int]:
    side = table.targets[t]
    assert side is not None
    conn, waiter = s.target(t)
    pending = list(candidates)
    streak = dict.fromkeys(pending, 0)
    confirmed: dict[tuple[Any, ...], tuple[Image, Image]] = {}
    position, before = _source_images(ctx, s, table, pending)
    rounds = 0
    while pending and rounds < ctx.max_rounds:
        rounds += 1
        waiter.wait(position)
        s.begin(t)
        try:
            target = _images(conn, side, table, pending, ctx.targets[t].dialect, table.types(t))
        finally:
            pinning.end(conn)
        position, after = _source_images(ctx, s, table, pending)
        still = []
        for key in pending:
            if before[key] != after[key]:
                streak[key] = 0  # rewritten on the source meanwhile: look again
                still.append(key)
            elif before[key] == target[key]:
                continue  # equal: a live change had not reached the target at first
            else:
                streak[key] += 1
                if streak[key] >= ctx.confirm:
                    confirmed[key] = (after[key], target[key])
                else:
                    still.append(key)
        pending, before = still, after
    diffs = [_diff(table, t, key, src, tgt) for key, (src, tgt) in confirmed.items()]
    changed = [d for d in diffs if d.kind == "changed"]
    if changed:
        diffs = [d for d in diffs if d.kind != "changed"] + _with_values(s, table, t, changed)
    diffs.extend(Diff(table.index, t, key, "unsettled") for key in pending)
    return tuple(sorted(diffs, key=lambda d: repr(d.key))), rounds


def _diff(table: TableSpec, t: int, key: tuple[Any, ...], src: Image, tgt: Image) -> Diff:
    if src is None:
        return Diff(table.index, t, key, "extra")
    if tgt is None:
        return Diff(table.index, t, key, "missing")
    columns = tuple(c for c, a, b in zip(table.columns, src, tgt, strict=True) if a != b)
    return Diff(table.index, t, key, "changed", columns)


def _with_values(s: _Sessions, table: TableSpec, t: int, diffs: list[Diff]) -> list[Diff]:
    """The differing columns' values on both sides, as read now (for people, cut short)."""
    side = table.targets[t]
    assert side is not None
    conn, _waiter = s.target(t)
    keys = [d.key for d in diffs]
    columns = tuple(dict.fromkeys(c for d in diffs for c in d.columns))
    source = _values(s.source, table.source, table, keys, columns)
    target = _values(conn, side, table, keys, columns, s.ctx.targets[t].dialect)
    out = []
    for d in diffs:
        src, tgt = source.get(d.key, {}), target.get(d.key, {})
        out.append(
            Diff(
                d.table,
                d.target,
                d.key,
                d.kind,
                d.columns,
                json.dumps({c: src.get(c) for c in d.columns}, ensure_ascii=False),
                json.dumps({c: tgt.get(c) for c in d.columns}, ensure_ascii=False),
            )
        )
    return out


def _values(
    conn: Any,
    side: tuple[str, str],
    table: TableSpec,
    keys: Sequence[tuple[Any, ...]],
    columns: Sequence[str],
    dialect: dialects.Dialect = MySQL,
) -> dict[tuple[Any, ...], dict[str, Any]]:
    n = len(table.key)
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    with conn.cursor() as cur:
        for start in range(0, len(keys), KEY_BATCH):
            batch = keys[start : start + KEY_BATCH]
            where, params = checksums.keys_where(table.key, batch, dialect.quote)
            cur.execute(
                dialect.rows_sql(side, [*table.key, *columns], where, table.encoding.floats),
                params,
            )
            for r in cur.fetchall():
                key = dialect.key(tuple(r[:n]), table.integer_columns)
                out[key] = {c: show(v) for c, v in zip(columns, r[n:], strict=True)}
    return out


def show(value: Any) -> Any:
    """A column value as JSON-friendly text for people: exact, cut to VALUE_CHARS."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, bytes):
        text = "0x" + value.hex()
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = str(value)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + "…"
