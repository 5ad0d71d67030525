"""The page's new sections in ops/overview.py: the lag history from the status map, the last
reconciliation's differing rows, and its report, found only among the state folder's jobs
(no name reaches another file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from binlogsync.ops import overview, state

pytestmark = pytest.mark.unit


def _job(state_dir: Path, name: str, out: Path | str | None, **extra: object) -> None:
    state.keep(state_dir / state.RECONCILE_DIR / name, "last-reconcile.json", {
        "state": "different", "differing_rows": 2, "started_at": "2026-11-26T10:00:00",
        "tables": [], "out": None if out is None else str(out), **extra,
    })  # fmt: skip


def test_the_reconcile_report_is_the_one_the_job_recorded(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"exit_code": 1}')
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    st = tmp_path / "state"
    rows = [
        {"table": "shop.t", "target": "t1", "kind": "missing", "key": '{"id": 7}', "columns": None,
         "source_values": "not shown"},
        {"table": "shop.t", "target": "t1", "kind": "changed", "key": '{"id": 8}',
         "columns": ["note"]},
    ]  # fmt: skip
    _job(st, "db1", run, rows=rows, rows_total=2)
    _job(st, "gone", tmp_path / "runs" / "deleted")  # its folder was removed since
    _job(st, "none", None)
    assert overview.reconcile_summary(st, "db1") == run / "summary.json"
    assert overview.reconcile_summary(st, "gone") is None
    assert overview.reconcile_summary(st, "none") is None
    # Names that would leave the folder, or name a file rather than a job, find nothing.
    (st / state.RECONCILE_DIR / "x").mkdir()
    for hostile in ("../..", "..", ".", "", "/etc", "db1/../db1", "db1/", "../state/reconcile/db1",
                    "%2e%2e", str(secret), "x", "db1\x00", "*", "d?1"):  # fmt: skip
        assert overview.reconcile_summary(st, hostile) is None, hostile

    by_job = {r["job"]: r for r in overview.build_offline(st)["reconcile"]}
    assert by_job["db1"]["report"] is True and by_job["gone"]["report"] is False
    assert by_job["db1"]["rows_total"] == 2
    assert by_job["db1"]["rows"] == [
        {"table": "shop.t", "target": "t1", "kind": "missing", "key": '{"id": 7}', "columns": None},
        {"table": "shop.t", "target": "t1", "kind": "changed", "key": '{"id": 8}',
         "columns": ["note"]},
    ]  # fmt: skip
    assert by_job["none"]["rows"] == [] and by_job["none"]["report"] is False


def test_history_comes_from_the_status_map_and_is_absent_without_it() -> None:
    status = {
        "hub": "hub", "time": 2000.0, "hosts": [], "targets": [],
        "history": {"interval": 10.0, "window": 3600.0, "pairs": [
            {"target": "t1", "origin": "o1", "samples": [[1990.0, 1.5, 3], [2000.0, 0.0, 0]]},
        ]},
    }  # fmt: skip
    out = overview.from_status(status)
    assert out["history"] == json.loads(json.dumps(status["history"]))
    assert overview.from_status({**status, "history": None})["history"] is None
    assert overview.build_offline(Path("/nonexistent"))["history"] is None
