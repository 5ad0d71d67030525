"""Primary-key range chunks: how a table is cut into pieces that each database checksums.

A chunk is `lower <= key < upper` in key order, where either bound may be open (None) and a
bound may be a key prefix (`(5,)` of a key (a, b) means a >= 5). The first chunk is open below
and the last open above, so rows that exist on only one side, beyond the other side's first or
last key, still fall into some chunk: the chunks of a table cover every possible key exactly
once, whatever rows either side holds. Boundaries are only a partition of the key space;
correctness never depends on where they fall, only the chunk sizes do.

Where the boundaries come from:

- the first key column is an integer: equal widths between the smallest and largest value
  found on either side (no scan; a sparse or skewed key gives uneven chunks, which `split`
  evens out where it matters, in chunks that differ);
- otherwise: a walk of the primary key on the source, `LIMIT 1 OFFSET rows` from the previous
  boundary, as pt-table-checksum walks it (one index scan in total).

`split` cuts a chunk that differs and holds more rows than one task may hold (`max_task_rows`)
into smaller ones, the same two ways (the walk runs on the side with more rows in the range),
so a row-level comparison never holds more than a bounded number of rows in one executor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..mysql import ident, qualified
from .checksums import Bound, Quote, keys_where, range_where
from .schema import INTEGER_TYPES, TablePair

FANOUT = 16  # a split chunk becomes at least this many pieces


@dataclass(frozen=True, slots=True)
class Chunk:
    table: int  # index of the table in the job's plan
    number: str  # "7", then "7.3" for the 4th piece of chunk 7 after a split
    lower: Bound | None
    upper: Bound | None
    estimate: int = 0  # rows expected (for balancing tasks), 0 = unknown
    keys: tuple[tuple[Any, ...], ...] | None = None  # given: exactly these keys (--since-last)

    def where(self, key: Sequence[str], quote: Quote = ident) -> tuple[str, list[Any]]:
        if self.keys is not None:
            return keys_where(key, self.keys, quote)
        return range_where(key, self.lower, self.upper, quote)

    def describe(self) -> str:
        if self.keys is not None:
            return f"{len(self.keys)} changed keys"
        low = "…" if self.lower is None else _show(self.lower)
        high = "…" if self.upper is None else _show(self.upper)
        return f"[{low}, {high})"


def _show(bound: Bound) -> str:
    return ",".join(str(v) for v in bound) if len(bound) > 1 else str(bound[0])


def by_keys(table: int, keys: Sequence[tuple[Any, ...]], size: int) -> list[Chunk]:
    """Chunks of exactly the given keys, `size` keys each (an incremental run: only the keys
    the change stream touched are compared; keys absent on both sides simply count nothing)."""
    return [
        Chunk(table, f"k{i // size + 1}", None, None, len(part), tuple(part))
        for i in range(0, len(keys), size)
        for part in [keys[i : i + size]]
    ]


def first_key_is_integer(pair: TablePair) -> bool:
    return pair.source.column(pair.key[0]).data_type in INTEGER_TYPES


def key_extent(
    cursor: Any, schema: str, table: str, column: str, quote: Quote = ident
) -> tuple[Any, Any]:
    """Smallest and largest value of the first key column (None, None when empty)."""
    col = quote(column)
    cursor.execute(f"SELECT MIN({col}), MAX({col}) FROM {quote(schema)}.{quote(table)}")
    low, high = cursor.fetchone()
    return low, high


def equal_width(
    table: int,
    low: int,
    high: int,
    pieces: int,
    prefix: str = "",
    lower: Bound | None = None,
    upper: Bound | None = None,
) -> list[Chunk]:
    """`pieces` chunks of equal width over [low, high] of the first key column, the first open
    below (or from `lower`) and the last open above (or to `upper`)."""
    pieces = max(1, min(pieces, high - low + 1))
    width = (high - low + 1) / pieces
    cuts = sorted({low + math.ceil(width * i) for i in range(1, pieces)})
    bounds: list[Bound | None] = [lower, *[(c,) for c in cuts], upper]
    return [Chunk(table, f"{prefix}{i}", bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def walk(
    cursor: Any,
    schema: str,
    table: str,
    key: Sequence[str],
    rows: int,
    lower: Bound | None = None,
    upper: Bound | None = None,
    limit: int = 10_000,
) -> list[Bound]:
    """Boundaries every `rows` rows of the primary key within [lower, upper), walking the key."""
    cols = ", ".join(ident(c) for c in key)
    order = ", ".join(ident(c) for c in key)
    cuts: list[Bound] = []
    current = lower
    while len(cuts) < limit:
        where, params = range_where(key, current, upper)
        cursor.execute(
            f"SELECT {cols} FROM {qualified(schema, table)} FORCE INDEX (PRIMARY) "
            f"WHERE {where} ORDER BY {order} LIMIT 1 OFFSET {int(rows)}",
            params,
        )
        row = cursor.fetchone()
        if row is None:
            break
        cut = tuple(row)
        cuts.append(cut)
        current = cut
    return cuts


def from_cuts(
    table: int,
    cuts: Sequence[Bound],
    prefix: str = "",
    lower: Bound | None = None,
    upper: Bound | None = None,
    estimate: int = 0,
) -> list[Chunk]:
    bounds: list[Bound | None] = [lower, *cuts, upper]
    return [
        Chunk(table, f"{prefix}{i}", bounds[i], bounds[i + 1], estimate)
        for i in range(len(bounds) - 1)
    ]


def plan(
    table: int,
    pair: TablePair,
    source_cursor: Any,
    target_cursors: Sequence[tuple[Any, Quote]],
    chunk_rows: int,
) -> list[Chunk]:
    """The first-level chunks of one table (boundaries from the source, extent from all; each
    target cursor comes with its dialect's identifier quoting)."""
    estimate = max(
        [pair.source.rows_estimate, *(pair.target.rows_estimate for _ in target_cursors)]
    )
    if first_key_is_integer(pair):
        lows, highs = [], []
        for cur, quote, (schema, name) in [
            (source_cursor, ident, (pair.source.schema, pair.source.table)),
            *((c, q, (pair.target.schema, pair.target.table)) for c, q in target_cursors),
        ]:
            low, high = key_extent(cur, schema, name, pair.key[0], quote)
            if low is not None:
                lows.append(int(low))
                highs.append(int(high))
        if not lows:
            return [Chunk(table, "0", None, None, 0)]
        pieces = max(1, math.ceil(estimate / chunk_rows))
        chunks = equal_width(table, min(lows), max(highs), pieces)
        per = estimate // max(1, len(chunks))
        return [Chunk(c.table, c.number, c.lower, c.upper, per) for c in chunks]
    cuts = walk(source_cursor, pair.source.schema, pair.source.table, pair.key, chunk_rows)
    return from_cuts(table, cuts, estimate=chunk_rows)


BUCKETS = 64  # a differing chunk's one-pass narrowing (tasks.py): per-bucket checksums


def buckets(chunk: Chunk, low: int, high: int, n: int = BUCKETS) -> tuple[int, list[Chunk]]:
    """`chunk` cut into at most `n` pieces of one integer width over [low, high] of its first
    key column (the first piece from the chunk's lower bound, the last to its upper bound), as
    `checksums.bucket_sql` numbers them: (width, pieces)."""
    n = max(1, min(n, high - low + 1))
    width = -(-(high - low + 1) // n)
    n = -(-(high - low + 1) // width)
    cuts: list[Bound | None] = [
        chunk.lower,
        *[(low + i * width,) for i in range(1, n)],
        chunk.upper,
    ]
    prefix = f"{chunk.number}."
    pieces = [
        Chunk(chunk.table, f"{prefix}{i}", cuts[i], cuts[i + 1], 0) for i in range(len(cuts) - 1)
    ]
    return width, pieces


def split(
    chunk: Chunk,
    key: Sequence[str],
    integer_key: bool,
    rows: int,
    max_task_rows: int,
    cursor: Any,
    side: tuple[str, str],
) -> list[Chunk]:
    """Cut `chunk`, which holds `rows` rows on its fuller side, into at least `FANOUT` pieces of
    at most about `max_task_rows // 2` rows. `cursor` and `side` (schema, table) are that
    fuller side's. A few differing rows then cost a second checksum pass over the chunk and a
    row-level fetch of a sixteenth of it, not of the whole chunk."""
    pieces = max(FANOUT, math.ceil(rows / max(1, max_task_rows // 2)))
    target_rows = max(1, math.ceil(rows / pieces))
    prefix = f"{chunk.number}."
    lo, hi = chunk.lower, chunk.upper
    if integer_key and (lo is None or len(lo) == 1) and (hi is None or len(hi) == 1):
        # Equal widths between the real first and last key inside the chunk.
        where, params = chunk.where(key)
        col = ident(key[0])
        cursor.execute(
            f"SELECT MIN({col}), MAX({col}) FROM {qualified(*side)} WHERE {where}", params
        )
        low, high = cursor.fetchone()
        if low is not None and int(high) > int(low):
            pieces_ = equal_width(
                chunk.table, int(low), int(high), pieces, prefix, lower=lo, upper=hi
            )
            return [
                Chunk(c.table, c.number, c.lower, c.upper, rows // len(pieces_)) for c in pieces_
            ]
    cuts = walk(cursor, side[0], side[1], key, target_rows, lo, hi)
    return from_cuts(chunk.table, cuts, prefix, lo, hi, target_rows)
