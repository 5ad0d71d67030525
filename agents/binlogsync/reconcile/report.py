"""What a reconciliation found: a JSON summary, Parquet rows, and a readable summary on stdout.

Output folder (`--out DIR`):

    summary.json     the run (source, targets, options, Spark, times, exit code) and one entry
                     per table and target: status, rows on each side, chunks, how many rows
                     were compared one by one, missing / extra / changed / unsettled counts,
                     the first differing keys, notes, errors, time and rows/s
    rows.parquet/    one row per differing key, written by Spark, partitioned by table
                     (`table=shop.orders/part-….parquet`; read it with
                     `spark.read.parquet("DIR/rows.parquet")`): table, target, target_table,
                     kind, key (JSON object), columns (array of differing column names,
                     changed rows), source_values / target_values (JSON objects of those
                     columns, values cut to 200 characters), chunk. With no differing row it
                     holds one file with these columns and no row
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
import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..position import Position
from . import rowstage
from .recheck import KINDS, Diff, Rechecked, show
from .taskdata import ChunkResult, Leaf, TaskError

if TYPE_CHECKING:
    from .pinning import Pin
    from .plan import TableState
    from .settings import Options


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
    largest_piece: int = 0  # most rows on one side of a piece compared row by row
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
        cls, name: str, label: str, state: TableState, t: int, pin: Pin | None
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
            "largest_piece_rows": self.largest_piece,
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
        self.began = began  # the run's work begins (Spark may still be starting)
        self.spark_wait = 0.0  # seconds the run waited for Spark after its plan
        self.started_at = dt.datetime.now(dt.UTC)
        self.finished: float | None = None
        self.spark: dict[str, Any] = {}
        self.hash = ""  # the per-row hash the run used (choices.HASHES)
        self.position: Position | None = None  # the source's when planned; None: unpinned
        self.tables: list[TableReport] = []
        self.errors: list[str] = []  # errors not tied to one table
        self.stages: list[dict[str, Any]] = []
        self.plan: list[TableState] = []
        self.rows: Any = None  # the report's rows: a DataFrame (rowstage.diffs)
        self.rows_results: Any = None  # the persisted re-check results it is read from
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

    def add_plan(self, states: list[TableState]) -> None:
        for state in states:
            if state.spec is not None:
                self.key_columns[state.index] = state.spec.key

    def add_leaves(self, leaves: Iterable[Leaf]) -> None:
        """The pieces whose rows went to the row stage."""
        for leaf in leaves:
            r = self._table(leaf.table, leaf.target)
            r.rows_compared += leaf.source_rows + leaf.target_rows
            r.largest_piece = max(r.largest_piece, leaf.source_rows, leaf.target_rows)
            r.chunks_split += int("." in leaf.chunk)

    def add_rechecked(self, rechecked: Iterable[Rechecked]) -> None:
        """What the re-check partitions saw: candidates, rounds, counts, and the first
        `--show` differences of each table and target."""
        for res in rechecked:
            r = self._table(res.table, res.target)
            r.candidates += res.candidates
            r.rounds = max(r.rounds, res.rounds)
            r.counts.update(dict(res.counts))
            r.sample.extend(res.sample)
        for r in self.tables:
            r.sample.sort(key=lambda d: (KINDS.index(d.kind), repr(d.key)))
            del r.sample[self.options.show :]

    def add_diffs(self, frame: Any, results: Any) -> None:
        """The report's rows: a DataFrame over the persisted re-check `results`."""
        self.rows, self.rows_results = frame, results

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
        if self.rows_results is not None:
            self.rows_results.unpersist()
            self.rows_results = None

    def finish(self) -> Report:
        self.finished = time.monotonic()
        return self

    def seconds(self, with_startup: bool = True) -> float:
        """Wall time of the run; without start-up: from the run's first step, less what it
        waited for Spark to start (the plan runs while Spark starts)."""
        end = self.finished or time.monotonic()
        if with_startup:
            return end - self.started
        return end - self.began - self.spark_wait

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

    def write(self, out: Path, spark: Any) -> None:
        """rows.parquet (written by Spark), then summary.json, whose stages include the write."""
        started = time.monotonic()
        out.mkdir(parents=True, exist_ok=True)
        path = out / "rows.parquet"
        if path.is_file():  # an older run's report (a single file then)
            path.unlink()
        rowstage.write(spark, self.rows, str(path))
        self.files["rows"] = str(path)
        self.stage("write report", time.monotonic() - started, 0)
        self.write_summary(out)

    def write_summary(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.files["summary"] = str(out / "summary.json")
        (out / "summary.json").write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")

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
