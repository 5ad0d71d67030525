"""The command takes the in-process engine (threads, no JVM) by itself for a small local run,
and Spark above --in-process-rows (test_reconcile.py holds the engines to the same findings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from binlogsync.devsite.sandbox import Server
from reconcile_kit import execute, make_table

pytestmark = pytest.mark.integration


def _command(origin: Server, target: Server, db: str, out: Path, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "binlogsync.cli",
            "reconcile",
            f"--source=mysql://root@127.0.0.1:{origin.port}",
            f"--target=mysql://root@127.0.0.1:{target.port}",
            f"--tables={db}.t",
            "--pin=none",
            f"--out={out}",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "missing   id=9" in done.stdout
    return json.loads((out / "summary.json").read_text())  # type: ignore[no-any-return]


def test_the_command_runs_a_small_table_in_process_and_a_larger_one_in_spark(
    origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    make_table([origin, target], dbname, rows=500)
    execute(target, dbname, "DELETE FROM t WHERE id = 9")
    for server in (origin, target):
        execute(server, dbname, "ANALYZE TABLE t")
    small = _command(origin, target, dbname, tmp_path / "auto")
    assert small["spark"]["master"] == "in-process"
    # Above --in-process-rows, auto starts Spark: the same finding.
    large = _command(origin, target, dbname, tmp_path / "spark", "--in-process-rows=100")
    assert large["spark"]["master"].startswith("local")
    assert large["tables"][0]["missing"] == small["tables"][0]["missing"] == 1
