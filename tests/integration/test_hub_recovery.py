"""A hub that lost its log, or holds less than a target needs: the targets' checkpoints decide
where capture starts, an older checkpoint restarts capture, and a binlog that no longer has
it blocks that target with "reseed needed" — never a silent start from the current position
(issue 6, defect 2: a hub restarted on an empty data dir once lost 241 rows without a word).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from binlogsync.config import HubConfig, Route, Security
from binlogsync.hub.log import HubLog, StagedPart
from binlogsync.hub.server import Hub
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync.transport import frames
from hubkit import HubThread, Peer, body, hello_header, tx

pytestmark = pytest.mark.integration

OLDEST = Position("binlog.000001", 4)  # what the origin's binlog still has
PURGED = Position("binlog.000002", 4)  # … once binlog.000001 was purged


def _checkpoint(n: int, epoch: str = "lost-epoch") -> dict[str, Any]:
    return {**tx(n).position.to_json(), "epoch": epoch}


def _positions(delivery: frames.Message) -> list[Position]:
    return [t.position for t in delivery.transactions()]


def test_a_new_log_starts_capture_at_the_oldest_target_checkpoint(tmp_path: Path) -> None:
    with HubThread(tmp_path) as h:
        target = Peer(h.endpoint)
        target.hello("t1", ["target"], checkpoints={"o1": _checkpoint(3)})
        origin = Peer(h.endpoint)
        # The origin is at tx 9 now; a hub that believed it would lose 4..9.
        welcome = origin.hello("o1", ["origin"], start=tx(9).position, oldest=OLDEST)
        assert welcome.header["resume"] == tx(3).position
        assert welcome.header["epoch"] == h.hub.log.epoch != "lost-epoch"
        origin.batch("o1", 1, [body(tx(i)) for i in range(4, 10)], after=tx(3).position)
        origin.recv(kind=frames.ACK)
        delivered = target.recv(kind=frames.DELIVER)
        assert _positions(delivered) == [tx(i).position for i in range(4, 10)]
        assert delivered.header["after"] == tx(3).position


def test_a_target_reporting_an_older_checkpoint_restarts_capture(tmp_path: Path) -> None:
    with HubThread(tmp_path) as h:
        origin = Peer(h.endpoint)
        welcome = origin.hello("o1", ["origin"], start=tx(6).position, oldest=OLDEST)
        assert welcome.header["resume"] == tx(6).position  # no target has spoken yet
        origin.batch("o1", 1, [body(tx(7)), body(tx(8))], after=tx(6).position)
        origin.recv(kind=frames.ACK)
        target = Peer(h.endpoint)
        target.hello("t1", ["target"], checkpoints={"o1": _checkpoint(3)})
        kicked = origin.recv(kind=frames.ERROR)
        assert kicked.header["code"] == "hello-first"
        again = origin.hello("o1", ["origin"], start=tx(8).position, oldest=OLDEST)
        assert again.header["resume"] == tx(3).position
        origin.batch("o1", 2, [body(tx(i)) for i in range(4, 9)], after=tx(3).position)
        origin.recv(kind=frames.ACK)
        got: list[Position] = []
        while len(got) < 5:
            delivery = target.recv(kind=frames.DELIVER)
            got += _positions(delivery)
            target.applied(delivery)
        assert got == [tx(i).position for i in range(4, 9)]


def test_a_checkpoint_the_binlog_no_longer_has_blocks_the_target_reseed_needed(
    tmp_path: Path,
) -> None:
    routes = (Route("o1", ("t1", "t2"), TableFilter(("*.*",))),)
    with HubThread(tmp_path, routes=routes) as h:
        late, fine = Peer(h.endpoint), Peer(h.endpoint)
        late.hello("t1", ["target"], checkpoints={"o1": _checkpoint(3)})
        fine.hello("t2", ["target"], checkpoints={"o1": {**PURGED.to_json(), "epoch": "x"}})
        origin = Peer(h.endpoint)
        welcome = origin.hello("o1", ["origin"], start=PURGED, oldest=PURGED)
        assert welcome.header["resume"] == PURGED  # t1's checkpoint is purged: not there
        after = [tx(i, file="binlog.000002") for i in (1, 2)]
        origin.batch("o1", 1, [body(t) for t in after], after=PURGED)
        origin.recv(kind=frames.ACK)
        assert _positions(fine.recv(kind=frames.DELIVER)) == [t.position for t in after]
        with pytest.raises(TimeoutError):  # t1 gets nothing: it would skip binlog.000001
            late.recv(timeout=0.5, kind=frames.DELIVER)
        t1 = next(t for t in h.hub.status()["targets"] if t["target"] == "t1")
        assert "reseed needed" in t1["blocked"] and str(tx(3).position) in t1["blocked"]


class ManualHub:
    """A hub whose turns the test runs: messages are read off its socket by the test and
    handed to `Hub.handle` in the order the test chooses, so two peers' messages can share
    one turn deterministically."""

    def __init__(self, data_dir: Path) -> None:
        config = HubConfig(
            name="hub",
            bind="tcp://127.0.0.1:*",
            data_dir=data_dir,
            routes=(Route("o1", ("t1",), TableFilter(("*.*",))),),
            security=Security(),
            heartbeat_interval=0.2,
        )
        self.hub = Hub(config)
        # Every turn's batches are stored at its end (no group commit across turns), so the
        # test can look at the log right after a turn.
        self.hub.origins.commit_interval = 0.0
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.bind(config.bind)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.hub._sock = self.sock

    def turn(self, count: int, first: bytes | None = None) -> None:
        """Read `count` messages and handle them in one turn, those of kind `first` first
        (each peer's own messages stay in their order)."""
        received: list[list[zmq.Frame]] = []
        deadline = time.monotonic() + 5
        while len(received) < count:
            if not self.sock.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                raise TimeoutError(f"{len(received)} of {count} messages arrived")
            received.append(self.sock.recv_multipart(copy=False))
        if first is not None:  # identity, version, kind, …
            received.sort(key=lambda parts: parts[2].bytes != first)
        self.hub.handle(received)

    def close(self) -> None:
        self.sock.close(linger=0)
        self.hub.log.close()


def test_batches_in_the_turn_that_restarts_capture_are_not_stored_past_the_hole(
    tmp_path: Path,
) -> None:
    """The origin's BATCH and a target's older checkpoint read in one turn. The batch
    continues the head, so it is stored; capture restarts only once the origin, asked, says
    HELLO (and so tells what its binlog still has). A batch it sent before that HELLO, read in
    the same turn, continues the old head: stored after the restart it would leave 4..10 out
    for good."""
    h = ManualHub(tmp_path)
    try:
        origin, target = Peer(h.endpoint), Peer(h.endpoint)
        origin.send(
            frames.HELLO, hello_header("o1", ["origin"], start=tx(6).position, oldest=OLDEST)
        )
        h.turn(1)
        assert origin.recv(kind=frames.WELCOME).header["resume"] == tx(6).position
        origin.batch("o1", 1, [body(tx(7)), body(tx(8))], after=tx(6).position)
        h.turn(1)
        origin.recv(kind=frames.ACK)
        # One turn: the origin's next batch first, then the target's HELLO at tx 3.
        origin.batch("o1", 2, [body(tx(9)), body(tx(10))], after=tx(8).position)
        checkpoints = {"o1": _checkpoint(3)}
        target.send(frames.HELLO, hello_header("t1", ["target"], checkpoints=checkpoints))
        h.turn(2, first=frames.BATCH)
        assert h.hub.log.head("o1") == tx(10).position  # no restart yet: no hole either
        assert origin.recv(kind=frames.ERROR).header["code"] == "hello-first"
        t1 = next(t for t in h.hub.status()["targets"] if t["target"] == "t1")
        assert t1["blocked"].startswith("waiting for origin o1 to say HELLO"), t1
        # The origin's HELLO restarts capture; a batch of its old run in the same turn,
        # before the HELLO, is not stored.
        origin.batch("o1", 3, [body(tx(11))], after=tx(10).position)
        origin.send(
            frames.HELLO, hello_header("o1", ["origin"], start=tx(11).position, oldest=OLDEST)
        )
        h.turn(2, first=frames.BATCH)
        assert origin.recv(kind=frames.WELCOME).header["resume"] == tx(3).position
        assert h.hub.log.head("o1") == tx(3).position, "a batch was stored past the restart"
        with pytest.raises(TimeoutError):
            target.recv(timeout=0.3, kind=frames.DELIVER)
    finally:
        h.close()


def test_a_binlog_purged_since_the_origins_last_hello_blocks_the_target_not_capture(
    tmp_path: Path,
) -> None:
    """The origin said at its HELLO that its binlog starts at OLDEST; binlog.000001 was purged
    since. A target then reports a checkpoint in binlog.000001: the hub asks the origin
    before it restarts anything, and the answer blocks that target with "reseed needed"
    while capture goes on. (Restarting on the stale answer dropped the log and sent capture
    to a purged position, where it halted for every target.)"""
    routes = (Route("o1", ("t1", "t2"), TableFilter(("*.*",))),)
    with HubThread(tmp_path, routes=routes) as h:
        fine = Peer(h.endpoint)
        fine.hello("t2", ["target"], checkpoints={"o1": {**PURGED.to_json(), "epoch": "x"}})
        origin = Peer(h.endpoint)
        welcome = origin.hello("o1", ["origin"], start=PURGED, oldest=OLDEST)
        assert welcome.header["resume"] == PURGED
        after = [tx(i, file="binlog.000002") for i in (1, 2)]
        origin.batch("o1", 1, [body(t) for t in after], after=PURGED)
        origin.recv(kind=frames.ACK)
        fine.applied(fine.recv(kind=frames.DELIVER))
        late = Peer(h.endpoint)
        late.hello("t1", ["target"], checkpoints={"o1": _checkpoint(3)})
        assert origin.recv(kind=frames.ERROR).header["code"] == "hello-first"
        again = origin.hello("o1", ["origin"], start=after[-1].position, oldest=PURGED)
        assert again.header["resume"] == after[-1].position  # no restart
        t1 = next(t for t in h.hub.status()["targets"] if t["target"] == "t1")
        assert "reseed needed" in t1["blocked"] and str(tx(3).position) in t1["blocked"]
        more = tx(3, file="binlog.000002")
        origin.batch("o1", 2, [body(more)], after=after[-1].position)
        origin.recv(kind=frames.ACK)
        assert _positions(fine.recv(kind=frames.DELIVER)) == [more.position]
        with pytest.raises(TimeoutError):
            late.recv(timeout=0.3, kind=frames.DELIVER)


def test_a_transaction_half_compacted_is_below_the_floor_and_never_sent_half(
    tmp_path: Path,
) -> None:
    """Compaction deletes a large transaction's parts a few per step; from the first step the
    floor covers it, so a target that reports an older checkpoint afterwards is blocked or
    restarted, not sent the parts that are left (the hub once died there on a LookupError)."""
    store = HubLog(tmp_path)
    begin, end = tx(1).position, tx(2).position
    store.register("o1", OLDEST)
    staged = [
        StagedPart(begin.key, n, b"p%d" % n, end if n == 5 else None, 1.0) for n in range(1, 6)
    ]
    store.append("o1", staged)
    dropped, done = store.compact("o1", end, parts=2)
    assert (dropped, done) == (0, False)
    assert store.floor("o1") == end, "the floor must cover a transaction with parts deleted"
    store.close()
    with HubThread(tmp_path) as h:
        target = Peer(h.endpoint)
        target.hello("t1", ["target"], checkpoints={"o1": OLDEST.to_json()})
        with pytest.raises(TimeoutError):
            target.recv(timeout=0.5, kind=frames.DELIVER)
        t1 = h.hub.status()["targets"][0]
        assert "waiting for origin o1" in t1["blocked"], t1
        assert h.hub.error is None and h.hub.alive


def test_batches_waiting_for_a_group_commit_reach_targets_but_never_the_floor(
    tmp_path: Path,
) -> None:
    """Group commit: a batch that arrives soon after the origin's last commit waits for the
    next one, but is forwarded to the up-to-date target at once. The target may apply it
    before the hub has stored it; compaction then must not raise the floor past the head
    (the log would claim to hold everything after a position it does not hold yet)."""
    h = ManualHub(tmp_path)
    try:
        origin, target = Peer(h.endpoint), Peer(h.endpoint)
        origin.send(
            frames.HELLO, hello_header("o1", ["origin"], start=tx(6).position, oldest=OLDEST)
        )
        h.turn(1)
        origin.recv(kind=frames.WELCOME)
        target.send(
            frames.HELLO, hello_header("t1", ["target"], checkpoints={"o1": _checkpoint(6)})
        )
        h.turn(1)
        target.recv(kind=frames.WELCOME)
        origin.batch("o1", 1, [body(tx(7))], after=tx(6).position)
        h.turn(1)  # the first commit of a quiet origin waits for nothing
        assert origin.recv(kind=frames.ACK).header["seq"] == 1
        assert _positions(target.recv(kind=frames.DELIVER)) == [tx(7).position]
        h.hub.origins.commit_interval = 3600.0  # from now on, batches wait
        origin.batch("o1", 2, [body(tx(8))], after=tx(7).position)
        origin.batch("o1", 3, [body(tx(9))], after=tx(8).position)
        h.turn(2)
        assert h.hub.log.head("o1") == tx(7).position, "stored before its commit was due"
        got: list[Position] = []
        while len(got) < 2:  # forwarded before they are stored
            delivery = target.recv(kind=frames.DELIVER)
            got += _positions(delivery)
            target.applied(delivery)
            h.turn(1)
        assert got == [tx(8).position, tx(9).position]
        with pytest.raises(TimeoutError):
            origin.recv(timeout=0.2, kind=frames.ACK)  # not durable: not acknowledged
        h.hub.delivery.compact()
        floor, head = h.hub.log.floor("o1"), h.hub.log.head("o1")
        assert (
            floor is not None and head is not None and floor.key <= head.key == tx(7).position.key
        )
        assert h.hub.origins.due(time.monotonic()) == []
        due = h.hub.origins.next_due()  # the hub's loop sleeps until then, at most
        assert due is not None and h.hub.origins.due(due) == ["o1"]
        h.hub.origins.commit_interval = 0.0
        h.hub._store()
        assert h.hub.origins.next_due() is None
        ack = origin.recv(kind=frames.ACK)  # one ACK for both batches, after their commit
        assert (ack.header["seq"], ack.header["upto"]) == (3, tx(9).position)
        assert h.hub.log.head("o1") == tx(9).position
        with pytest.raises(TimeoutError):
            origin.recv(timeout=0.2, kind=frames.ACK)
    finally:
        h.close()
