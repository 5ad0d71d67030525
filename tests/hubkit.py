"""Test kit: a hub running in a thread, and raw DEALER peers that speak the wire protocol."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import zmq

from binlogsync.codec import pack
from binlogsync.config import HubConfig, Route, Security
from binlogsync.hub.server import Hub
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync.transport import frames


def tx(n: int, table: str = "t", schema: str = "shop", file: str = "binlog.000001") -> Transaction:
    change = Change("insert", schema, table, ("id", "v"), (), ((n, f"v{n}"),))
    return Transaction(Position(file, 1000 + n * 10, f"0-1-{n}"), 1_700_000_000.0 + n, (change,))


def body(t: Transaction) -> bytes:
    return pack(t.to_wire())


class HubThread:
    """A hub on a port the OS chooses (`endpoint` once entered)."""

    def __init__(
        self,
        data_dir: Path,
        routes: tuple[Route, ...] | None = None,
        security: Security | None = None,
        bind: str = "tcp://127.0.0.1:*",
        heartbeat_interval: float = 0.2,
        **kwargs: Any,
    ) -> None:
        self.config = HubConfig(
            name="hub",
            bind=bind,
            data_dir=data_dir,
            routes=routes or (Route("o1", ("t1",), TableFilter(("*.*",))),),
            security=security or Security(),
            heartbeat_interval=heartbeat_interval,
            **kwargs,
        )
        self.hub = Hub(self.config)
        self.endpoint = ""

    def __enter__(self) -> HubThread:
        self.hub.start()
        deadline = time.monotonic() + 10
        while not self.hub.bound_endpoint:
            if self.hub.error is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the hub did not start: {self.hub.error}")
            time.sleep(0.005)
        self.endpoint = self.hub.bound_endpoint
        return self

    def __exit__(self, *exc: object) -> None:
        self.hub.stop()
        assert self.hub.join(10), "the hub did not stop within 10 s"


OPEN_PEERS: list[Peer] = []


class Peer:
    def __init__(
        self, endpoint: str, context: zmq.Context | None = None, setup: Any = None
    ) -> None:
        self.context = context or zmq.Context.instance()
        self.sock = self.context.socket(zmq.DEALER)
        self.sock.linger = 0
        if setup is not None:
            setup(self.sock)
        self.sock.connect(endpoint)
        OPEN_PEERS.append(self)

    def send(self, kind: bytes, header: dict[str, Any], bodies: list[bytes] = ()) -> None:  # type: ignore[assignment]
        self.sock.send_multipart(frames.encode(kind, header, bodies))

    def send_raw(self, parts: list[bytes]) -> None:
        self.sock.send_multipart(parts)

    def recv(self, timeout: float = 5.0, kind: bytes | None = None) -> frames.Message:
        """The next message (of `kind`, skipping others such as PONG); fails on timeout."""
        while True:
            if not self.sock.poll(timeout * 1000):
                raise TimeoutError(f"no {kind!r} message within {timeout} s")
            message = frames.decode(self.sock.recv_multipart(), 1 << 26)
            if kind is None or message.kind == kind:
                return message

    def hello(
        self,
        host: str,
        roles: list[str],
        start: Position | None = None,
        checkpoints: dict[str, Any] | None = None,
        oldest: Position | None = None,
        **extra: Any,
    ) -> frames.Message:
        self.send(frames.HELLO, hello_header(host, roles, start, checkpoints, oldest, **extra))
        return self.recv(kind=frames.WELCOME)

    def batch(
        self, origin: str, seq: int, bodies: list[bytes], after: Position | None = None
    ) -> None:
        self.send(frames.BATCH, {"origin": origin, "seq": seq, "after": after}, bodies)

    def applied(self, delivery: frames.Message, upto: Position | None = None) -> None:
        header = delivery.header
        self.send(
            frames.APPLIED,
            {"origin": header["origin"], "seq": header["seq"], "upto": upto or header["upto"]},
        )

    def close(self) -> None:
        self.sock.close(linger=0)


def hello_header(
    host: str,
    roles: list[str],
    start: Position | None = None,
    checkpoints: dict[str, Any] | None = None,
    oldest: Position | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "host": host,
        "roles": roles,
        "checkpoints": checkpoints or {},
        "start": start,
        "oldest": oldest,
        "agent": "test",
        "max_message_bytes": 1 << 26,
        **extra,
    }
