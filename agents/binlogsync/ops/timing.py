"""The paper's timing test as a lifecycle job: Table 1 measured on throwaway sandbox servers
beside native replication (binlogsync_dev/paper_timing.py), kept per run as JSON and a PNG plot.

Each run writes, under `out`, `timing-<UTC time>.json` (machine, runs per cell, and per DML and
statement count our seconds, native seconds, lag and the paper's seconds) and
`timing-<UTC time>.png`: one panel per DML, seconds against statements for ours, native and the
paper's, on a log scale (the paper's seconds are two to three orders of magnitude above ours).
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError

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
        if n not in paper_timing.PAPER["insert"]:
            raise UsageError(
                f"{n} is not one of the paper's statement counts",
                f"use some of {sorted(paper_timing.PAPER['insert'])}",
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


def plot(cells: list[Any], path: Path, machine: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DMLS), figsize=(12, 4), sharey=True)
    for ax, dml in zip(axes, DMLS, strict=True):
        mine = sorted((c for c in cells if c.dml == dml), key=lambda c: c.rows)
        xs = [c.rows for c in mine]
        ax.plot(xs, [c.seconds for c in mine], "o-", label="binlogsync")
        ax.plot(xs, [c.native_seconds for c in mine], "s--", label="native replication")
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
