"""The client agent's run loop: one thread owns the hub link; capture and apply run beside it.

    HELLO (checkpoints, binlog positions) → WELCOME → ship / apply / heartbeat …
      ↑                                              │ hub silent for `liveness` intervals,
      └──────── HELLO again at once when the link ───┘ or ERROR hello-first
                is back, then every heartbeat interval

The loop never blocks on anything but its poll: database reads for HELLO (the target's
checkpoints, the origin's binlog positions) run on a short-lived thread (`HelloInfo`),
capture and apply run on threads of their own that are never joined from the loop, and a
hub that does not answer is asked again on a timer, not after a sleep.

A HELLO is sent again each heartbeat interval only while no connection carries one: on a
connection that is up, the hub has it and answers when it can (a paused hub would otherwise
find one HELLO per interval waiting, each resetting its view of this host to a stale one),
so it is repeated there only after `heartbeat_liveness` intervals, then at doubling gaps. A
new connection gets a HELLO at once. After three intervals without an answer the agent says
why the hub may be silent (nothing listening, a peer that is not a hub, a CURVE handshake
refused, a HELLO refused, a hub that accepts and stays silent), in its log and in the
binlogsync_hub_link metric.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import zmq

from .. import __version__
from ..config import ClientConfig
from ..engines.base import takes_open_parts
from ..errors import BinlogsyncError, ConfigError, UnreachableError
from ..metrics import ClientMetrics, serve
from ..position import Position
from ..runloop import Backoff, RunLoop
from ..transport import frames
from ..transport.link import HubLink
from .target import TargetRole

if TYPE_CHECKING:
    from .origin import OriginRole

log = logging.getLogger("binlogsync.client")

_FIRST_DIAGNOSIS = 3  # HELLO intervals without an answer before the agent says what it sees
_DIAGNOSIS_EVERY = 30
_HELLO_GAP_MAX = 30.0  # seconds: the longest wait before a HELLO on an up connection is repeated


class HelloInfo(RunLoop):
    """Reads what HELLO must say from the databases, off the agent's loop.

    The target's checkpoints must be read (a HELLO never claims "nothing applied" for a target
    it could not read), so this retries with back-off until it can, or is stopped. The
    origin's positions may be unknown (None); the hub then waits for a later HELLO.
    """

    name = "hello-info"

    def __init__(self, agent: ClientAgent) -> None:
        super().__init__()
        self.agent = agent
        self.header: dict[str, Any] | None = None
        self.made_at = 0.0

    def run(self) -> int:
        backoff = Backoff(0.5, 10.0)
        agent = self.agent
        checkpoints: dict[str, Any] = {}
        while agent.target is not None and not self.stopping:
            try:
                checkpoints = agent.target.checkpoints()
                break
            except BinlogsyncError as exc:
                delay = backoff.next()
                log.warning(
                    "cannot read the target's checkpoints (%s); retrying in %.1f s", exc, delay
                )
                self.stop_event.wait(delay)
        start = oldest = current = None
        if agent.origin is not None:
            start, oldest, current = agent.origin.positions()
        header: dict[str, Any] = {
            "host": agent.config.name,
            "roles": agent.roles,
            "checkpoints": checkpoints,
            "start": start,
            "oldest": oldest,
            "current": current,
            "agent": __version__,
            "max_message_bytes": agent.config.max_message_bytes,
        }
        if agent.config.target is not None:
            header["open_parts"] = takes_open_parts(agent.config.target.kind)
        if agent.origin is not None and agent.origin.halted is not None:
            header["halted"] = agent.origin.halt_header()
        self.header, self.made_at = header, time.monotonic()
        agent.wake()
        return 0


class ClientAgent(RunLoop):
    name = "client"

    def __init__(self, config: ClientConfig) -> None:
        super().__init__()
        self.config = config
        self.metrics = ClientMetrics()
        self.context: zmq.Context[Any] = zmq.Context()
        self.link = HubLink(self.context, config)
        self.wake_endpoint = f"inproc://wake-{id(self)}"
        self.wake_pull = self.context.socket(zmq.PULL)
        self.wake_pull.linger = 0
        self.wake_pull.bind(self.wake_endpoint)
        self._wake_lock = threading.Lock()
        self._wake_push = self.context.socket(zmq.PUSH)
        self._wake_push.linger = 0
        self._wake_push.connect(self.wake_endpoint)
        limit = config.max_message_bytes
        self.origin: OriginRole | None = None
        if config.origin:
            # Imported only here: a target's agent never reads a binlog, and its start-up
            # (part of every catch-up after a restart) need not load the capture modules.
            from .origin import OriginRole

            origin = OriginRole(config.name, config.origin, self.metrics, self.wake, limit)
            # read at each scrape: a container's healthcheck asks the agent, not the hub
            self.metrics.capture_halted.set_function(lambda: float(origin.halted is not None))
            self.origin = origin
        self.target = (
            TargetRole(config.target, self.metrics, self.wake, limit) if config.target else None
        )
        self.roles = [r for r, on in (("origin", self.origin), ("target", self.target)) if on]
        self.welcomed = False
        self.epoch: str | None = None
        self.resume: Position | None = None
        self.hello_info: HelloInfo | None = None
        self.next_hello = 0.0
        self.unanswered = 0  # HELLO intervals since the last WELCOME
        self.hello_sent_at: float | None = None  # a HELLO is out on the current connection
        self.hello_gap = 0.0  # the wait before that HELLO is repeated on the same connection
        self.lost_at: float | None = None
        self.last_refusal = ""
        self.refusal = ""  # the hub's ERROR answer to our HELLO, until a WELCOME
        self.link_state = ""

    def wake(self) -> None:
        """Make the loop look around now (called from worker threads)."""
        with self._wake_lock:  # a socket is not thread-safe
            try:
                self._wake_push.send(b"", zmq.NOBLOCK)
            except (zmq.Again, zmq.ContextTerminated, zmq.ZMQError):
                pass  # a wake-up is already pending, or the agent is closing

    # -- lifecycle -------------------------------------------------------------------------
    def preflight(self) -> None:
        """Check the origin's settings before anything connects (raises PreflightError).

        With `origin.candidates` every server is checked, and one that cannot be reached
        now is only a warning: the primary may be gone, and capture waits for a candidate
        that qualifies (capture/failover.py). A target's kind must have its client library,
        and its database is read once: TLS that cannot work (TlsError, ConfigError) stops
        the agent here; a target that is only down now is a warning (HELLO waits for it)."""
        if self.config.target is not None:
            from ..apply.store import require

            require(self.config.target.kind)
            if self.target is not None and self.config.target.kind != "auditlog":
                try:
                    self.target.checkpoints()
                except ConfigError:
                    raise
                except BinlogsyncError as exc:
                    log.warning("target database: %s", exc)
        if self.config.origin is not None:
            from ..capture.preflight import check_origin
            from ..capture.tablemap import check_library

            check_library()
            o = self.config.origin
            for db in o.servers:
                try:
                    warnings = check_origin(db, o.server_id, o.tables, None)
                except UnreachableError as exc:
                    if not o.candidates:
                        raise
                    log.warning("origin server %s:%s: %s", db.host, db.port, exc)
                    continue
                for warning in warnings:
                    log.warning("origin: %s", warning)

    def run(self) -> int:
        http = serve(self.config.metrics, self.metrics.registry)
        log.info(
            "client %s (%s) connecting to %s",
            self.config.name,
            ", ".join(self.roles),
            self.config.hub,
        )
        try:
            self.link.open()
            return self._loop()
        finally:
            if self.hello_info is not None:
                self.hello_info.stop()
            if self.origin is not None:
                self.origin.close()
            if self.target is not None:
                self.target.close()
            self.link.close()
            with self._wake_lock:
                self.wake_pull.close(linger=0)
                self._wake_push.close(linger=0)
            self.context.term()
            if http is not None:
                http.shutdown()  # type: ignore[attr-defined]
            log.info("client %s stopped", self.config.name)

    def _loop(self) -> int:
        tick = min(self.config.heartbeat_interval / 4, 0.25)
        poller = zmq.Poller()
        assert self.link.socket is not None and self.link.monitor is not None
        poller.register(self.link.socket, zmq.POLLIN)
        poller.register(self.link.monitor, zmq.POLLIN)
        poller.register(self.wake_pull, zmq.POLLIN)
        while not self.stopping:
            ready = dict(poller.poll(int(tick * 1000)))
            if self.link.monitor in ready:
                change = self.link.events()
                if change.came_up or change.went_down:
                    self.hello_sent_at = None  # a HELLO on the old connection is lost
                if change.went_down and self.welcomed:
                    # Back, it is a new connection the hub does not know: HELLO before anything.
                    self._lost(f"the connection to the hub at {self.link.endpoint} dropped")
                if change.came_up and not self.welcomed:
                    self.next_hello = 0.0  # the connection is back: say HELLO now
            if self.link.socket in ready:
                for message in self.link.receive():
                    self._handle(message)
            if self.wake_pull in ready:
                self._silence_wake()
            now = time.monotonic()
            self.link.redial(now)
            if self.welcomed:
                if self.target is not None:
                    self._report_outcomes()
                if self.origin is not None:
                    self.origin.ship(self.link)
                    if self.origin.stalled:
                        self._lost("a batch could not be sent to the hub")
                if self.welcomed and self.link.dead(now):
                    self._lost(
                        f"the hub at {self.link.endpoint} has been silent for "
                        f"{self.link.silent_for(now):.1f} s"
                    )
                elif self.welcomed and self.link.ping_due(now):
                    self.link.send(frames.PING, {})
            if not self.welcomed:
                self._say_hello(now)
            self._show_link()
        return 0

    def _diagnosis(self) -> tuple[str, str]:
        """(state, sentence): why no WELCOME comes, as far as this agent can tell."""
        if self.refusal:
            return "rejected", f"the hub at {self.link.endpoint} refuses HELLO: {self.refusal}"
        diagnosis = self.link.diagnosis()
        return diagnosis.state, diagnosis.text

    def _show_link(self) -> None:
        state = "welcomed" if self.welcomed else self._diagnosis()[0]
        if state != self.link_state:
            self.link_state = state
            self.metrics.hub_link.state(state)
        self.metrics.hub_handshake_failures.set(self.link.handshake_failures)

    def _silence_wake(self) -> None:
        while True:
            try:
                self.wake_pull.recv(zmq.NOBLOCK)
            except zmq.Again:
                return

    # -- HELLO -----------------------------------------------------------------------------
    def _say_hello(self, now: float) -> None:
        if now < self.next_hello:
            return
        interval = self.config.heartbeat_interval
        sent_at = self.hello_sent_at
        if sent_at is not None and self.link.up and now < sent_at + self.hello_gap - interval / 2:
            # This connection carries our HELLO: the hub answers it when it can.
            self.next_hello = now + interval
            self._unanswered()
            return
        info = self.hello_info
        if info is None or (
            info.header is not None and now - info.made_at > self.config.heartbeat_interval
        ):
            if info is not None:
                info.stop()
            self.hello_info = HelloInfo(self)
            self.hello_info.start()
            return
        if info.header is None:
            return  # still reading the databases; it wakes the loop when done
        self.hello_info = None
        self.next_hello = now + self.config.heartbeat_interval
        if self.link.send(frames.HELLO, info.header):  # not connected: the diagnosis says so
            if sent_at is None:
                self.hello_gap = interval * self.config.heartbeat_liveness
            else:
                self.hello_gap = min(self.hello_gap * 2, max(_HELLO_GAP_MAX, self.hello_gap))
            self.hello_sent_at = now
        self._unanswered()

    def _unanswered(self) -> None:
        self.unanswered += 1
        self.metrics.unanswered_hellos.set(self.unanswered)
        if self.unanswered == _FIRST_DIAGNOSIS or (
            self.unanswered > _FIRST_DIAGNOSIS and self.unanswered % _DIAGNOSIS_EVERY == 0
        ):
            log.warning(
                "no WELCOME after %d HELLO interval(s): %s",
                self.unanswered,
                self._diagnosis()[1],
            )

    def _welcome(self, header: dict[str, Any]) -> None:
        self.hello_sent_at = None  # answered
        resume = header["resume"]
        if self.origin is not None and resume is None:
            log.warning(
                "the hub has no start position for this origin yet (it could not be read); "
                "saying HELLO again"
            )
            return
        again = self.welcomed and resume == self.resume and header["epoch"] == self.epoch
        if again:
            return  # an answer to a repeated HELLO: nothing changed
        took = f" after {time.monotonic() - self.lost_at:.1f} s" if self.lost_at else ""
        self.welcomed, self.unanswered, self.lost_at = True, 0, None
        self.epoch, self.resume = header["epoch"], resume
        self.refusal = self.last_refusal = ""
        self.link.use_hub_heartbeat(header["heartbeat"])
        self.metrics.hub_online.set(1)
        self.metrics.unanswered_hellos.set(0)
        log.info(
            "hub %s (epoch %s) welcomed %s%s", header["hub"], self.epoch, self.config.name, took
        )
        if self.target is not None:
            self.target.reset(self.epoch)
        if self.origin is not None and resume is not None:
            hub_limit = header.get("max_message_bytes")
            limit = min(self.config.max_message_bytes, hub_limit or self.config.max_message_bytes)
            if limit != self.origin.max_message_bytes:
                # A batch over the hub's limit would be dropped by its socket, unanswered.
                log.info("the hub takes messages up to %d bytes: batches stay below that", limit)
                self.origin.max_message_bytes = limit
            self.origin.start(resume)
            log.info("capture resumes after %s", resume)

    def _lost(self, why: str) -> None:
        log.warning("hub link: %s; saying HELLO again", why)
        self.welcomed, self.lost_at = False, time.monotonic()
        self.metrics.hub_online.set(0)
        self.next_hello = 0.0
        if self.hello_info is not None:
            self.hello_info.stop()
            self.hello_info = None
        if self.origin is not None:
            self.origin.stop()
        if self.target is not None:
            self.target.reset(self.epoch)

    # -- messages --------------------------------------------------------------------------
    def _handle(self, message: frames.Message) -> None:
        kind, header = message.kind, message.header
        if kind == frames.WELCOME:
            self._welcome(header)
        elif kind == frames.ACK and self.origin is not None and self.welcomed:
            self.origin.acknowledged(header["seq"], header["upto"])
        elif kind == frames.DELIVER and self.target is not None and self.welcomed:
            self.target.deliver(header["origin"], header, message.bodies)
        elif kind == frames.ERROR:
            if not self.welcomed:
                self.hello_sent_at = None  # an answer to our HELLO
            if header["code"] == "hello-first":
                if self.welcomed:
                    self._lost(f"the hub asks for HELLO ({header['message'][:200]})")
                return
            if header["message"] != self.last_refusal:
                log.error("hub refused: %s", header["message"][:1000])
            self.last_refusal = header["message"]
            if not self.welcomed:  # before WELCOME we send only HELLO: this answers it
                self.refusal = header["message"][:1000]

    def _report_outcomes(self) -> None:
        assert self.target is not None
        for outcome in self.target.drain():
            if outcome.generation != self.target.generation:
                continue  # from before the last WELCOME: the hub no longer waits for it
            if outcome.upto is not None or not outcome.done and not outcome.error:
                self.link.send(
                    frames.APPLIED,
                    {"origin": outcome.origin, "seq": outcome.seq, "upto": outcome.upto},
                )
                continue
            if not outcome.resend:
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
                    "error": outcome.error[: frames.MAX_STRING],
                    "retry_in": outcome.retry_in,
                    "seq": outcome.seq,
                    "repair": outcome.repair,
                    "resend": outcome.resend,
                },
            )
