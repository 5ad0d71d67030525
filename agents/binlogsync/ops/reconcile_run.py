"""After a reconciliation run (`binlogsync reconcile` or `spark_jobs/reconcile_job.py` under
`spark-submit`): read what it wrote, keep the last result, and fail with the differing rows.

The run's output folder holds `summary.json` and `rows.parquet` (reconcile/report.py). This job
reads them into an outcome (equal or not, per table and target the counts and the positions
the comparison was pinned to, the differing rows), writes it as `last-reconcile.json` into a
state folder (what the Airflow UI page shows as "the last reconciliation"), and then:

    equal                       done
    differences, repaired       done; the repair is in the outcome (the run had --repair: the
                                rows were sent through the hub, ordered with live changes; the
                                next run shows them equal)
    differences, not repaired   ReconcileDifferences listing the differing rows (the first
                                `show` of them, and how many there are)
    the run failed              ReconcileFailed with its errors
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BinlogsyncError
from . import state as state_files

KINDS = ("missing", "extra", "changed", "unsettled")
LAST = "last-reconcile.json"


class ReconcileDifferences(BinlogsyncError):
    """The copies differ and nothing repaired them."""


class ReconcileFailed(BinlogsyncError):
    """The reconciliation could not compare (a table, a database, Spark)."""

    exit_code = 2


@dataclass
class ReconcileOutcome:
    out: str
    started_at: str
    exit_code: int
    totals: dict[str, Any]
    tables: list[dict[str, Any]]
    errors: list[str]
    repair: dict[str, Any] | None
    rows: list[dict[str, Any]] = field(default_factory=list)  # the differing rows read
    rows_total: int = 0

    @property
    def differing(self) -> int:
        return sum(int(self.totals.get(k, 0)) for k in KINDS)

    @property
    def repaired(self) -> bool:
        return bool(self.repair) and not (self.repair or {}).get("error")

    @property
    def state(self) -> str:
        if self.exit_code == 2:
            return "failed"
        if not self.differing:
            return "equal"
        return "repaired" if self.repaired else "different"

    def to_json(self) -> dict[str, Any]:
        return {
            "out": self.out,
            "started_at": self.started_at,
            "state": self.state,
            "exit_code": self.exit_code,
            "differing_rows": self.differing,
            "totals": self.totals,
            "tables": [
                {
                    k: t.get(k)
                    for k in ("table", "target", "status", "pin", "source_positions", *KINDS)
                }
                for t in self.tables
            ],
            "errors": self.errors,
            "repair": self.repair,
            "rows": self.rows,
            "rows_total": self.rows_total,
            "read_at": dt.datetime.now(dt.UTC).isoformat(),
        }


def collect(out: Path, show: int = 50) -> ReconcileOutcome:
    """The outcome of the run whose output folder is `out`."""
    summary_path = out / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError) as exc:
        raise ReconcileFailed(
            f"the reconciliation's summary {summary_path} cannot be read: {exc}",
            "did the reconcile run (or the spark-submit task) finish? its log says why not",
        ) from exc
    outcome = ReconcileOutcome(
        str(out),
        str(summary.get("started_at", "")),
        int(summary.get("exit_code", 2)),
        dict(summary.get("totals", {})),
        list(summary.get("tables", [])),
        [str(e) for e in summary.get("errors", [])],
        summary.get("repair"),
    )
    rows_path = out / "rows.parquet"
    if outcome.differing and rows_path.exists():
        import pyarrow.parquet as pq

        table = pq.read_table(rows_path)
        outcome.rows_total = table.num_rows
        wanted = ["table", "target", "kind", "key", "columns"]
        outcome.rows = table.select(wanted).slice(0, show).to_pylist()
    return outcome


def keep(outcome: ReconcileOutcome, state: Path) -> Path:
    """Write the outcome as the last reconciliation (atomically: a reader never sees half)."""
    return state_files.keep(state, LAST, outcome.to_json())


def check(outcome: ReconcileOutcome) -> None:
    """Raise when the copies differ unrepaired, or when the run could not compare."""
    if outcome.state == "failed":
        raise ReconcileFailed(
            "the reconciliation could not compare: " + "; ".join(outcome.errors or ["see its log"]),
            f"see {outcome.out}/summary.json",
        )
    if outcome.state != "different":
        return
    listed = [
        f"{r['kind']} {r['table']} -> {r['target']} key {r['key']}"
        + (f" ({', '.join(r['columns'])})" if r.get("columns") else "")
        for r in outcome.rows
    ]
    more = outcome.rows_total - len(listed)
    raise ReconcileDifferences(
        f"{outcome.differing} row(s) differ: "
        + "; ".join(listed)
        + (f"; and {more} more" if more > 0 else ""),
        "run it again with repair (the rows are sent through the hub), or look at "
        f"{outcome.out}/rows.parquet",
    )
