"""Repairs through the hub: source row images a reconciliation read at a snapshot position,
applied on one target by its normal apply path (REPAIR, an admin command).

A repair waits in its cursor's queue; while one is queued nothing else is delivered to that
target for that origin. It travels as a DELIVER with `repair: true`; the target applies it and
sets its checkpoint to min(checkpoint, snapshot) in the same transaction, and the hub then
re-sends everything after that checkpoint (so the repair is ordered with live changes). The
requester hears REPAIRED, or ERROR `repair-failed`.

A seed chunk is a repair with a `seed` map (hub/seeds.py): the hub also checks that its routes
send that table to the target and that it holds the origin's log from the chunk's snapshot on,
records the chunk once the target has applied it, and delivers a `reset` chunk even to a target
that is blocked for being older than the log (the reset moves its checkpoint into the log).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..codec import pack, unpack
from ..errors import ProtocolError, StaleSnapshotError
from ..model import Transaction
from ..position import GTID_BASE, Position
from ..transport import frames
from ..transport.seedchunk import SeedChunk
from .cursors import Cursor, Repair
from .hosts import Hosts
from .routing import Router
from .seeds import SeedRecords

log = logging.getLogger("binlogsync.hub")

# Repairs in flight to one target at most: while it applies one, the next is already in its
# queue, so a seed's chunks do not wait for a round trip between them (a 1M-row seed's apply
# thread waited 2.5 s of 11 s for its next chunk with one in flight, 1.0 s with three), and a
# MariaDB target's lanes (target.seed_connections, at most this many) each have one to apply.
REPAIRS_AHEAD = 4
# Seconds the log is kept from a seed chunk's snapshot on (the next chunk is read after it); a
# seed that pauses longer may find its next snapshot compacted away and reads it again.
SEED_HOLD = 120.0

Send = Callable[[bytes, bytes, dict[str, Any], Sequence[bytes]], bool]


class Repairs:
    def __init__(
        self,
        router: Router,
        hosts: Hosts,
        send: Send,
        cursor_of: Callable[[str, str], Cursor],
        floor_key: Callable[[str], int],
        head: Callable[[str], Position | None],
        max_bytes: int,
        seeds: SeedRecords,
        reseeded: Callable[[str, str], None],
    ) -> None:
        self.router, self.hosts, self.send = router, hosts, send
        self.cursor_of, self.floor_key, self.head = cursor_of, floor_key, head
        self.max_bytes = max_bytes
        self.seeds, self.reseeded = seeds, reseeded

    def request(self, identity: bytes, message: frames.Message) -> Cursor:
        """Queue a REPAIR on its cursor (the caller then pumps that cursor)."""
        header = message.header
        origin, target, snapshot = header["origin"], header["target"], header["snapshot"]
        cursor = self.cursor_of(target, origin)
        if len(message.bodies) != 1:
            raise ProtocolError("REPAIR carries exactly one transaction")
        # Checked now, not when the target gets it.
        checked = frames.check_body(message.bodies[0], self.max_bytes)
        if checked.number != 0:
            raise ProtocolError("REPAIR carries whole transactions only")
        if not snapshot.by_gtid and self.floor_key(origin) >= GTID_BASE:
            raise ProtocolError(
                f"repair snapshot {snapshot} is a binlog file position, but {origin}'s log is in "
                "GTID positions",
                "pin the snapshot to its GTID state: BINLOG_GTID_POS(binlog_snapshot_file, "
                "binlog_snapshot_position)",
            )
        if snapshot.key < self.floor_key(origin):
            raise StaleSnapshotError(
                f"repair snapshot {snapshot} is older than what the hub still holds for {origin}",
                "read the source again (a fresh snapshot) and resend the repair",
            )
        head = self.head(origin)
        seed = None
        if "seed" in header:
            seed = SeedChunk.from_wire(header["seed"])
            self._check_seed(origin, target, cursor, seed, head is not None)
            # The seed's next chunk is read at or after this snapshot: keep the log from here.
            cursor.seed_hold = snapshot
            cursor.seed_hold_until = time.monotonic() + SEED_HOLD
        if snapshot.gtid is None and head is not None and head.key == snapshot.key:
            snapshot = head  # same place; the GTID lets `caught up` checks compare GTIDs
        cursor.repairs.append(
            Repair(identity, header["id"], snapshot, message.bodies[0], seed, checked.tables)
        )
        log.info(
            "repair %s for %s from %s queued (snapshot %s)", header["id"], target, origin, snapshot
        )
        return cursor

    def _check_seed(
        self, origin: str, target: str, cursor: Cursor, seed: SeedChunk, logged: bool
    ) -> None:
        if not logged:
            raise ProtocolError(
                f"origin {origin} has never sent anything to this hub, so the changes made "
                "after the seed's snapshot would be missing",
                f"start {origin}'s agent (and let it connect) first, then seed",
            )
        if not self.router.sends(origin, target, seed.schema, seed.table):
            raise ProtocolError(
                f"no route sends {origin}'s table {seed.schema}.{seed.table} to {target}",
                "route the table to that target in the hub's config (and restart the hub), "
                "or leave it out of --tables",
            )
        if cursor.blocked_by in ("floor", "detached") and not seed.reset:
            raise ProtocolError(
                f"{target} is blocked: {cursor.blocked}",
                "seed every table it gets from that origin (run seed without --tables): only "
                "a whole reseed can move its checkpoint into the hub's log",
            )

    def deliverable(self, cursor: Cursor) -> bool:
        """Whether the first queued repair may go out: always, unless the cursor is blocked;
        a blocked-for-the-floor cursor still gets a reset seed chunk (it lifts the block)."""
        if not cursor.repairs:
            return False
        if not cursor.blocked:
            return True
        seed = cursor.repairs[0].seed
        return cursor.blocked_by in ("floor", "detached") and seed is not None and seed.reset

    def deliver(self, target: str, origin: str, cursor: Cursor) -> None:
        """Send the queued repairs not out yet, up to REPAIRS_AHEAD in flight; a blocked
        cursor gets only its first (`deliverable`), alone."""
        while len(cursor.repair_seqs) < min(REPAIRS_AHEAD, len(cursor.repairs)):
            if cursor.repair_seqs and cursor.blocked:
                return
            if not self._deliver(target, origin, cursor, cursor.repairs[len(cursor.repair_seqs)]):
                return

    def _deliver(self, target: str, origin: str, cursor: Cursor, repair: Repair) -> bool:
        body = repair.body  # as it came, unless the route renames its schemas
        if not self.router.unchanged(origin, target, repair.tables):
            tx = Transaction.from_wire(unpack(repair.body, tuples=True))
            body = pack(self.router.for_target(origin, target, tx).to_wire(packing=True))
        header = {
            "origin": origin,
            "seq": cursor.next_seq,
            "upto": repair.snapshot,
            "after": None,
            "repair": True,
        }
        if repair.seed is not None:
            header["seed"] = True
            header["reset"] = repair.seed.reset
        host = self.hosts[target]
        if not self.send(host.identity, frames.DELIVER, header, [body]):
            return False
        cursor.repair_seqs.append(cursor.next_seq)
        cursor.next_seq += 1
        return True

    def applied(self, target: str, cursor: Cursor, header: dict[str, Any]) -> bool:
        """An APPLIED that answers the first repair in flight (True), or not (False)."""
        if not cursor.repair_seqs or header["seq"] != cursor.repair_seqs[0]:
            return False
        upto = header["upto"]
        if upto is None:
            raise ProtocolError("APPLIED for a repair needs the new checkpoint")
        repair = cursor.repaired(upto)
        log.info(
            "target %s applied repair %s of %s; replaying from %s",
            target,
            repair.id,
            cursor.origin,
            upto,
        )
        if repair.seed is not None:
            if not self.seeds.applied(cursor.origin, target, repair.seed, str(repair.snapshot)):
                log.warning(
                    "seed chunk %s of %s.%s for %s applied but not recorded: it does not "
                    "continue the recorded chunks (an earlier one was lost; the seed sends "
                    "it again)",
                    repair.id,
                    repair.seed.schema,
                    repair.seed.table,
                    target,
                )
            if repair.seed.reset:
                self.reseeded(cursor.origin, target)  # the checkpoint is in the log again
        self.send(repair.requester, frames.REPAIRED, {"id": repair.id, "upto": upto}, ())
        return True

    def failed(self, target: str, cursor: Cursor, header: dict[str, Any]) -> bool:
        """A FAILED that answers the first repair in flight (True), or not (False). The
        repairs sent after it are applied all the same (each is sound alone)."""
        if not (
            header.get("repair") is True
            and cursor.repair_seqs
            and header.get("seq") == cursor.repair_seqs[0]
            and cursor.repairs
        ):
            return False
        repair = cursor.repairs.popleft()
        cursor.repair_seqs.popleft()
        message = f"target {target} could not apply repair {repair.id[:64]}: {header['error']}"
        self.send(repair.requester, frames.ERROR, {"code": "repair-failed", "message": message}, ())
        return True
