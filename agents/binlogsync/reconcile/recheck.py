"""Re-check rounds: which candidate keys of the row stage really differ while writes continue.

The row stage's join (job.py) gives candidate keys: present on one side only, or with different
row hashes. They are looked at again, by key, with per-column hashes:

    source at P1 → target after applied(P1) → source again at P2 (P2 is after the target's read)
    for each key:  source image changed between P1 and P2  → changed by a live write; next round
                   source image == target image            → equal: not a difference
                   otherwise                               → differs in this round

A key is reported when it differs in `confirm` consecutive rounds (default 2); a key still
being rewritten after `max_rounds` rounds is reported as unsettled, never as a difference.
Differing columns' values are read for people (cut to VALUE_CHARS).

`recheck_partition` runs in a Spark task over a partition of the candidates and yields the
report's rows (`DiffRow`) and one `Rechecked` per table and target it saw.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BinlogsyncError
from ..position import Position
from . import checksums, dialects, pinning
from .dialects import MySQL
from .taskdata import Context, TableSpec, TaskError
from .tasks import _guard, _query_error, _Sessions

KEY_BATCH = 500  # keys per by-key query
KINDS = ("missing", "extra", "changed", "unsettled")  # the report's order
VALUE_CHARS = 200  # differing values shown in the report are cut to this length


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
class Rechecked:
    """What the re-check of one table and target saw in one partition (for the summary): its
    counts per kind and its first `show` differences, so the driver needs no Spark job for
    either (the first `show` overall are among the partitions' first `show`)."""

    table: int
    target: int
    candidates: int
    rounds: int
    counts: tuple[tuple[str, int], ...] = ()
    sample: tuple[Diff, ...] = ()


# A row of the report (rows.parquet): (table index, target index, table, target,
# target_table, kind, key (JSON object), columns, source_values, target_values, chunk,
# key_pickle). The first two and the last stay in Spark (counts, samples, repair).
DiffRow = tuple[int, int, str, str, str, str, str, list[str], str | None, str | None, str, bytes]


def is_diff_row(item: Any) -> bool:
    return type(item) is tuple


def recheck_partition(
    ctx: Context, rows: Iterable[Any]
) -> Iterator[DiffRow | Rechecked | TaskError]:
    """Re-check the candidates in `rows` (table, target, chunk, key_pickle), grouped by table
    and target."""
    groups: dict[tuple[int, int], dict[tuple[Any, ...], str]] = {}
    for table, target, chunk, blob in rows:
        groups.setdefault((table, target), {})[pickle.loads(blob)] = chunk
    if not groups:
        return iter(())

    def run(s: _Sessions) -> Iterator[DiffRow | Rechecked | TaskError]:
        for (index, t), chunks in sorted(groups.items()):
            table = ctx.tables[index]
            candidates = sorted(chunks, key=repr)
            try:
                diffs, rounds = _recheck(ctx, s, table, t, candidates)
            except (BinlogsyncError, OSError) as exc:
                yield TaskError(index, t, str(_query_error(exc, "a database", table)))
                continue
            except Exception as exc:
                if isinstance(exc, dialects.query_errors()):
                    label = f"target {ctx.targets[t].label} or the source"
                    yield TaskError(index, t, str(_query_error(exc, label, table)))
                    continue
                raise
            counts = Counter(d.kind for d in diffs)
            ordered = sorted(diffs, key=lambda d: (KINDS.index(d.kind), repr(d.key)))
            yield Rechecked(
                index, t, len(candidates), rounds, tuple(counts.items()), tuple(ordered[: ctx.show])
            )
            side = table.targets[t]
            assert side is not None
            for d in diffs:
                yield (
                    index,
                    t,
                    table.name,
                    ctx.targets[t].label,
                    f"{side[0]}.{side[1]}",
                    d.kind,
                    key_json(d.key, table.key),
                    list(d.columns),
                    d.source_values or None,
                    d.target_values or None,
                    chunks[d.key],
                    pickle.dumps(d.key, protocol=4),
                )

    return _guard(ctx, run)


def key_json(key: tuple[Any, ...], columns: Sequence[str]) -> str:
    """A key as a JSON object of its columns, for people (values cut as `show` cuts them)."""
    return json.dumps(
        {c: show(v) for c, v in zip(columns, key, strict=False)}, ensure_ascii=False, default=str
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
