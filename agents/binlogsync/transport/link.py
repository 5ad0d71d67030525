"""A client agent's connection to the hub: one DEALER socket, heartbeats, reconnects.

As in the ZeroMQ Guide's Paranoid Pirate: any message from the hub counts as a sign of life;
when nothing is sent for one heartbeat interval we send PING (the paper's `3#id`) and the hub
answers PONG (`4#id`); when nothing is heard for `liveness` intervals the socket is thrown away
and a new one connects, with back-off, and the agent says HELLO again.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import zmq

from ..config import ClientConfig
from ..errors import ProtocolError
from . import curve, frames
from .frames import Message

log = logging.getLogger("binlogsync.link")


class HubLink:
    def __init__(self, context: zmq.Context, config: ClientConfig) -> None:
        self.context, self.config = context, config
        self.socket: zmq.Socket | None = None
        self.last_heard = self.last_sent = 0.0

    def connect(self) -> zmq.Socket:
        self.close()
        sock = self.context.socket(zmq.DEALER)
        sock.linger = 0
        sock.maxmsgsize = self.config.max_message_bytes + 65536
        sock.sndhwm = sock.rcvhwm = 100_000
        sock.reconnect_ivl = 100
        sock.reconnect_ivl_max = 2000
        security = self.config.security
        if security.enabled:
            assert security.secret_key_file and security.hub_public_key_file
            curve.secure_client(sock, security.secret_key_file, security.hub_public_key_file)
        sock.connect(self.config.hub)
        self.socket = sock
        self.last_heard = time.monotonic()
        return sock

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close(linger=0)
            self.socket = None

    def send(self, kind: bytes, header: dict[str, Any], bodies: list[bytes] = ()) -> None:  # type: ignore[assignment]
        assert self.socket is not None
        self.socket.send_multipart(frames.encode(kind, header, bodies))
        self.last_sent = time.monotonic()

    def receive(self) -> list[Message]:
        """Everything waiting on the socket; malformed messages are logged and dropped."""
        assert self.socket is not None
        messages: list[Message] = []
        while True:
            try:
                parts = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return messages
            self.last_heard = time.monotonic()
            try:
                messages.append(frames.decode(parts, self.config.max_message_bytes))
            except ProtocolError as exc:
                log.warning("dropped a malformed message from the hub: %s", exc)

    def ping_due(self, now: float) -> bool:
        return now - self.last_sent >= self.config.heartbeat_interval

    def silent_for(self, now: float) -> float:
        return now - self.last_heard

    def dead(self, now: float) -> bool:
        limit = self.config.heartbeat_interval * self.config.heartbeat_liveness
        return self.silent_for(now) > limit
