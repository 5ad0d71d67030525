"""`binlogsync spark-class-archive`: the Spark driver's class archive written ahead of the first
run (the compose image's build runs it), then mapped by a run's driver instead of written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from binlogsync.reconcile.sparkapp import SparkSettings, SparkStart

pytestmark = pytest.mark.integration


def _archive(folder: Path) -> subprocess.CompletedProcess[str]:
    # PySpark's launch options as an earlier SparkStart in a process leaves them (this test's
    # worker's, when a reconcile test ran there first): the command must not keep them.
    inherited = f"--driver-java-options '-XX:SharedArchiveFile={folder}/other.jsa' pyspark-shell"
    command = [sys.executable, "-m", "binlogsync.cli", "spark-class-archive"]
    return subprocess.run(
        [*command, "--class-cache", str(folder)],
        capture_output=True,
        text=True,
        timeout=1800,  # the JVM writing the archive: about a minute, longer on a busy machine
        env={**os.environ, "PYSPARK_SUBMIT_ARGS": inherited},
    )


@pytest.mark.timeout(3600)
def test_the_archive_is_written_once_and_a_run_maps_it(tmp_path: Path) -> None:
    folder = tmp_path / "spark-cds"
    made = _archive(folder)
    assert made.returncode == 0, made.stdout + made.stderr[-3000:]
    archives = list(folder.glob("spark-*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 1_000_000, archives
    assert str(archives[0]) in made.stdout
    assert not list(folder.glob("*.tmp"))  # renamed into place, nothing half-written left
    written = archives[0].stat().st_mtime_ns

    again = _archive(folder)  # made already: kept as it is, no Spark started
    assert again.returncode == 0 and str(archives[0]) in again.stdout, again.stderr[-3000:]
    assert archives[0].stat().st_mtime_ns == written
    assert "NativeCodeLoader" not in again.stderr  # Spark's first log line: no JVM started

    # A run's driver now maps the archive rather than writing one as its JVM exits.
    environ = {**os.environ}
    environ.pop("PYSPARK_SUBMIT_ARGS", None)
    start = SparkStart(SparkSettings("local[1]", (("spark.ui.enabled", "false"),), folder), environ)
    try:
        assert f"-XX:SharedArchiveFile={archives[0]}" in environ["PYSPARK_SUBMIT_ARGS"]
        assert "ArchiveClassesAtExit" not in environ["PYSPARK_SUBMIT_ARGS"]
        assert start.session().range(3).count() == 3
    finally:
        start.stop()


def test_a_folder_it_cannot_write_is_a_clear_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    done = _archive(blocked / "spark-cds")
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    assert f"cannot make the class archive's folder {blocked / 'spark-cds'}" in done.stderr
    assert "name a folder this user can write" in done.stderr, done.stderr
