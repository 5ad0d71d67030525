"""Repairs (and so seed chunks) in flight to one target (hub/repairs.py): up to REPAIRS_AHEAD
are out at once, so the target has the next one while it applies one; they are answered in
the order they were sent, and a target that reconnects gets every unanswered one again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlogsync.hub.repairs import REPAIRS_AHEAD
from binlogsync.position import Position
from binlogsync.transport import frames
from hubkit import HubThread, Peer, body, tx

pytestmark = pytest.mark.integration

START = Position("binlog.000001", 4)
COUNT = REPAIRS_AHEAD + 2


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubThread]:
    # Peers of these tests stay online without pinging (20 s of silence).
    with HubThread(tmp_path / "hub", heartbeat_interval=0.2, heartbeat_liveness=100) as h:
        yield h


def _site(hub: HubThread) -> tuple[Peer, Peer, Peer]:
    """o1 captured tx 1, t1 applied it; then an operator asks for COUNT repairs of t1."""
    origin = Peer(hub.endpoint)
    origin.hello("o1", ["origin"], start=START)
    origin.batch("o1", 1, [body(tx(1))])
    origin.recv(kind=frames.ACK)
    target = Peer(hub.endpoint)
    target.hello("t1", ["target"])
    target.applied(target.recv(kind=frames.DELIVER))
    operator = Peer(hub.endpoint)
    for n in range(COUNT):
        header = {"origin": "o1", "target": "t1", "snapshot": tx(1).position, "id": f"r{n}"}
        operator.send(frames.REPAIR, header, [body(tx(50 + n))])
    return origin, target, operator


def _repairs(target: Peer, count: int) -> list[frames.Message]:
    got = [target.recv(kind=frames.DELIVER) for _ in range(count)]
    assert all(d.header["repair"] is True for d in got)
    return got


def _ids(delivered: list[frames.Message]) -> list[int]:
    return [d.transactions()[0].position.offset for d in delivered]


def _nothing_more(peer: Peer, kind: bytes) -> None:
    with pytest.raises(TimeoutError):
        peer.recv(timeout=0.5, kind=kind)


def test_repairs_go_ahead_and_are_answered_in_order(hub: HubThread) -> None:
    assert REPAIRS_AHEAD >= 2  # the point: the next one is there before the first is answered
    _, target, operator = _site(hub)
    first = _repairs(target, REPAIRS_AHEAD)
    assert _ids(first) == [tx(50 + n).position.offset for n in range(REPAIRS_AHEAD)]
    _nothing_more(target, frames.DELIVER)  # no more than REPAIRS_AHEAD out
    # An answer out of order is not the one the hub waits for: nothing moves.
    target.applied(first[1], upto=tx(1).position)
    _nothing_more(operator, frames.REPAIRED)
    done: list[Any] = []
    for delivered in first:
        target.applied(delivered, upto=tx(1).position)
        done.append(operator.recv(kind=frames.REPAIRED).header["id"])
    assert done == [f"r{n}" for n in range(REPAIRS_AHEAD)]
    rest = _repairs(target, COUNT - REPAIRS_AHEAD)
    assert _ids(rest) == [tx(50 + n).position.offset for n in range(REPAIRS_AHEAD, COUNT)]
    for delivered in rest:
        target.applied(delivered, upto=tx(1).position)
    assert [operator.recv(kind=frames.REPAIRED).header["id"] for _ in rest] == [
        f"r{n}" for n in range(REPAIRS_AHEAD, COUNT)
    ]


def test_a_target_that_reconnects_gets_every_unanswered_repair_again(hub: HubThread) -> None:
    _, target, operator = _site(hub)
    first = _repairs(target, REPAIRS_AHEAD)
    target.applied(first[0], upto=tx(1).position)
    assert operator.recv(kind=frames.REPAIRED).header["id"] == "r0"
    target.close()  # lost with r1, r2, ... applied or not: the hub cannot know
    again = Peer(hub.endpoint)
    again.hello("t1", ["target"], checkpoints={"o1": tx(1).position.to_json()})
    resent = _repairs(again, REPAIRS_AHEAD)
    assert _ids(resent) == [tx(50 + n).position.offset for n in range(1, REPAIRS_AHEAD + 1)]
