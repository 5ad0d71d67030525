"""The hub and the agents set their start-up heap aside from the garbage collector before
they start work (runloop.settle_heap): a target draining a backlog spent a sixth of its CPU in
the collector before, most of it walking the modules' objects in full collections."""

from __future__ import annotations

import argparse
import gc
from typing import Any

import pytest

from binlogsync import cli

pytestmark = pytest.mark.unit


class _Piece:
    """Stands in for the hub or an agent: what it sees when its work begins."""

    def __init__(self, _config: Any) -> None:
        pass

    def preflight(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def run(self) -> int:
        return gc.get_freeze_count()


@pytest.mark.parametrize("command", ["server", "client"])
def test_work_begins_with_the_start_up_heap_frozen(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import binlogsync.client.agent
    import binlogsync.config
    import binlogsync.hub.server
    import binlogsync.runloop

    monkeypatch.setattr(binlogsync.hub.server, "Hub", _Piece)
    monkeypatch.setattr(binlogsync.client.agent, "ClientAgent", _Piece)
    monkeypatch.setattr(binlogsync.config, "load_hub", lambda path: path)
    monkeypatch.setattr(binlogsync.config, "load_client", lambda path: path)
    monkeypatch.setattr(binlogsync.runloop, "stop_on_signals", lambda stop: None)
    run = cli.cmd_server if command == "server" else cli.cmd_client
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        frozen = run(argparse.Namespace(config="unused.toml"))
    finally:
        gc.unfreeze()
    # The interpreter's own objects and every imported module's are among them.
    assert frozen > 10_000
