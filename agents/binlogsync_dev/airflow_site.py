"""Airflow over a local site: the environment that points Airflow at this repo's DAGs (the
provider's, in agents/binlogsync_airflow/dags) and at a LocalSite (connections from
environment variables, no Airflow database edits), `dag_test` (one DAG run with `dag.test()`
in a runner process kept for the next run with the same Airflow settings: Airflow reads its
configuration once, at import, and its first task builds the execution API, ~14 s of a fresh
process against 0.3 s for a run after it), `DagTest` (a run in a process of its own, to watch),
and `Standalone`
(`airflow standalone`, started, asked over its REST API, and stopped with everything it
started). The provider itself (hook, operators, the page) comes from the installed
binlogsync's entry points, as in any Airflow: `./dev` installs the checkout editable.

Used by `./dev airflow`, the demo and the tests alike.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .localsite import LocalSite, wait_until
from .sandbox import Server, free_port

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "agents" / "binlogsync_airflow" / "dags"
BIN = Path(sys.executable).parent
# The provider's DAGs as Airflow finds them in an installed binlogsync (binlogsync_airflow/
# bundle.py), the only bundle: what a managed Airflow with `pip install` alone would run.
BUNDLES = json.dumps(
    [
        {
            "name": "binlogsync",
            "classpath": "binlogsync_airflow.bundle.BinlogsyncDagBundle",
            "kwargs": {},
        }
    ]
)


def base_env(home: Path) -> dict[str, str]:
    """Airflow's settings for this repo, with AIRFLOW_HOME `home` (nothing inherited from an
    AIRFLOW_* variable of the caller's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(home / "plugins"),  # empty: the page is an entry point
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__TEST_CONNECTION="Enabled",  # the connection form's "Test" button
        AIRFLOW__BINLOGSYNC__STATE_DIR=str(home / "state"),
        AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "local[*]"}),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # spark-submit, airflow
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=str(ROOT / "agents"),
    )
    return env


def database_conn(server: Server) -> str:
    return json.dumps(
        {
            "conn_type": "mysql",
            "host": server.host,
            "port": server.port,
            "login": server.user,
            "password": server.password,
        }
    )


def site_env(home: Path, site: LocalSite) -> dict[str, str]:
    """`base_env` plus connections for `site`: the hub (binlogsync_default; with CURVE on,
    the hub's own key pair, as the operator on the hub's machine) and each host's database
    (binlogsync_db_<HOST>)."""
    env = base_env(home)
    hub: dict[str, Any] = {"conn_type": "binlogsync", "host": "127.0.0.1", "port": site.hub_port}
    if site.curve:
        hub["extra"] = {
            "secret_key_file": str(site.keys / "hub.key_secret"),
            "hub_public_key_file": str(site.keys / "hub.key"),
        }
    env["AIRFLOW_CONN_BINLOGSYNC_DEFAULT"] = json.dumps(hub)
    env["AIRFLOW_CONN_BINLOGSYNC_DB_ORIGIN"] = database_conn(site.origin)
    for t in site.targets:
        env[f"AIRFLOW_CONN_BINLOGSYNC_DB_{t.name.upper()}"] = database_conn(t)
    return env


def migrate(env: dict[str, str]) -> None:
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode:
        raise RuntimeError(
            f"airflow db migrate failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )


_RUN = """
def run_dag(folder, dag_id, conf):
    import json, time
    from airflow.dag_processing.dagbag import DagBag
    dag = DagBag(folder).get_dag(dag_id)
    started = time.monotonic()
    run = dag.test(run_conf=conf)
    tasks = {}
    for ti in run.get_task_instances():
        name = ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else "")
        tasks[name] = str(ti.state)
    return {"state": str(run.state), "tasks": tasks,
            "seconds": round(time.monotonic() - started, 2)}
"""
# One run, given on the command line.
_RUNNER = (
    _RUN
    + """
import json, sys
print("DAGRESULT " + json.dumps(run_dag(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))))
"""
)
# Runs one after the other, each a JSON line on stdin with the environment it runs in (only
# what Airflow does not read at import may differ: connections); ends when stdin closes.
_SERVER = (
    _RUN
    + """
import json, os, sys, traceback
for line in sys.stdin:
    request = json.loads(line)
    os.environ.clear()
    os.environ.update(request["env"])
    try:
        result = run_dag(request["folder"], request["dag_id"], request["conf"])
    except Exception:
        traceback.print_exc()
        result = {"failed": True}  # no DAG run to report: the caller raises with the output
    sys.stderr.flush()
    print("DAGRESULT " + json.dumps({**result, "id": request["id"]}), flush=True)
"""
)


@dataclass
class DagResult:
    dag_id: str
    state: str
    tasks: dict[str, str]
    seconds: float  # dag.test() itself
    wall_seconds: float  # the caller's wait (with a runner's start: Airflow's import)
    output: str

    @property
    def ok(self) -> bool:
        return self.state == "success"


def dag_test(
    env: dict[str, str],
    dag_id: str,
    conf: dict[str, Any] | None = None,
    timeout: float = 900,
    folder: Path = DAGS,
    log: Path | None = None,
) -> DagResult:
    """Run `dag_id` (from `folder`) once with dag.test() in the runner for these Airflow
    settings (started on first use). With `log`, in a process of its own whose output goes
    there, so a caller may watch it while the run goes on (`DagTest` below)."""
    if log is not None:
        return DagTest(env, dag_id, conf, folder, log).wait(timeout)
    env = {**env, "AIRFLOW__CORE__DAGS_FOLDER": str(folder)}  # dag.test() syncs this bundle
    fixed = tuple(sorted((k, v) for k, v in env.items() if not k.startswith("AIRFLOW_CONN_")))
    runner = _RUNNERS.get(fixed)
    if runner is None or not runner.alive:
        runner = _RUNNERS[fixed] = _DagRunner(env)
    return runner.run(env, dag_id, conf or {}, folder, timeout)


class _DagRunner:
    """A Python process with Airflow imported that runs DAGs with dag.test() when asked."""

    def __init__(self, env: dict[str, str]) -> None:
        home = Path(env["AIRFLOW_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        self.log = home / f"dag-runner-{os.getpid()}-{len(_RUNNERS)}.log"
        self.ids = 0
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER], env=env, stdin=subprocess.PIPE,
                stdout=out, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(
        self, env: dict[str, str], dag_id: str, conf: dict[str, Any], folder: Path, timeout: float
    ) -> DagResult:
        started = time.monotonic()
        self.ids += 1
        offset = self.log.stat().st_size
        request = {"id": self.ids, "env": env, "folder": str(folder), "dag_id": dag_id}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({**request, "conf": conf}) + "\n")
        self.proc.stdin.flush()
        run_id = self.ids

        def answered() -> str | None:
            with self.log.open(errors="replace") as f:
                f.seek(offset)
                text = f.read()
            return text if _reported(text, run_id) is not None or not self.alive else None

        try:
            output = wait_until(answered, timeout, 0.1, f"dag.test() of {dag_id}")
        except TimeoutError:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(
                f"dag.test() of {dag_id} did not finish within {timeout} s"
            ) from None
        return _result(dag_id, output, started, f"the runner: exit {self.proc.poll()}", run_id)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the runner ends after the run it has
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_RUNNERS: dict[tuple[tuple[str, str], ...], _DagRunner] = {}


@atexit.register
def _close_runners() -> None:
    for runner in _RUNNERS.values():
        if runner.alive:
            runner.close()


class DagTest:
    """A dag.test() run in its own process, started at once; `wait` gives its result."""

    def __init__(
        self,
        env: dict[str, str],
        dag_id: str,
        conf: dict[str, Any] | None = None,
        folder: Path = DAGS,
        log: Path | None = None,
    ) -> None:
        self.dag_id = dag_id
        self.started = time.monotonic()
        self.log = log or Path(env["AIRFLOW_HOME"]) / f"dag-test-{dag_id}-{os.getpid()}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = {**env, "AIRFLOW__CORE__DAGS_FOLDER": str(folder)}  # dag.test() syncs this bundle
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _RUNNER, str(folder), dag_id, json.dumps(conf or {})],
                env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float = 900) -> DagResult:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return _result(self.dag_id, self.output(), self.started, f"exit {self.proc.returncode}")


def _reported(output: str, run_id: int | None = None) -> dict[str, Any] | None:
    """What the runner printed on its DAGRESULT line (of run `run_id`, for a kept runner);
    None before it has (a line still being written does not count)."""
    for line in output.splitlines():
        if line.startswith("DAGRESULT "):
            try:
                data = json.loads(line.removeprefix("DAGRESULT "))
            except ValueError:
                continue
            if data.get("id") == run_id:
                return dict(data)
    return None


def _result(
    dag_id: str, output: str, started: float, ended: str, run_id: int | None = None
) -> DagResult:
    data = _reported(output, run_id)
    if data is None or data.get("failed"):
        raise RuntimeError(f"dag.test() of {dag_id} did not finish ({ended}):\n{output[-6000:]}")
    wall = round(time.monotonic() - started, 2)
    return DagResult(dag_id, data["state"], data["tasks"], data["seconds"], wall, output)


class Standalone:
    """`airflow standalone` on 127.0.0.1:`port` (its log servers on free ports too), with one
    admin user whose password is `password`, running the DAGs from the provider's bundle. It runs in its own process group, so `stop`
    ends every part it started (api-server, scheduler, dag-processor, triggerer)."""

    def __init__(self, env: dict[str, str], port: int, password: str = "admin") -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.password = password
        home = Path(env["AIRFLOW_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        passwords = home / "binlogsync-passwords.json"
        passwords.write_text(json.dumps({"admin": password}))
        self.env = {
            **env,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__SCHEDULER__DAG_DIR_LIST_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": BUNDLES,
        }
        self.log = home / "standalone.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180.0) -> float:
        """Start it; return the seconds until its health endpoint answered healthy."""
        started = time.monotonic()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(BIN / "airflow"), "standalone"],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        try:
            wait_until(self._healthy, timeout, 0.5, f"airflow standalone healthy (log {self.log})")
        except TimeoutError:
            self.stop()
            raise
        return time.monotonic() - started

    def _healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"airflow standalone exited {self.proc.returncode}; see {self.log}")
        try:
            health = self._call("GET", "/api/v2/monitor/health", token=None)
        except OSError:
            return False
        return all(
            part.get("status") == "healthy"
            for name, part in health.items()
            if name in ("metadatabase", "scheduler") and isinstance(part, dict)
        )

    def _call(self, method: str, path: str, body: Any = None, token: str | None = "") -> Any:
        headers = {"Content-Type": "application/json"}
        if token == "":
            token = self.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read() or b"null")

    def token(self) -> str:
        answer = self._call(
            "POST", "/auth/token", {"username": "admin", "password": self.password}, token=None
        )
        return str(answer["access_token"])

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Unpause `dag_id` and trigger a run of it; return the run's id."""
        token = self.token()

        def parsed() -> bool:
            try:
                self._call("GET", f"/api/v2/dags/{dag_id}", token=token)
            except (urllib.error.URLError, TimeoutError):  # not parsed yet, or slow to answer
                return False
            return True

        wait_until(parsed, 120, 0.5, f"the DAG {dag_id} parsed by the dag processor")
        self._call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False}, token=token)
        run = self._call(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}},
            token=token,
        )  # fmt: skip
        return str(run["dag_run_id"])

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 600.0) -> str:
        """The run's final state (success or failed), polled until it has one."""
        token = self.token()
        found: dict[str, str] = {}

        def finished() -> bool:
            try:
                run = self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", token=token)
            except (urllib.error.URLError, TimeoutError):  # slow to answer on a loaded machine
                return False
            found["state"] = run["state"]
            return run["state"] in ("success", "failed")

        wait_until(finished, timeout, 1.0, f"the run {run_id} of {dag_id}")
        return found["state"]

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        group = self.proc.pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    os.killpg(group, 0)
                except ProcessLookupError:
                    break
                self.proc.poll()
                time.sleep(0.2)
            else:
                continue
            break
        self.proc.wait(timeout=10)
        self.proc = None
