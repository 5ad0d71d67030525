"""The server agent (hub): one ROUTER socket, the durable log, routing and delivery.

One thread does everything with the socket. Each turn of the loop drains what has arrived,
stores every origin's batches in one commit per origin (group commit), acknowledges them,
and then pushes new transactions to the targets that are online, each within its window of
unacknowledged batches. Heartbeats tell who is online; the log stays until every target of an
origin has applied it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import zmq

from .. import __version__
from ..codec import pack, unpack
from ..config import HubConfig
from ..errors import ProtocolError
from ..metrics import HubMetrics, serve
from ..model import Transaction
from ..position import Position
from ..transport import curve, frames
from ..transport.frames import Message
from .cursors import Cursor, Repair
from .log import Entry, HubLog
from .routing import Router

log = logging.getLogger("binlogsync.hub")

_DRAIN = 2000  # messages taken per turn before storing and answering


@dataclass
class Host:
    name: str
    identity: bytes = b""
    roles: tuple[str, ...] = ()
    online: bool = False
    last_seen: float | None = None
    user_id: str | None = None


@dataclass
class _Pending:
    identity: bytes
    seq: int
    entries: list[Entry] = field(default_factory=list)


class Hub:
    def __init__(self, config: HubConfig) -> None:
        self.config = config
        self.router = Router(config.routes)
        self.log = HubLog(config.data_dir)
        self.metrics = HubMetrics()
        self.started = time.time()
        self.hosts: dict[str, Host] = {name: Host(name) for name in self.router.hosts()}
        self.by_identity: dict[bytes, str] = {}
        self.cursors: dict[tuple[str, str], Cursor] = {}
        for route in config.routes:
            for target in route.targets:
                self.cursors.setdefault((target, route.origin), Cursor(target, route.origin))
        for (target, origin), position in self.log.cursors().items():
            if (target, origin) in self.cursors:
                cursor = self.cursors[(target, origin)]
                cursor.applied = position
                cursor.rewind()
        # Per origin, the key at or below which log entries may be gone (compacted).
        self.compacted: dict[str, int] = {}
        for (_target, origin), cursor in self.cursors.items():
            self.compacted[origin] = min(self.compacted.get(origin, 1 << 62), cursor.applied_key)
        self.keys: dict[bytes, str] = {}
        self.stop_event = threading.Event()
        self.bound_endpoint = ""

    # -- lifecycle -------------------------------------------------------------------------
    def run(self) -> None:
        context = zmq.Context()
        auth = None
        security = self.config.security
        if security.enabled:
            assert security.secret_key_file and security.authorized_keys_dir
            self.keys = curve.authorized_keys(security.authorized_keys_dir)
            own_public, _ = curve.load_pair(security.secret_key_file)
            self.keys.setdefault(own_public, self.config.name)  # `status` with the hub's keys
            auth = curve.start_authenticator(context, self.keys)
        sock = context.socket(zmq.ROUTER)
        sock.linger = 0
        sock.router_mandatory = 1
        sock.maxmsgsize = self.config.max_message_bytes + 65536
        sock.sndhwm = sock.rcvhwm = 100_000
        if security.enabled:
            assert security.secret_key_file
            curve.secure_server(sock, security.secret_key_file)
        try:
            sock.bind(self.config.bind)
        except zmq.ZMQError as exc:
            sock.close()
            context.term()
            raise ProtocolError(
                f"cannot bind {self.config.bind}: {exc}",
                "choose a free port in hub.bind or stop the process that holds it",
            ) from exc
        self.bound_endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        http = serve(self.config.metrics, self.metrics.registry)
        log.info(
            "hub %s listening on %s (CURVE %s), %d route(s), log %s",
            self.config.name,
            self.bound_endpoint,
            "on" if security.enabled else "off",
            len(self.config.routes),
            self.log.path,
        )
        try:
            self._loop(sock)
        finally:
            self._flush_cursors()
            sock.close()
            if auth is not None:
                auth.stop()
            context.term()
            if http is not None:
                http.shutdown()  # type: ignore[attr-defined]
            self.log.close()
            log.info("hub %s stopped", self.config.name)

    def stop(self) -> None:
        self.stop_event.set()

    def _loop(self, sock: zmq.Socket) -> None:
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        tick = min(self.config.heartbeat_interval / 4, 0.25)
        next_housekeeping = next_gauges = 0.0
        next_compaction = time.monotonic() + self.config.compact_interval
        while not self.stop_event.is_set():
            if poller.poll(int(tick * 1000)):
                self._drain(sock)
            now = time.monotonic()
            if now >= next_housekeeping:
                next_housekeeping = now + tick
                self._check_liveness(sock)
                self._flush_cursors()
            if now >= next_gauges:
                next_gauges = now + 1.0
                self._update_gauges()
            if now >= next_compaction:
                next_compaction = now + self.config.compact_interval
                self._compact()

    # -- receiving -------------------------------------------------------------------------
    def _drain(self, sock: zmq.Socket) -> None:
        batches: dict[str, list[_Pending]] = {}
        touched_targets: set[tuple[str, str]] = set()
        for _ in range(_DRAIN):
            try:
                parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            identity = parts[0].bytes
            try:
                message = frames.decode([p.bytes for p in parts[1:]], self.config.max_message_bytes)
                user_id = str(parts[1].get("User-Id")) if self.config.security.enabled else None
                name = self._authenticate(identity, message, user_id)
            except ProtocolError as exc:
                self._reject(sock, identity, str(exc))
                continue
            host = self.hosts[name] if name else None
            if host is not None:
                host.last_seen = time.time()
                if not host.online and host.identity == identity:
                    self._online(host)
            try:
                self._handle(sock, identity, host, message, user_id, batches, touched_targets)
            except ProtocolError as exc:
                self._reject(sock, identity, str(exc))
        for origin, pending in batches.items():
            self._forward(sock, origin, pending)
            self._store(sock, origin, pending)
            touched_targets.update((t, origin) for t in self.router.targets_of(origin))
        for target, origin in touched_targets:
            self._pump(sock, target, origin)

    def _authenticate(self, identity: bytes, message: Message, user_id: str | None) -> str:
        """The host name this message speaks for, or '' for a HELLO not yet accepted."""
        if message.kind == frames.HELLO:
            return ""
        name = self.by_identity.get(identity, "")
        if not name:
            if message.kind in (frames.STATUS, frames.REPAIR):
                return ""  # commands need no HELLO; with CURVE, only authorised keys get here
            raise ProtocolError("send HELLO first")
        if user_id is not None and self.hosts[name].user_id != user_id:
            raise ProtocolError(f"message for {name} signed by another key")
        return name

    def _reject(self, sock: zmq.Socket, identity: bytes, reason: str) -> None:
        self.metrics.rejected.inc()
        log.warning("rejected a message from peer %s: %s", identity.hex(), reason)
        code = "hello-first" if reason.startswith("send HELLO first") else "rejected"
        self._send(sock, identity, frames.ERROR, {"code": code, "message": reason})

    def _send(
        self,
        sock: zmq.Socket,
        identity: bytes,
        kind: bytes,
        header: dict[str, Any],
        bodies: list[bytes] | tuple[bytes, ...] = (),
    ) -> bool:
        try:
            sock.send_multipart([identity, *frames.encode(kind, header, bodies)], zmq.NOBLOCK)
            return True
        except zmq.ZMQError as exc:  # EHOSTUNREACH: peer gone; EAGAIN: peer not reading
            name = self.by_identity.get(identity)
            if name:
                log.info("cannot send to %s (%s); treating it as offline", name, exc.strerror)
                self._offline(self.hosts[name], "connection gone")
            return False

    def _handle(
        self,
        sock: zmq.Socket,
        identity: bytes,
        host: Host | None,
        message: Message,
        user_id: str | None,
        batches: dict[str, list[_Pending]],
        touched: set[tuple[str, str]],
    ) -> None:
        kind, header = message.kind, message.header
        if kind == frames.HELLO:
            self._hello(sock, identity, message, user_id)
        elif kind == frames.PING:
            self._send(sock, identity, frames.PONG, {})
        elif kind == frames.STATUS:
            self._send(sock, identity, frames.STATUS_REPLY, {"status": self.status()})
        elif kind == frames.REPAIR:
            self._repair(sock, identity, message)
        elif host is None:
            raise ProtocolError("send HELLO first")
        elif kind == frames.BATCH:
            if "origin" not in host.roles or header["origin"] != host.name:
                raise ProtocolError(f"{host.name} may only send its own origin's transactions")
            pending = _Pending(identity, header["seq"])
            for body in message.bodies:
                tx = Transaction.from_wire(unpack(body, self.config.max_message_bytes))
                pending.entries.append(
                    Entry(tx.position, tx.timestamp, body if tx.changes else b"", tx)
                )
            batches.setdefault(host.name, []).append(pending)
        elif kind == frames.APPLIED:
            cursor = self._cursor(host.name, header["origin"])
            if cursor.repair_seq is not None and header["seq"] == cursor.repair_seq:
                repair = cursor.repaired(header["upto"])
                log.info(
                    "target %s applied repair %s of %s; replaying from %s",
                    host.name,
                    repair.id,
                    cursor.origin,
                    header["upto"],
                )
                self._send(
                    sock,
                    repair.requester,
                    frames.REPAIRED,
                    {"id": repair.id, "upto": header["upto"]},
                )
            else:
                cursor.acknowledge(header["seq"], header["upto"])
            touched.add((host.name, cursor.origin))
        elif kind == frames.FAILED:
            cursor = self._cursor(host.name, header["origin"])
            if (
                header.get("repair") is True
                and header.get("seq") == cursor.repair_seq
                and cursor.repairs
            ):
                repair = cursor.repairs.popleft()
                cursor.repair_seq = None
                self._send(
                    sock,
                    repair.requester,
                    frames.ERROR,
                    {
                        "code": "repair-failed",
                        "message": f"target {host.name} could not apply repair {repair.id}: "
                        f"{header['error']}",
                    },
                )
                touched.add((host.name, cursor.origin))
                return
            if cursor.last_error != header["error"]:
                log.error(
                    "target %s cannot apply %s at %s: %s",
                    host.name,
                    cursor.origin,
                    header["position"],
                    header["error"],
                )
            cursor.last_error, cursor.error_position = header["error"], header["position"]
            cursor.error_at, cursor.retry_in = time.time(), header["retry_in"]
        else:
            raise ProtocolError(f"a client does not send {kind.decode()}")

    def _repair(self, sock: zmq.Socket, identity: bytes, message: Message) -> None:
        header = message.header
        origin, target, snapshot = header["origin"], header["target"], header["snapshot"]
        cursor = self._cursor(target, origin)
        if len(message.bodies) != 1:
            raise ProtocolError("REPAIR carries exactly one transaction")
        Transaction.from_wire(unpack(message.bodies[0], self.config.max_message_bytes))
        floor = self.compacted.get(origin, -1)
        if snapshot.key < floor:
            raise ProtocolError(
                f"repair snapshot {snapshot} is older than what the hub still holds for {origin}",
                "read the source again (a fresh snapshot) and resend the repair",
            )
        head = self.log.head(origin)
        if snapshot.gtid is None and head is not None and head.key == snapshot.key:
            snapshot = head  # same place; the GTID lets `caught up` checks compare GTIDs
        cursor.repairs.append(Repair(identity, header["id"], snapshot, message.bodies[0]))
        log.info(
            "repair %s for %s from %s queued (snapshot %s)", header["id"], target, origin, snapshot
        )
        self._pump(sock, target, origin)

    def _send_repair(self, sock: zmq.Socket, target: str, origin: str, cursor: Cursor) -> None:
        repair = cursor.repairs[0]
        tx = self.router.for_target(origin, target, Transaction.from_wire(unpack(repair.body)))
        header = {"origin": origin, "seq": cursor.next_seq, "upto": repair.snapshot, "repair": True}
        if self._send(
            sock, self.hosts[target].identity, frames.DELIVER, header, [pack(tx.to_wire())]
        ):
            cursor.repair_seq = cursor.next_seq
            cursor.next_seq += 1

    def _cursor(self, target: str, origin: Any) -> Cursor:
        cursor = self.cursors.get((target, origin))
        if cursor is None:
            raise ProtocolError(f"no route sends origin {origin!r} to {target}")
        return cursor

    def _hello(
        self, sock: zmq.Socket, identity: bytes, message: Message, user_id: str | None
    ) -> None:
        header = message.header
        name = header["host"]
        host = self.hosts.get(name)
        if host is None:
            raise ProtocolError(
                f"host {name!r} is not in any [[route]] of the hub config",
                "add it to a route's origin or targets, or fix client.name",
            )
        if self.config.security.enabled:
            owner = self.keys.get(user_id.encode()) if user_id else None
            if owner != name:
                raise ProtocolError(f"the key that signed HELLO does not belong to host {name!r}")
        roles = tuple(r for r in header["roles"] if r in ("origin", "target"))
        if "origin" in roles and name not in {r.origin for r in self.config.routes}:
            raise ProtocolError(f"host {name!r} is not the origin of any route")
        if host.identity and host.identity != identity:
            self.by_identity.pop(host.identity, None)
        host.identity, host.roles, host.user_id = identity, roles, user_id
        host.last_seen = time.time()
        self.by_identity[identity] = name
        resume = None
        if "origin" in roles:
            resume = self.log.head(name)
            if resume is None and header["start"] is not None:
                resume = self.log.register(name, header["start"])
                log.info("origin %s registered, capture starts at %s", name, resume)
                for target in self.router.targets_of(name):
                    self._pump(sock, target, name)  # targets learn the starting checkpoint
        if "target" in roles:
            checkpoints = header["checkpoints"]
            for origin in self.router.origins_of(name):
                reported = checkpoints.get(origin)
                cursor = self.cursors[(name, origin)]
                cursor.reset_to(Position.from_json(reported) if reported else None)
        self._send(
            sock,
            identity,
            frames.WELCOME,
            {
                "hub": self.config.name,
                "resume": resume,
                "heartbeat": self.config.heartbeat_interval,
            },
        )
        self._online(host)
        for origin in self.router.origins_of(name):
            self._pump(sock, name, origin)

    # -- storing and delivering --------------------------------------------------------------
    def _store(self, sock: zmq.Socket, origin: str, pending: list[_Pending]) -> None:
        entries = [e for p in pending for e in p.entries]
        head, fresh = self.log.append(origin, entries)
        self.metrics.appended.labels(origin).inc(fresh)
        if head is None:
            return
        for p in pending:
            upto = p.entries[-1].position if p.entries else head
            self._send(
                sock,
                p.identity,
                frames.ACK,
                {"origin": origin, "seq": p.seq, "upto": min(upto, head)},
            )

    def _forward(self, sock: zmq.Socket, origin: str, pending: list[_Pending]) -> None:
        """Send new transactions to targets that are up to date, before the log's fsync.

        This takes the fsync off the latency path and is safe: a target applies by position
        and reports its checkpoint as the truth, and if the hub dies before its commit, the
        origin (not acknowledged) re-sends and the target skips what it has.
        """
        head = self.log.head(origin)
        fresh = self.log.fresh(origin, [e for p in pending for e in p.entries])
        if head is None or not fresh:
            return
        for target in self.router.targets_of(origin):
            cursor = self.cursors[(target, origin)]
            if cursor.sent_key == head.key and not cursor.repairs:
                self._send_entries(sock, target, origin, cursor, fresh)

    def _send_entries(
        self,
        sock: zmq.Socket,
        target: str,
        origin: str,
        cursor: Cursor,
        entries: list[Entry],
        head: Position | None = None,
    ) -> bool:
        """Send `entries` (in `batch_transactions` chunks, within the window) as DELIVERs.

        `head` given: the last chunk's `upto` is the head (nothing is stored between). Returns
        False when the window filled or the target is gone before everything was sent.
        """
        host = self.hosts[target]
        if not host.online or "target" not in host.roles:
            return False
        whole = self.router.passes_whole(origin, target)
        limit = self.config.batch_transactions
        for start in range(0, max(len(entries), 1), limit):
            if len(cursor.inflight) >= self.config.window:
                return False
            chunk = entries[start : start + limit]
            last_chunk = start + limit >= len(entries)
            upto = head if (head is not None and last_chunk) else chunk[-1].position
            bodies = []
            for entry in chunk:
                if not entry.payload:
                    continue
                if whole:
                    bodies.append(entry.payload)
                    continue
                tx = entry.tx or Transaction.from_wire(unpack(entry.payload))
                routed = self.router.for_target(origin, target, tx)
                if routed is tx:
                    bodies.append(entry.payload)  # all of it, unchanged: forward the bytes
                elif routed.changes:
                    bodies.append(pack(routed.to_wire()))
            header = {"origin": origin, "seq": cursor.next_seq, "upto": upto}
            if not self._send(sock, host.identity, frames.DELIVER, header, bodies):
                return False
            cursor.sent(upto.key)
            self.metrics.delivered.labels(target, origin).inc(len(bodies))
        return True

    def _pump(self, sock: zmq.Socket, target: str, origin: str) -> None:
        host = self.hosts.get(target)
        cursor = self.cursors.get((target, origin))
        if host is None or cursor is None or not host.online or "target" not in host.roles:
            return
        if cursor.repairs:  # nothing else goes to this target until the repair is applied
            if cursor.repair_seq is None:
                self._send_repair(sock, target, origin, cursor)
            return
        head = self.log.head(origin)
        limit = self.config.batch_transactions
        while head is not None and cursor.sent_key < head.key:
            entries = self.log.read(origin, cursor.sent_key, limit)
            full = len(entries) == limit
            if not self._send_entries(
                sock, target, origin, cursor, entries, None if full else head
            ):
                return

    # -- liveness, housekeeping --------------------------------------------------------------
    def _online(self, host: Host) -> None:
        if not host.online:
            host.online = True
            log.info("host %s online (%s)", host.name, ", ".join(host.roles) or "no roles")

    def _offline(self, host: Host, why: str) -> None:
        if host.online:
            log.warning("host %s offline: %s", host.name, why)
        host.online = False
        self.by_identity.pop(host.identity, None)
        host.identity = b""
        for (target, _origin), cursor in self.cursors.items():
            if target == host.name:
                cursor.rewind()

    def _check_liveness(self, sock: zmq.Socket) -> None:
        limit = self.config.heartbeat_interval * self.config.heartbeat_liveness
        now = time.time()
        for host in self.hosts.values():
            if host.online and host.last_seen is not None and now - host.last_seen > limit:
                self._offline(host, f"no heartbeat for {now - host.last_seen:.1f} s")

    def _flush_cursors(self) -> None:
        dirty = {k: c.applied for k, c in self.cursors.items() if c.dirty and c.applied}
        if dirty:
            self.log.save_cursors(dirty)  # type: ignore[arg-type]
            for key in dirty:
                self.cursors[key].dirty = False

    def _compact(self) -> None:
        for origin in {r.origin for r in self.config.routes}:
            cursors = [c for (_t, o), c in self.cursors.items() if o == origin]
            if any(c.repairs for c in cursors):
                continue  # a repair will send its target back to its snapshot: keep the log
            keys = [c.applied_key for c in cursors]
            if keys and min(keys) >= 0:
                self.compacted[origin] = max(self.compacted.get(origin, -1), min(keys))
                dropped = self.log.compact(origin, min(keys))
                if dropped:
                    log.debug("compacted %d transactions of %s", dropped, origin)

    def _update_gauges(self) -> None:
        for host in self.hosts.values():
            self.metrics.online.labels(host.name).set(1 if host.online else 0)
        now = time.time()
        for (target, origin), cursor in self.cursors.items():
            count, oldest = self.log.backlog(origin, cursor.applied_key)
            self.metrics.backlog.labels(target, origin).set(count)
            self.metrics.lag.labels(target, origin).set(max(0.0, now - oldest) if oldest else 0)

    # -- status ------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        now = time.time()
        hosts = [
            {
                "name": h.name,
                "online": h.online,
                "roles": list(h.roles),
                "last_seen": h.last_seen,
                "seconds_since_seen": None if h.last_seen is None else round(now - h.last_seen, 3),
            }
            for h in sorted(self.hosts.values(), key=lambda h: h.name)
        ]
        origins = []
        for origin in sorted({r.origin for r in self.config.routes}):
            known = self.log.heads.get(origin)
            origins.append(
                {
                    "origin": origin,
                    "head": known.head.to_json() if known else None,
                    "head_time": known.head_ts if known else None,
                    "stored": self.log.log_rows(origin),
                    "appended": known.appended if known else 0,
                }
            )
        targets = []
        for (target, origin), c in sorted(self.cursors.items()):
            count, oldest = self.log.backlog(origin, c.applied_key)
            targets.append(
                {
                    "target": target,
                    "origin": origin,
                    "applied": c.applied.to_json() if c.applied else None,
                    "applied_at": c.applied_at,
                    "backlog": count,
                    "backlog_age_seconds": round(now - oldest, 3) if oldest else 0.0,
                    "in_flight": len(c.inflight),
                    "last_error": c.last_error or None,
                    "error_position": c.error_position.to_json() if c.error_position else None,
                    "error_at": c.error_at,
                    "retry_in": c.retry_in,
                }
            )
        return {
            "hub": self.config.name,
            "version": __version__,
            "time": now,
            "uptime": round(now - self.started, 3),
            "hosts": hosts,
            "origins": origins,
            "targets": targets,
        }
