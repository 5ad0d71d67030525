"""psycopg is an extra (`binlogsync[postgresql]`): reconciling MariaDB/MySQL targets must not
need it, and a PostgreSQL target without it is a clear error naming what to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

AGENTS = Path(__file__).resolve().parents[2] / "agents"
SCRIPT = """
import sys
sys.modules["psycopg"] = None  # as if it were not installed: importing it raises ImportError
from binlogsync.config import PostgresSettings
from binlogsync.errors import ConfigError
from binlogsync.reconcile import dialects, job, repair, tasks
assert dialects.query_errors() == dialects.MySQL.errors()
try:
    dialects.PostgreSQL.connect(PostgresSettings("127.0.0.1", 1), "target")
except ConfigError as exc:
    print(exc)
"""


def test_reconcile_imports_without_psycopg_and_names_it_when_needed() -> None:
    env = {**os.environ, "PYTHONPATH": str(AGENTS)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "needs psycopg" in done.stdout and "binlogsync[postgresql]" in done.stdout
