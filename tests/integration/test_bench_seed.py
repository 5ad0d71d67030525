"""`bench seed` end to end with a tiny table: our seed, `mariadb-dump | mariadb` and
`mydumper`/`myloader` each copy it in the same run, and the target ends equal to the origin.
No timed assertions: the figures are only checked to exist and to be sane."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
AGENTS = str(Path(__file__).resolve().parents[2] / "agents")  # this tree's code, not an install


@pytest.mark.skipif(shutil.which("mydumper") is None, reason="mydumper is not installed")
@pytest.mark.timeout(600)
def test_bench_seed_times_our_seed_beside_mariadb_dump_and_mydumper() -> None:
    tmp_path = Path(tempfile.mkdtemp(prefix="bls-"))  # short: a socket path has 107 bytes
    result = subprocess.run(
        [sys.executable, "-m", "binlogsync_dev", "bench", "seed", "--sizes", "20000",
         "--runs", "2", "--parallel", "2", "--json", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": AGENTS},
        timeout=540,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (cell,) = json.loads(result.stdout)
    assert cell["rows"] == 20_000 and cell["runs"] == 2 and cell["parallel"] == 2
    for name in ("dump_seconds", "mydumper_seconds", "seed_seconds", "in_sync_seconds",
                 "dump_cpu", "mydumper_cpu", "seed_cpu"):  # fmt: skip
        assert cell[name] > 0, name
    assert cell["in_sync_seconds"] >= cell["seed_seconds"]
    assert cell["ratio"] > 0 and cell["ratio_mydumper"] > 0
    assert cell["equal"] is True
    assert list(tmp_path.glob("binlogsync-bench-*")) == []  # the sandbox is removed
