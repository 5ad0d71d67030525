"""The warm reconcile server: one Spark application, started once, runs the reconciliations
`binlogsync reconcile --spark-server` sends it (each without Spark's start-up), with the same
findings and exit codes as a run of its own; a request that is not one is refused and the
server goes on; SIGTERM ends it and removes its socket."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Server
from reconcile_kit import execute, make_table

pytestmark = pytest.mark.integration


def _reconcile(
    sock: Path, origin: Server, target: Server, db: str, out: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", "reconcile", f"--spark-server={sock}",
         f"--source=mysql://root@127.0.0.1:{origin.port}",
         f"--target=mysql://root@127.0.0.1:{target.port}?password_env=TARGET_PW",
         f"--tables={db}.t", "--pin=none", f"--out={out}"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "TARGET_PW": ""},
    )  # fmt: skip


def test_runs_share_one_warm_spark_application(
    origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    sock = tmp_path / "reconcile.sock"
    server = subprocess.Popen(
        [sys.executable, "-m", "binlogsync.cli", "reconcile-server", f"--socket={sock}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_until(sock.exists, 120, 0.1, "the server's socket")
        assert oct(sock.stat().st_mode & 0o777) == "0o600"
        make_table([origin, target], dbname, rows=1000)
        execute(target, dbname, "DELETE FROM t WHERE id = 3")
        first = _reconcile(sock, origin, target, dbname, tmp_path / "one")
        assert first.returncode == 1 and "missing   id=3" in first.stdout, first.stderr
        execute(target, dbname, "INSERT INTO t (id, name) VALUES (3, 'back')")
        second = _reconcile(sock, origin, target, dbname, tmp_path / "two")
        assert second.returncode == 1 and "changed   id=3" in second.stdout, second.stderr
        apps = {json.loads((tmp_path / d / "summary.json").read_text())["spark"]["app_id"]
                for d in ("one", "two")}  # fmt: skip
        assert len(apps) == 1  # one application, started once

        # Not a request: answered with the reason, and the server goes on.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.connect(str(sock))
            body = b'{"argv": "--tables x", "env": {}}'
            raw.sendall(struct.pack(">I", len(body)) + body)
            size = struct.unpack(">I", raw.recv(4))[0]
            answer = json.loads(raw.recv(size))
        assert answer["exit_code"] == 2 and "argv must be a list" in answer["stderr"]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.connect(str(sock))
            body = json.dumps({"argv": ["--tables=a.b"], "env": {"HOME": "/x"}}).encode()
            raw.sendall(struct.pack(">I", len(body)) + body)
            size = struct.unpack(">I", raw.recv(4))[0]
            assert "env may carry only" in json.loads(raw.recv(size))["stderr"]
        equal = _reconcile(sock, origin, target, dbname, tmp_path / "three")
        assert equal.returncode == 1  # still serving
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=60)
    assert server.returncode == 0, output[-3000:]
    assert not sock.exists()
    gone = _reconcile(sock, origin, target, dbname, tmp_path / "four")
    assert gone.returncode == 2 and "no reconcile server answers" in gone.stderr
