"""Shared fixtures: one sandbox of real MariaDB servers per test session."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlogsync_dev.pg_sandbox import PgServer
from binlogsync_dev.sandbox import Sandbox, Server

# The two tests that run a whole site in a private Docker engine (image builds, a dozen
# containers, Airflow, Spark's JVMs). Side by side on two cores they starved each other's
# Airflow: its API server answered a task's heartbeats too late and the task was killed (a
# paper_timing run failed in CI that way). They run one after the other on one worker, first,
# while the other worker takes the rest.
DOCKER_SITES = ("tests/deploy/test_compose.py", "tests/deploy/test_ansible.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in DOCKER_SITES)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """As `--dist loadfile` (a file's tests on one worker, for its module fixtures), with the
    Docker sites one unit of work."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class DockerSitesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "docker sites" if path in DOCKER_SITES else path

    return DockerSitesTogether(config, log)


@pytest.fixture(autouse=True)
def _close_peers() -> Iterator[None]:
    """Raw test sockets are closed after every test (unclosed sockets warn, and warnings fail)."""
    yield
    from hubkit import OPEN_PEERS

    while OPEN_PEERS:
        OPEN_PEERS.pop().close()


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    # A tiny max_binlog_size forces rotation during the tests.
    box = Sandbox(tmp_path_factory.mktemp("sandbox"), max_binlog_size="64K")
    try:
        yield box
    finally:
        box.stop_all()


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    """A private PostgreSQL server for one test module."""
    server = PgServer().start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="session")
def origin(sandbox: Sandbox) -> Server:
    return sandbox.start("origin", 1)


@pytest.fixture(scope="session")
def target(sandbox: Sandbox) -> Server:
    return sandbox.start("target", 2)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder of the test's own whose path is short (a Unix socket's path has at most 107
    bytes, and pytest's tmp_path is longer), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="bls-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def dbname() -> str:
    """A database name unique to one test."""
    return f"t_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark standalone cluster on loopback (a master, two workers with one core each, a
    history server), whose executors run a Python without binlogsync, PyMySQL or PySpark."""
    from binlogsync_dev.spark_cluster import SparkCluster, bare_python

    folder = tmp_path_factory.mktemp("spark-cluster")
    python = bare_python(folder / "bare-python")
    with SparkCluster(folder / "cluster", workers=2, python=python, history=True) as cluster:
        yield cluster
