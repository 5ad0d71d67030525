"""What runs inside Spark tasks: chunk checksums, narrowing differing chunks, the rows of
differing pieces, and re-check rounds (recheck.py).

Each task holds one source session and one session per target (so a job opens at most
`connections x (1 + targets)` sessions), and works through its items in order. The source is
read in the calling thread; each target in a thread of its own, so the target's read of a chunk
overlaps the source's: the target only has to wait for the source's snapshot *position*, which
is known as soon as the snapshot is opened, not for the source's query.

Per chunk (level 1):

    source   snapshot at P, COUNT(*) and the fold of the row hashes over the chunk
    target   wait until applied(P), snapshot, the same query

A chunk that differs on a target is narrowed in the same task, while its sessions are open,
until each differing piece holds at most `max_task_rows` rows on either side. With an integer
first key column and a MariaDB/MySQL target, in one pass per side: a `GROUP BY` of the chunk
into 64 equal-width buckets gives each bucket's count and fold (pinned as level 1 is), and only
the differing buckets go on (`_bucketed`). Otherwise the chunk is cut into pieces (chunks.split)
that are checksummed again, one pinned query pair each, recursively. Of those pieces:

    source   snapshot at P, (key, row hash) of every row
    target   wait until applied(P), snapshot, the same

come out of the task as rows of the row stage's DataFrame (`RowHash`): job.py joins the two
sides on the key (a full outer join in Spark SQL), and the keys present on one side only or
with different hashes go to the re-check rounds (recheck.py), which tell live writes from
differences.

Expected failures (a server unreachable, a target that does not catch up) come back as
`TaskError` items rather than exceptions, so the driver can name them in one clear line.
Database passwords are not in the tasks: `Context.resolved()` reads them from the run's secrets
file (passwords.py).
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from decimal import Decimal
from typing import Any

from ..errors import BinlogsyncError
from ..mysql import ident, qualified
from ..position import Position
from . import checksums, dialects, pinning
from . import chunks as chunking
from .chunks import Chunk
from .connections import close, connect
from .dialects import MySQL
from .pinning import Waiter
from .taskdata import (
    SOURCE,
    TARGET,
    ChunkResult,
    Context,
    Leaf,
    RowHash,
    SideSum,
    TableSpec,
    TaskError,
)


# -- sessions of one task ----------------------------------------------------------------------
class _Sessions:
    def __init__(self, ctx: Context) -> None:
        ctx = ctx.resolved()
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


# -- level 1: chunk checksums, and narrowing what differs ------------------------------------
def checksum_partition(
    ctx: Context, items: Iterable[tuple[Chunk, tuple[int, ...]]]
) -> Iterator[ChunkResult | Leaf | RowHash | TaskError]:
    """Checksum each chunk on the source once and on each of its targets; narrow a chunk that
    differs on a target down to the rows of its differing pieces (`RowHash`, `Leaf`)."""
    work = list(items)
    if not work:
        return iter(())

    def run(s: _Sessions) -> Iterator[ChunkResult | Leaf | RowHash | TaskError]:
        for chunk, targets in work:
            try:
                result = _checksum_chunk(ctx, s, chunk, targets)
            except _Failed as exc:
                yield TaskError(exc.table, exc.target, str(exc))
                continue
            yield result
            for t, side in result.targets:
                if (side.count, side.total) != (result.source.count, result.source.total):
                    yield from _narrowed(ctx, s, chunk, t, result.source.count, side.count)

    return _guard(ctx, run)


def _narrowed(
    ctx: Context, s: _Sessions, chunk: Chunk, t: int, source_rows: int, target_rows: int
) -> Iterator[Leaf | RowHash | TaskError]:
    table = ctx.tables[chunk.table]
    try:
        yield from _narrow(ctx, s, table, t, chunk, source_rows, target_rows)
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


Query = Callable[..., Any]  # (conn, dialect, side, table, chunk, types) -> one side's answer


def _checksum_chunk(
    ctx: Context, s: _Sessions, chunk: Chunk, targets: tuple[int, ...]
) -> ChunkResult:
    started = time.monotonic()
    position, source, sums = _pinned(ctx, s, chunk, targets, _checksum)
    return ChunkResult(chunk, position, source, tuple(sums), time.monotonic() - started)


def _pinned(
    ctx: Context, s: _Sessions, chunk: Chunk, targets: tuple[int, ...], query: Query
) -> tuple[Position, Any, list[tuple[int, Any]]]:
    """`query` on the source in a snapshot at P, and on each target (in its thread, while the
    source's runs) once it has applied P, in a snapshot of its own: (P, the source's answer,
    each target's)."""
    table = ctx.tables[chunk.table]
    try:
        position = ctx.snapshot(s.source)
    except Exception as exc:
        raise _Failed(_query_error(exc, "the source", table), table.index, None) from exc
    futures: list[tuple[int, Future[Any]]] = []
    try:
        for t in targets:
            conn, waiter = s.target(t)
            futures.append(
                (
                    t,
                    s.pool(t).submit(
                        _target_checksum, ctx, conn, waiter, table, t, chunk, position, query
                    ),
                )
            )
        source = query(s.source, MySQL, table.source, table, chunk, {})
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
    return position, source, sums


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
    query: Query,
) -> Any:
    side = table.targets[t]
    assert side is not None
    label = f"target {ctx.targets[t].label}"
    dialect = ctx.targets[t].dialect
    try:
        waiter.wait(position)
        with conn.cursor() as cur:
            cur.execute(dialect.snapshot)
        try:
            return query(conn, dialect, side, table, chunk, table.types(t))
        finally:
            pinning.end(conn)
    except Exception as exc:
        raise _Failed(_query_error(exc, label, table), table.index, t) from exc


def _narrow(
    ctx: Context,
    s: _Sessions,
    table: TableSpec,
    t: int,
    chunk: Chunk,
    source_rows: int,
    target_rows: int,
    depth: int = 0,
) -> Iterator[Leaf | RowHash]:
    """The rows of a differing chunk; one with more than `max_task_rows` rows on either side is
    first cut into pieces that are checksummed again, and only the differing pieces go on, so
    a few differing rows cost a second checksum pass over their chunk and the rows of a few
    small pieces, not of the whole chunk."""
    if max(source_rows, target_rows) <= ctx.max_task_rows or depth >= 32:
        yield from _leaf_rows(ctx, s, table, t, chunk)
        return
    # The walk and the extent run on the fuller side; a PostgreSQL target's key order may
    # differ from MariaDB's collation, so its chunks are always cut on the source.
    on_target = target_rows > source_rows and ctx.targets[t].dialect is MySQL
    conn = s.target(t)[0] if on_target else s.source
    side = table.targets[t] if on_target else table.source
    assert side is not None
    bucketed = _bucketed(ctx, s, table, t, chunk, conn, side)
    if bucketed is not None:
        for piece, piece_source, piece_target in bucketed:
            yield from _narrow(ctx, s, table, t, piece, piece_source, piece_target, depth + 1)
        return
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
            yield from _narrow(ctx, s, table, t, piece, source.count, target.count, depth + 1)


def _bucketed(
    ctx: Context,
    s: _Sessions,
    table: TableSpec,
    t: int,
    chunk: Chunk,
    conn: Any,
    side: tuple[str, str],
) -> list[tuple[Chunk, int, int]] | None:
    """A differing chunk narrowed in one pass per side (MariaDB/MySQL target, integer first key
    column): the per-bucket checksums of `chunks.BUCKETS` equal-width pieces, pinned as a chunk
    is, and the pieces that differ with their rows on each side. One query per side instead of
    one pinned query pair per piece, and pieces of a sixty-fourth of the chunk rather than a
    sixteenth, so fewer rows go to the row stage. None where it does not apply (the caller
    splits the chunk instead)."""
    lo, hi = chunk.lower, chunk.upper
    if (
        not table.integer_key
        or ctx.targets[t].dialect is not MySQL
        or chunk.keys is not None
        or (lo is not None and len(lo) != 1)
        or (hi is not None and len(hi) != 1)
    ):
        return None
    where, params = chunk.where(table.key)
    col = ident(table.key[0])
    with conn.cursor() as cur:
        cur.execute(f"SELECT MIN({col}), MAX({col}) FROM {qualified(*side)} WHERE {where}", params)
        low, high = cur.fetchone()
    if low is None or int(high) <= int(low) or int(high) - int(low) >= 1 << 62:
        return None
    width, pieces = chunking.buckets(chunk, int(low), int(high))
    if len(pieces) < 2:
        return None
    last = len(pieces) - 1
    bounds = [int(low), int(low) + last * width, last, int(low), width]

    def per_bucket(
        conn: Any,
        dialect: dialects.Dialect,
        side: tuple[str, str],
        table: TableSpec,
        chunk: Chunk,
        types: Mapping[str, str],
    ) -> dict[int, tuple[int, Decimal]]:
        where, params = chunk.where(table.key, dialect.quote)
        sql = checksums.bucket_sql(side[0], side[1], table.key[0], table.encoding, where)
        with conn.cursor() as cur:
            cur.execute(sql, [*bounds, *params])
            return {int(b): (int(n), Decimal(total)) for b, n, total in cur.fetchall()}

    _position, source, found = _pinned(ctx, s, chunk, (t,), per_bucket)
    target = found[0][1]
    none = (0, Decimal(0))
    return [
        (piece, source.get(b, none)[0], target.get(b, none)[0])
        for b, piece in enumerate(pieces)
        if source.get(b, none) != target.get(b, none)
    ]


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _row_hashes(
    conn: Any,
    dialect: dialects.Dialect,
    side: tuple[str, str],
    table: TableSpec,
    chunk: Chunk,
    types: Mapping[str, str],
) -> list[tuple[tuple[Any, ...], int]]:
    where, params = chunk.where(table.key, dialect.quote)
    n = len(table.key)
    with conn.cursor() as cur:
        cur.execute(dialect.row_hashes_sql(side, table.key, table.encoding, types, where), params)
        return [
            (dialect.key(tuple(r[:n]), table.integer_columns), _signed(int(r[n])))
            for r in cur.fetchall()
        ]


def _leaf_rows(
    ctx: Context, s: _Sessions, table: TableSpec, t: int, chunk: Chunk
) -> Iterator[Leaf | RowHash]:
    """(key, hash) of every row of `chunk` on the source at P and on target `t` once it has
    applied P, as row-stage rows."""
    side = table.targets[t]
    assert side is not None
    conn, waiter = s.target(t)
    position = ctx.snapshot(s.source)

    def target_side() -> list[tuple[tuple[Any, ...], int]]:
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
    yield Leaf(table.index, t, chunk.number, len(source), len(target))
    for number, rows in ((SOURCE, source), (TARGET, target)):
        for key, digest in rows:
            yield (
                table.index,
                t,
                chunk.number,
                number,
                repr(key),
                pickle.dumps(key, protocol=4),
                digest,
            )
