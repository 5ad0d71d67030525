"""Agents started as the user starts them: a mistake in the setup ends the process at once with
one line naming the key and exit code 2, never a traceback or a silent hang."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from binlogsync.transport.curve import make_keys
from binlogsync_dev.localsite import wait_until

pytestmark = pytest.mark.integration
AGENTS = str(Path(__file__).resolve().parents[2] / "agents")  # this tree's code, not an install


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,  # a hang is the bug some of these tests guard against
        env={**os.environ, "PYTHONPATH": AGENTS},
    )


def _dev(*args: str) -> subprocess.CompletedProcess[str]:
    """The dev harness's command (`./dev` runs it; not in the wheel)."""
    return subprocess.run(
        [sys.executable, "-m", "binlogsync_dev", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": AGENTS},
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_hub_with_its_metrics_port_in_use_exits_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "hub.toml"
        config.write_text(
            f'[hub]\nbind = "tcp://127.0.0.1:{_free_port()}"\ndata_dir = "{tmp_path}"\n'
            f"[metrics]\nport = {port}\n"
        )
        result = _run("server", "--config", str(config))
    assert result.returncode == 2, result.stderr
    assert f"metrics.port {port}" in _one_error_line(result)


def test_client_with_a_public_key_as_its_secret_key_exits_2(tmp_path: Path) -> None:
    for name in ("hub", "shop-db"):
        make_keys(tmp_path, name)
    config = tmp_path / "client.toml"
    config.write_text(
        f'[client]\nname = "shop-db"\nhub = "tcp://127.0.0.1:{_free_port()}"\n[target]\n'
        '[security]\nsecret_key_file = "shop-db.key"\nhub_public_key_file = "hub.key"\n'
    )
    result = _run("client", "--config", str(config))
    assert result.returncode == 2, result.stderr
    line = _one_error_line(result)
    assert "security.secret_key_file" in line and "NAME.key_secret" in line


def test_sandbox_start_status_stop_from_the_command_line(tmp_path: Path) -> None:
    folder = tmp_path / "box"
    try:
        started = _dev("sandbox", "start", "--dir", str(folder), "--targets", "0")
        assert started.returncode == 0, started.stderr
        assert started.stdout.startswith("origin ")
        status = _dev("sandbox", "status", "--dir", str(folder))
        assert status.returncode == 0 and status.stdout.startswith("origin "), status.stderr
        stopped = _dev("sandbox", "stop", "--dir", str(folder))
        assert stopped.returncode == 0 and "stopped 1 server(s)" in stopped.stdout
        again = _dev("sandbox", "stop", "--dir", str(folder))
        assert again.returncode == 2 and "no sandbox runs in" in _one_error_line(again)
    finally:
        _dev("sandbox", "stop", "--dir", str(folder))  # whatever a failed assertion left


def test_hub_whose_port_is_taken_exits_2_naming_hub_bind(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "hub.toml"
        config.write_text(f'[hub]\nbind = "tcp://127.0.0.1:{port}"\ndata_dir = "{tmp_path}"\n')
        result = _run("server", "--config", str(config))
    assert result.returncode == 2, result.stderr
    line = _one_error_line(result)
    assert "hub.bind" in line and str(port) in line and "free port" in line


def test_sigterm_to_a_benchmark_stops_the_servers_and_agents_it_started(short_tmp: Path) -> None:
    """`./dev bench` and `./dev demo` (binlogsync_dev) start servers and agents; a SIGTERM (Ctrl-C in CI, a
    timeout) must not leave them running."""
    tmp_path = short_tmp
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "binlogsync_dev",
            "bench",
            "large-tx",
            "--sizes",
            "1000",
            "--dir",
            str(tmp_path),
        ],  # fmt: skip
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": AGENTS},
    )

    def started_agents() -> list[str]:
        found = subprocess.run(
            ["pgrep", "-f", f"{tmp_path}/binlogsync-bench-.*/site/.*toml"],
            capture_output=True,
            text=True,
        ).stdout.split()
        return found

    def ours() -> list[str]:
        return subprocess.run(
            ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True
        ).stdout.split()

    try:
        try:
            wait_until(lambda: len(started_agents()) == 3, 120, 0.1, "the bench's agents")
        except TimeoutError:
            proc.kill()
            raise AssertionError(proc.communicate()) from None
        proc.terminate()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + 15, err
        assert ours() == [], "servers or agents of the bench still run"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in ours():
            os.kill(int(pid), 9)
