"""What a Spark executor of a reconciliation imports: only the task modules and what they use,
never pyzmq or python-mysql-replication, and all of it from the zip the job ships
(reconcile/shipping.py), so executors need no binlogsync installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from binlogsync.reconcile import shipping
from binlogsync_dev.spark_cluster import bare_python

pytestmark = pytest.mark.unit

AGENTS = Path(__file__).resolve().parents[2] / "agents"
EXECUTOR_MODULES = "tasks, recheck, rowstage, passwords, checksums, pgsql, chunks, dialects"
BLOCKED = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("zmq", "pymysqlreplication"):
            raise ImportError(f"{name} is blocked: executors need not have it")
sys.meta_path.insert(0, Blocked())
from binlogsync.reconcile import MODULES
print("imported")
""".replace("MODULES", EXECUTOR_MODULES)


def test_the_task_modules_import_without_zmq_and_the_binlog_library() -> None:
    env = {**os.environ, "PYTHONPATH": str(AGENTS)}
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr


def test_the_shipped_zip_is_all_an_executor_without_binlogsync_needs(tmp_path: Path) -> None:
    python = bare_python(tmp_path / "bare")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    absent = subprocess.run([python, "-c", "import binlogsync"], capture_output=True, env=env)
    assert absent.returncode != 0  # the bare interpreter has nothing installed
    zipped = shipping.build(tmp_path)
    assert zipped.name == shipping.ZIP_NAME
    assert shipping.build(tmp_path / "again.zip").read_bytes() == zipped.read_bytes()
    done = subprocess.run(
        [python, "-c", BLOCKED + "import pymysql, binlogsync\nprint(binlogsync.__file__)"],
        capture_output=True, text=True, timeout=60, env={**env, "PYTHONPATH": str(zipped)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert str(zipped) in done.stdout  # binlogsync came from the zip
    assert shipping.shipped(f"/x/a.py,{zipped}") and not shipping.shipped("/x/other.zip")
