"""The docker compose site, for real, in a private Docker engine: the top-level
docker-compose.yaml built with deploy/compose/Dockerfile on a local Debian base image
(BASE_IMAGE), its wheelhouse made in the builder stage by the image's own Python (offline here,
PIP_OFFLINE=1, from the wheel cache that make-wheels fills by running pip inside the base image:
builds have no network on this machine; make-wheels runs with python/pip on PATH replaced by
failing commands, so the host's interpreter is never used), with the secrets make-secrets makes;
`up -d` until every service is healthy; the Redis target seeded from the Airflow container (as
docs/deploy.md says); no password is in any container's configuration; rows written on the
origin arrive on every target kind: both MariaDB targets, the PostgreSQL target (row for row)
and the Redis target (a hash per row); Airflow's REST API (published on 127.0.0.1 only) shows
the binlogsync page's overview from the hub (CURVE, Airflow's admin key) and runs every DAG to
success, triggered at once: reconcile waits for the targets (TargetCaughtUpSensor, deferred),
then one spark-submit in the Airflow container (client deploy mode) against the compose Spark
standalone cluster, whose master lists its one application (both jobs of the run) as finished,
compares the MariaDB and PostgreSQL targets and leaves the Redis target out; paper_timing times the site's own pipeline
(the origin's scratch table to target1 and target2, no native replica, a PNG); binlog_retention
and outbox_retries; the hub is killed (SIGKILL) in the middle of a burst of transactions and
rows are written while it is down: after it is started again, every database target equals the
origin row for row; Prometheus scrapes the hub and every agent, and the Redis target's agent,
stopped while the DAGs run (none needs it), shows in its API as BinlogsyncHostOffline firing
for that host (the shipped rule, `for: 30s`, unchanged); `down -v` leaves no container and no
volume. Timings are printed.

The third-party wheels are cached under ~/.cache/binlogsync/wheels, keyed by pyproject.toml,
constraints.txt and make-wheels; binlogsync's own wheel is built from this checkout by the
builder stage on every run.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlogsync_dev.docker_kit import CACHE, ROOT, Engine, debian_image
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import free_port

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(3000)]

COMPOSE_DIR = ROOT / "deploy" / "compose"
PROJECT = "bls-compose-test"
BASE_IMAGE = "local/bls-compose-base:bookworm"
# Everything any image needs, so the Dockerfiles install nothing (builds have no network here)
PACKAGES = [
    "python3", "python3-venv", "mariadb-server", "mariadb-client",
    "openjdk-17-jre-headless", "procps", "ca-certificates", "postgresql", "redis-server",
    "prometheus", "python3-psycopg",
]  # fmt: skip
SERVICES = {
    "origin", "target1", "target2", "hub", "origin-agent", "target1-agent", "target2-agent",
    "workload", "airflow", "spark-master", "spark-worker", "warehouse", "warehouse-agent",
    "cache", "cache-agent", "prometheus",
}  # fmt: skip
TABLES = ("customers", "orders")


def prepare_wheels(engine: Engine, scratch: Path) -> str:
    """deploy/compose/wheel-cache as make-wheels leaves it (made by make-wheels itself the first
    time, then cached): the offline builder's only source of dependencies. make-wheels runs pip
    inside the base image; a `python3`/`python` on PATH that fails proves the host's
    interpreter is never used (README: compose works whatever the host's Python). Returns what
    make-wheels printed ('' when cached)."""
    key = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes()
        + (ROOT / "constraints.txt").read_bytes()
        + (COMPOSE_DIR / "make-wheels").read_bytes()
    ).hexdigest()[:12]
    cached = CACHE / "wheels" / key
    said = ""
    if not cached.exists():
        partial = cached.with_name(key + ".partial")
        trap = scratch / "no-host-python"
        trap.mkdir(parents=True, exist_ok=True)
        for name in ("python", "python3", "python3.11", "python3.12", "pip", "pip3"):
            (trap / name).write_text(
                "#!/bin/sh\necho 'the host interpreter was used' >&2\nexit 97\n"
            )
            (trap / name).chmod(0o755)
        # this machine's package index settings (a TLS-intercepting proxy's CA, local indexes)
        mounts = [
            f"-v {p}:{p}:ro"
            for p in ("/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf", "/etc/xdg/pip",
                      "/opt/pypi", "/opt/pypi-more", "/opt/wheels")
            if Path(p).exists()
        ]  # fmt: skip
        env = {
            **engine.env,
            "PATH": f"{trap}:{os.environ['PATH']}",
            "WHEELS_DIR": str(partial),
            "BASE_IMAGE": BASE_IMAGE,
            "PIP_CACHE": str(Path.home() / ".cache" / "pip"),
            "MAKE_WHEELS_DOCKER_ARGS": " ".join(
                [*mounts, "-e PIP_CERT=/etc/ssl/certs/ca-certificates.crt"]
            ),
        }
        said = run([str(COMPOSE_DIR / "make-wheels")], env=env, timeout=2400).stdout
        assert "wheels made by Python 3.11" in said, said
        partial.replace(cached)
    dest = COMPOSE_DIR / "wheel-cache"
    for old in dest.glob("*.whl"):
        old.unlink()
    for wheel in cached.glob("*.whl"):
        try:
            os.link(wheel, dest / wheel.name)
        except OSError:
            shutil.copy2(wheel, dest / wheel.name)
    assert any(dest.glob("matplotlib-*.whl")), "no matplotlib for paper_timing's plot"
    return said


def run(
    command: list[str], env: dict[str, str] | None = None, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    if check and done.returncode:
        raise RuntimeError(
            f"{' '.join(command)} failed ({done.returncode}):\n"
            f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
    return done


class Site:
    """The compose project `PROJECT` in `engine`: compose commands, containers, SQL."""

    def __init__(self, engine: Engine, secrets: Path) -> None:
        self.engine = engine
        self.airflow_port = free_port()
        self.spark_ui_port = free_port()
        self.prometheus_port = free_port()
        self.env = {
            **engine.env,
            "BASE_IMAGE": BASE_IMAGE,
            "PIP_OFFLINE": "1",  # builds have no network here: the builder uses the cache
            "BINLOGSYNC_SECRETS": str(secrets),
            "AIRFLOW_PORT": str(self.airflow_port),
            "SPARK_UI_PORT": str(self.spark_ui_port),
            "PROMETHEUS_PORT": str(self.prometheus_port),
            # only the run the test triggers: unpausing reconcile would also queue its
            # @daily run first (max_active_runs=1), doubling the wait
            "AIRFLOW_USE_JOB_SCHEDULE": "False",
        }
        self.ids: dict[str, str] = {}
        self.compose_cli = (
            ["docker-compose"] if shutil.which("docker-compose") else ["docker", "compose"]
        )

    def compose(self, *args: str, timeout: float = 900) -> str:
        return run([*self.compose_cli, "-p", PROJECT, *args], self.env, timeout).stdout

    def docker(self, *args: str, check: bool = True) -> str:
        return self.engine.docker(*args, check=check).stdout.decode()

    def container(self, service: str) -> str:
        """The service's container (the same one across kill and start; `down` forgets)."""
        if service not in self.ids:
            ids = self.compose("ps", "-q", service).split()
            assert len(ids) == 1, f"{service}: containers {ids}"
            self.ids[service] = ids[0]
        return self.ids[service]

    def states(self) -> dict[str, str]:
        """service -> its container's health (or its state when not running)."""
        ids = self.docker(
            "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"
        ).split()
        if not ids:
            return {}
        form = (
            '{{index .Config.Labels "com.docker.compose.service"}} {{.State.Status}} '
            "{{if .State.Health}}{{.State.Health.Status}}{{end}}"
        )
        states = {}
        for line in self.docker("inspect", "-f", form, *ids).splitlines():
            service, status, *health = line.split()
            states[service] = health[0] if status == "running" and health else status
        return states

    def wait_healthy(self, timeout: float) -> None:
        def healthy() -> bool:
            states = self.states()
            dead = {s: v for s, v in states.items() if v in ("exited", "dead")}
            if dead:
                raise RuntimeError(f"containers stopped: {dead}")
            return set(states) == SERVICES and all(v == "healthy" for v in states.values())

        try:
            wait_until(healthy, timeout, 1.0, "every service healthy")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}: {self.states()}") from None

    def sql(self, service: str, query: str) -> list[str]:
        """Rows of `query` on the database service, as tab-separated lines (root, by socket)."""
        out = self.docker(
            "exec", self.container(service), "mariadb", "-N", "-B", "shop", "-e", query
        )
        return out.splitlines()

    def pg_rows(self, where: str) -> list[str]:
        """shop.orders rows matching `where` on the PostgreSQL target, tab-separated as
        MariaDB prints them (amounts with two decimals, times with six)."""
        query = (
            "SELECT id, customer_id, amount, note, "
            "to_char(created_at, 'YYYY-MM-DD HH24:MI:SS.US') FROM shop.orders "
            f"WHERE {where} ORDER BY id"
        )
        out = self.docker(
            "exec", "-u", "postgres", self.container("warehouse"),
            "psql", "-X", "-q", "-At", "-F", "\t", "-d", "postgres", "-c", query,
        )  # fmt: skip
        return out.splitlines()

    def redis(self, *args: str) -> str:
        """redis-cli in the Redis target's container, its password from the secret file."""
        command = "REDISCLI_AUTH=$(cat /run/secrets/db_binlogsync_password) redis-cli --raw"
        out = self.docker(
            "exec", self.container("cache"), "sh", "-c",
            " ".join([command, *(_sh_quote(a) for a in args)]),
        )  # fmt: skip
        return out.strip()

    def redis_notes(self, note: str) -> list[str]:
        """The keys of shop.orders rows whose note is `note` on the Redis target, sorted."""
        script = (
            "local out = {} for _, k in ipairs(redis.call('KEYS', ARGV[1])) do "
            "if redis.call('HGET', k, 'note') == ARGV[2] then out[#out + 1] = k end end "
            "return out"
        )
        return sorted(self.redis("EVAL", script, "0", "shop:orders:*", note).split())

    def rows(self, service: str, where: str | None = None) -> dict[str, list[str]]:
        """Every row of shop.customers and shop.orders, or the orders matching `where`."""
        if where:
            return {"orders": self.sql(service, f"SELECT * FROM orders WHERE {where} ORDER BY id")}
        return {t: self.sql(service, f"SELECT * FROM {t} ORDER BY id") for t in TABLES}

    def wait_targets_equal(self, timeout: float, where: str | None = None) -> dict[str, list[str]]:
        """The rows (`where`) of the origin, once both targets hold exactly the same."""
        seen: dict[str, Any] = {}

        def equal() -> bool:
            seen["origin"] = self.rows("origin", where)
            seen["target1"] = self.rows("target1", where)
            seen["target2"] = self.rows("target2", where)
            return seen["target1"] == seen["origin"] == seen["target2"]

        try:
            wait_until(equal, timeout, 0.5, "both targets equal to the origin")
        except TimeoutError:
            counts = {db: {t: len(r) for t, r in rows.items()} for db, rows in seen.items()}
            raise TimeoutError(f"targets differ from the origin: row counts {counts}") from None
        return seen["origin"]


class AirflowApi:
    """Airflow's REST API on 127.0.0.1 (the port compose publishes), as user admin."""

    def __init__(self, port: int, password: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.password = password
        self.token = ""

    def call(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read() or b"null")

    def login(self) -> None:
        answer = self.call("POST", "/auth/token", {"username": "admin", "password": self.password})
        self.token = str(answer["access_token"])

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        run = self.call(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf}
        )
        return str(run["dag_run_id"])

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def finished() -> bool:
            # An answer slower than the call's 30 s (the API server beside four DAG runs and
            # the other Docker test on two cores) says nothing of the run: ask again, within
            # the run's own deadline.
            try:
                found.update(self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"))
            except TimeoutError:
                return False
            return found["state"] in ("success", "failed")

        wait_until(finished, timeout, 1.0, f"the run {run_id} of {dag_id} finished")
        return found

    def task_log(
        self, dag_id: str, run_id: str, task: str, map_index: int = -1, tail: int = 6000
    ) -> str:
        """The task's log (its first try; its last `tail` characters, 0: all of it)."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task}/logs/1"
        try:
            answer = self.call("GET", path + (f"?map_index={map_index}" if map_index >= 0 else ""))
        except OSError as exc:
            return f"(no log: {exc})"
        content = answer.get("content", answer) if isinstance(answer, dict) else answer
        return json.dumps(content)[-tail:]

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        """The run's task instances by name (`task[map_index]` for a mapped one)."""
        answer = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {
            ti["task_id"] + (f"[{ti['map_index']}]" if ti["map_index"] >= 0 else ""): ti
            for ti in answer["task_instances"]
        }

    def task_timeline(self, dag_id: str, run_id: str, run_start: str) -> list[str]:
        """Each task instance's queued, start and end, in seconds after the run's start."""
        zero = dt.datetime.fromisoformat(run_start)

        def at(value: str | None) -> str:
            if not value:
                return "-"
            return f"{(dt.datetime.fromisoformat(value) - zero).total_seconds():.1f}"

        instances = self.task_instances(dag_id, run_id).items()
        return [
            f"{name}: queued {at(ti.get('queued_when'))}, start {at(ti.get('start_date'))}, "
            f"end {at(ti.get('end_date'))}, tries {ti.get('try_number')}"
            for name, ti in sorted(instances, key=lambda item: item[1].get("start_date") or "")
        ]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        return {name: ti["state"] for name, ti in self.task_instances(dag_id, run_id).items()}


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def firing(port: int) -> list[dict[str, Any]]:
    """Prometheus' firing alerts (its HTTP API)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=10) as r:
        alerts = json.loads(r.read())["data"]["alerts"]
    return [a for a in alerts if a["state"] == "firing"]


def xcom(api: AirflowApi, dag: str, run_id: str, task: str, map_index: int = -1) -> Any:
    """A task's return value, deserialized."""
    path = (
        f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances/{task}/xcomEntries/return_value"
        f"?deserialize=true" + (f"&map_index={map_index}" if map_index >= 0 else "")
    )
    value = api.call("GET", path)["value"]
    return json.loads(value) if isinstance(value, str) else value


def seconds_between(run: dict[str, Any]) -> float:
    """A DAG run's duration from its start and end dates (ISO 8601, from the REST API)."""
    start, end = (dt.datetime.fromisoformat(run[k]) for k in ("start_date", "end_date"))
    return round((end - start).total_seconds(), 1)


def insert_orders(note: str, count: int) -> str:
    """One INSERT of `count` orders tagged `note` (MariaDB's sequence engine)."""
    return (
        "INSERT INTO shop.orders (customer_id, amount, note, created_at) "
        f"SELECT seq % 50 + 1, seq * 1.25, '{note}', UTC_TIMESTAMP(6) FROM seq_1_to_{count}"
    )


def dag_evidence(api: AirflowApi, site: Site, dag: str, run_id: str) -> str:
    """What a DAG run that failed or did not finish leaves to read: its tasks' states and
    times, the main task's log, and what the task supervisors said (a heartbeat that failed,
    a kill), which goes to Airflow's own output, not to the task's log."""
    lines = [f"tasks of {dag} {run_id}:"]
    try:
        run = api.call("GET", f"/api/v2/dags/{dag}/dagRuns/{run_id}")
        states = api.task_states(dag, run_id)
        lines += [f"  {name}: {state}" for name, state in sorted(states.items())]
        if run.get("start_date"):
            lines += [f"  {line}" for line in api.task_timeline(dag, run_id, run["start_date"])]
    except OSError as exc:  # the API server itself too slow or gone: say so, keep the rest
        lines.append(f"  (the REST API did not answer: {exc})")
    task = "spark_reconcile" if dag == "reconcile" else dag
    lines.append(f"log of {task}: {api.task_log(dag, run_id, task)}")
    said = site.engine.docker("logs", "--tail", "3000", site.container("airflow"), check=False)
    words = ("heartbeat", "terminat", "killed", "error", dag)
    lines += [
        line
        for line in (said.stdout + said.stderr).decode(errors="replace").splitlines()
        if any(w in line.lower() for w in words)
    ][-120:]
    return "\n".join(lines)


@pytest.fixture
def site(engine: Engine, tmp_path: Path) -> Iterator[Site]:
    box = Site(engine, tmp_path / "secrets")
    try:
        yield box
    finally:
        if box.states():
            logs = box.compose("logs", "--no-color", "--tail=60", timeout=120)
            (tmp_path / "compose.log").write_text(logs)
        box.compose("down", "-v", "--remove-orphans", timeout=300)


def test_compose_site(engine: Engine, site: Site, tmp_path: Path) -> None:
    timings: dict[str, float] = {}
    started = time.monotonic()

    def timed(name: str, since: float) -> None:
        timings[name] = round(time.monotonic() - since, 1)
        print(f"compose site: {name} {timings[name]} s", flush=True)

    t = time.monotonic()
    debian_image(engine, BASE_IMAGE, PACKAGES)
    timed("base image (debian_image)", t)

    t = time.monotonic()
    said = prepare_wheels(engine, tmp_path)
    timed("wheel cache (make-wheels in the base image, when not cached)", t)
    if said:
        print(f"compose site: {said.strip()}")

    t = time.monotonic()
    site.compose("config", "-q")
    # one service after another: the classic builder has no shared stage cache between
    # parallel builds (each made every stage up to its target: 265 s against 132 s)
    site.compose("build", timeout=1800)
    # the wheelhouse came from the builder stage, made by the base image's Python (3.11)
    provenance = site.docker(
        "run", "--rm", "--network", "none", "binlogsync/agent:local",
        "cat", "/opt/binlogsync/WHEELHOUSE",
    )  # fmt: skip
    assert "made in the builder stage by Python 3.11" in provenance, provenance
    timed("compose build", t)

    t = time.monotonic()
    run([str(COMPOSE_DIR / "make-secrets")], {**site.env, "BINLOGSYNC": ""})
    secrets = Path(site.env["BINLOGSYNC_SECRETS"])
    assert (secrets / "keys" / "hub.key_secret").exists()
    assert (secrets / "db_binlogsync_password").stat().st_mode & 0o077 == 0
    timed("make-secrets", t)

    t = time.monotonic()
    site.compose("up", "-d")
    site.wait_healthy(600)  # Airflow's first start migrates its database
    timed("up until healthy", t)

    # The Redis target knows a table only from its definition, which a seed brings (the
    # site's tables were made before capture began): seed them, as docs/deploy.md says.
    t = time.monotonic()
    seed = (
        "BINLOGSYNC_SOURCE_PASSWORD=$(cat /run/secrets/db_binlogsync_password) "
        "binlogsync seed --config /etc/binlogsync/admin.toml --source mysql://binlogsync@origin:3306 "
        "--origin origin --target cache --tables 'shop.*' --quiet"
    )
    site.docker("exec", site.container("airflow"), "sh", "-c", seed)
    timed("seed of the Redis target", t)

    # No secret in any container's configuration: the passwords are files under /run/secrets.
    for service in ("origin", "origin-agent", "airflow", "workload"):
        config = site.docker("inspect", site.container(service))
        for name in ("db_binlogsync_password", "db_app_password", "airflow_admin_password"):
            value = (secrets / name).read_text().strip()
            assert value not in config, f"{name} appears in {service}'s configuration"

    # Rows written on the origin (inserts, updates, deletes) arrive on both targets.
    t = time.monotonic()
    site.sql("origin", insert_orders("test-1", 100))
    site.sql(
        "origin",
        "UPDATE shop.orders SET amount = amount + 1000 WHERE note = 'test-1' AND id % 7 = 0",
    )
    site.sql("origin", "DELETE FROM shop.orders WHERE note = 'test-1' AND id % 10 = 0")
    rows = site.wait_targets_equal(60, "note = 'test-1'")
    assert len(rows["orders"]) == 90
    # ... and on the PostgreSQL target, row for row, and on the Redis target, a hash per row.
    wait_until(
        lambda: site.pg_rows("note = 'test-1'") == rows["orders"], 60, 0.5,
        "the PostgreSQL target equal to the origin",
    )  # fmt: skip
    ids = sorted(f"shop:orders:{r.split(chr(9))[0]}" for r in rows["orders"])
    wait_until(lambda: site.redis_notes("test-1") == ids, 60, 0.5, "the Redis target's rows")
    first = rows["orders"][0].split("\t")
    fields = site.redis("HGETALL", f"shop:orders:{first[0]}").splitlines()
    stored = dict(zip(fields[::2], fields[1::2], strict=True))
    assert stored["note"] == "test-1" and stored["customer_id"] == first[1], stored
    timed("rows on every target kind", t)

    # Every DAG through Airflow's REST API, triggered at once (the wall time is the slowest).
    t = time.monotonic()
    api = AirflowApi(site.airflow_port, (secrets / "airflow_admin_password").read_text().strip())
    api.login()
    dags = ("reconcile", "paper_timing", "binlog_retention", "outbox_retries")
    wait_until(
        lambda: {d["dag_id"] for d in api.call("GET", "/api/v2/dags?limit=100")["dags"]}
        >= set(dags),
        120, 1.0, "every DAG parsed",
    )  # fmt: skip
    overview = api.call("GET", "/binlogsync/api/overview")  # the plugin's page, via the hub
    assert {h["name"]: h["online"] for h in overview["hosts"]} == {
        "origin": True, "target1": True, "target2": True, "warehouse": True, "cache": True,
    }, overview  # fmt: skip
    # Prometheus scrapes the hub and every agent; an agent stopped while the DAGs run (none of
    # them needs it) fires "host offline" by the time they are done (checked after them).
    prometheus = f"http://127.0.0.1:{site.prometheus_port}"

    def scraped() -> set[str]:
        query = urllib.parse.quote('up{job="binlogsync"} == 1')
        with urllib.request.urlopen(f"{prometheus}/api/v1/query?query={query}", timeout=10) as r:
            result = json.loads(r.read())["data"]["result"]
        return {s["metric"]["binlogsync_host"] for s in result}

    every = {"hub", "origin", "target1", "target2", "warehouse", "cache"}
    wait_until(lambda: scraped() == every, 60, 1.0, "Prometheus scraping the hub and every agent")
    assert not [a for a in firing(site.prometheus_port)
                if a["labels"]["alertname"] == "BinlogsyncHostOffline"]  # fmt: skip
    site.compose("stop", "cache-agent")
    stopped = time.monotonic()
    confs: dict[str, dict[str, Any]] = {
        "reconcile": {"tables": ["shop.*"]},
        # the site's own pipeline (the Variables compose sets), 100 statements per DML
        "paper_timing": {"rows": [100], "runs": 1},
        "binlog_retention": {},  # keeps 24 h and what the targets need: purges nothing here
        "outbox_retries": {},
    }
    run_ids = {dag: api.trigger(dag, confs[dag]) for dag in dags}
    results = {}
    for dag in dags:
        try:
            # alone about 100 s (reconcile's Spark application on a loaded 2-core machine);
            # beside the rest of the suite several times that
            results[dag] = api.wait_run(dag, run_ids[dag], 1500)
        except TimeoutError as exc:
            pytest.fail(f"{exc}\n{dag_evidence(api, site, dag, run_ids[dag])}")
        if results[dag]["state"] != "success":
            pytest.fail(
                f"{dag} {results[dag]['state']}\n{dag_evidence(api, site, dag, run_ids[dag])}"
            )
    timed("every DAG run (trigger to the last success)", t)
    for dag in dags:
        print(f"compose site: DAG {dag} run {run_ids[dag]} took {seconds_between(results[dag])} s")
    for line in api.task_timeline(
        "reconcile", run_ids["reconcile"], results["reconcile"]["start_date"]
    ):
        print(f"compose site: reconcile task {line}")
    run_id, result = run_ids["reconcile"], results["reconcile"]
    tasks = api.task_states("reconcile", run_id)
    # one job per group of targets the routes make (shop.* to all four; the timing table to
    # target1 and target2), each waited for, and all compared in one Spark application
    assert set(tasks.values()) == {"success"}, tasks
    waits = [k for k in tasks if k.startswith("caught_up[")]
    assert {"plan", "spark_reconcile", "reconcile_result"} <= set(tasks), tasks
    submitted = xcom(api, "reconcile", run_id, "spark_reconcile")["jobs"]
    assert len(submitted) == len(waits) == 2, (submitted, tasks)
    compared: dict[tuple[str, str], str] = {}
    for job in submitted:
        assert job["spark"]["master"] == "spark://spark-master:7077", job
        assert job["exit_code"] == 0
        assert all(r["source_rows"] > 0 for r in job["tables"]), job
        compared.update({(r["table"], r["target"]): r["status"] for r in job["tables"]})
    apps = sorted({job["spark"]["app_id"] for job in submitted})
    assert len(apps) == 1, submitted  # one application for the DAG run, not one per job
    expected = {
        (f"shop.{t}", target) for t in TABLES for target in ("target1", "target2", "warehouse")
    }
    assert expected <= set(compared) and set(compared.values()) == {"equal"}, compared
    assert not [
        k for k in compared if k[1] == "cache"
    ]  # the Redis target (a `redis` connection) is left out
    with urllib.request.urlopen(f"http://127.0.0.1:{site.spark_ui_port}/json/", timeout=10) as r:
        master = json.loads(r.read())
    finished = {a["id"]: a["state"] for a in master["completedapps"]}
    ours = [a for a in master["completedapps"] if a["id"] in apps]
    for app in ours:
        print(
            f"compose site: Spark application {app['id']}: {app['duration'] / 1000:.1f} s, "
            f"{app['cores']} core(s), {app.get('memoryperexecutor', app.get('memoryperslave'))} "
            "MB per executor"
        )
    # An application gets one of the worker's cores (spark.deploy.defaultCores), leaving the
    # other to a second application (a manual run beside the DAG's).
    assert [app["cores"] for app in ours] == [1], ours
    assert all(finished.get(app) == "FINISHED" for app in apps), master
    # The drivers mapped the class archive the image was built with (the Dockerfile's
    # `binlogsync spark-class-archive`) rather than writing one as their JVMs exited.
    submit = api.task_log("reconcile", run_id, "spark_reconcile", tail=0)
    assert "-XX:SharedArchiveFile=" in submit and "ArchiveClassesAtExit" not in submit, submit
    print(
        f"compose site: reconcile run {run_id} itself {seconds_between(result)} s, "
        f"Spark application {apps[0]}"
    )
    # paper_timing timed this site: the origin's scratch table through the real agents to
    # target1 and target2, no native replica (said so), and a plot in Airflow's state folder.
    timing = xcom(api, "paper_timing", run_ids["paper_timing"], "paper_timing")
    assert timing["mode"] == "site" and timing["origin"] == "origin", timing
    assert timing["targets"] == ["target1", "target2"] and timing["native_replicas"] == 0
    assert (
        timing["native"] == "no native replica is present in this site: only binlogsync was timed"
    )
    cells = {(c["dml"], c["rows"]): c for c in timing["cells"]}
    assert set(cells) == {(d, 100) for d in ("insert", "update", "delete")}, timing
    for cell in cells.values():
        assert set(cell["targets"]) == {"target1", "target2"} and cell["seconds"] > 0, cell
        assert cell["native_seconds"] is None
    png = site.docker(
        "exec", site.container("airflow"), "sh", "-c", f"head -c 4 '{timing['png']}' | tail -c 3"
    )  # the file's magic number is \x89PNG
    assert png == "PNG", png
    print(
        "compose site: paper_timing (s until both MariaDB targets equal, 100 statements): "
        + ", ".join(f"{d} {cells[(d, 100)]['seconds']}" for d in ("insert", "update", "delete"))
    )
    for dag in ("binlog_retention", "outbox_retries"):
        assert api.task_states(dag, run_ids[dag]), f"{dag} ran no task"

    offline: list[dict[str, Any]] = []

    def host_offline_fires() -> bool:
        offline[:] = [a for a in firing(site.prometheus_port)
                      if a["labels"]["alertname"] == "BinlogsyncHostOffline"]  # fmt: skip
        return bool(offline)

    wait_until(host_offline_fires, 180, 1.0, "BinlogsyncHostOffline firing in Prometheus")
    assert [a["labels"]["host"] for a in offline] == ["cache"], offline
    assert offline[0]["annotations"]["summary"] == "binlogsync host cache is offline"
    timed("agent stopped until BinlogsyncHostOffline fired (while the DAGs ran)", stopped)
    site.compose("start", "cache-agent")  # healthy again below, with the hub

    # Kill the hub in the middle of a burst of single-row transactions, write while it is
    # down, start it again: nothing is lost on either target.
    t = time.monotonic()
    origin, hub = site.container("origin"), site.container("hub")
    count = 5000
    burst = "".join(
        f"INSERT INTO shop.orders (customer_id, amount, note, created_at) "
        f"VALUES ({i % 50 + 1}, {i}, 'burst', UTC_TIMESTAMP(6));"
        for i in range(1, count + 1)
    )
    script = tmp_path / "burst.sql"
    script.write_text(burst)
    with script.open() as stdin:
        writer = subprocess.Popen(
            ["docker", "exec", "-i", origin, "mariadb", "shop"],
            env=site.engine.env, stdin=stdin, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    burst_rows = "SELECT COUNT(*) FROM orders WHERE note = 'burst'"
    wait_until(
        lambda: int(site.sql("origin", burst_rows)[0]), 60, 0.02, "the burst started"
    )  # fmt: skip
    site.docker("kill", hub)
    writing = writer.poll() is None
    arrived = int(site.sql("target1", burst_rows)[0])
    output, _ = writer.communicate(timeout=120)
    assert writer.returncode == 0, output
    site.sql("origin", insert_orders("while-down", 200))
    assert site.states()["hub"] == "exited"
    site.compose("start", "hub")
    site.wait_healthy(120)
    site.compose("stop", "workload")  # quiet, so that whole tables can be compared
    rows = site.wait_targets_equal(120)
    counted = {
        n: sum(1 for r in rows["orders"] if f"\t{n}\t" in r) for n in ("burst", "while-down")
    }
    assert counted == {"burst": count, "while-down": 200}
    assert writing, "the burst was over before the hub was killed: nothing was in flight"
    wait_until(
        lambda: site.pg_rows("true") == rows["orders"], 120, 1.0,
        "the PostgreSQL target equal to the origin (every order)",
    )  # fmt: skip
    timed("hub killed and restarted, nothing lost", t)
    print(
        f"compose site: hub killed with {arrived}/{count} burst rows on target1; "
        f"{len(rows['orders'])} orders and {len(rows['customers'])} customers equal on all three"
    )

    t = time.monotonic()
    site.compose("down", "-v", "--remove-orphans", timeout=300)
    site.ids.clear()
    label = f"label=com.docker.compose.project={PROJECT}"
    assert site.docker("ps", "-aq", "--filter", label).split() == []
    assert site.docker("volume", "ls", "-q", "--filter", label).split() == []
    timed("down -v", t)

    timings["whole test"] = round(time.monotonic() - started, 1)
    print("\ncompose site timings (s):")
    for name, seconds in timings.items():
        print(f"  {name:<42} {seconds:>7.1f}")
