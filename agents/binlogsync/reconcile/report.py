"""What a reconciliation found: a JSON summary, Parquet rows, and a readable summary on stdout.

Output folder (`--out DIR`):

    summary.json     the run (source, targets, options, Spark, times, exit code) and one entry
                     per table and target: status, rows on each side, chunks, how many rows
                     were compared one by one, missing / extra / changed / unsettled counts,
                     the first differing keys, notes, errors, time and rows/s
    rows.parquet     one row per differing key (written with pyarrow as rows stream in):
                     table, target, target_table, kind, key (JSON object), columns (array of
                     differing column names, changed rows), source_values / target_values
                     (JSON objects of those columns, values cut to 200 characters), chunk
    repair-*.sql     with --repair=sql, one file per target (repair.py)

Kinds: `missing` (on the source, not on the target), `extra` (on the target only), `changed`
(both, different values), `unsettled` (rewritten on the source in every re-check round, so
neither equal nor different could be established: run again when writes calm down).

Exit code, as diff(1): 0 every compared table is equal; 1 differences (or unsettled keys)
found; 2 trouble: a table or database could not be compared (differences found elsewhere are
still reported).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import shutil
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..position import Position
from .tasks import ChunkResult, Diff, RowResult, TaskError, show

if TYPE_CHECKING:
    from .job import Options, _TableState
    from .pinning import Pin

KINDS = ("missing", "extra", "changed", "unsettled")
ROW_COLUMNS = (
    "table",
    "target",
    "target_table",
    "kind",
    "key",
    "columns",
    "source_values",
    "target_values",
    "chunk",
)


@dataclass
class TableReport:
    table: str  # source schema.table
    target: str  # target label
    index: int
    target_index: int
    target_table: str = ""
    pin: str = ""
    error: str = ""
    notes: list[str] = field(default_factory=list)
    source_rows: int = 0
    target_rows: int = 0
    chunks: int = 0
    chunks_differing: int = 0
    chunks_split: int = 0
    rows_compared: int = 0  # rows fetched one by one (both sides), in differing chunks
    candidates: int = 0
    rounds: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    sample: list[Diff] = field(default_factory=list)
    seconds: float = 0.0  # busy time of this table's chunk checksums (source side)
    first_position: Position | None = None
    last_position: Position | None = None
    mode: str = "full"  # or "since-last": only the keys changed since the last equal run

    @classmethod
    def planned(
        cls, name: str, label: str, state: _TableState, t: int, pin: Pin | None
    ) -> TableReport:
        r = cls(name, label, state.index, t)
        r.error = state.errors.get(None, "") or state.errors.get(t, "")
        pair = state.pairs.get(t)
        if pair is not None:
            r.target_table = pair.target.schema + "." + pair.target.table
            r.notes.extend(pair.notes)
            r.chunks = len(state.chunks)
        r.notes.extend(state.notes)
        r.mode = state.mode
        if pin is not None:
            r.pin = pin.describe()
            if pin.mode == "none":
                r.notes.append(
                    "not pinned: the target has no replication position, so this is a static "
                    "comparison; rows written meanwhile may show as differences"
                )
        return r

    @property
    def status(self) -> str:
        if self.error:
            return "error"
        if any(self.counts[k] for k in KINDS):
            return "different"
        return "equal"

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "target": self.target,
            "target_table": self.target_table,
            "status": self.status,
            "mode": self.mode,
            "error": self.error or None,
            "notes": self.notes,
            "pin": self.pin,
            "source_rows": self.source_rows,
            "target_rows": self.target_rows,
            "chunks": self.chunks,
            "chunks_differing": self.chunks_differing,
            "chunks_split": self.chunks_split,
            "rows_compared": self.rows_compared,
            "candidates": self.candidates,
            "recheck_rounds": self.rounds,
            **{k: self.counts[k] for k in KINDS},
            "first_differences": [_diff_json(d) for d in self.sample],
            "checksum_seconds": round(self.seconds, 3),
            "rows_per_second": round(self.source_rows / self.seconds) if self.seconds else None,
            "source_positions": {
                "first": str(self.first_position) if self.first_position else None,
                "last": str(self.last_position) if self.last_position else None,
            },
        }


def _key_json(key: tuple[Any, ...], columns: tuple[str, ...]) -> str:
    return json.dumps(
        {c: show(v) for c, v in zip(columns, key, strict=False)}, ensure_ascii=False, default=str
    )


def _diff_json(d: Diff) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": d.kind, "key": [show(v) for v in d.key]}
    if d.columns:
        out["columns"] = list(d.columns)
    if d.source_values:
        out["source"] = json.loads(d.source_values)
        out["target"] = json.loads(d.target_values)
    return out


class Report:
    def __init__(self, options: Options, started: float, began: float) -> None:
        self.options = options
        self.started = started  # before Spark started
        self.began = began  # Spark up, work begins
        self.started_at = dt.datetime.now(dt.UTC)
        self.finished: float | None = None
        self.spark: dict[str, Any] = {}
        self.hash = ""  # the per-row hash the run used (checksums.HASHES)
        self.position: Position | None = None  # the source's when planned; None: unpinned
        self.tables: list[TableReport] = []
        self.errors: list[str] = []  # errors not tied to one table
        self.stages: list[dict[str, Any]] = []
        self.plan: list[_TableState] = []
        self.row_summaries: list[RowResult] = []
        self.rows_rdd: Any = None
        self.repair: dict[str, Any] | None = None
        self.key_columns: dict[int, tuple[str, ...]] = {}
        self.files: dict[str, str] = {}
        self.target_errors: dict[int, str] = {}

    # -- collecting ------------------------------------------------------------------------
    def fatal(self, message: str) -> None:
        self.errors.append(message)

    def target_error(self, t: int, message: str) -> None:
        """Target `t` cannot be used at all (every table's entry for it says why)."""
        self.target_errors[t] = message
        for r in self.tables:
            if r.target_index == t and not r.error:
                r.error = message

    def task_error(self, e: TaskError) -> None:
        hit = False
        for r in self.tables:
            if (e.table is None or r.index == e.table) and (
                e.target is None or r.target_index == e.target
            ):
                if not r.error:
                    r.error = e.message
                hit = True
        if not hit or e.table is None:
            if e.message not in self.errors:
                self.errors.append(e.message)

    def stage(self, name: str, seconds: float, items: int) -> None:
        self.stages.append({"stage": name, "seconds": round(seconds, 3), "tasks_items": items})

    def _table(self, index: int, t: int) -> TableReport:
        for r in self.tables:
            if r.index == index and r.target_index == t:
                return r
        raise KeyError((index, t))

    def add_checksums(self, results: Iterable[ChunkResult], level: int) -> None:
        for res in results:
            for t, side in res.targets:
                r = self._table(res.chunk.table, t)
                differs = (side.count, side.total) != (res.source.count, res.source.total)
                if level == 1:
                    r.source_rows += res.source.count
                    r.target_rows += side.count
                    r.seconds += res.seconds
                    r.chunks_differing += int(differs)
                    pos = res.position
                    r.first_position = min(r.first_position or pos, pos)
                    r.last_position = max(r.last_position or pos, pos)
                elif differs:
                    r.chunks_split += 1

    def add_rows(self, rdd: Any, states: list[_TableState]) -> None:
        self.rows_rdd = rdd
        for state in states:
            if state.spec is not None:
                self.key_columns[state.index] = state.spec.key
        for res in self.row_summaries:
            r = self._table(res.table, res.target)
            r.rows_compared += res.source_rows + res.target_rows
            r.chunks_split += int("." in res.chunk.number)
            r.candidates += res.candidates
            r.rounds = max(r.rounds, res.rounds)
            r.counts.update(dict(res.counts))
            room = self.options.show - len(r.sample)
            if room > 0:
                r.sample.extend(res.diffs[:room])
        for r in self.tables:
            r.sample.sort(key=lambda d: (KINDS.index(d.kind), repr(d.key)))

    def errors_present(self) -> bool:
        return bool(self.errors) or any(r.error for r in self.tables)

    def differences_present(self) -> bool:
        return any(r.status == "different" for r in self.tables)

    # -- results ---------------------------------------------------------------------------
    @property
    def exit_code(self) -> int:
        if self.errors_present():
            return 2
        return 1 if self.differences_present() else 0

    def release(self) -> None:
        """Drop the persisted row results (Spark memory and disk)."""
        if self.rows_rdd is not None:
            self.rows_rdd.unpersist()
            self.rows_rdd = None

    def finish(self) -> Report:
        self.finished = time.monotonic()
        return self

    def seconds(self, with_startup: bool = True) -> float:
        end = self.finished or time.monotonic()
        return end - (self.started if with_startup else self.began)

    def to_json(self) -> dict[str, Any]:
        rows = sum(r.source_rows for r in self.tables if not r.error)
        wall = self.seconds(True)
        work = self.seconds(False)
        return {
            "version": 1,
            "started_at": self.started_at.isoformat(),
            "source": str(self.options.source),
            "targets": [self.options.target_label(i) for i in range(len(self.options.targets))],
            "tables": [r.to_json() for r in self.tables],
            "errors": self.errors,
            "totals": {
                "source_rows": rows,
                **{k: sum(r.counts[k] for r in self.tables) for k in KINDS},
                "seconds": round(wall, 3),
                "seconds_without_spark_startup": round(work, 3),
                "rows_per_second": round(rows / wall) if wall else None,
                "rows_per_second_without_spark_startup": round(rows / work) if work else None,
            },
            "stages": self.stages,
            "spark": self.spark,
            "options": {
                "pin": self.options.pin,
                "json": self.options.json,
                "hash": self.hash,
                "since_last": self.options.since_last,
                "chunk_rows": self.options.chunk_rows,
                "max_task_rows": self.options.max_task_rows,
                "confirm": self.options.confirm,
                "max_rounds": self.options.max_rounds,
                "common_columns": self.options.common_columns,
                "renames": dict(self.options.renames),
            },
            "repair": self.repair,
            "files": self.files,
            "exit_code": self.exit_code,
        }

    def write(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self._write_rows(out / "rows.parquet")
        self.write_summary(out)

    def write_summary(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.files["summary"] = str(out / "summary.json")
        (out / "summary.json").write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")

    def _write_rows(self, path: Path) -> None:
        """rows.parquet: streamed from the persisted row results to the driver a partition at a
        time and written with pyarrow in batches, so neither side holds them all. (Spark's own
        Parquet writer would need a SQL session, seconds of JVM start-up for one small file.)"""
        import pyarrow as pa
        import pyarrow.json as pa_json
        import pyarrow.parquet as pq

        schema = pa.schema(
            [
                *(pa.field(c, pa.string(), nullable=False) for c in ROW_COLUMNS[:5]),
                pa.field("columns", pa.list_(pa.string()), nullable=False),
                pa.field("source_values", pa.string()),
                pa.field("target_values", pa.string()),
                pa.field("chunk", pa.string(), nullable=False),
            ]
        )
        names = {r.index: r.table for r in self.tables}
        labels = {r.target_index: r.target for r in self.tables}
        target_tables = {(r.index, r.target_index): r.target_table for r in self.tables}
        keys = dict(self.key_columns)

        def rows(result: Any) -> list[tuple[Any, ...]]:
            if not isinstance(result, RowResult):
                return []
            return [
                (
                    names[d.table],
                    labels[d.target],
                    target_tables[(d.table, d.target)],
                    d.kind,
                    _key_json(d.key, keys[d.table]),
                    list(d.columns),
                    d.source_values or None,
                    d.target_values or None,
                    result.chunk.number,
                )
                for d in result.diffs
            ]

        if path.is_dir():
            shutil.rmtree(path)
        # Batches are handed to pyarrow as JSON lines, read by its own reader: building arrays
        # from Python lists makes pyarrow import pandas, 0.2 s (a fifth of an incremental run).
        # No differing row: the file holds the schema and no row group.
        with pq.ParquetWriter(str(path), schema) as writer:
            batch: list[tuple[Any, ...]] = []
            options = pa_json.ParseOptions(explicit_schema=schema)

            def flush() -> None:
                lines = "".join(
                    json.dumps(dict(zip(schema.names, row, strict=True))) + "\n" for row in batch
                )
                table = pa_json.read_json(io.BytesIO(lines.encode()), parse_options=options)
                writer.write_table(table.cast(schema))
                batch.clear()

            if self.rows_rdd is not None:
                for row in self.rows_rdd.flatMap(rows).toLocalIterator():
                    batch.append(row)
                    if len(batch) >= 10_000:
                        flush()
            if batch:
                flush()
        self.files["rows"] = str(path)

    def render(self) -> str:
        """The readable summary for stdout."""
        o = self.options
        lines = []
        wall, work = self.seconds(True), self.seconds(False)
        rows = sum(r.source_rows for r in self.tables if not r.error)
        lines.append(
            f"reconcile: source {o.source}, {len(o.targets)} target(s), {len(o.tables)} table(s): "
            f"{rows:,} source rows in {wall:.1f} s ({work:.1f} s without Spark's start-up), "
            f"{rows / wall if wall else 0:,.0f} rows/s; row hash {self.hash or '-'}"
        )
        for r in self.tables:
            head = f"{r.table} → {r.target}"
            if r.target_table and r.target_table != r.table:
                head += f" ({r.target_table})"
            if r.error:
                lines.append(f"{head}: ERROR {r.error}")
                continue
            counts = ", ".join(f"{r.counts[k]:,} {k}" for k in KINDS if r.counts[k])
            lines.append(
                f"{head}: {r.status.upper()}  source {r.source_rows:,} rows, target "
                f"{r.target_rows:,} rows"
                + (f"; {counts}" if counts else "")
                + f"  ({r.chunks} chunks, {r.chunks_differing} differed, {r.rows_compared:,} "
                f"rows compared one by one; pin: {r.pin})"
            )
            for note in r.notes:
                lines.append(f"    note: {note}")
            keys = self.key_columns.get(r.index, ())
            for d in r.sample:
                key = ", ".join(f"{c}={show(v)!r}" for c, v in zip(keys, d.key, strict=False))
                extra = f"  columns: {', '.join(d.columns)}" if d.columns else ""
                lines.append(f"    {d.kind:9} {key}{extra}")
            shown = len(r.sample)
            total = sum(r.counts[k] for k in KINDS)
            if total > shown:
                lines.append(f"    … and {total - shown:,} more (see rows.parquet)")
        for e in self.errors:
            if not any(e == r.error for r in self.tables):
                lines.append(f"error: {e}")
        if self.repair:
            lines.append(f"repair: {self.repair.get('summary', '')}")
        if self.files:
            lines.append("report: " + ", ".join(self.files.values()))
        return "\n".join(lines)
