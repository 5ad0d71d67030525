"""Fixtures of the deployment tests: a private Docker engine per test module (dockerd started
by hand, its data under /var/tmp so overlay2 works)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from binlogsync_dev.docker_kit import Engine, kept_root


@pytest.fixture(scope="module")
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """A private dockerd per test module, on the module's kept data root when no other session
    holds it (images and build cache from the last session: a compose build after a code
    change rebuilds only binlogsync's layers), else on a root of its own, removed after."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    with kept_root(name) as kept:
        root = kept or Path("/var/tmp") / f"bls-docker-{os.getpid()}-{name}"
        box = Engine(root)
        box.start()
        try:
            yield box
        finally:
            box.stop()
            if kept is None:
                shutil.rmtree(root, ignore_errors=True)
    # Nothing of the engine is left: no socket, no exec root, no namespace mounted there.
    assert not box.run_dir.exists(), f"{box.run_dir} left after dockerd stopped"
