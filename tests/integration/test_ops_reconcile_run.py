"""After a reconciliation: the outcome read from its folder, kept as the last result, and a
failure that lists the differing rows (real Spark, real servers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from binlogsync.ops.reconcile_run import (
    ReconcileDifferences,
    ReconcileFailed,
    check,
    collect,
    keep,
)
from binlogsync_dev.sandbox import Server
from reconcile_kit import execute, make_table, reconcile, spark_fixture  # noqa: F401


def test_equal_then_different_then_failed(
    spark: Any, origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    make_table([origin, target], dbname)
    equal = tmp_path / "run1"
    reconcile(spark, origin, [target], [f"{dbname}.t"], out=equal)
    outcome = collect(equal)
    assert outcome.state == "equal" and outcome.differing == 0
    check(outcome)  # nothing raised
    last = keep(outcome, tmp_path / "state")
    assert json.loads(last.read_text())["state"] == "equal"

    execute(target, dbname, "DELETE FROM t WHERE id = 7", "UPDATE t SET note = 'x' WHERE id = 8")
    different = tmp_path / "run2"
    reconcile(spark, origin, [target], [f"{dbname}.t"], out=different)
    outcome = collect(different)
    assert outcome.state == "different" and outcome.differing == 2 and outcome.rows_total == 2
    with pytest.raises(ReconcileDifferences) as raised:
        check(outcome)
    message = str(raised.value)
    assert "2 row(s) differ" in message and "missing" in message and "changed" in message
    assert '"id": 7' in message and "(note)" in message
    kept = json.loads(keep(outcome, tmp_path / "state").read_text())
    assert kept["state"] == "different" and kept["differing_rows"] == 2
    assert kept["tables"][0]["table"] == f"{dbname}.t" and len(kept["rows"]) == 2

    with pytest.raises(ReconcileFailed, match="cannot be read"):
        collect(tmp_path / "no-such-run")


def test_the_command_exits_1_with_the_rows(
    spark: Any, origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    import subprocess
    import sys

    make_table([origin, target], dbname, rows=500)
    execute(target, dbname, "DELETE FROM t WHERE id = 9")
    reconcile(spark, origin, [target], [f"{dbname}.t"], out=tmp_path / "run")
    done = subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", "reconcile-result", "--out",
         str(tmp_path / "run"), "--state", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and "1 row(s) differ: missing" in done.stderr, done.stderr
    assert json.loads((tmp_path / "state" / "last-reconcile.json").read_text())["state"] == (
        "different"
    )
