"""binlogsync's code for executors that do not have it installed.

The executors of a reconciliation import only `binlogsync.reconcile`'s task modules and what
they use: the standard library, PyMySQL (pure Python) and, for a PostgreSQL target, psycopg —
never pyzmq or python-mysql-replication (tests/unit/test_reconcile_executor_imports.py). So the
code can travel with the job as one zip for `--py-files` / `SparkContext.addPyFile`: the
`binlogsync` package and PyMySQL, both pure Python. psycopg has a compiled part; executors
that compare a PostgreSQL target need `pip install 'psycopg[binary]'` on their own Python.

    binlogsync spark-package --out binlogsync-reconcile.zip     (the CLI's face of `build`)
    spark-submit --py-files binlogsync-reconcile.zip spark_jobs/reconcile_job.py …

A run started by the command line with a cluster master adds the zip itself, and so does the
Airflow operator (as --py-files).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

ZIP_NAME = "binlogsync-reconcile.zip"
# Packages the executor side imports that are pure Python (shipped); psycopg is not.
PURE_PACKAGES = ("binlogsync", "pymysql")


def _package_dir(name: str) -> Path:
    module = __import__(name)
    return Path(module.__file__).resolve().parent  # type: ignore[arg-type]


def build(out: Path) -> Path:
    """Write the zip of PURE_PACKAGES (their .py files) to `out` (a file, or a folder to
    put ZIP_NAME in) and return its path. Entries carry a fixed date, so the same code makes
    the same bytes."""
    path = out / ZIP_NAME if out.is_dir() else out
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in PURE_PACKAGES:
            root = _package_dir(name)
            for file in sorted(root.rglob("*.py")):
                if "__pycache__" in file.parts:
                    continue
                arcname = f"{name}/{file.relative_to(root).as_posix()}"
                info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, file.read_bytes())
            typed = root / "py.typed"
            if typed.exists():
                zf.writestr(zipfile.ZipInfo(f"{name}/py.typed", (2020, 1, 1, 0, 0, 0)), b"")
    os.replace(tmp, path)
    return path


def shipped(py_files: str) -> bool:
    """Whether spark-submit's `spark.submit.pyFiles` already carries binlogsync's zip."""
    return any(Path(p).name.startswith("binlogsync") for p in py_files.split(",") if p)
