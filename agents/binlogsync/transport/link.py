"""A client agent's connection to the hub: one DEALER socket for the agent's life.

libzmq reconnects the TCP connection by itself (every 100 ms, backing off to half a heartbeat
interval), so the socket is never thrown away: the agent only says HELLO again, at once when
the connection comes back (the socket monitor tells it) and then once per heartbeat interval
until WELCOME. `immediate` keeps messages from queueing for a hub that is not there, so a hub
that comes back after an hour gets one HELLO, not an hour of them.

As in the ZeroMQ Guide's Paranoid Pirate, any message from the hub counts as a sign of life;
when nothing is sent for one heartbeat interval the agent sends PING (the paper's `3#id`) and
the hub answers PONG (`4#id`); `heartbeat_liveness` silent intervals mean the hub is gone.
The interval for PING is the shorter of the client's own and the one the hub announces in
WELCOME (`use_hub_heartbeat`), so a hub with a shorter liveness never takes the client for
gone between two PINGs.

libzmq reconnects by itself after a connection drops, but not after a handshake the hub
refused outright (ZAP denied the key, or a protocol error such as CURVE on one side only): it
gives that endpoint up for the socket's life. The link then connects again itself
(`redial`), with back-off up to 30 s, so a client whose key is authorised later, or a hub
whose security is fixed later, is found without restarting the client.

A connection that drops is a new connection when it comes back: the hub's ROUTER gives it a
new routing id and knows nothing of it until HELLO. `events` says so (`went_down`), and the
agent says HELLO before anything else, rather than sending messages the hub must refuse.

The monitor also tells apart what looks the same from the outside — "no answer" — so the
agent can say which it is (`diagnosis`): nothing listens at the endpoint (connection
refused, retrying), something listens but closes the connection before the ZeroMQ handshake
(not a binlogsync hub), a CURVE handshake that fails (the hub's public key is not the one in
hub_public_key_file, or this client's key is not authorised), or a hub that accepted the
connection and is silent.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import zmq

from ..config import ClientConfig
from ..errors import ProtocolError
from ..runloop import Backoff
from . import curve, frames, sockets
from .frames import Message
from .limits import FRAME_ROOM

log = logging.getLogger("binlogsync.link")

_EVENTS = (
    zmq.EVENT_CONNECTED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
# After these libzmq ends the session and does not reconnect that endpoint by itself.
_GIVEN_UP = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
_REDIAL_MAX = 30.0


@dataclass(frozen=True, slots=True)
class LinkChange:
    """What the socket monitor reported since it was last read."""

    came_up: bool = False  # a connection (and its handshake) is established
    went_down: bool = False  # an established connection dropped


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why the hub does not answer: a short state (for metrics) and a sentence (for the log)."""

    state: str  # connecting | refused | dropped | handshake_failed | silent
    text: str


class HubLink:
    def __init__(self, context: zmq.Context[Any], config: ClientConfig) -> None:
        self.context, self.config = context, config
        self.socket: zmq.Socket[bytes] | None = None
        self.monitor: zmq.Socket[bytes] | None = None
        self.last_heard = self.last_sent = 0.0
        self.up = False  # a connection (and its handshake) is established
        self.refused = 0  # connection attempts that found nothing listening, since last up
        self.dropped = 0  # connections closed by the peer before any handshake, since last up
        self.handshake_failures = 0  # handshakes that failed, since last up
        self.interval = config.heartbeat_interval  # between PINGs (see use_hub_heartbeat)
        self._connecting = False  # TCP connected, handshake not done yet
        self.redial_at: float | None = None  # connect again then (libzmq gave the endpoint up)
        self._redial = Backoff(max(0.1, config.heartbeat_interval), _REDIAL_MAX)

    @property
    def endpoint(self) -> str:
        return self.config.hub

    def open(self) -> None:
        sock: zmq.Socket[bytes] = self.context.socket(zmq.DEALER)
        sock.linger = 0
        sock.immediate = 1
        sock.maxmsgsize = self.config.max_message_bytes + FRAME_ROOM
        sock.sndhwm = sock.rcvhwm = 100_000
        sock.reconnect_ivl = 100
        sock.reconnect_ivl_max = max(100, int(self.config.heartbeat_interval * 500))
        security = self.config.security
        if security.enabled:
            assert security.secret_key_file and security.hub_public_key_file
            curve.secure_client(sock, security.secret_key_file, security.hub_public_key_file)
        self.monitor = sock.get_monitor_socket(_EVENTS)
        sock.connect(self.config.hub)
        self.socket = sock
        self.last_heard = time.monotonic()

    def close(self) -> None:
        if self.socket is not None:
            if self.monitor is not None:
                self.socket.disable_monitor()
                self.monitor.close(linger=0)
                self.monitor = None
            self.socket.close(linger=0)
            self.socket = None

    def send(self, kind: bytes, header: dict[str, Any], bodies: list[bytes] | None = None) -> bool:
        """Send now, or return False when no connection to the hub is up (nothing queues)."""
        assert self.socket is not None
        try:
            sockets.send(self.socket, frames.encode(kind, header, bodies or ()))
        except zmq.Again:
            return False
        self.last_sent = time.monotonic()
        return True

    def receive(self) -> list[Message]:
        """Everything waiting on the socket; malformed messages are logged and dropped."""
        assert self.socket is not None
        messages: list[Message] = []
        while True:
            try:
                parts = self.socket.recv_multipart(sockets.NOBLOCK)
            except zmq.Again:
                return messages
            self.last_heard = time.monotonic()
            try:
                messages.append(frames.decode(parts, self.config.max_message_bytes))
            except ProtocolError as exc:
                log.warning("dropped a malformed message from the hub: %s", exc)

    def events(self) -> LinkChange:
        """Read the socket monitor: did a connection come up, did an established one drop?"""
        came_up = went_down = False
        while self.monitor is not None:
            try:
                kind = sockets.monitor_event(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                break
            if kind == zmq.EVENT_CONNECT_RETRIED:
                self.refused += 1
            elif kind == zmq.EVENT_CONNECTED:
                self._connecting = True
            elif kind & _FAILED:
                self.handshake_failures += 1
                self.up = self._connecting = False
                if kind & _GIVEN_UP and self.redial_at is None:
                    self.redial_at = time.monotonic() + self._redial.next()
            elif kind == zmq.EVENT_DISCONNECTED:
                if self.up:
                    went_down = True
                elif self._connecting:
                    self.dropped += 1  # closed before the handshake: not a ZeroMQ peer?
                self.up = self._connecting = False
            elif kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:  # every mechanism, NULL too
                self.up, came_up, self._connecting = True, True, False
                self.refused = self.dropped = self.handshake_failures = 0
                self.redial_at = None
                self._redial.reset()
        return LinkChange(came_up, went_down)

    def redial(self, now: float) -> bool:
        """Connect again when libzmq gave the endpoint up after a refused handshake and the
        back-off has passed; True when it did."""
        if self.redial_at is None or now < self.redial_at or self.socket is None:
            return False
        self.redial_at = None
        try:
            self.socket.disconnect(self.endpoint)
        except zmq.ZMQError:
            pass  # already gone: libzmq ended the session
        self.socket.connect(self.endpoint)
        log.debug("connecting to %s again after a refused handshake", self.endpoint)
        return True

    def diagnosis(self) -> Diagnosis:
        """Why the hub does not answer, as far as this side can tell."""
        where = f"the hub at {self.endpoint}"
        if self.handshake_failures:
            if not self.config.security.enabled:
                return Diagnosis(
                    "handshake_failed",
                    f"the ZeroMQ handshake with {where} failed {self.handshake_failures} "
                    "time(s): does the hub use CURVE? Then configure [security] here too",
                )
            return Diagnosis(
                "handshake_failed",
                f"{where} refused the CURVE handshake {self.handshake_failures} time(s): its "
                "public key is not the one in security.hub_public_key_file, or this client's "
                "public key is not in the hub's authorized_keys_dir",
            )
        if self.up:
            return Diagnosis(
                "silent",
                f"{where} accepted the connection but does not answer (paused or overloaded?)",
            )
        if self.dropped:
            return Diagnosis(
                "dropped",
                f"something at {self.endpoint} accepts connections but closes them before the "
                f"ZeroMQ handshake ({self.dropped} time(s)): is client.hub the hub's port, not "
                "another service's?",
            )
        if self.refused:
            return Diagnosis(
                "refused",
                f"nothing answers at {self.endpoint} ({self.refused} connection attempts "
                "refused): is `binlogsync server` running there, and is client.hub right? "
                "(Not a CURVE key problem: a wrong key would get as far as a handshake.)",
            )
        return Diagnosis(
            "connecting",
            f"no connection to {where} yet: is client.hub right and the port reachable? With "
            "CURVE, a wrong hub_public_key_file looks exactly like this",
        )

    def use_hub_heartbeat(self, hub_interval: float) -> None:
        """PING at the shorter of our interval and the hub's (from WELCOME): the hub takes a
        host for gone after its own liveness, which may be shorter than ours."""
        self.interval = max(0.05, min(self.config.heartbeat_interval, hub_interval))

    def ping_due(self, now: float) -> bool:
        return now - self.last_sent >= self.interval

    def silent_for(self, now: float) -> float:
        return now - self.last_heard

    def dead(self, now: float) -> bool:
        limit = self.config.heartbeat_interval * self.config.heartbeat_liveness
        return self.silent_for(now) > limit
