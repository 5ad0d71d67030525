"""Repairs through the hub: source row images a reconciliation read at a snapshot position,
applied on one target by its normal apply path (REPAIR, an admin command).

A repair waits in its cursor's queue; while one is queued nothing else is delivered to that
target for that origin. It travels as a DELIVER with `repair: true`; the target applies it and
sets its checkpoint to min(checkpoint, snapshot) in the same transaction, and the hub then
re-sends everything after that checkpoint (so the repair is ordered with live changes). The
requester hears REPAIRED, or ERROR `repair-failed`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..codec import pack, unpack
from ..errors import ProtocolError
from ..model import Transaction
from ..position import GTID_BASE, Position
from ..transport import frames
from .cursors import Cursor, Repair
from .hosts import Hosts
from .routing import Router

log = logging.getLogger("binlogsync.hub")

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
    ) -> None:
        self.router, self.hosts, self.send = router, hosts, send
        self.cursor_of, self.floor_key, self.head = cursor_of, floor_key, head
        self.max_bytes = max_bytes

    def request(self, identity: bytes, message: frames.Message) -> Cursor:
        """Queue a REPAIR on its cursor (the caller then pumps that cursor)."""
        header = message.header
        origin, target, snapshot = header["origin"], header["target"], header["snapshot"]
        cursor = self.cursor_of(target, origin)
        if len(message.bodies) != 1:
            raise ProtocolError("REPAIR carries exactly one transaction")
        message.transactions(self.max_bytes)  # checked now, not when the target gets it
        if not snapshot.by_gtid and self.floor_key(origin) >= GTID_BASE:
            raise ProtocolError(
                f"repair snapshot {snapshot} is a binlog file position, but {origin}'s log is in "
                "GTID positions",
                "pin the snapshot to its GTID state: BINLOG_GTID_POS(binlog_snapshot_file, "
                "binlog_snapshot_position)",
            )
        if snapshot.key < self.floor_key(origin):
            raise ProtocolError(
                f"repair snapshot {snapshot} is older than what the hub still holds for {origin}",
                "read the source again (a fresh snapshot) and resend the repair",
            )
        head = self.head(origin)
        if snapshot.gtid is None and head is not None and head.key == snapshot.key:
            snapshot = head  # same place; the GTID lets `caught up` checks compare GTIDs
        cursor.repairs.append(Repair(identity, header["id"], snapshot, message.bodies[0]))
        log.info(
            "repair %s for %s from %s queued (snapshot %s)", header["id"], target, origin, snapshot
        )
        return cursor

    def deliver(self, target: str, origin: str, cursor: Cursor) -> None:
        """Send the first queued repair, unless it is out already."""
        if cursor.repair_seq is not None:
            return
        repair = cursor.repairs[0]
        tx = self.router.for_target(origin, target, Transaction.from_wire(unpack(repair.body)))
        header = {
            "origin": origin,
            "seq": cursor.next_seq,
            "upto": repair.snapshot,
            "after": None,
            "repair": True,
        }
        host = self.hosts[target]
        if self.send(host.identity, frames.DELIVER, header, [pack(tx.to_wire())]):
            cursor.repair_seq = cursor.next_seq
            cursor.next_seq += 1

    def applied(self, target: str, cursor: Cursor, header: dict[str, Any]) -> bool:
        """An APPLIED that answers the repair in flight (True), or not (False)."""
        if cursor.repair_seq is None or header["seq"] != cursor.repair_seq:
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
        self.send(repair.requester, frames.REPAIRED, {"id": repair.id, "upto": upto}, ())
        return True

    def failed(self, target: str, cursor: Cursor, header: dict[str, Any]) -> bool:
        """A FAILED that answers the repair in flight (True), or not (False)."""
        if not (
            header.get("repair") is True
            and header.get("seq") == cursor.repair_seq
            and cursor.repairs
        ):
            return False
        repair = cursor.repairs.popleft()
        cursor.repair_seq = None
        message = f"target {target} could not apply repair {repair.id[:64]}: {header['error']}"
        self.send(repair.requester, frames.ERROR, {"code": "repair-failed", "message": message}, ())
        return True
