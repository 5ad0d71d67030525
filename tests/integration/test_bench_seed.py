"""`bench seed` end to end with a tiny table: our seed, `mariadb-dump | mariadb` and
`mydumper`/`myloader` each copy it in the same run, and the target ends equal to the origin;
bench/seed_forms_probe.py's two copies end equal too. No timed assertions: the figures are only
checked to exist and to be sane."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from binlogsync_dev.sandbox import Sandbox

pytestmark = pytest.mark.integration
AGENTS = str(Path(__file__).resolve().parents[2] / "agents")  # this tree's code, not an install


def run_alone(command: list[str], timeout: float) -> str:
    """Run `command` (this tree's code) in a session of its own and return its stdout; if it
    has to be killed, its servers, agents and tools go with it (a hung mydumper once left them
    all running after the timeout killed the bench alone)."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": AGENTS}, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{command[1:3]} did not end within {timeout} s: {stderr[-3000:]}")
    assert process.returncode == 0, stderr[-3000:]
    return stdout


def mydumper() -> str:
    found = shutil.which("mydumper")
    assert found, "mydumper is missing: apt-get install mydumper (./dev test installs it)"
    return found


@pytest.mark.timeout(600)
def test_bench_seed_times_our_seed_beside_mariadb_dump_and_mydumper(short_tmp: Path) -> None:
    mydumper()
    tmp_path = short_tmp
    stdout = run_alone(
        [sys.executable, "-m", "binlogsync_dev", "bench", "seed", "--sizes", "20000",
         "--runs", "2", "--parallel", "2", "--json", "--dir", str(tmp_path)],
        540,
    )  # fmt: skip
    (cell,) = json.loads(stdout)
    assert cell["rows"] == 20_000 and cell["runs"] == 2 and cell["parallel"] == 2
    for name in ("dump_seconds", "mydumper_seconds", "seed_seconds", "in_sync_seconds",
                 "dump_cpu", "mydumper_cpu", "seed_cpu"):  # fmt: skip
        assert cell[name] > 0, name
    assert cell["in_sync_seconds"] >= cell["seed_seconds"]
    by = cell["seed_cpu_by"]  # where the seed's CPU went, process by process
    assert set(by) == {"origin server", "target server", "hub", "origin agent", "target agent",
                       "this process (the seed, the writer)"}, by  # fmt: skip
    assert by["target server"] > 0 and by["this process (the seed, the writer)"] > 0, by
    assert abs(sum(by.values()) - cell["seed_cpu"]) <= 0.1 * len(by) + 0.2, (by, cell)
    assert cell["ratio"] > 0 and cell["ratio_mydumper"] > 0
    assert cell["equal"] is True
    assert list(tmp_path.glob("binlogsync-bench-*")) == []  # the sandbox is removed


@pytest.mark.timeout(120)
def test_a_hung_mydumper_is_killed_and_run_again(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """mydumper 0.10 now and then deadlocks (it once held a full suite for 9 minutes; about 1 run
    of 100 on a loaded machine): a run that spends no CPU for its idle limit is killed and timed
    again from the start, instead of hanging the bench."""
    from binlogsync_dev import seed_bench

    origin, target = sandbox.start("hang-origin"), sandbox.start("hang-target")
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{seed_bench.SCHEMA}`")
        cur.execute(f"USE `{seed_bench.SCHEMA}`")
        cur.execute(seed_bench.DDL)
        cur.execute(seed_bench.FILL.format(lo=1, hi=500))
        conn.commit()
    # The first start hangs as the real deadlock does (no query, just waiting); the second
    # is the real mydumper.
    fake = tmp_path / "bin"
    fake.mkdir()
    real = mydumper()
    (fake / "mydumper").write_text(
        "#!/bin/sh\n"
        f"if [ ! -e {tmp_path}/hung-once ]; then touch {tmp_path}/hung-once; exec sleep 600; fi\n"
        f'exec {real} "$@"\n'
    )
    (fake / "mydumper").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    monkeypatch.setattr(seed_bench, "MYDUMPER_IDLE_SECONDS", 2.0)
    meter = seed_bench.CpuMeter([origin.pid, target.pid])
    began = time.perf_counter()
    seconds, _cpu = seed_bench._mydumper(origin, target, tmp_path / "dump", meter, 500)
    took = time.perf_counter() - began
    assert (tmp_path / "hung-once").exists()
    assert 0 < seconds <= took - 2.0  # a real run's time only, not the hung one's
    assert took < 30  # killed for its idleness, long before its 60 s limit
    assert "mydumper hung (no CPU spent for 2 s; attempt 1 of 3): killed, running it again" in (
        capsys.readouterr().err
    )


@pytest.mark.timeout(300)
def test_seed_forms_probe_copies_the_table_both_ways_equal() -> None:
    """bench/seed_forms_probe.py: both copies, rows as text (the seed's form) and rows as
    values, end equal to the origin, and each prints its Python CPU step by step."""
    probe = Path(AGENTS).parent / "bench" / "seed_forms_probe.py"
    out = run_alone([sys.executable, str(probe), "--rows", "20000", "--chunk", "3000"], 280)
    assert out.count("equal to the origin: True") == 2, out
    assert out.count("decode (target)") == 2 and out.count("check (hub)") == 2, out
    assert out.count("Python, in all") == 2, out
