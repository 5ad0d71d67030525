"""A Spark standalone cluster on loopback, from the pyspark wheel alone: a master, workers and,
when asked, a history server, each started with pyspark's own `spark-class` (no download, no
internet). For the tests and the reconcile benchmark: `binlogsync reconcile --master
spark://127.0.0.1:PORT` runs there as on any standalone cluster.

    with SparkCluster(folder, workers=2, python=bare) as cluster:
        cluster.master_url            spark://127.0.0.1:PORT
        cluster.state()               the master's /json/ (aliveworkers, activeapps, completedapps)
        cluster.application(app_id)   the history server's /api/v1/applications/<id>/environment…

`python` is the interpreter the executors run (PYSPARK_PYTHON on the workers): the tests give
one without binlogsync, to show that the job ships its own code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from binlogsync.errors import SandboxError

from .sandbox import free_port


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def bare_python(folder: Path) -> Path:
    """A virtual environment of this Python's base interpreter with nothing installed (no
    binlogsync, no PyMySQL, no PySpark: Spark's workers put pyspark.zip on its path)."""
    python = folder / "bin" / "python"
    if not python.exists():
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    return python


class SparkCluster:
    def __init__(
        self,
        folder: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        python: Path | None = None,
        history: bool = False,
    ) -> None:
        self.folder = folder
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.python = python
        self.history = history
        self.port = free_port()
        self.web_port = free_port()
        self.history_port = free_port()
        self.event_log = folder / "events"
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def history_url(self) -> str:
        return f"http://127.0.0.1:{self.history_port}"

    def event_conf(self) -> dict[str, str]:
        """What an application needs so the history server shows it."""
        return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file:{self.event_log}"}

    def _env(self, name: str) -> dict[str, str]:
        home = spark_home()
        # Not the caller's PYTHONPATH: the executors' Python must find only what Spark and the
        # job give it.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(
            SPARK_HOME=str(home),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.folder / "logs"),
            SPARK_WORKER_DIR=str(self.folder / f"work-{name}"),
            SPARK_CONF_DIR=str(self.folder / "conf"),
        )
        if self.python is not None:
            env["PYSPARK_PYTHON"] = str(self.python)
        return env

    def _spark_class(self, name: str, *args: str, opts: str = "") -> None:
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 - kept for the process
        env = self._env(name)
        if opts:
            env["SPARK_DAEMON_JAVA_OPTS"] = opts
        proc = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # stopped as a group: spark-class runs java as a child
        )
        log.close()
        self.processes.append(proc)

    def start(self) -> SparkCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "conf").mkdir(exist_ok=True)
        self.event_log.mkdir(exist_ok=True)
        self._spark_class(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.web_port),
        )  # fmt: skip
        self._wait(lambda: self._json(f"{self.web_url}/json/") is not None, "the master")
        for i in range(self.workers):
            self._spark_class(
                f"worker{i + 1}",
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(free_port()),
            )  # fmt: skip
        self._wait(
            lambda: int(self.state().get("aliveworkers", 0)) >= self.workers,
            f"{self.workers} workers registered with the master",
        )
        if self.history:
            self._spark_class(
                "history",
                "org.apache.spark.deploy.history.HistoryServer",
                opts=(
                    f"-Dspark.history.fs.logDirectory=file:{self.event_log} "
                    f"-Dspark.history.ui.port={self.history_port} "
                    "-Dspark.history.fs.update.interval=1s"
                ),
            )
            self._wait(
                lambda: self._json(f"{self.history_url}/api/v1/applications") is not None,
                "the history server",
            )
        return self

    def state(self) -> dict[str, Any]:
        found = self._json(f"{self.web_url}/json/")
        return found if isinstance(found, dict) else {}

    def completed(self, app_id: str) -> dict[str, Any] | None:
        """The master's record of a finished application."""
        for app in self.state().get("completedapps", []):
            if app.get("id") == app_id:
                return dict(app)
        return None

    def application(self, app_id: str, part: str = "") -> Any:
        """The history server's REST answer for an application (`part`: "environment", …),
        waiting until the server has read its event log."""
        url = f"{self.history_url}/api/v1/applications/{app_id}" + (f"/{part}" if part else "")
        found: list[Any] = []

        def ready() -> bool:
            answer = self._json(url)
            if answer is None:
                return False
            found.append(answer)
            return True

        self._wait(ready, f"application {app_id} in the history server")
        return found[-1]

    def application_text(self, app_id: str, part: str) -> str:
        self.application(app_id, part)
        url = f"{self.history_url}/api/v1/applications/{app_id}/{part}"
        with urllib.request.urlopen(url, timeout=10) as r:
            return str(r.read().decode())

    @staticmethod
    def _json(url: str) -> Any:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def _wait(self, condition: Any, what: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            dead = [p for p in self.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "".join(
                    f"\n--- {log.name}:\n" + log.read_text(errors="replace")[-2000:]
                    for log in sorted(self.folder.glob("*.log"))
                )
                self.stop()
                raise SandboxError(f"the Spark cluster did not start: no {what}{logs}")
            time.sleep(0.2)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for proc in self.processes:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.processes.clear()

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
