"""The product wheel holds the library and nothing of the dev harness: binlogsync_dev (throwaway
servers, the demo, the benchmarks) stays in the repository."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_has_the_library_and_no_dev_harness(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("binlogsync-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"binlogsync"}, packages
    assert "binlogsync/reconcile/tasks.py" in names and "binlogsync/cli.py" in names
