"""The server agent (hub): one ROUTER socket, its loop, and the dispatch of what arrives.

One thread does everything with the socket. Each turn of the loop drains what has arrived,
stores every origin's batches in one commit per origin (group commit), acknowledges them,
and then pushes new transactions to the targets that are online, each within its window of
unacknowledged batches. The work itself lives beside this module:

    access.py    who may say what (CURVE keys, admin keys)
    hosts.py     hosts, their connections, liveness
    origins.py   where capture starts, BATCH intake, halts, capture-skip
    delivery.py  cursors and DELIVER, checkpoints reported in HELLO, compaction
    repairs.py   REPAIR through the hub
    status.py    what `binlogsync status` shows
    history.py   the last hour of lag per target and origin (the page's chart)
    log.py       the durable store (SQLite)

With [binlog_service] the hub also runs the binlog service (binlogservice/) on its own
threads: it reads the log on its own connections; the hub wakes it after each commit and asks
it how far compaction may go.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import zmq

from ..config import MIN_MESSAGE_BYTES, HubConfig
from ..errors import ProtocolError, TransportError
from ..metrics import HubMetrics, serve
from ..runloop import RunLoop, collection_deferred
from ..transport import curve, frames, sockets
from ..transport.frames import Message
from ..transport.limits import FRAME_ROOM
from . import status
from .access import Access
from .delivery import Delivery
from .history import LagHistory
from .hosts import Host, Hosts
from .log import HubLog
from .origins import Origins
from .routing import Router

log = logging.getLogger("binlogsync.hub")

_DRAIN = 2000  # messages taken per turn before storing and answering …
_DRAIN_SECONDS = 0.05  # … or this much time: a turn stays short, so PINGs are answered
_HANDSHAKE_EVENTS = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL


class Hub(RunLoop):
    name = "hub"

    def __init__(self, config: HubConfig) -> None:
        super().__init__()
        self.config = config
        self.router = Router(config.routes)
        self.log = HubLog(config.data_dir)
        self.metrics = HubMetrics()
        self.started = time.time()
        self.history = LagHistory()
        self.hosts = Hosts(self.router.hosts())
        self.access = Access(config.security.enabled)
        self.origins = Origins(config, self.log, self.hosts, self.metrics, self._send, self._kick)
        self.service = None
        if config.binlog_service is not None:
            from ..binlogservice import BinlogService

            served = config.binlog_service.origins or tuple(self.origins.names)
            self.service = BinlogService(
                config.binlog_service,
                config.data_dir,
                list(served),
                lambda: self.origins.table_maps.version,
            )
        self.delivery = Delivery(
            config, self.log, self.router, self.hosts, self.metrics, self._send, self.origins,
            self.service,
        )  # fmt: skip
        self.bound_endpoint = ""
        self._sock: zmq.Socket[bytes] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def run(self) -> int:
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        sock = context.socket(zmq.ROUTER)
        sock.linger = 0
        sock.router_mandatory = 1
        sock.maxmsgsize = self.config.max_message_bytes + FRAME_ROOM
        sock.sndhwm = sock.rcvhwm = 100_000
        auth = monitor = http = None
        try:
            security = self.config.security
            if security.enabled:
                assert security.secret_key_file and security.authorized_keys_dir
                self.access.host_keys = curve.authorized_keys(security.authorized_keys_dir)
                admin_dir = security.admin_keys_dir
                if admin_dir is not None:
                    self.access.admin_keys = curve.authorized_keys(admin_dir)
                own_public, _ = curve.load_pair(security.secret_key_file)
                self.access.admin_keys.setdefault(own_public, self.config.name)
                curve.secure_server(sock, security.secret_key_file)
                # Before the bind: a handshake that finds no ZAP handler is let in unchecked.
                auth = curve.start_authenticator(context, self.access.admitted)
            try:
                sock.bind(self.config.bind)
            except zmq.ZMQError as exc:
                raise TransportError(
                    f"hub.bind: cannot listen on {self.config.bind}: {exc.strerror}",
                    "choose a free port in hub.bind, or stop the process that holds it",
                ) from exc
            self.bound_endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            # Whole or not at all: a reader polling for the file never sees half of it.
            partial = self.config.data_dir / "endpoint.new"
            partial.write_text(self.bound_endpoint + "\n")
            partial.replace(self.config.data_dir / "endpoint")
            http = serve(self.config.metrics, self.metrics.registry)
            if self.service is not None:
                self.service.start()
            monitor = sock.get_monitor_socket(_HANDSHAKE_EVENTS)
            self._announce()
            self._sock = sock
            self._loop(sock, monitor)
        finally:
            self._sock = None
            if self.service is not None:
                self.service.stop()
            self.delivery.flush()
            if monitor is not None:
                sock.disable_monitor()
                monitor.close(linger=0)
            sock.close(linger=0)
            if auth is not None:
                auth.stop()
            context.term()
            if http is not None:
                http.shutdown()  # type: ignore[attr-defined]
            self.log.close()
            log.info("hub %s stopped", self.config.name)
        return 0

    def _announce(self) -> None:
        enabled = self.config.security.enabled
        log.info(
            "hub %s listening on %s (CURVE %s), %d route(s), log %s (epoch %s)",
            self.config.name,
            self.bound_endpoint,
            "on" if enabled else "off",
            len(self.config.routes),
            self.log.path,
            self.log.epoch,
        )
        host = self.bound_endpoint.removeprefix("tcp://").rsplit(":", 1)[0].strip("[]")
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not enabled and self.bound_endpoint.startswith("tcp://") and not loopback:
            log.warning(
                "CURVE is off and the hub listens on %s: anyone who reaches the port can speak "
                "for any host and send admin commands; configure [security]",
                self.bound_endpoint,
            )

    def _loop(self, sock: zmq.Socket[bytes], monitor: zmq.Socket[bytes]) -> None:
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        tick = min(self.config.heartbeat_interval / 4, 0.25)
        next_housekeeping = next_gauges = 0.0
        next_compaction = time.monotonic() + self.config.compact_interval
        while not self.stopping:
            wait = tick
            due = self.origins.next_due()
            if due is not None:  # batches wait for their commit (origins.py: group commit)
                wait = min(wait, max(0.0, due - time.monotonic()))
            ready = dict(poller.poll(math.ceil(wait * 1000)))
            behind = False
            if sock in ready:
                behind = self._drain(sock)
            elif due is not None:
                self._store()
            if monitor in ready:
                self._handshakes(monitor)
            now = time.monotonic()
            if now >= next_housekeeping:
                next_housekeeping = now + tick
                if not behind:  # a heartbeat may wait in the socket: read it first
                    self._check_liveness()
                self.delivery.flush()
            if now >= next_gauges:
                next_gauges = now + 1.0
                self._update_gauges()
            if now >= next_compaction:
                more = self.delivery.compact()
                next_compaction = now + (tick if more else self.config.compact_interval)

    def _handshakes(self, monitor: zmq.Socket[bytes]) -> None:
        while True:
            try:
                event = sockets.monitor_event(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event & _HANDSHAKE_EVENTS:
                self.access.once(
                    "handshake",
                    "%s failed: a client uses a different hub public key (hub_public_key_file), "
                    "or does not speak CURVE",
                )

    # -- receiving -------------------------------------------------------------------------
    def _drain(self, sock: zmq.Socket[bytes]) -> bool:
        """Take what arrived (within the turn's limits) and handle it; True when messages were
        left waiting."""
        received: list[list[Any]] = []
        deadline = time.monotonic() + _DRAIN_SECONDS
        behind = False
        # Frames (copy=False) only where their User-Id is read (CURVE): taking the bytes of a
        # small frame costs more than its copy.
        copy = not self.config.security.enabled
        for _ in range(_DRAIN):
            if time.monotonic() > deadline:
                behind = True
                break
            try:
                received.append(sock.recv_multipart(sockets.NOBLOCK, copy=copy))
            except zmq.Again:
                break
        # What a turn decodes to check the bodies is gone when it ends (runloop.py)
        with collection_deferred():
            self.handle(received)
        return behind

    def handle(self, received: list[list[Any]]) -> None:
        """One turn: answer every message, forward new transactions to up-to-date targets,
        store the origins' batches that are due (one commit each, group commit), then
        deliver."""
        touched: set[tuple[str, str]] = set()
        secure = self.config.security.enabled
        for parts in received:
            user_id = None
            if secure:  # zmq.Frames (see _drain)
                try:
                    user_id = str(parts[1].get("User-Id"))
                except zmq.ZMQError:  # not checked by the ZAP handler: never let in
                    self.metrics.rejected.inc()
                    continue
            if not isinstance(parts[0], bytes):  # zmq.Frames (see _drain)
                parts = [p.bytes for p in parts]
            identity = parts[0]
            try:
                message = frames.decode(parts[1:], self.config.max_message_bytes)
                host = self.access.check(self.hosts, identity, message, user_id)
                if host is not None:
                    self.hosts.heard(host)
                self._dispatch(identity, host, message, user_id, touched)
            except ProtocolError as exc:
                self._reject(identity, str(exc), user_id, exc.code)
        for origin, (after_key, items) in self.origins.take_new().items():
            self.delivery.forward(origin, items, after_key)
        self._store(touched)

    def _store(self, touched: set[tuple[str, str]] | None = None) -> None:
        """Commit the origins' waiting batches that are due, acknowledge them, then deliver
        (to the cursors in `touched` as well)."""
        touched = touched if touched is not None else set()
        due = self.origins.due(time.monotonic())
        if due:
            self.origins.store_all(due)
            for origin in due:
                touched.update((t, origin) for t in self.router.targets_of(origin))
            if self.service is not None:
                self.service.wake()
        for target, origin in sorted(touched):
            self.delivery.pump(target, origin)

    def _dispatch(
        self,
        identity: bytes,
        host: Host | None,
        message: Message,
        user_id: str | None,
        touched: set[tuple[str, str]],
    ) -> None:
        kind, header = message.kind, message.header
        if kind == frames.HELLO:
            self._hello(identity, message, user_id)
        elif kind == frames.PING:
            self._send(identity, frames.PONG, {})
        elif kind == frames.STATUS:
            detail = header.get("detail") is True
            history = header.get("history") is True
            self._send(identity, frames.STATUS_REPLY, {"status": self.status(detail, history)})
        elif kind == frames.REPAIR:
            cursor = self.delivery.repairs.request(identity, message)
            touched.add((cursor.target, cursor.origin))
        elif kind == frames.DETACH:
            touched.add(self.delivery.detach(header))
            self._send(
                identity,
                frames.DETACHED,
                {"id": header["id"], "origin": header["origin"], "target": header["target"]},
            )
        elif kind == frames.CAPTURE_SKIP:
            self.origins.skip_request(identity, header)
        elif host is None:
            raise ProtocolError("send HELLO first")
        elif kind == frames.BATCH:
            self.origins.batch(host, message)
        elif kind == frames.APPLIED:
            touched.add(self.delivery.applied(host, header))
        elif kind == frames.FAILED:
            touched.add(self.delivery.failed(host, header))
        elif kind == frames.HALTED:
            self.origins.halted_message(host, header)
        else:
            raise ProtocolError(f"a client does not send {kind.decode()}")

    def _hello(self, identity: bytes, message: Message, user_id: str | None) -> None:
        header = message.header
        name = header["host"]
        host = self.hosts.get(name)
        if host is None:
            raise ProtocolError(
                f"host {name[:64]!r} is not in any [[route]] of the hub config",
                "add it to a route's origin or targets, or fix client.name",
            )
        if header["max_message_bytes"] < MIN_MESSAGE_BYTES:
            raise ProtocolError(
                f"{name}'s max_message_bytes ({header['max_message_bytes']}) is below 1 MiB",
                "raise client.max_message_bytes",
            )
        roles = tuple(r for r in header["roles"] if r in ("origin", "target"))
        if "origin" in roles and name not in self.origins.names:
            raise ProtocolError(f"host {name!r} is not the origin of any route")
        self.hosts.welcome(host, identity, roles, user_id, header["max_message_bytes"])
        host.open_parts = header.get("open_parts") is True
        if "target" in roles:
            self.delivery.hello(host, header)
        resume = None
        if "origin" in roles:
            self.origins.hello(host, header, self.delivery.reports(name))
            with self.origins.connecting(name):
                self.delivery.check_floor(name)  # the origin's oldest binlog is known now
            resume = self.log.head(name)
        self._send(
            identity,
            frames.WELCOME,
            {
                "hub": self.config.name,
                "epoch": self.log.epoch,
                "resume": resume,
                "heartbeat": self.config.heartbeat_interval,
                "max_message_bytes": self.config.max_message_bytes,
            },
        )
        for origin in sorted(self.router.origins_of(name)):
            self.delivery.pump(name, origin)
        if "origin" in roles:
            for target in sorted(self.router.targets_of(name)):
                self.delivery.pump(target, name)  # targets learn the starting checkpoint

    def _reject(
        self, identity: bytes, reason: str, user_id: str | None, code: str = "rejected"
    ) -> None:
        self.metrics.rejected.inc()
        host = self.hosts.speaking(identity)
        who = host.name if host else self.access.name_of(user_id)
        self.access.once(
            f"{who} ({identity.hex()[:8]}): {reason[:120]}", "rejected a message from %s"
        )
        code = "hello-first" if reason.startswith("send HELLO first") else code
        self._send(identity, frames.ERROR, {"code": code, "message": reason})

    def _send(
        self,
        identity: bytes,
        kind: bytes,
        header: dict[str, Any],
        bodies: Sequence[bytes] = (),
    ) -> bool:
        sock = self._sock
        if sock is None:
            return False
        if kind == frames.ERROR and len(header["message"]) > frames.MAX_STRING:
            # It may quote what peers sent (names, ids, errors): it must stay a valid message.
            header = {**header, "message": header["message"][: frames.MAX_STRING - 1] + "…"}
        try:
            sockets.send(sock, [identity, *frames.encode(kind, header, bodies)])
            return True
        except zmq.ZMQError as exc:  # EHOSTUNREACH: peer gone; EAGAIN: peer not reading
            host = self.hosts.speaking(identity)
            if host is not None:
                log.info("cannot send to %s (%s); treating it as offline", host.name, exc.strerror)
                self._offline(host, "connection gone")
            return False

    def _kick(self, host: Host, why: str) -> None:
        """Make a host say HELLO again (its state on the hub changed under it)."""
        identity = host.identity
        self._offline(host, why)
        if identity:
            self._send(identity, frames.ERROR, {"code": "hello-first", "message": why})

    def _offline(self, host: Host, why: str) -> None:
        self.hosts.offline(host, why)
        self.delivery.offline(host)

    # -- liveness, gauges, status ----------------------------------------------------------
    def _check_liveness(self) -> None:
        limit = self.config.heartbeat_interval * self.config.heartbeat_liveness
        for host in self.hosts.silent(limit):
            assert host.last_seen is not None
            self._offline(host, f"no heartbeat for {time.time() - host.last_seen:.1f} s")

    def _update_gauges(self) -> None:
        for host in self.hosts.values():
            self.metrics.online.labels(host.name).set(1 if host.online else 0)
        for origin in self.origins.names:
            self.metrics.halted.labels(origin).set(1 if origin in self.origins.halted else 0)
        now = time.time()
        for (target, origin), cursor in self.delivery.cursors.items():
            count, oldest = self.log.backlog(origin, cursor.applied_key)
            self.metrics.backlog.labels(target, origin).set(count)
            lag = max(0.0, now - oldest) if oldest else 0.0
            self.metrics.lag.labels(target, origin).set(lag)
            self.history.record(now, target, origin, lag, count)
            self.metrics.blocked.labels(target, origin).set(1 if cursor.blocked else 0)

    def status(self, detail: bool = False, history: bool = False) -> dict[str, Any]:
        result = status.build(
            self.config.name,
            self.started,
            self.log,
            self.hosts,
            self.origins,
            self.delivery,
            detail,
        )
        if self.service is not None:
            result["binlog_service"] = self.service.status()
        if history:
            result["history"] = self.history.to_json(result["time"])
        return result
