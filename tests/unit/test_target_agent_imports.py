"""A target's agent never reads a binlog: it starts without the capture modules and without
python-mysql-replication (their import is part of every catch-up after the agent restarts),
and an origin's agent still loads them when it needs them. No agent imports asyncio (pyzmq's
monitor and authenticator modules pull it in: ~30 ms of a start)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

AGENTS = Path(__file__).resolve().parents[2] / "agents"
PROGRAM = """
import sys
from binlogsync.cli import cmd_client  # what `binlogsync client` runs
from binlogsync.client.agent import ClientAgent
from binlogsync.config import ClientConfig, DatabaseSettings, OriginConfig, TargetConfig
agent = ClientAgent(ClientConfig("t", "tcp://127.0.0.1:1", target=TargetConfig(DatabaseSettings())))
agent.link.close()
agent.context.destroy(linger=0)
print(sorted(m for m in sys.modules if m.startswith(("binlogsync.capture", "pymysqlreplication"))))
agent = ClientAgent(ClientConfig("o", "tcp://127.0.0.1:1", origin=OriginConfig(DatabaseSettings(), 7)))
agent.link.close()
agent.context.destroy(linger=0)
print("binlogsync.capture.reader" in sys.modules)
print("asyncio" in sys.modules)
"""


def test_a_target_agent_starts_without_the_capture_modules() -> None:
    env = {**os.environ, "PYTHONPATH": str(AGENTS)}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    target_modules, origin_loaded, asyncio_loaded = done.stdout.splitlines()
    assert target_modules == "[]"
    assert origin_loaded == "True"
    assert asyncio_loaded == "False"
