"""The paper's timing test as a lifecycle job, kept per run as JSON and a PNG plot. Two modes:

- `run`: Table 1 measured on throwaway sandbox servers beside native replication
  (binlogsync_dev/paper_timing.py; needs a clone of the repository and mariadbd).
- `run_site`: a running site's own pipeline (e.g. the compose site): N single-row statements
  on a scratch table of the site's origin (`binlogsync_timing.t` by default; it must exist on
  the origin and the targets and be routed to them), timed until every named target holds the
  same rows, through the site's real agents and hub; native replicas of the origin are timed
  beside it where there are some, else the result says that no native replica is present.

Each run writes, under `out`, `timing-<UTC time>.json` (machine, runs per cell, and per DML and
statement count our seconds, native seconds, lag and the paper's seconds) and
`timing-<UTC time>.png`: one panel per DML, seconds against statements for ours, native and the
paper's, on a log scale (the paper's seconds are two to three orders of magnitude above ours).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..paper import PAPER

DMLS = ("insert", "update", "delete")


def _harness() -> Any:
    """The dev harness's Table 1 (throwaway MariaDB servers); it is in the repository, not in
    the wheel."""
    try:
        from binlogsync_dev import paper_timing
    except ImportError as exc:
        raise UsageError(
            "the paper's timing test runs throwaway MariaDB servers from binlogsync's dev "
            f"harness (binlogsync_dev), which this installation lacks ({exc})",
            "run it from a clone of the repository (./dev bench paper), where the harness is",
        ) from exc
    return paper_timing


@dataclass
class TimingResult:
    json_path: Path
    png_path: Path
    cells: list[Any]  # binlogsync_dev.paper_timing.Cell
    runs: int

    def to_json(self) -> dict[str, Any]:
        worst = max(c.seconds / c.native_seconds for c in self.cells)
        return {
            "json": str(self.json_path),
            "png": str(self.png_path),
            "runs": self.runs,
            "worst_ours_over_native": round(worst, 3),
            "worst_lag_ms": max(c.lag_ms for c in self.cells),
            "cells": [asdict(c) for c in self.cells],
        }


def run(out: Path, rows: list[int], runs: int = 1, scratch: str | None = None) -> TimingResult:
    """Measure, then write the JSON and the plot under `out` (made if missing)."""
    paper_timing = _harness()
    for n in rows:
        if n not in PAPER["insert"]:
            raise UsageError(
                f"{n} is not one of the paper's statement counts",
                f"use some of {sorted(PAPER['insert'])}",
            )
    if runs < 1:
        raise UsageError("runs must be at least 1")
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    with tempfile.TemporaryDirectory(prefix="binlogsync-timing-", dir=scratch) as tmp:
        cells = paper_timing.run(Path(tmp), rows, runs, progress=False)
    result = TimingResult(out / f"timing-{stamp}.json", out / f"timing-{stamp}.png", cells, runs)
    result.json_path.write_text(
        json.dumps({"machine": paper_timing.machine(), **result.to_json()}, indent=2)
    )
    plot(cells, result.png_path, paper_timing.machine())
    return result


SCRATCH_TABLE = "binlogsync_timing.t"
NO_NATIVE = "no native replica is present in this site: only binlogsync was timed"


@dataclass
class SiteCell:
    dml: str
    rows: int
    seconds: float  # first statement until every target holds the origin's rows
    lag_ms: float  # last statement until then
    native_seconds: float | None  # the same for the native replicas; None: there are none
    paper_seconds: float
    targets: dict[str, float]  # per target: seconds until it held the origin's rows


@dataclass
class SiteTimingResult:
    json_path: Path
    png_path: Path
    cells: list[SiteCell]
    runs: int
    origin: str
    targets: list[str]
    replicas: int

    def to_json(self) -> dict[str, Any]:
        natives = [c for c in self.cells if c.native_seconds]
        return {
            "mode": "site",
            "json": str(self.json_path),
            "png": str(self.png_path),
            "runs": self.runs,
            "origin": self.origin,
            "targets": self.targets,
            "native_replicas": self.replicas,
            "native": None if self.replicas else NO_NATIVE,
            "worst_ours_over_native": round(
                max(c.seconds / c.native_seconds for c in natives if c.native_seconds), 3
            )
            if natives
            else None,
            "worst_lag_ms": max(c.lag_ms for c in self.cells),
            "cells": [asdict(c) for c in self.cells],
        }


def run_site(
    out: Path,
    origin: Any,  # DatabaseSettings of the site's origin (an account that may write the table)
    targets: dict[str, Any],  # name -> DatabaseSettings of each target to wait for
    rows: list[int],
    runs: int = 1,
    replicas: Sequence[Any] = (),  # DatabaseSettings of native replicas of the origin
    table: str = SCRATCH_TABLE,
    origin_name: str = "origin",
    timeout: float = 300.0,
) -> SiteTimingResult:
    """Time the site's pipeline on its scratch table; write the JSON and the plot under `out`."""
    from ..mysql import connect

    for n in rows:
        if n not in PAPER["insert"]:
            raise UsageError(
                f"{n} is not one of the paper's statement counts",
                f"use some of {sorted(PAPER['insert'])}",
            )
    if runs < 1:
        raise UsageError("runs must be at least 1")
    if not targets:
        raise UsageError("name at least one target whose rows are timed")
    if not re.fullmatch(r"[A-Za-z0-9_]+\.[A-Za-z0-9_]+", table):
        raise UsageError(f"{table!r} is not schema.table")
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    src = connect(origin, f"writing the scratch table {table} on the origin")
    readers = {n: connect(db, f"reading {table} on target {n}") for n, db in targets.items()}
    natives = {
        f"native{i}": connect(db, f"reading {table} on a native replica")
        for i, db in enumerate(replicas)
    }
    try:
        clock = _SiteClock(src, readers, natives, table, timeout)
        samples: dict[tuple[str, int], list[SiteCell]] = {}
        for _ in range(runs):
            for dml in DMLS:
                for n in rows:
                    samples.setdefault((dml, n), []).append(clock.measure(dml, n))
        clock.empty()
    finally:
        for conn in [src, *readers.values(), *natives.values()]:
            conn.close()
    cells = [sorted(v, key=lambda c: c.seconds)[len(v) // 2] for v in samples.values()]
    result = SiteTimingResult(
        out / f"timing-{stamp}.json", out / f"timing-{stamp}.png", cells, runs, origin_name,
        sorted(targets), len(replicas),
    )  # fmt: skip
    machine = f"site {origin_name} -> {', '.join(sorted(targets))} (through the site's agents)"
    result.json_path.write_text(json.dumps({"machine": machine, **result.to_json()}, indent=2))
    plot(cells, result.png_path, machine)
    return result


class _SiteClock:
    """Runs single-row statements on the origin's scratch table and waits, by a fingerprint of
    the table (row count and a CRC32 sum), until each target and native replica holds the
    same rows."""

    def __init__(
        self, src: Any, targets: dict[str, Any], natives: dict[str, Any], table: str,
        timeout: float,
    ) -> None:  # fmt: skip
        self.src, self.targets, self.natives = src, targets, natives
        self.table, self.timeout = table, timeout

    def fingerprint(self, conn: Any) -> tuple[int, int]:
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', id, v))), 0) FROM {self.table}"
            )
            count, crc = cur.fetchone()
        return int(count), int(crc)

    def wait_equal(self, started: float) -> dict[str, float]:
        """Seconds since `started` at which each reader first held the origin's rows."""
        want = self.fingerprint(self.src)
        left = {**self.targets, **self.natives}
        done: dict[str, float] = {}
        deadline = time.monotonic() + self.timeout
        while left:
            for name, conn in list(left.items()):
                if self.fingerprint(conn) == want:
                    done[name] = time.monotonic() - started
                    del left[name]
            if left and time.monotonic() > deadline:
                raise TimeoutError(
                    f"{', '.join(sorted(left))} did not hold the origin's rows of {self.table} "
                    f"within {self.timeout:.0f} s: is the table routed to them and are their "
                    "agents running?"
                )
            if left:
                time.sleep(0.005)
        return done

    def run(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        with self.src.cursor() as cur:
            for sql, args in statements:
                cur.execute(sql, args)  # autocommit: one transaction per statement

    def empty(self) -> None:
        self.run([(f"DELETE FROM {self.table}", ())])
        self.wait_equal(time.monotonic())

    def measure(self, dml: str, n: int) -> SiteCell:
        t = self.table
        self.empty()
        if dml != "insert":  # rows to change, made in one statement, then all equal
            values = ", ".join(f"({i}, 'row {i}')" for i in range(1, n + 1))
            self.run([(f"INSERT INTO {t} (id, v) VALUES {values}", ())])
            self.wait_equal(time.monotonic())
        statements: list[tuple[str, tuple[Any, ...]]]
        if dml == "insert":
            statements = [(f"INSERT INTO {t} (id, v) VALUES (%s, %s)", (i, f"row {i}"))
                          for i in range(1, n + 1)]  # fmt: skip
        elif dml == "update":
            statements = [(f"UPDATE {t} SET v = %s WHERE id = %s", (f"changed {i}", i))
                          for i in range(1, n + 1)]  # fmt: skip
        else:
            statements = [(f"DELETE FROM {t} WHERE id = %s", (i,)) for i in range(1, n + 1)]
        started = time.monotonic()
        self.run(statements)
        written = time.monotonic() - started
        done = self.wait_equal(started)
        ours = {k: round(v, 4) for k, v in done.items() if k in self.targets}
        native = [v for k, v in done.items() if k in self.natives]
        seconds = max(ours.values())
        return SiteCell(
            dml, n, round(seconds, 4), round((seconds - written) * 1000, 1),
            round(max(native), 4) if native else None, PAPER[dml][n], ours,
        )  # fmt: skip


def plot(cells: list[Any], path: Path, machine: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DMLS), figsize=(12, 4), sharey=True)
    for ax, dml in zip(axes, DMLS, strict=True):
        mine = sorted((c for c in cells if c.dml == dml), key=lambda c: c.rows)
        xs = [c.rows for c in mine]
        ax.plot(xs, [c.seconds for c in mine], "o-", label="binlogsync")
        if all(c.native_seconds is not None for c in mine):
            ax.plot(xs, [c.native_seconds for c in mine], "s--", label="native replication")
        else:
            ax.text(0.5, 0.5, "no native replica\nin this site", transform=ax.transAxes,
                    ha="center", fontsize=8, alpha=0.6)  # fmt: skip
        ax.plot(xs, [c.paper_seconds for c in mine], "^:", label="the paper (Table 1)")
        ax.set_title(dml.upper())
        ax.set_xlabel("statements")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("seconds until the target is equal")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8)
    fig.suptitle(f"The paper's Table 1 measured here — {machine}", fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
