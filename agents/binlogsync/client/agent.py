"""The client agent's run loop: one thread owns the hub link; capture and apply run beside it.

connect → HELLO (checkpoints, start position) → WELCOME → ship / apply / heartbeat …
    ↑                                                    │ hub silent for `liveness`
    └──────────────── new socket, back-off ──────────────┘ intervals, or ERROR hello-first
"""

from __future__ import annotations

import logging
import threading
import time

import zmq

from .. import __version__
from ..capture.preflight import check_origin
from ..config import ClientConfig
from ..errors import BinlogsyncError
from ..metrics import ClientMetrics, serve
from ..runloop import Backoff
from ..transport import frames
from ..transport.link import HubLink
from .origin import OriginRole
from .target import TargetRole

log = logging.getLogger("binlogsync.client")


class ClientAgent:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.metrics = ClientMetrics()
        self.stop_event = threading.Event()
        self.context = zmq.Context()
        self.link = HubLink(self.context, config)
        self.wake_endpoint = f"inproc://wake-{id(self)}"
        self.wake_pull = self.context.socket(zmq.PULL)
        self.wake_pull.linger = 0
        self.wake_pull.bind(self.wake_endpoint)
        self._wake_lock = threading.Lock()
        self._wake_push = self.context.socket(zmq.PUSH)
        self._wake_push.linger = 0
        self._wake_push.connect(self.wake_endpoint)
        self.origin = (
            OriginRole(config.name, config.origin, self.context, self.metrics)
            if config.origin
            else None
        )
        self.target = TargetRole(config.target, self.metrics, self._wake) if config.target else None
        self.welcomed = False

    def _wake(self) -> None:
        with self._wake_lock:  # called from worker threads; a socket is not thread-safe
            try:
                self._wake_push.send(b"", zmq.NOBLOCK)
            except zmq.Again:
                pass  # a wake-up is already pending

    def stop(self) -> None:
        self.stop_event.set()

    # -- lifecycle -------------------------------------------------------------------------
    def preflight(self) -> None:
        """Check the origin's binlog settings before anything connects (raises PreflightError)."""
        if self.config.origin is not None:
            o = self.config.origin
            for warning in check_origin(o.database, o.server_id, o.tables, None):
                log.warning("origin: %s", warning)

    def run(self) -> int:
        http = serve(self.config.metrics, self.metrics.registry)
        roles = [r for r, on in (("origin", self.origin), ("target", self.target)) if on]
        log.info(
            "client %s (%s) connecting to %s", self.config.name, ", ".join(roles), self.config.hub
        )
        try:
            return self._loop(roles)
        finally:
            if self.origin is not None:
                self.origin.close()
            if self.target is not None:
                self.target.close()
            self.link.close()
            self.wake_pull.close(linger=0)
            self._wake_push.close(linger=0)
            self.context.term()
            if http is not None:
                http.shutdown()  # type: ignore[attr-defined]
            log.info("client %s stopped", self.config.name)

    def _hello(self, roles: list[str]) -> None:
        checkpoints = self.target.checkpoints() if self.target else {}
        start = self.origin.start_position() if self.origin else None
        self.link.send(
            frames.HELLO,
            {
                "host": self.config.name,
                "roles": roles,
                "checkpoints": checkpoints,
                "start": start,
                "agent": __version__,
            },
        )
        self.welcomed = False

    def _reconnect(self, roles: list[str], why: str) -> None:
        log.warning("hub link: %s; reconnecting", why)
        self.metrics.hub_online.set(0)
        if self.origin is not None:
            self.origin.stop()
        if self.target is not None:
            self.target.reset()
        self.link.connect()
        self._hello(roles)

    def _loop(self, roles: list[str]) -> int:
        self.link.connect()
        self._hello(roles)
        backoff = Backoff(self.config.heartbeat_interval, 10 * self.config.heartbeat_interval)
        tick = min(self.config.heartbeat_interval / 4, 0.25)
        while not self.stop_event.is_set():
            poller = zmq.Poller()
            assert self.link.socket is not None
            poller.register(self.link.socket, zmq.POLLIN)
            poller.register(self.wake_pull, zmq.POLLIN)
            if self.origin is not None and self.welcomed and self.origin.can_send():
                poller.register(self.origin.pull, zmq.POLLIN)
            ready = dict(poller.poll(int(tick * 1000)))
            if self.link.socket in ready:
                for message in self.link.receive():
                    if not self._handle(message, roles):
                        break
            if self.wake_pull in ready:
                while True:
                    try:
                        self.wake_pull.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
            if self.target is not None and self.welcomed:
                self._report_outcomes()
            if self.origin is not None and self.welcomed:
                if self.origin.fatal is not None:
                    log.error("origin capture cannot continue: %s", self.origin.fatal)
                    return 2
                self.origin.ship(self.link)
            now = time.monotonic()
            if self.link.dead(now):
                self._reconnect(roles, f"no answer for {self.link.silent_for(now):.1f} s")
                self.stop_event.wait(backoff.next())
            elif not self.welcomed and now - self.link.last_sent > self.config.heartbeat_interval:
                self._hello(roles)  # the hub may have been down when we said HELLO
            elif self.link.ping_due(now):
                self.link.send(frames.PING, {})
        return 0

    def _handle(self, message: frames.Message, roles: list[str]) -> bool:
        kind, header = message.kind, message.header
        if kind == frames.WELCOME:
            self.welcomed = True
            self.metrics.hub_online.set(1)
            log.info("hub %s welcomed %s", header["hub"], self.config.name)
            if self.origin is not None:
                if header["resume"] is None:
                    log.warning("the hub has no start position for this origin yet; retrying")
                    self.welcomed = False
                else:
                    self.origin.start(header["resume"])
                    log.info("capture resumes after %s", header["resume"])
        elif kind == frames.ACK and self.origin is not None:
            self.origin.acknowledged(header["seq"], header["upto"])
        elif kind == frames.DELIVER and self.target is not None:
            try:
                txs = message.transactions()
            except BinlogsyncError as exc:
                log.warning("dropped a malformed delivery: %s", exc)
                return True
            repair = header.get("repair") is True
            self.target.deliver(header["origin"], header["seq"], header["upto"], txs, repair)
        elif kind == frames.ERROR:
            if header["code"] == "hello-first":
                self._reconnect(roles, "the hub does not know this connection (hub restarted?)")
                return False
            log.error("hub refused: %s", header["message"])
        return True

    def _report_outcomes(self) -> None:
        assert self.target is not None
        for outcome in self.target.drain():
            if outcome.upto is not None:
                self.link.send(
                    frames.APPLIED,
                    {"origin": outcome.origin, "seq": outcome.seq, "upto": outcome.upto},
                )
            else:
                log.error(
                    "cannot apply %s at %s: %s (retry in %.1f s)",
                    outcome.origin,
                    outcome.position,
                    outcome.error,
                    outcome.retry_in,
                )
                self.link.send(
                    frames.FAILED,
                    {
                        "origin": outcome.origin,
                        "position": outcome.position,
                        "error": outcome.error,
                        "retry_in": outcome.retry_in,
                        "seq": outcome.seq,
                        "repair": outcome.repair,
                    },
                )
