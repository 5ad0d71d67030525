"""The driver's file of a run's passwords (reconcile/passwords.py): mode 0600 in a folder of
mode 0700, one folder per driver process, gone from disk when a local run ends; on a cluster
(tests/integration/test_reconcile_cluster.py) emptied instead, since the application keeps it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from binlogsync.reconcile import passwords

pytestmark = pytest.mark.unit


def test_a_local_runs_file_is_read_by_its_path_and_gone_when_the_run_ends() -> None:
    first = passwords.Distributed(None, {"source": "s3cret", "target0": "t"}, local=True)
    second = passwords.Distributed(None, {"source": "other"}, local=True)
    assert os.path.isabs(first.name) and Path(first.name) == first.path
    assert first.folder == second.folder  # one folder per process, not one per run
    assert first.folder.stat().st_mode & 0o777 == 0o700
    assert first.path.stat().st_mode & 0o777 == 0o600
    assert passwords.password(first.name, "source") == "s3cret"
    assert passwords.password(second.name, "source") == "other"
    first.remove()
    second.remove()
    assert not first.path.exists() and not second.path.exists()


def test_the_folder_goes_when_the_driver_process_exits() -> None:
    script = (
        "import json\n"
        "from binlogsync.reconcile import passwords\n"
        "d = passwords.Distributed(None, {'source': 'x'}, local=True)\n"
        "print(json.dumps([str(d.folder), d.folder.is_dir()]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    folder, existed = json.loads(done.stdout)
    assert existed and not Path(folder).exists()
