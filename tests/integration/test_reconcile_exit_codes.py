"""Exit codes keep diff(1)'s meaning: 1 only when the copies differ. Anything that keeps a
reconciliation from comparing — no Java, no PySpark, a Spark that cannot start, a crash —
exits 2 with its reason on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from binlogsync_dev.sandbox import Server
from reconcile_kit import execute, make_table

pytestmark = pytest.mark.integration


def _reconcile(
    origin: Server,
    target: Server,
    db: str,
    *extra: str,
    env: dict[str, str] | None = None,
    prelude: str = "",
) -> subprocess.CompletedProcess[str]:
    argv = [
        "reconcile", f"--source=mysql://root@127.0.0.1:{origin.port}",
        f"--target=mysql://root@127.0.0.1:{target.port}", f"--tables={db}.t", "--pin=none",
        *extra,
    ]  # fmt: skip
    code = f"{prelude}\nimport sys\nfrom binlogsync.cli import main\nsys.exit(main({argv!r}))"
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=env if env is not None else dict(os.environ),
    )


def test_what_keeps_a_run_from_comparing_exits_2_never_1(
    origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    make_table([origin, target], dbname, rows=300)
    execute(target, dbname, "DELETE FROM t WHERE id = 3")  # the copies differ: 1 if compared

    # No Java: neither JAVA_HOME nor a `java` on PATH.
    bare = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    bare["PATH"] = str(Path(sys.executable).parent)
    done = _reconcile(origin, target, dbname, env=bare)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "needs Java 17 or later" in done.stderr and "openjdk-17-jre-headless" in done.stderr

    # No PySpark.
    done = _reconcile(origin, target, dbname, prelude="import sys; sys.modules['pyspark'] = None")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "PySpark is not installed" in done.stderr and "binlogsync[spark]" in done.stderr

    # A master Spark cannot use.
    done = _reconcile(origin, target, dbname, "--master=nonsense://x")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Spark did not start" in done.stderr and "master" in done.stderr

    # A crash after the comparison: the report's folder is a file.
    (tmp_path / "taken").write_text("")
    done = _reconcile(origin, target, dbname, f"--out={tmp_path / 'taken'}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the reconciliation failed: FileExistsError" in done.stderr

    # And when it compares, 1 means what diff(1) means.
    done = _reconcile(origin, target, dbname, f"--out={tmp_path / 'report'}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "missing   id=3" in done.stdout
