"""Test kit for the Airflow faces: an AIRFLOW_HOME per session, the environment that points
Airflow at this repo's DAGs and plugins and at a LocalSite (connections from environment
variables), and `run_dag`, which runs one DAG with `dag.test()` in its own process (Airflow
reads its configuration once, at import, and the suite's other tests must not see it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from binlogsync.devsite.localsite import LocalSite
from binlogsync.devsite.sandbox import Server

ROOT = Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"
PLUGINS = ROOT / "plugins"
BIN = Path(sys.executable).parent


def base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(PLUGINS),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__BINLOGSYNC__STATE_DIR=str(home / "state"),
        AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "local[*]"}),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # spark-submit, airflow
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(PLUGINS), str(ROOT / "agents")]),
    )
    return env


def database_conn(server: Server) -> str:
    return json.dumps(
        {"conn_type": "mysql", "host": server.host, "port": server.port, "login": server.user}
    )


def site_env(home: Path, s: LocalSite, origin_name: str = "origin") -> dict[str, str]:
    """Connections for `s`: the hub (binlogsync_default) and each host's database."""
    env = base_env(home)
    env["AIRFLOW_CONN_BINLOGSYNC_DEFAULT"] = json.dumps(
        {"conn_type": "binlogsync", "host": "127.0.0.1", "port": s.hub_port}
    )
    env[f"AIRFLOW_CONN_BINLOGSYNC_DB_{origin_name.upper()}"] = database_conn(s.origin)
    for t in s.targets:
        env[f"AIRFLOW_CONN_BINLOGSYNC_DB_{t.name.upper()}"] = database_conn(t)
    return env


def migrate(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"],
        env=base_env(home), check=True, capture_output=True, timeout=300,
    )  # fmt: skip


RUNNER = """
import json, sys, time
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(sys.argv[1]).get_dag(sys.argv[2])
started = time.monotonic()
run = dag.test(run_conf=json.loads(sys.argv[3]))
tasks = {}
for ti in run.get_task_instances():
    name = ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else "")
    tasks[name] = str(ti.state)
print("DAGRESULT " + json.dumps({"state": str(run.state), "tasks": tasks,
      "seconds": round(time.monotonic() - started, 2)}))
"""


@dataclass
class DagResult:
    state: str
    tasks: dict[str, str]
    seconds: float
    output: str

    @property
    def ok(self) -> bool:
        return self.state == "success"


def run_dag(env: dict[str, str], dag_id: str, conf: dict[str, Any] | None = None,
            timeout: float = 600) -> DagResult:  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(DAGS), dag_id, json.dumps(conf or {})],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    output = done.stdout + done.stderr
    for line in done.stdout.splitlines():
        if line.startswith("DAGRESULT "):
            data = json.loads(line.removeprefix("DAGRESULT "))
            print(f"{dag_id}: {data['state']} in {data['seconds']} s (dag.test), "
                  f"{time.monotonic() - started:.1f} s with the process")  # fmt: skip
            return DagResult(data["state"], data["tasks"], data["seconds"], output)
    raise AssertionError(
        f"dag.test() of {dag_id} did not finish (exit {done.returncode}):\n{output[-6000:]}"
    )
