"""Delivery: each target's cursor per origin, and what the hub sends it (DELIVER).

Everything after a target's cursor is its outbox (the paper's). The hub pushes it in order,
at most `window` DELIVERs unacknowledged per cursor, each of at most `batch_transactions`
transactions and DELIVER_BYTES bytes (and never more than the target's max_message_bytes). A
transaction stored in parts goes one part per DELIVER; the target acknowledges each part (its
checkpoint does not move until the last one commits). A target that has been sent everything
before such a transaction gets its parts as they are stored, before its last part arrives
(`upto` nil until then), when its HELLO said it takes them (`open_parts`), so that it applies
while the origin's agent still reads the transaction. Every DELIVER names the position it
continues from (`after`), so a target can drop anything that does not continue what it has,
such as deliveries still in flight when it asked for a re-send (FAILED `resend`).

A target's HELLO reports its checkpoint, and that is the truth. When the checkpoint is older
than anything this log holds for that origin (a new hub, a lost data directory, a target
restored from a backup), capture restarts from there if the origin's binlog still has it
(origins.py; the target waits, blocked, until the origin's next HELLO tells); otherwise the
cursor is blocked with a "reseed needed" error until the target reports a checkpoint the log
can serve.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..codec import pack, unpack
from ..config import HubConfig
from ..errors import ProtocolError
from ..metrics import HubMetrics
from ..model import Part, Transaction
from ..position import Position
from ..transport import frames
from ..transport.limits import FRAME_ROOM
from .cursors import Cursor
from .detached import Detachments
from .hosts import Host, Hosts
from .log import Entry, HubLog
from .origins import Origins
from .repairs import Repairs
from .routing import Router
from .seeds import SeedRecords

log = logging.getLogger("binlogsync.hub")

Send = Callable[[bytes, bytes, dict[str, Any], Sequence[bytes]], bool]


class Retention(Protocol):
    """Who else keeps the log (the binlog service: binlogservice/service.py)."""

    def serves(self, origin: str) -> bool: ...

    def compaction_bound(self, origin: str) -> Position | None: ...


DELIVER_BYTES = 8 * 1024 * 1024
# The bodies of unacknowledged DELIVERs, all cursors together: they sit in the hub's memory
# (ZeroMQ's queues) until the target reads them, so with a cursor's window alone (8 DELIVERs
# of up to 8 MiB) a fleet of lagging targets took the hub to ~750 MB (`bench fleet`, 200
# cursors). Each cursor gets an equal share, at least CURSOR_BYTES_MIN and at most a window.
INFLIGHT_BYTES = 256 * 1024 * 1024
CURSOR_BYTES_MIN = 1024 * 1024


class Delivery:
    def __init__(
        self,
        config: HubConfig,
        store: HubLog,
        router: Router,
        hosts: Hosts,
        metrics: HubMetrics,
        send: Send,
        origins: Origins,
        retention: Retention | None = None,
    ) -> None:
        self.config, self.log, self.router, self.hosts = config, store, router, hosts
        self.metrics, self.send, self.origins = metrics, send, origins
        self.retention = retention
        self.cursors: dict[tuple[str, str], Cursor] = {}
        self.reported: set[tuple[str, str]] = set()  # cursors whose target reported to this log
        for route in config.routes:
            for target in route.targets:
                self.cursors.setdefault((target, route.origin), Cursor(target, route.origin))
        self._by_origin: dict[str, list[Cursor]] = {}
        for (_target, origin), cursor in self.cursors.items():
            self._by_origin.setdefault(origin, []).append(cursor)
        for key, position in store.cursors().items():
            if key in self.cursors:
                self.cursors[key].applied = position
                self.cursors[key].rewind()
                self.reported.add(key)
        self.cursor_bytes = max(
            CURSOR_BYTES_MIN,
            min(config.window * DELIVER_BYTES, INFLIGHT_BYTES // max(1, len(self.cursors))),
        )  # a cursor's share of INFLIGHT_BYTES
        self.repairs = Repairs(
            router,
            hosts,
            send,
            self.cursor,
            lambda origin: self._floor_key(origin),
            store.head,
            config.max_message_bytes,
            SeedRecords(store.db),
            self._reseeded,
        )
        self.detachments = Detachments(store.db)
        for (target, origin), (reason, _at) in self.detachments.all().items():
            if (target, origin) in self.cursors:
                self._block_detached(self.cursors[(target, origin)], reason)

    def cursor(self, target: str, origin: Any) -> Cursor:
        cursor = self.cursors.get((target, origin))
        if cursor is None:
            raise ProtocolError(f"no route sends origin {str(origin)[:64]!r} to {target[:64]!r}")
        return cursor

    def of_origin(self, origin: str) -> list[Cursor]:
        return list(self._by_origin.get(origin, ()))

    def reports(self, origin: str) -> dict[str, Position | None]:
        """The checkpoints `origin`'s targets reported to this log (absent: not yet)."""
        return {
            c.target: c.applied
            for c in self.of_origin(origin)
            if (c.target, origin) in self.reported
        }

    def _floor_key(self, origin: str) -> int:
        floor = self.log.floor(origin)
        return floor.key if floor is not None else -1

    # -- detaching ---------------------------------------------------------------------------
    def detach(self, header: dict[str, Any]) -> tuple[str, str]:
        """DETACH: stop holding `origin`'s changes for `target` (durably) until a reseed."""
        target, origin, reason = header["target"], header["origin"], header["reason"].strip()
        cursor = self.cursor(target, origin)
        if not reason:
            raise ProtocolError("DETACH needs a reason", "say why; it is shown in `status`")
        self.detachments.add(target, origin, reason[:1000])
        self._block_detached(cursor, reason[:1000])
        log.warning("target %s detached from origin %s: %s", target, origin, reason[:300])
        return target, origin

    @staticmethod
    def _block_detached(cursor: Cursor, reason: str) -> None:
        cursor.blocked = (
            f"detached: {reason} — the hub keeps nothing for it; reseed it with `binlogsync "
            f"seed --origin {cursor.origin} --target {cursor.target}` (every table)"
        )
        cursor.blocked_by = "detached"
        cursor.rewind()

    def _reseeded(self, origin: str, target: str) -> None:
        """A reset seed chunk was applied on `target`: it is attached again, in the log."""
        if (target, origin) in self.detachments.all():
            self.detachments.remove(target, origin)
            cursor = self.cursors[(target, origin)]
            cursor.blocked = cursor.blocked_by = ""
            log.info("target %s is attached to origin %s again (reseeded)", target, origin)
        self.check_floor(origin)

    # -- HELLO -------------------------------------------------------------------------------
    def hello(self, host: Host, header: dict[str, Any]) -> None:
        """The target role of a HELLO: its checkpoints are the truth."""
        reported = frames.checkpoints(header)
        for origin in sorted(self.router.origins_of(host.name)):
            cursor = self.cursors[(host.name, origin)]
            position, epoch = reported.get(origin, (None, None))
            cursor.reset_to(position, epoch)
            self.reported.add((host.name, origin))
            if cursor.blocked_by != "detached":  # only a reseed attaches it again
                cursor.blocked = cursor.blocked_by = ""
        for origin in sorted(self.router.origins_of(host.name)):
            self.check_floor(origin)

    def check_floor(self, origin: str) -> None:
        """Targets that need more of `origin` than this log holds: restart capture for them if
        the origin's binlog still has it, else block them with the reason."""
        floor = self.log.floor(origin)
        for cursor in self.of_origin(origin):
            if cursor.blocked_by == "floor":
                cursor.blocked = cursor.blocked_by = ""  # decided again below
        if floor is None:
            return
        behind = [
            c
            for c in self.of_origin(origin)
            if c.applied is not None
            and c.applied.key < floor.key
            and c.blocked_by != "detached"  # held by nothing until a reseed
        ]
        if not behind:
            return
        oldest = self.origins.oldest.get(origin)
        fixable = [c for c in behind if oldest is not None and c.applied_key >= oldest.key]
        asked: list[Cursor] = []
        if fixable:
            start = min(fixable, key=lambda c: c.applied_key)
            assert start.applied is not None
            why = (
                f"target {start.target} needs it from {start.applied} (checkpoint of hub epoch "
                f"{start.epoch or 'unknown'}), older than this log (epoch {self.log.epoch}) "
                f"holds (after {floor})"
            )
            restarted = self.origins.restart_from(origin, start.applied, why)
            if restarted:
                for cursor in self.of_origin(origin):
                    cursor.rewind()
                behind = [c for c in behind if c not in fixable]
            elif restarted is None:
                asked = fixable  # the origin's next HELLO decides (check_floor again)
        for cursor in behind:
            if oldest is None or cursor in asked:
                reason = (
                    f"waiting for origin {origin} to "
                    f"{'say HELLO' if cursor in asked else 'connect'}: {cursor.target}'s "
                    f"checkpoint {cursor.applied} is older than this log holds (after {floor}), "
                    "and only the origin can tell whether its binlog still has it"
                )
            else:
                reason = (
                    f"reseed needed: {cursor.target}'s checkpoint {cursor.applied} (hub epoch "
                    f"{cursor.epoch or 'unknown'}) is older than anything this hub holds for "
                    f"{origin} (after {floor}, epoch {self.log.epoch}), and {origin}'s binlog "
                    f"starts at {oldest}"
                )
            if cursor.blocked != reason:
                say = log.warning if reason.startswith("waiting") else log.error
                say("target %s, origin %s: %s", cursor.target, origin, reason)
            cursor.blocked, cursor.blocked_by = reason, "floor"

    # -- sending -------------------------------------------------------------------------------
    def forward(self, origin: str, items: Sequence[Any], after_key: int) -> None:
        """Send new whole transactions to targets that are up to date, before the log's commit.

        `after_key`: where the origin's log ends (stored or waiting to be) before `items`; a
        target that has been sent exactly that far gets them now. This takes the commit (its
        fsync, and the wait for a group commit) off the latency path and is safe: a target
        applies by position and reports its checkpoint as the truth, and if the hub dies
        before its commit, the origin (not acknowledged) re-sends and the target skips what
        it has. Parts are only sent once stored (`pump`).
        """
        if self.log.head(origin) is None or not all(isinstance(i, Entry) for i in items):
            return
        fresh = self.log.fresh(items, after_key)
        if not fresh:
            return
        for target in self.router.targets_of(origin):
            cursor = self.cursors[(target, origin)]
            if (
                cursor.sent_key == after_key
                and cursor.parts_sent == 0
                and not cursor.repairs
                and not cursor.blocked
            ):
                self._send_entries(target, origin, cursor, fresh, None)

    def pump(self, target: str, origin: str) -> None:
        host = self.hosts.get(target)
        cursor = self.cursors.get((target, origin))
        if host is None or cursor is None or not host.online or "target" not in host.roles:
            return
        if self.repairs.deliverable(cursor):
            # Nothing else goes to this target until the repair is applied.
            self.repairs.deliver(target, origin, cursor)
            return
        if cursor.blocked or cursor.repairs:
            return
        if cursor.open_parts is not None and cursor.open_parts[1] != self.log.stage(origin):
            # The parts sent before their end was known may not be the ones stored now: send
            # from the first again (the target keeps what it has if the bytes are the same).
            cursor.parts_sent, cursor.open_parts = 0, None
        head = self.log.head(origin)
        limit = self.config.batch_transactions
        while head is not None and cursor.sent_key < head.key:
            if self._window_full(cursor):
                return  # a read now would be in vain: each APPLIED that frees a slot pumps
            entries = self.log.read(origin, cursor.sent_key, limit)
            full = len(entries) == limit
            if not self._send_entries(target, origin, cursor, entries, None if full else head):
                return
        if host.open_parts and head is not None:
            self._send_open_parts(host, origin, cursor)

    def _send_entries(
        self,
        target: str,
        origin: str,
        cursor: Cursor,
        entries: list[Entry],
        head: Position | None,
    ) -> bool:
        """Send `entries` as DELIVERs, within the window and the size limits.

        `head` given: the last DELIVER's `upto` is the head (nothing is stored between).
        Returns False when the window filled, the target is gone or the cursor got blocked.
        """
        host = self.hosts[target]
        if not host.online or "target" not in host.roles:
            return False
        hard = host.max_message_bytes - FRAME_ROOM  # no message may be larger
        # Bodies batched per message (a larger one goes alone): a quarter of the cursor's
        # share at most, so that a few DELIVERs are in flight at once.
        budget = min(DELIVER_BYTES, hard, max(self.cursor_bytes // 4, 64 * 1024))
        whole = self.router.passes_whole(origin, target)
        bodies: list[bytes] = []
        size = 0
        upto: Position | None = None
        oldest: float | None = None
        for entry in entries:
            if entry.position.key <= cursor.sent_key:
                continue
            if entry.parts:
                if upto is not None and not self._deliver(host, cursor, bodies, upto, oldest):
                    return False
                bodies, size, upto, oldest = [], 0, None, None
                if not self._send_parts(host, origin, cursor, entry, hard):
                    return False
                continue
            body = self._body(origin, target, entry, whole)
            if body and len(body) > hard:
                self._too_large(cursor, entry.position, len(body), host)
                return False
            if (
                body
                and bodies
                and (
                    size + len(body) + frames.BODY_FRAMING > budget
                    or len(bodies) >= self.config.batch_transactions
                )
            ):
                if not self._deliver(host, cursor, bodies, upto, oldest):
                    return False
                bodies, size, oldest = [], 0, None
            if body:
                bodies.append(body)
                size += len(body) + frames.BODY_FRAMING
                oldest = entry.timestamp if oldest is None else oldest
            upto = entry.position
        if (
            head is not None
            and (upto is None or head.key > upto.key)
            and head.key > cursor.sent_key
        ):
            upto = head
        if upto is not None:
            return self._deliver(host, cursor, bodies, upto, oldest)
        return True

    def _body(self, origin: str, target: str, entry: Entry, whole: bool) -> bytes:
        if not entry.payload or whole:
            return entry.payload
        if entry.tables is not None and self.router.unchanged(origin, target, entry.tables):
            return entry.payload
        tx = Transaction.from_wire(unpack(entry.payload, tuples=True))
        routed = self.router.for_target(origin, target, tx)
        if routed is tx:
            return entry.payload  # all of it, unchanged: forward the bytes
        return pack(routed.to_wire(packing=True)) if routed.changes else b""

    def _deliver(
        self,
        host: Host,
        cursor: Cursor,
        bodies: list[bytes],
        upto: Position | None,
        oldest: float | None,
    ) -> bool:
        assert upto is not None
        size = sum(map(len, bodies))
        if len(cursor.inflight) >= self.config.window or (
            cursor.inflight and cursor.inflight_bytes + size > self.cursor_bytes
        ):
            return False
        header: dict[str, Any] = {
            "origin": cursor.origin,
            "seq": cursor.next_seq,
            "upto": upto,
            "after": cursor.sent_position,
        }
        if oldest is not None and 0 <= oldest <= frames.MAX_NUM:
            header["ts"] = oldest
        if not self.send(host.identity, frames.DELIVER, header, bodies):
            return False
        cursor.sent(upto.key, size=size)
        cursor.sent_position = upto
        self.metrics.delivered_to(cursor.target, cursor.origin).inc(len(bodies))
        return True

    def _send_parts(
        self, host: Host, origin: str, cursor: Cursor, entry: Entry, budget: int
    ) -> bool:
        """Send the parts of `entry` not sent yet, one per DELIVER, within the window."""
        assert entry.begin_key is not None
        while cursor.parts_sent < entry.parts:
            last = cursor.parts_sent + 1 == entry.parts
            if not self._send_part(host, origin, cursor, entry.begin_key, entry.position,
                                   entry.timestamp, last, budget):  # fmt: skip
                return False
            if last:
                cursor.sent_position = entry.position
        return True

    def _send_open_parts(self, host: Host, origin: str, cursor: Cursor) -> None:
        """Send the stored parts of the transaction still arriving, to a target that has been
        sent everything before it: it applies them in its open target transaction while the
        origin's agent reads the rest (the last part, which commits it, goes with the stored
        transaction: `_send_parts`)."""
        arriving = self.log.arriving(origin)
        if arriving is None:
            return
        begin_key, stored, stage = arriving
        if cursor.open_parts is None:
            if cursor.parts_sent:
                return  # parts of a stored transaction are out (`_send_parts` goes on)
            cursor.open_parts = (begin_key, stage)
        elif cursor.open_parts != (begin_key, stage):
            return  # `pump` starts the new one over from its first part
        budget = host.max_message_bytes - FRAME_ROOM
        while cursor.parts_sent < stored:
            if not self._send_part(host, origin, cursor, begin_key, None, None, False, budget):
                return

    def _window_full(self, cursor: Cursor) -> bool:
        """No further DELIVER fits in the cursor's window, whatever its size."""
        return len(cursor.inflight) >= self.config.window or bool(
            cursor.inflight and cursor.inflight_bytes >= self.cursor_bytes
        )

    def _send_part(
        self,
        host: Host,
        origin: str,
        cursor: Cursor,
        begin_key: int,
        end: Position | None,
        timestamp: float | None,
        last: bool,
        budget: int,
    ) -> bool:
        """Send part `cursor.parts_sent + 1` of the transaction at `begin_key` (ending at
        `end`, None while its last part is not stored), within the window."""
        if self._window_full(cursor):
            return False
        number = cursor.parts_sent + 1
        try:
            body, tables = self.log.part(origin, begin_key, number)
        except LookupError as exc:  # compacted since: the floor check restarts or blocks
            log.warning("target %s: %s", cursor.target, exc)
            self.check_floor(origin)
            return False
        if not self.router.passes_whole(origin, host.name) and (
            tables is None or not self.router.unchanged(origin, host.name, tables)
        ):
            body = self._routed_part(origin, host.name, body)
        if len(body) > budget:
            where = end or self.log.head(origin)
            assert where is not None
            self._too_large(cursor, where, len(body), host)
            return False
        header: dict[str, Any] = {
            "origin": origin,
            "seq": cursor.next_seq,
            "upto": end,
            "after": cursor.sent_position,
            "part": number,
        }
        if timestamp is not None and 0 <= timestamp <= frames.MAX_NUM:
            header["ts"] = timestamp
        if not self.send(host.identity, frames.DELIVER, header, [body]):
            return False
        cursor.sent(end.key if end is not None else cursor.sent_key, part=not last,
                    size=len(body))  # fmt: skip
        self.metrics.delivered_to(cursor.target, origin).inc(1 if last else 0)
        return True

    def _routed_part(self, origin: str, target: str, body: bytes) -> bytes:
        part = Part.from_wire(unpack(body, tuples=True))
        probe = Transaction(part.end or part.begin, part.timestamp, part.changes)
        routed = self.router.for_target(origin, target, probe)
        if routed is probe:
            return body
        kept = Part(part.begin, part.number, part.last, routed.changes, part.end, part.timestamp)
        return pack(kept.to_wire(packing=True))

    def _too_large(self, cursor: Cursor, position: Position, size: int, host: Host) -> None:
        reason = (
            f"transaction {position} needs a message of {size} bytes, over {host.name}'s "
            f"max_message_bytes ({host.max_message_bytes})"
        )
        if cursor.last_error != reason:
            log.error("target %s, origin %s: %s", host.name, cursor.origin, reason)
        cursor.last_error, cursor.error_position = reason, position
        cursor.error_at, cursor.retry_in = time.time(), None
        cursor.blocked = (
            reason + " — raise max_message_bytes in that client's config and restart it"
        )
        cursor.blocked_by = "size"

    # -- what targets report -----------------------------------------------------------------
    def applied(self, host: Host, header: dict[str, Any]) -> tuple[str, str]:
        cursor = self.cursor(host.name, header["origin"])
        if not self.repairs.applied(host.name, cursor, header):
            cursor.acknowledge(header["seq"], header["upto"])
        return host.name, cursor.origin

    def failed(self, host: Host, header: dict[str, Any]) -> tuple[str, str]:
        cursor = self.cursor(host.name, header["origin"])
        if self.repairs.failed(host.name, cursor, header):
            return host.name, cursor.origin
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
        if header.get("resend") is True:
            cursor.rewind()  # it dropped what it had of a transaction in parts
        return host.name, cursor.origin

    def offline(self, host: Host) -> None:
        for (target, _origin), cursor in self.cursors.items():
            if target == host.name:
                cursor.rewind()

    # -- housekeeping --------------------------------------------------------------------------
    def flush(self) -> None:
        dirty = {k: c.applied for k, c in self.cursors.items() if c.dirty and c.applied}
        if dirty:
            self.log.save_cursors({k: p for k, p in dirty.items() if p is not None})
            for key in dirty:
                self.cursors[key].dirty = False

    def compact(self) -> bool:
        """Compact a step; True when more is left to drop (call again soon)."""
        more = False
        for origin in self.origins.names:
            every = self.of_origin(origin)
            # A target that needs a reseed does not hold the log, nor does a detached one; one
            # waiting for a larger max_message_bytes does.
            cursors = [c for c in every if c.blocked_by not in ("floor", "detached")]
            if any(c.repairs for c in every):
                continue  # a repair will send its target back to its snapshot: keep the log
            head = self.log.head(origin)
            if head is None:
                continue
            if cursors:
                lowest = min(cursors, key=lambda c: c.applied_key)
                if lowest.applied is None:
                    continue
                # A target may have applied what was forwarded to it before the commit: the
                # floor never passes what the log holds.
                below = min(lowest.applied, head)
            elif every and all(c.blocked_by == "detached" for c in every):
                below = head  # nobody is to be sent anything: only a reseed brings one back
            elif not every and self.retention is not None and self.retention.serves(origin):
                below = head  # no target: the binlog service alone keeps it (below)
            else:
                continue
            if self.retention is not None and self.retention.serves(origin):
                held = self.retention.compaction_bound(origin)
                if held is None:
                    continue  # nothing the service indexed is old enough yet
                below = min(below, held)
            now = time.monotonic()
            holds = [c.seed_hold for c in every if c.seed_hold and c.seed_hold_until > now]
            dropped, done = self.log.compact(origin, min([below, *holds]))
            more = more or not done
            if dropped:
                log.debug("compacted %d transactions of %s", dropped, origin)
        return more
