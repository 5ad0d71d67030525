"""`binlogsync bench oltp` end to end with tiny settings: every figure is in its JSON, the data
are equal and the PNG is drawn. No timed assertions: the figures are only checked to exist and
to be sane. sysbench is Debian's (`./dev test` installs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
AGENTS = str(Path(__file__).resolve().parents[2] / "agents")  # this tree's code, not an install
FIGURES = {
    "tps",
    "transactions",
    "row_changes",
    "ours_lag_p50",
    "ours_lag_p99",
    "ours_lag_max",
    "native_lag_p50",
    "native_lag_p99",
    "native_lag_max",
    "ours_catchup_s",
    "native_catchup_s",
    "backlog_transactions",
    "backlog_rows",
    "ours_backlog_s",
    "native_backlog_s",
    "ours_backlog_tps",
    "native_backlog_tps",
    "ours_backlog_rows_s",
    "native_backlog_rows_s",
    "catchup_ratio",
    "alone_backlog_transactions",
    "ours_alone_s",
    "native_alone_s",
    "alone_ratio",
}


@pytest.mark.timeout(600)
def test_bench_oltp_reports_every_figure_and_draws_the_lag_curves(short_tmp: Path) -> None:
    tmp_path = short_tmp
    png = tmp_path / "lag.png"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "binlogsync_dev",
            "bench",
            "oltp",
            "--tables",
            "1",
            "--table-size",
            "1000",
            "--threads",
            "2",
            "--seconds",
            "5",
            "--runs",
            "1",
            "--json",
            "--out",
            str(png),
            "--dir",
            str(tmp_path),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": AGENTS},
        timeout=540,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    median = report["median"]
    assert FIGURES <= set(median), FIGURES - set(median)
    assert set(median["cpu_us_per_tx"]) == {"origin", "hub", "target"}
    assert all(v > 0 for v in median["cpu_us_per_tx"].values())
    assert median["transactions"] > 0 and median["backlog_transactions"] > 0
    assert median["ours_backlog_tps"] > 0 and median["native_backlog_tps"] > 0
    assert median["alone_backlog_transactions"] > 0
    assert median["ours_alone_s"] > 0 and median["native_alone_s"] > 0
    assert set(report["goals"]) == {
        "lag_p99", "catchup_ratio", "alone_ratio", "cpu_origin", "cpu_hub", "cpu_target",
    }  # fmt: skip
    assert report["equal"] is True
    assert len(report["runs"]) == 1 and report["runs"][0]["curve"]["t"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(tmp_path.glob("binlogsync-bench-*")) == []  # the sandbox is removed
