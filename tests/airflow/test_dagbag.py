"""The DAG files parse with no errors, touch no database and no network while parsing (the
metadata database is unreachable and every socket connect raises), each in under 2 s, and
every param says what it is for. The installed pyspark is the version of its jars."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflowkit import DAGS, base_env

pytestmark = pytest.mark.airflow

PARSE = """
import json, socket, sys, time
def refuse(*args, **kwargs):
    raise OSError("network at parse time")
socket.socket.connect = refuse
socket.create_connection = refuse
from airflow.dag_processing.dagbag import DagBag
out = {}
for path in sys.argv[1:]:
    started = time.monotonic()
    bag = DagBag(path)
    out[path] = {
        "seconds": time.monotonic() - started,
        "errors": {k: str(v) for k, v in bag.import_errors.items()},
        "dags": {d.dag_id: {name: p.description for name, p in d.params.items()}
                 for d in bag.dags.values()},
    }
print("PARSED " + json.dumps(out))
"""


def test_every_dag_parses_fast_without_database_or_network(tmp_path: Path) -> None:
    env = base_env(tmp_path / "home")
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{tmp_path}/no/such/dir/airflow.db"
    files = sorted(str(p) for p in DAGS.glob("*.py"))
    done = subprocess.run(
        [sys.executable, "-c", PARSE, *files], env=env, capture_output=True, text=True, timeout=120
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("PARSED ")), None)
    assert line, done.stdout + done.stderr
    parsed = json.loads(line.removeprefix("PARSED "))
    dags = {}
    for path, result in parsed.items():
        print(f"{Path(path).name}: parsed in {result['seconds']:.3f} s")
        assert result["errors"] == {}, result["errors"]
        assert result["seconds"] < 2.0, f"{path} took {result['seconds']:.2f} s to parse"
        dags.update(result["dags"])
    assert set(dags) == {"binlog_retention", "outbox_retries", "reconcile", "paper_timing"}
    for dag_id, params in dags.items():
        missing = [name for name, description in params.items() if not description]
        assert not missing, f"{dag_id}: params without a description: {missing}"


def test_pyspark_is_the_version_of_its_jars() -> None:
    # The Spark provider's pyspark-client installs into pyspark's folder: a mixed install
    # reports the client's version over the other version's jars (constraints.txt).
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    core = sorted(jars.glob("spark-core_*.jar"))
    assert core, f"no spark-core jar in {jars}"
    assert core[0].name.endswith(f"-{pyspark.__version__}.jar"), (core[0].name, pyspark.__version__)


def _airflow_json(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), *args, "-o", "json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout[done.stdout.index("[") :]))


def test_airflow_lists_the_provider_its_connection_type_and_the_page(tmp_path: Path) -> None:
    """What `pip install 'binlogsync[airflow]'` gives an Airflow, through entry points alone
    (the plugins folder is empty): the provider, the `binlogsync` connection type with its
    hook, and the page's plugin."""
    env = base_env(tmp_path / "home")
    providers = {p["package_name"]: p for p in _airflow_json(env, "providers", "list")}
    assert "binlogsync" in providers, sorted(providers)
    hooks = {h["connection_type"]: h for h in _airflow_json(env, "providers", "hooks")}
    assert hooks["binlogsync"]["class"] == "binlogsync_airflow.hooks.BinlogsyncHook"
    assert hooks["binlogsync"]["package_name"] == "binlogsync"
    plugins = {p["name"]: p for p in _airflow_json(env, "plugins")}
    assert "airflow.plugins" in plugins["binlogsync"]["source"], plugins.get("binlogsync")
    assert plugins["binlogsync"]["external_views"], plugins["binlogsync"]
