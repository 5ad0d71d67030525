"""The databases' passwords on their way to Spark's executors: in a file, never in the job.

A reconciliation's tasks connect to the source and every target, so the executors need the
passwords. They never travel in the tasks themselves (a closure is data Spark may log or spill),
nor on a command line, nor in Spark's conf or environment (the application's environment page
shows both, and the Airflow Spark provider turns `env_vars` into conf on YARN and Kubernetes).
The driver writes them to one file per run (mode 0600, in the driver process's folder of mode
0700, removed when the process exits); the tasks carry the file's name and no password, and
each executor process reads the file once. On a cluster the file is added to the application
(`SparkContext.addFile`) and read from each executor's SparkFiles folder (the file stays added
for the application's life, emptied when its run ends: see `Distributed.remove`); in local
mode the executors share the driver's machine and read it where it is (local mode's executor
and driver share one SparkFiles folder, where Spark's own copy of an added file races between
concurrent tasks).

On the driver the passwords come from the URLs (`?password_file=PATH`, a file with the password
alone, for what runs unattended; `?password_env=VAR`; or the URL itself).
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigError

_LOADED: dict[str, dict[str, str]] = {}  # per executor process: file name -> passwords
_LOCK = threading.Lock()


_FOLDER: Path | None = None  # this driver process's folder of secrets files


def _folder() -> Path:
    """The process's folder for its runs' secrets files (mode 0700), removed when it exits: a
    warm server runs for months, one folder, not one per run."""
    global _FOLDER
    with _LOCK:
        if _FOLDER is None or not _FOLDER.is_dir():
            _FOLDER = Path(tempfile.mkdtemp(prefix="binlogsync-secrets-"))
            os.chmod(_FOLDER, 0o700)
            atexit.register(shutil.rmtree, _FOLDER, True)
        return _FOLDER


class Distributed:
    """The file of one run's passwords, added to its Spark application."""

    def __init__(self, sc: Any, passwords: dict[str, str], local: bool) -> None:
        self.folder = _folder()
        path = self.folder / f"binlogsync-{secrets.token_hex(8)}.secrets.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(passwords, f)
        if local:
            self.name = str(path)  # an absolute path: read where it is
        else:
            sc.addFile(str(path))
            self.name = path.name  # a SparkFiles name
        self.path = path
        self.local = local

    def remove(self) -> None:
        """Take the passwords off the driver's disk when the run is over. An added file stays
        in the application: an executor fetches every file added so far before its first task
        of a later run (a warm server's next run, the next job of a DAG run's submission), so
        a deleted one failed that run's tasks ("Stream '/files/…secrets.json' was not found").
        Its content is emptied now; the folder goes when the driver's process ends."""
        if self.local:
            self.path.unlink(missing_ok=True)
            return
        with open(self.path, "w") as f:
            f.write("{}")


def password(file: str, key: str) -> str:
    """The password kept under `key` in the run's secrets file `file` (an absolute path, or a
    name in this executor's SparkFiles folder), read once per process."""
    with _LOCK:
        found = _LOADED.get(file)
        if found is None:
            path = file
            if not os.path.isabs(file):
                from pyspark import SparkFiles

                path = SparkFiles.get(file)
            with open(path) as f:
                found = json.load(f)
            _LOADED[file] = found
    return found[key]


def read_password_file(path: str) -> str:
    """The password in `path` (its first line, without the line end); ConfigError when the
    file cannot be read. A relative path is also looked for by its name in the working
    folder, where spark-submit's `--files` puts files in cluster deploy mode."""
    candidates = [Path(path)]
    if Path(path).name != path:
        candidates.append(Path(Path(path).name))
    for candidate in candidates:
        try:
            text = candidate.read_text()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(
                f"cannot read the password file {path}: {exc}",
                "make it readable by the user that runs the job",
            ) from exc
        return text.splitlines()[0] if text else ""
    raise ConfigError(
        f"the password file {path} does not exist",
        "write the database password alone into it (mode 0600), or pass it with --files",
    )
