"""The product wheel holds the library and the Airflow provider (binlogsync_airflow, with its
DAGs and the Spark job, found by Airflow through the wheel's entry points) and nothing of the
dev harness: binlogsync_dev (throwaway servers, the demo, the benchmarks) stays in the
repository."""

from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_has_the_library_and_the_provider_and_no_dev_harness(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("binlogsync-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"binlogsync", "binlogsync_airflow"}, packages
    assert "binlogsync/reconcile/tasks.py" in names and "binlogsync/cli.py" in names
    for shipped in (
        "dags/reconcile.py",
        "dags/paper_timing.py",
        "dags/outbox_retries.py",
        "dags/binlog_retention.py",
        "spark_jobs/reconcile_job.py",
        "page.html",
    ):
        assert f"binlogsync_airflow/{shipped}" in names, shipped  # fmt: skip
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    found = configparser.ConfigParser()
    found.read_string(archive.read(entry_points).decode())
    assert dict(found["apache_airflow_provider"]) == {
        "provider_info": "binlogsync_airflow.provider:get_provider_info"
    }
    assert dict(found["airflow.plugins"]) == {
        "binlogsync": "binlogsync_airflow.plugin:BinlogsyncPlugin"
    }


def test_the_provider_info_imports_nothing_of_airflow() -> None:
    """An agent-only install carries the entry point: reading it must not need Airflow."""
    script = (
        "import sys; import binlogsync_airflow.provider as p; info = p.get_provider_info(); "
        "assert not [m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')]; "
        "print(info['package-name'], info['connection-types'][0]['connection-type'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["binlogsync", "binlogsync"]
