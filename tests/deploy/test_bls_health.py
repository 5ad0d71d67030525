"""deploy/compose/bin/bls-health, the compose site's healthchecks, without Docker: each check
against real loopback servers standing in for what it asks (an agent's Prometheus endpoint
served by prometheus_client with the agent's own metrics, JSON pages like Airflow's health
endpoint and the Spark master's /json/), healthy and each way of not being healthy, with the
reason it prints. The compose test runs the same script in the site's containers."""

from __future__ import annotations

import http.server
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from binlogsync.config import Metrics
from binlogsync.metrics import ClientMetrics, HubMetrics
from binlogsync.metrics import serve as serve_metrics
from binlogsync_dev.sandbox import free_port

pytestmark = pytest.mark.deploy

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "compose" / "bin" / "bls-health"


def check(*args: str) -> tuple[int, str]:
    done = subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=30
    )  # fmt: skip
    return done.returncode, (done.stdout + done.stderr).strip()


@pytest.fixture
def pages() -> Iterator[tuple[str, dict[str, str]]]:
    """An HTTP server on loopback answering each path of the dict with its text (404 else)."""
    served: dict[str, str] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            body = served.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write((body or "not here").encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()


def test_client_is_healthy_only_while_the_hub_welcomes_it_and_capture_runs() -> None:
    metrics, port = ClientMetrics(), free_port()
    server = serve_metrics(Metrics(host="127.0.0.1", port=port), metrics.registry)
    try:
        assert check("client", str(port)) == (1, "the hub does not welcome this agent")
        metrics.hub_online.set(1)
        assert check("client", str(port)) == (0, "healthy")
        halted = [True]
        metrics.capture_halted.set_function(lambda: float(halted[0]))
        code, said = check("client", str(port))
        assert (code, said) == (1, "capture halted (binlogsync status on the hub says why)")
        halted[0] = False
        assert check("client", str(port)) == (0, "healthy")
        # the hub's endpoint is not an agent's, and an agent's is not the hub's
        assert check("hub", str(port)) == (1, f"no hub metrics at port {port}")
    finally:
        server.shutdown()  # type: ignore[attr-defined]
        server.server_close()  # type: ignore[attr-defined]
    assert check("client", str(port)) == (1, f"nothing answers at 127.0.0.1:{port}")


def test_hub_is_healthy_once_its_metrics_answer() -> None:
    port = free_port()
    assert check("hub", str(port)) == (1, f"nothing answers at 127.0.0.1:{port}")
    server = serve_metrics(Metrics(host="127.0.0.1", port=port), HubMetrics().registry)
    try:
        assert check("hub", str(port)) == (0, "healthy")
    finally:
        server.shutdown()  # type: ignore[attr-defined]
        server.server_close()  # type: ignore[attr-defined]


def test_airflow_spark_and_http_pages(pages: tuple[str, dict[str, str]]) -> None:
    url, served = pages
    health = "/api/v2/monitor/health"
    served[health] = (
        '{"metadatabase":{"status":"healthy"},"scheduler":{"status":"healthy",'
        '"latest_scheduler_heartbeat":"2026-11-29T15:00:00+00:00"},"triggerer":{"status":null}}'
    )
    assert check("airflow", url) == (0, "healthy")
    served[health] = '{"metadatabase": {"status": "healthy"}, "scheduler": {"status": "unhealthy"}}'
    assert check("airflow", url) == (1, "not healthy: scheduler")
    del served[health]
    assert check("airflow", url) == (1, f"{url}{health} answered HTTP/1.0 404 Not Found")

    # the master's /json/ as Spark 4 writes it (Jackson, pretty-printed)
    served["/json/"] = (
        '{\n  "url" : "spark://spark-master:7077",\n  "aliveworkers" : 1,\n  "status" : "ALIVE"\n}'
    )
    assert check("spark-master", f"{url}/json/") == (0, "healthy")
    assert check("spark-worker", f"{url}/json/") == (0, "healthy")
    assert check("spark-worker", f"{url}/json/", "2") == (1, "1 alive worker(s), 2 wanted")
    served["/json/"] = '{ "aliveworkers" : 0, "status" : "STANDBY" }'
    assert check("spark-master", f"{url}/json/") == (1, "the master is not ALIVE")

    served["/-/ready"] = "Prometheus Server is Ready.\n"
    assert check("http", f"{url}/-/ready") == (0, "healthy")
    assert check("http", "ftp://127.0.0.1/") == (1, "not an http:// URL: ftp://127.0.0.1/")


def test_workload_is_healthy_while_it_commits(tmp_path: Path) -> None:
    alive = tmp_path / "workload-alive"
    assert check("workload", str(alive)) == (1, f"no commit yet ({alive} is missing)")
    alive.touch()
    assert check("workload", str(alive)) == (0, "healthy")
    old = time.time() - 45
    os.utime(alive, (old, old))
    code, said = check("workload", str(alive))
    assert code == 1 and said.startswith("no commit for 4"), said


def test_usage() -> None:
    code, said = check("nonsense")
    assert code == 2 and "bls-health client [PORT]" in said, said
