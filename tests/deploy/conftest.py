"""Fixtures of the deployment tests: one private Docker engine per session (dockerd started by
hand, its data under /var/tmp so overlay2 works, removed at the end)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from binlogsync_dev.docker_kit import Engine


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    root = Path("/var/tmp") / f"bls-docker-{os.getpid()}"
    box = Engine(root)
    box.start()
    try:
        yield box
    finally:
        box.stop()
        shutil.rmtree(root, ignore_errors=True)
