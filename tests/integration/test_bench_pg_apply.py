"""`./dev bench apply --target-kind postgresql` end to end with a tiny backlog: both cases and
their sum are measured for binlogsync and for pg_chameleon (installed into its own venv on
first use), and every figure is in its JSON. No timed assertions: the figures must exist and
be sane."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
AGENTS = str(Path(__file__).resolve().parents[2] / "agents")


def test_bench_apply_postgresql_prints_both_sides() -> None:
    with tempfile.TemporaryDirectory(prefix="bls-pgb-test-") as root:
        done = subprocess.run(
            [sys.executable, "-m", "binlogsync_dev", "bench", "apply", "--target-kind",
             "postgresql", "--single", "300", "--batches", "5", "--dir", root, "--json"],
            capture_output=True, text=True, timeout=900,
            env={**os.environ, "PYTHONPATH": AGENTS},
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(done.stdout)
    assert [(r["transactions"], r["rows"]) for r in results] == [(300, 300), (5, 500), (305, 800)]
    for r in results:  # a case may take ~0 s: the target groups across the boundary
        assert r["ours_seconds"] >= 0
        assert r["chameleon_seconds"] and r["chameleon_seconds"] > 0, r["chameleon_note"]
    total = results[-1]
    assert total["ours_seconds"] == pytest.approx(
        results[0]["ours_seconds"] + results[1]["ours_seconds"]
    )
    assert total["ours_seconds"] > 0
