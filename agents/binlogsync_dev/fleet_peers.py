"""Synthetic origin and target agents for `bench fleet`: many peers in one process, no database.

Each peer is one DEALER socket that speaks the real protocol (BLS4) to the real hub, as the
client agent does, but without a database behind it:

    origin   says HELLO, then "captures" sysbench-shaped transactions (4 row changes, ~700
             bytes packed) at a steady rate (or as fast as the window allows, rate 0), stamped
             with the wall clock as their commit time, and ships them as the origin agent
             does: at most WINDOW BATCHes unacknowledged, and a partial BATCH waits while one
             is in flight (Nagle's rule, client/origin.py)
    target   says HELLO, answers every DELIVER with APPLIED at once, and notes each
             transaction's delivery latency (now - its commit time: the peers share the clock)

One process drives all its peers from one poller, so a few processes stand for hundreds of
agents. A process reports to the bench (fleet_bench.py) over a multiprocessing pipe: "ready"
once every peer is welcomed, then its figures when told to stop.
"""

from __future__ import annotations

import array
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import msgpack
import zmq

from binlogsync.codec import pack, unpack
from binlogsync.model import Change
from binlogsync.transport import frames

WINDOW = 8  # BATCHes unacknowledged, as the origin agent
BATCH_TRANSACTIONS = 500  # a full BATCH, as the origin agent's default
HEARTBEAT = 1.0  # seconds of silence before a PING
TICK = 0.005  # seconds between two rounds of "capture" in a paced run
COLUMNS = ("id", "k", "c", "pad")
MAX_BYTES = 1 << 26


def _changes() -> bytes:
    """The changes of one oltp_write_only transaction, packed once (every peer sends the same
    rows: the hub neither decodes nor compares them, it checks and forwards the bytes)."""
    row = (7, 7, "c" * 119, "p" * 59)
    bumped = (7, 8, "c" * 119, "p" * 59)
    changes = (
        Change("update", "sbtest", "sbtest1", COLUMNS, (row,), (bumped,)),
        Change("update", "sbtest", "sbtest1", COLUMNS, (bumped,), ((7, 8, "C" * 119, "p" * 59),)),
        Change("delete", "sbtest", "sbtest1", COLUMNS, (bumped,), ()),
        Change("insert", "sbtest", "sbtest1", COLUMNS, (), (row,)),
    )
    packed: bytes = pack([c.to_wire() for c in changes])
    return packed


CHANGES = _changes()


def position(server: int, n: int) -> dict[str, Any]:
    """The GTID position after an origin's n-th transaction (JSON form, as headers carry it)."""
    return {"file": "binlog.000001", "offset": 4 + n * 700, "gtid": f"0-{server}-{n}",
            "scheme": "gtid"}  # fmt: skip


def body(server: int, n: int, commit_time: float) -> bytes:
    """One whole transaction as the origin agent packs it: [position, commit time, changes]."""
    where = ["binlog.000001", 4 + n * 700, f"0-{server}-{n}", "gtid"]
    head: bytes = msgpack.packb(where) + msgpack.packb(commit_time)
    return b"\x93" + head + CHANGES


def hello(name: str, roles: list[str], server: int) -> dict[str, Any]:
    return {
        "host": name,
        "roles": roles,
        "checkpoints": {},
        "start": position(server, 0) if "origin" in roles else None,
        "oldest": {"file": "binlog.000001", "offset": 4, "gtid": None},
        "agent": "bench-fleet",
        "max_message_bytes": MAX_BYTES,
    }


@dataclass
class Peer:
    name: str
    sock: zmq.Socket[bytes]
    roles: list[str]
    server: int = 0
    welcomed: bool = False
    last_sent: float = 0.0
    # origin
    made: int = 0  # transactions "captured" (numbered 1..made)
    phase_base: int = 0  # `made` when the current phase began
    pending: deque[bytes] = field(default_factory=deque)
    shipped: dict[str, Any] | None = None  # the `after` of the next BATCH
    inflight: deque[tuple[int, int]] = field(default_factory=deque)  # (seq, transactions)
    seq: int = 0
    acked: int = 0
    # target
    received: int = 0

    def send(self, kind: bytes, header: dict[str, Any], bodies: list[bytes] | None = None) -> None:
        self.sock.send_multipart(frames.encode(kind, header, bodies or ()), zmq.NOBLOCK)
        self.last_sent = time.monotonic()


class PeerProcess:
    """All the peers of one process and its loop."""

    def __init__(self, endpoint: str, origins: list[tuple[str, int]], targets: list[str]) -> None:
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.poller = zmq.Poller()
        self.peers: dict[zmq.Socket[bytes], Peer] = {}
        for name, server in origins:
            self._add(endpoint, Peer(name, self._socket(endpoint), ["origin"], server))
        for name in targets:
            self._add(endpoint, Peer(name, self._socket(endpoint), ["target"]))
        self.origins = [p for p in self.peers.values() if "origin" in p.roles]
        self.targets = [p for p in self.peers.values() if "target" in p.roles]
        # Figures of the measured window.
        self.latencies = array.array("d")  # seconds, one per transaction committed in it
        self.delivered_in_window = 0
        self.window = (0.0, 0.0)
        self.rate = 0.0
        self.began = 0.0
        self.at_measure = self.at_end = (0, 0)

    def _socket(self, endpoint: str) -> zmq.Socket[bytes]:
        sock = self.context.socket(zmq.DEALER)
        sock.linger = 0
        sock.sndhwm = sock.rcvhwm = 100_000
        sock.maxmsgsize = MAX_BYTES + 65536
        sock.connect(endpoint)
        return sock

    def _add(self, endpoint: str, peer: Peer) -> None:
        self.peers[peer.sock] = peer
        self.poller.register(peer.sock, zmq.POLLIN)

    def close(self) -> None:
        for sock in self.peers:
            sock.close(linger=0)
        self.context.term()

    # -- start-up ---------------------------------------------------------------------------
    def welcome_all(self, timeout: float) -> None:
        for peer in self.peers.values():
            peer.send(frames.HELLO, hello(peer.name, peer.roles, peer.server))
        deadline = time.monotonic() + timeout
        while not all(p.welcomed for p in self.peers.values()):
            if time.monotonic() > deadline:
                missing = [p.name for p in self.peers.values() if not p.welcomed][:5]
                raise TimeoutError(f"no WELCOME for {missing} within {timeout:.0f} s")
            self.turn(1.0, generate=False)

    # -- the loop ---------------------------------------------------------------------------
    def run(self, rate: float, start: float, measure: float, end: float, drain: float) -> None:
        """Generate from `start` (wall clock) until `end`, at `rate` transactions/s per origin
        (0: as fast as the window allows); note latencies of transactions committed from
        `measure` on; after `end`, keep answering until every transaction is acknowledged and
        delivered or `drain` seconds pass."""
        self.window = (measure, end)
        self.rate = rate
        self.latencies = array.array("d")
        self.delivered_in_window = 0
        for origin in self.origins:
            origin.phase_base = origin.made
        while time.time() < start:
            self.turn(min(0.05, max(0.0, start - time.time())), generate=False)
        self.began = time.time()
        while time.time() < measure:
            self.turn(TICK if rate else 0.001, generate=True)
        self.at_measure = self._counts()
        while time.time() < end:
            self.turn(TICK if rate else 0.001, generate=True)
        self.at_end = self._counts()
        quiet_since = time.monotonic()
        limit = time.monotonic() + drain
        # A process of targets only cannot know what is still to come: it waits for a longer
        # quiet spell (a busy hub may pause its deliveries for a moment), not for its origins.
        quiet = 0.5 if self.origins else 5.0
        while time.monotonic() < limit:
            busy = self.turn(0.05, generate=False)
            settled = all(not o.inflight and not o.pending for o in self.origins)
            if busy:
                quiet_since = time.monotonic()
            elif settled and time.monotonic() - quiet_since > quiet:
                break

    def _counts(self) -> tuple[int, int]:
        """(transactions made, transactions acknowledged) so far, all origins."""
        return sum(o.made for o in self.origins), sum(o.acked for o in self.origins)

    def turn(self, timeout: float, generate: bool) -> bool:
        """One round: read what arrived, "capture" and ship; True when a DELIVER arrived (the
        hub's answers to our PINGs come every second and are not work still to come)."""
        ready = dict(self.poller.poll(int(timeout * 1000)))
        received = sum(t.received for t in self.targets)
        for sock in ready:
            self._read(self.peers[sock])
        if generate:
            now = time.time()
            for origin in self.origins:
                if origin.welcomed:
                    self._capture(origin, now)
        for origin in self.origins:
            if origin.welcomed:
                self._ship(origin)
        now_mono = time.monotonic()
        for peer in self.peers.values():
            if peer.welcomed and now_mono - peer.last_sent > HEARTBEAT:
                peer.send(frames.PING, {})
        return sum(t.received for t in self.targets) != received

    def _capture(self, origin: Peer, now: float) -> None:
        if self.rate:
            due = int((now - self.began) * self.rate) - (origin.made - origin.phase_base)
        else:  # flat out: keep the window full of full BATCHes
            room = (WINDOW - len(origin.inflight)) * BATCH_TRANSACTIONS - len(origin.pending)
            due = max(0, room)
        for _ in range(due):
            origin.made += 1
            origin.pending.append(body(origin.server, origin.made, now))

    def _ship(self, origin: Peer) -> None:
        while origin.pending and len(origin.inflight) < WINDOW:
            if origin.inflight and len(origin.pending) < BATCH_TRANSACTIONS:
                return  # Nagle: a partial BATCH waits for the ACK of the one in flight
            take = min(len(origin.pending), BATCH_TRANSACTIONS)
            bodies = [origin.pending.popleft() for _ in range(take)]
            origin.seq += 1
            header = {"origin": origin.name, "seq": origin.seq, "after": origin.shipped}
            origin.send(frames.BATCH, header, bodies)
            origin.inflight.append((origin.seq, take))
            origin.shipped = position(origin.server, origin.made - len(origin.pending))

    def _read(self, peer: Peer) -> None:
        while True:
            try:
                parts = peer.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            kind = parts[1]
            if kind == frames.DELIVER:
                self._deliver(peer, parts)
            elif kind == frames.ACK:
                seq = unpack(parts[2])["seq"]
                while peer.inflight and peer.inflight[0][0] <= seq:
                    peer.acked += peer.inflight.popleft()[1]
            elif kind == frames.WELCOME:
                header = unpack(parts[2])
                peer.welcomed = True
                if "origin" in peer.roles:
                    resume = header.get("resume")
                    peer.made = int(resume["gtid"].rsplit("-", 1)[1]) if resume else 0
                    peer.shipped = resume
                    peer.pending.clear()
                    peer.inflight.clear()
            elif kind == frames.ERROR:
                header = unpack(parts[2])
                if header.get("code") == "hello-first":
                    peer.welcomed = False
                    peer.send(frames.HELLO, hello(peer.name, peer.roles, peer.server))

    def _deliver(self, peer: Peer, parts: list[bytes]) -> None:
        header = unpack(parts[2])
        now = time.time()
        first, last = self.window
        bodies = msgpack.unpackb(parts[3]) if len(parts) > 3 else []  # one frame (BLS4)
        for raw in bodies:
            reader = msgpack.Unpacker()
            reader.feed(raw)
            reader.read_array_header()
            reader.skip()  # the position
            committed = reader.unpack()
            if first <= committed <= last:
                self.latencies.append(now - committed)
        peer.received += len(bodies)
        if first <= now <= last:
            self.delivered_in_window += len(bodies)
        answer = {"origin": header["origin"], "seq": header["seq"], "upto": header["upto"]}
        peer.send(frames.APPLIED, answer)

    def figures(self) -> dict[str, Any]:
        first, last = self.window
        return {
            "made_in_window": self.at_end[0] - self.at_measure[0],
            "acked_in_window": self.at_end[1] - self.at_measure[1],
            "unacked": sum(len(o.pending) + sum(n for _s, n in o.inflight) for o in self.origins),
            "received": sum(t.received for t in self.targets),
            "delivered_in_window": self.delivered_in_window,
            "latencies": self.latencies.tobytes(),
            "window": [first, last],
        }


def serve(
    pipe: Connection, endpoint: str, origins: list[tuple[str, int]], targets: list[str]
) -> None:
    """A peer process (multiprocessing's target): welcome every peer, say "ready", run the
    phase the bench sends, send back the figures; until told "quit"."""
    process = PeerProcess(endpoint, origins, targets)
    try:
        process.welcome_all(120.0)
        pipe.send("ready")
        while True:
            order = pipe.recv()
            if order == "quit":
                return
            process.run(**order)
            pipe.send(process.figures())
    finally:
        process.close()
