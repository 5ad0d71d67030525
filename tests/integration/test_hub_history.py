"""The lag history through a real hub (ZeroMQ, its loop): STATUS with `history: true` answers
the samples the hub took of each target and origin; without it the status map has none."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from binlogsync.hub.history import LagHistory
from binlogsync.transport import frames
from hubkit import HubThread, Peer, body, tx

pytestmark = pytest.mark.integration


def _status(peer: Peer, **ask: bool) -> dict:  # type: ignore[type-arg]
    peer.send(frames.STATUS, ask)
    return dict(peer.recv(kind=frames.STATUS_REPLY).header["status"])


def test_status_history_has_the_lag_the_hub_sampled(tmp_path: Path) -> None:
    running = HubThread(tmp_path / "hub", heartbeat_interval=1.0)
    running.hub.history = LagHistory(interval=0.5)  # the hub's own is 10 s: a shorter test
    with running as hub:
        origin, target, admin = Peer(hub.endpoint), Peer(hub.endpoint), Peer(hub.endpoint)
        origin.hello("o1", ["origin"], start=tx(1).position)
        origin.batch("o1", 1, [body(tx(2)), body(tx(3))])
        origin.recv(kind=frames.ACK)
        target.hello("t1", ["target"])  # online, but it never applies: the backlog stays
        deadline = time.monotonic() + 30
        while True:
            status = _status(admin, history=True)
            pairs = {(p["target"], p["origin"]): p for p in status["history"]["pairs"]}
            samples = pairs.get(("t1", "o1"), {}).get("samples", [])
            if samples and samples[-1][2] == 2:
                break
            assert time.monotonic() < deadline, status["history"]
            time.sleep(0.1)
        assert status["history"]["interval"] == 0.5 and status["history"]["window"] == 3600
        when, lag, backlog = samples[-1]
        assert status["time"] - 3600 <= when <= status["time"]
        # The transactions' commit times are in 2023: the lag is the age of the oldest one.
        assert lag == pytest.approx(when - tx(2).timestamp, abs=2.0)
        row = next(t for t in status["targets"] if (t["target"], t["origin"]) == ("t1", "o1"))
        assert row["backlog"] == backlog
        assert "history" not in _status(admin)
        assert "history" not in _status(admin, detail=True)
