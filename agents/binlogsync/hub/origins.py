"""The hub's side of capture: where each origin's capture starts, what it sends, and the
operator's commands that move it.

Where capture starts. The first time an origin says HELLO to a log (a new hub, or one whose
data directory was lost), capture starts at the oldest checkpoint any of its targets has
reported, so nothing those targets still need is lost; only when no target has reported one
does it start where the origin says (`origin.start`). A target that reports later, with a
checkpoint older than anything the log holds, makes capture restart from there
(`restart_from`) if the origin's binlog still has it — as the origin says in a HELLO, which it
is asked for first, since a PURGE may have come after its last one; otherwise that target is
blocked with a "reseed needed" error (delivery.py). Capture never starts from "now" silently.

What it sends. BATCH bodies are whole transactions or parts of large ones. The batches of
every origin wait to be stored together in one commit, and are acknowledged after it (group
commit): at once when the hub's last commit is at least COMMIT_INTERVAL old (a quiet stream
waits for nothing), else when it is. A commit costs the hub 100-200 µs of CPU whatever it
holds (most of it the fsync), so under load this caps commits at a few hundred a second for
the whole hub, however many origins speak to it (one commit per origin cost a hub with 50
origins half a core: `bench fleet`); targets do not wait for it, since whole transactions are
forwarded to them as they arrive (delivery.py: forward).

Halts and skips. An origin whose capture stopped (HALTED: statement-based DML, a partial row
image, …) is shown in `status` with its error until it moves on. `capture-skip` (an admin
command) moves an origin's head past what it cannot capture, on purpose and recorded: to a
given position, or to the origin's current position (which the origin reports in HELLO), and
makes the origin reconnect to resume from there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..config import HubConfig
from ..errors import ProtocolError
from ..metrics import HubMetrics
from ..position import Position, comparable
from ..transport import frames
from .hosts import Host, Hosts
from .log import Entry, HubLog, StagedPart
from .tablemaps import Fact, TableMaps, facts

log = logging.getLogger("binlogsync.hub")

Send = Callable[[bytes, bytes, dict[str, Any], Sequence[bytes]], bool]


COMMIT_INTERVAL = 0.002  # seconds: at most one commit this often …
_WAITING_ITEMS = 20_000  # … unless this many bodies wait (memory stays bounded)


@dataclass
class Pending:
    """One BATCH received, waiting to be stored with the others of its origin in one commit."""

    identity: bytes
    seq: int
    items: list[Entry | StagedPart] = field(default_factory=list)
    maps: list[Fact] = field(default_factory=list)  # Table_maps it carries (tablemaps.py)


@dataclass
class SkipRequest:
    origin: str
    requester: bytes
    id: str
    to: Position | None  # None: the origin's current position, from its next HELLO
    reason: str


class Origins:
    def __init__(
        self,
        config: HubConfig,
        store: HubLog,
        hosts: Hosts,
        metrics: HubMetrics,
        send: Send,
        kick: Callable[[Host, str], None],
    ) -> None:
        self.config, self.log, self.hosts, self.metrics = config, store, hosts, metrics
        self.send, self.kick = send, kick
        self.table_maps = TableMaps(store.db)
        self.names = sorted({r.origin for r in config.routes})
        self.targets = {
            n: sorted({t for r in config.routes if r.origin == n for t in r.targets})
            for n in self.names
        }
        self.oldest: dict[str, Position | None] = {}  # what each origin's binlog still has
        self.halted: dict[str, dict[str, Any]] = {}
        self.skips: dict[str, SkipRequest] = {}
        self._connecting: str | None = None  # the origin whose HELLO is being answered
        self.commit_interval = COMMIT_INTERVAL
        # Batches received and not stored yet, by origin (acknowledged once stored) …
        self.waiting: dict[str, list[Pending]] = {}
        self._waiting_items: dict[str, int] = {}
        self._waiting_end: dict[str, Position] = {}  # the last transaction end among them
        self._stored_at = 0.0  # … and when the last commit ended (one for every origin)
        # What arrived since `take_new`, by origin: the key it continues (where the log will
        # end before it) and the items, for forwarding to up-to-date targets.
        self._new: dict[str, tuple[int, list[Entry | StagedPart]]] = {}

    @contextmanager
    def connecting(self, name: str) -> Iterator[None]:
        """While answering `name`'s HELLO: a restart needs no kick, the WELCOME carries it."""
        self._connecting = name
        try:
            yield
        finally:
            self._connecting = None

    # -- HELLO -------------------------------------------------------------------------------
    def hello(
        self, host: Host, header: dict[str, Any], reports: dict[str, Position | None]
    ) -> Position | None:
        """The origin role of a HELLO; returns where capture resumes (None: not yet known).

        `reports`: the checkpoints this origin's targets reported (None: "nothing applied"); a
        target that has not reported is absent."""
        name = host.name
        if name not in self.names:
            raise ProtocolError(f"host {name!r} is not the origin of any route")
        start = header["start"]
        head = self.log.head(name)
        said = header.get("current") or start
        if head is not None and not comparable(head, said):
            raise ProtocolError(
                f"origin {name} reports binlog file positions ({said}), but its log on this hub "
                f"is in GTID positions (head {head}); they cannot be ordered against each other",
                "point the origin at the MariaDB server (or a promoted replica) that holds "
                "these GTIDs; a server without MariaDB GTIDs needs a new hub log and a reseed",
            )
        if header["oldest"] is not None:  # unknown now (database unreachable): keep the last
            self.oldest[name] = header["oldest"]
        self._note_halt(name, header.get("halted"))
        skip = self.skips.pop(name, None)
        if skip is not None:
            self._skip(name, skip, header.get("current"))
        if self.log.head(name) is None:
            self._register(name, start, reports)
        return self.log.head(name)

    def _register(
        self, name: str, start: Position | None, reports: dict[str, Position | None]
    ) -> None:
        oldest = self.oldest.get(name)
        known = [p for p in reports.values() if p is not None]
        needed = min(known) if known else None
        if needed is not None and (oldest is None or needed.key >= oldest.key):
            self.log.register(name, needed)
            log.warning(
                "origin %s: this hub log (epoch %s) is new; capture starts at %s, the oldest "
                "checkpoint its targets reported, so they miss nothing",
                name,
                self.log.epoch,
                needed,
            )
        elif start is not None:
            self.log.register(name, start)
            silent = sorted(set(self.targets.get(name, ())) - set(reports))
            log.info("origin %s registered, capture starts at %s", name, start)
            if silent:
                log.warning(
                    "origin %s: target(s) %s have not reported a checkpoint to this log yet; "
                    "when they do, a checkpoint older than %s makes capture restart from it "
                    "(or asks for a reseed if the binlog no longer has it)",
                    name,
                    ", ".join(silent),
                    start,
                )

    def take_new(self) -> dict[str, tuple[int, list[Entry | StagedPart]]]:
        """What arrived since the last call, by origin: (the key it continues, items)."""
        new, self._new = self._new, {}
        return new

    def due(self, now: float) -> list[str]:
        """The origins whose waiting batches are to be committed now: every waiting one, once
        the hub's last commit is COMMIT_INTERVAL old or one origin has many bodies waiting
        (they share the commit: store_all)."""
        if not self.waiting:
            return []
        if now >= self._stored_at + self.commit_interval or any(
            n >= _WAITING_ITEMS for n in self._waiting_items.values()
        ):
            return list(self.waiting)
        return []

    def next_due(self) -> float | None:
        """When the waiting batches are due (time.monotonic); None: nothing waits."""
        if not self.waiting:
            return None
        return self._stored_at + self.commit_interval

    def _drop_waiting(self, name: str) -> list[Pending]:
        self._waiting_items.pop(name, None)
        self._waiting_end.pop(name, None)
        self._new.pop(name, None)
        return self.waiting.pop(name, [])

    def restart_from(self, name: str, position: Position, why: str) -> bool | None:
        """Restart `name`'s capture at `position` (its log starts over) if its binlog still has
        it; False when it does not or is not known yet.

        None: asked, not decided. What the origin said of its oldest binlog may be stale by now
        (a PURGE or binlog expiry since its HELLO), and restarting at a purged position would
        drop this log and stop capture for every target. So the restart happens only while
        answering the origin's HELLO, which brings the oldest position read just before (or,
        when it could not be read, the last one known); otherwise the origin is made to say
        HELLO (if online), and the floor check that follows it decides."""
        oldest = self.oldest.get(name)
        if oldest is None or position.key < oldest.key:
            return False  # the binlog only ever loses files: this holds whatever came since
        if name != self._connecting:
            host = self.hosts.get(name)
            if host is not None and host.online:
                log.info(
                    "origin %s: %s; asking the origin whether its binlog still has %s",
                    name,
                    why,
                    position,
                )
                self.kick(host, "a target needs older binlog: say HELLO with the oldest position")
            return None
        dropped = self.log.restart(name, position)
        # Batches received and not stored yet continue the old head: stored after the
        # restart they would leave a silent hole from `position` to there. Unacknowledged,
        # they are read again.
        self._drop_waiting(name)
        log.warning(
            "origin %s: %s; capture restarts from %s (%d stored transactions dropped, they "
            "are read again)",
            name,
            why,
            position,
            dropped,
        )
        return True  # the WELCOME being answered carries the new start

    # -- BATCH -------------------------------------------------------------------------------
    def batch(self, host: Host, message: frames.Message) -> None:
        """Check a BATCH and keep it with the origin's waiting batches (until `store`)."""
        header = message.header
        if "origin" not in host.roles or header["origin"] != host.name:
            raise ProtocolError(f"{host.name} may only send its own origin's transactions")
        if self.log.head(host.name) is None:
            # Its WELCOME said resume nil: with nothing registered the log would have no floor,
            # and a target's older checkpoint could not be told from a gap.
            raise ProtocolError(
                f"BATCH before the hub knows where {host.name}'s capture starts",
                "say HELLO with a start position (origin.start) and wait for a WELCOME with "
                "`resume`",
            )
        after = header["after"]
        ahead = self._ahead(host.name)
        if after is not None and ahead is not None and after.key > ahead.key:
            # Something between `ahead` and `after` never arrived: storing this would leave a
            # hole. The origin reads again from what is stored.
            self.kick(host, f"a batch continues from {after}, but the hub holds only up to {ahead}")
            raise ProtocolError(
                f"BATCH continues from {after}, but {host.name}'s log ends at {ahead}"
            )
        batch = Pending(host.identity, header["seq"])
        limit = self.config.max_message_bytes
        end = self._waiting_end.get(host.name)  # the last transaction end waiting, with these
        for body in message.bodies:
            # Checked as a target checks it, but not built into objects: the hub keeps and
            # forwards the bytes, and needs only the positions and the tables touched.
            item = frames.check_body(body, limit)
            if not comparable(ahead, item.end):  # GTIDs, then a file position: refused
                raise ProtocolError(
                    f"{host.name} sent a binlog file position ({item.end}) after GTID "
                    f"position {ahead}"
                )
            if item.end is not None and (end is None or item.end.key > end.key):
                end = item.end
            if item.begin is None:
                assert item.end is not None
                payload = body if item.changes else b""
                batch.items.append(Entry(item.end, item.timestamp, payload, tables=item.tables))
                continue
            if item.end is not None and item.end.key <= item.begin.key:
                raise ProtocolError(
                    f"part {item.number} of the transaction at {item.begin} ends at {item.end}, "
                    "not after it begins"
                )
            batch.items.append(
                StagedPart(item.begin.key, item.number, body, item.end, item.timestamp, item.tables)
            )
        batch.maps = facts(
            header,
            [i.position.key if isinstance(i, Entry) else i.begin_key + 1 for i in batch.items],
        )
        self.waiting.setdefault(host.name, []).append(batch)
        if end is not None:
            self._waiting_end[host.name] = end
        self._waiting_items[host.name] = self._waiting_items.get(host.name, 0) + len(batch.items)
        new = self._new.setdefault(host.name, (-1 if ahead is None else ahead.key, []))
        new[1].extend(batch.items)

    def _ahead(self, name: str) -> Position | None:
        """Where `name`'s log will end once its waiting batches are stored."""
        head, waiting = self.log.head(name), self._waiting_end.get(name)
        if head is None or (waiting is not None and waiting.key > head.key):
            return waiting
        return head

    def store(self, name: str) -> Position | None:
        """Store one origin's waiting batches in one commit and acknowledge them; the new
        head."""
        return self.store_all([name]).get(name)

    def store_all(self, names: list[str]) -> dict[str, Position | None]:
        """Store these origins' waiting batches in one commit (group commit across origins:
        the fsync is paid once) and acknowledge them; the new head of each."""
        pending = {name: self.waiting.pop(name, []) for name in names}
        for name in names:
            self._waiting_items.pop(name, None)
            self._waiting_end.pop(name, None)
            self.table_maps.add(name, (m for p in pending[name] for m in p.maps))
        try:
            results = self.log.append_many(
                {name: [i for p in batches for i in p.items] for name, batches in pending.items()}
            )
        finally:
            self._stored_at = time.monotonic()
        heads: dict[str, Position | None] = {}
        for name, result in results.items():
            if isinstance(result, ValueError):
                log.warning(
                    "origin %s sent a part out of order (%s); it starts that over", name, result
                )
                host = self.hosts.get(name)
                if host is not None and host.online:
                    self.kick(host, "a transaction's parts arrived out of order")
                heads[name] = self.log.head(name)
                continue
            heads[name] = self._acknowledge(name, pending[name], *result)
        return heads

    def _acknowledge(
        self, name: str, pending: list[Pending], head: Position | None, fresh: int
    ) -> Position | None:
        self.metrics.appended_by(name).inc(fresh)
        if head is None:
            return None
        if name in self.halted and fresh:
            self.halted.pop(name, None)  # it moved on
        # One ACK per connection, for its last batch: an ACK acknowledges every batch up to
        # its seq (docs/protocol.md), and each message costs the hub as much as a body check.
        last = {p.identity: p for p in pending}
        for p in last.values():
            upto = head
            for item in reversed(p.items):
                end = item.position if isinstance(item, Entry) else item.end
                if end is not None:
                    upto = min(end, head)
                    break
            self.send(p.identity, frames.ACK, {"origin": name, "seq": p.seq, "upto": upto}, ())
        return head

    # -- halts and skips ---------------------------------------------------------------------
    def halted_message(self, host: Host, header: dict[str, Any]) -> None:
        if header["origin"] != host.name or "origin" not in host.roles:
            raise ProtocolError(f"{host.name} may only report its own capture")
        self._note_halt(host.name, header)

    def _note_halt(self, name: str, info: dict[str, Any] | None) -> None:
        """A halt report as decoded (HALTED's header, or HELLO's `halted`: frames.halt_report);
        None or an empty error: capture runs."""
        if info is None or not info["error"]:
            if self.halted.pop(name, None) is not None:
                log.info("origin %s: capture runs again", name)
            return
        position, end = info["position"], info["end"]
        record = {
            "error": info["error"][: frames.MAX_STRING],
            "at": info["at"][:300],
            "position": position.to_json() if position is not None else None,
            "end": end.to_json() if end is not None else None,
            "since": self.halted.get(name, {}).get("since", time.time()),
        }
        if self.halted.get(name, {}).get("error") != record["error"]:
            log.error("origin %s: %s", name, record["error"])
        self.halted[name] = record

    def skip_request(self, identity: bytes, header: dict[str, Any]) -> None:
        name, to = header["origin"], header["to"]
        if name not in self.names:
            raise ProtocolError(f"{name[:64]!r} is not the origin of any route")
        if not header["reason"].strip():
            raise ProtocolError("a capture skip needs a reason")
        head = self.log.head(name)
        if to is not None and not comparable(head, to):
            raise ProtocolError(
                f"{to} is a binlog file position, but {name}'s log is in GTID positions "
                f"(head {head})",
                "give the GTID state to move to, as the halt and `binlogsync status` name it "
                "(e.g. --to 0-1-100), or --to current",
            )
        if to is not None and head is not None and to.key <= head.key:
            raise ProtocolError(
                f"{to} is not above {name}'s head {head}; capture already passed it",
                "give a position after the one `binlogsync status` shows",
            )
        earlier = self.skips.get(name)
        if earlier is not None:
            self._answer_skip(
                earlier, None, None, f"replaced by capture-skip {header['id'][:64]} before it ran"
            )
        self.skips[name] = SkipRequest(name, identity, header["id"], to, header["reason"])
        host = self.hosts.get(name)
        log.warning(
            "capture-skip %s requested for %s to %s: %s",
            header["id"],
            name,
            to or "its current position",
            header["reason"],
        )
        if host is not None and host.online:
            self.kick(host, "capture-skip requested")  # it says HELLO, with its position

    def _skip(self, name: str, skip: SkipRequest, current: Position | None) -> None:
        to = skip.to or current
        if to is None:
            self._answer_skip(skip, None, None, "the origin could not tell its current position")
            return
        head = self.log.head(name)
        if head is not None and to.key <= head.key:
            self._answer_skip(skip, None, None, f"{to} is not above the head {head}")
            return
        before = self.log.move_head(name, to, skip.reason)
        self.halted.pop(name, None)
        log.warning(
            "origin %s: capture moved from %s to %s on purpose (capture-skip %s: %s); the "
            "binlog between them is not replicated",
            name,
            before,
            to,
            skip.id,
            skip.reason,
        )
        self._answer_skip(skip, before, to, "")

    def _answer_skip(
        self, skip: SkipRequest, before: Position | None, to: Position | None, error: str
    ) -> None:
        if error:
            self.send(
                skip.requester,
                frames.ERROR,
                {"code": "skip-failed", "message": f"capture-skip {skip.id[:64]}: {error}"},
                (),
            )
            return
        assert to is not None
        header = {"id": skip.id, "origin": skip.origin, "skipped_from": before, "to": to}
        self.send(skip.requester, frames.SKIPPED, header, ())
