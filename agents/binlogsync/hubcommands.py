"""Commands that tools send to the hub: `fetch_status` (STATUS), `send_repair` (REPAIR),
`skip_capture` (CAPTURE_SKIP) and `detach` (DETACH). All but STATUS need an admin key when
CURVE is on.

A repair sends source row images for the keys a reconciliation found
different, applied on one target by the normal apply path.

The images must have been read in a consistent snapshot of the source at binlog position
`snapshot`. The target applies them and sets its checkpoint to min(checkpoint, `snapshot`) in
one transaction; the hub then re-sends the origin's transactions after that. Every change
writes whole row images by key, so replaying them over the repaired rows ends in the source's
current state: the repair is ordered with live changes, and no change is lost.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from .codec import pack
from .errors import ApplyError, UnreachableError, UsageError
from .model import Change, Transaction
from .position import Position
from .transport import frames
from .transport.admin import HubAccess, admin_socket, await_answer
from .transport.limits import MAX_MESSAGE_BYTES


def send_repair(
    config_path: HubAccess,
    origin: str,
    target: str,
    snapshot: Position,
    changes: Sequence[Change],
    timeout: float = 60.0,
) -> Position:
    """Returns the target's checkpoint after the repair (<= `snapshot`); raises ApplyError when
    the hub or the target refused it, UnreachableError when nobody answered in time."""
    repair_id = uuid.uuid4().hex[:12]
    tx = Transaction(snapshot, time.time(), tuple(changes))
    header = {"origin": origin, "target": target, "snapshot": snapshot, "id": repair_id}
    with admin_socket(config_path) as (sock, endpoint):
        sock.send_multipart(frames.encode(frames.REPAIR, header, [pack(tx.to_wire(packing=True))]))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1):
                raise UnreachableError(
                    f"repair {repair_id} for {target} was not confirmed within {timeout:.0f} s "
                    f"(hub {endpoint})",
                    f"is {target}'s agent online? `binlogsync status` shows it",
                )
            message = frames.decode(sock.recv_multipart(), 1 << 30)
            if message.kind == frames.REPAIRED and message.header["id"] == repair_id:
                return message.header["upto"]  # type: ignore[no-any-return]
            if message.kind == frames.ERROR:
                raise ApplyError(f"repair refused: {message.header['message']}")


def fetch_status(
    path: HubAccess, timeout: float = 5.0, detail: bool = False, history: bool = False
) -> dict[str, Any]:
    """The hub's status map; `detail` adds each backlog's bytes (a scan on the hub),
    `history` the last hour of lag per target and origin (hub/history.py)."""
    ask = {k: True for k, wanted in (("detail", detail), ("history", history)) if wanted}
    with admin_socket(path) as (sock, endpoint):
        sock.send_multipart(frames.encode(frames.STATUS, ask))
        message = frames.decode(await_answer(sock, endpoint, timeout), MAX_MESSAGE_BYTES)
        if message.kind != frames.STATUS_REPLY:
            raise UnreachableError(f"the hub answered {message.kind.decode()}: {message.header}")
        return dict(message.header["status"])


def skip_capture(
    config_path: HubAccess, origin: str, to: Position | None, reason: str, timeout: float = 60.0
) -> tuple[Position | None, Position]:
    """Move `origin`'s capture to `to` (None: its current binlog position) through the hub;
    returns (where capture stood, where it resumes). The origin's agent must be online (or
    come online within `timeout`): it reads `current`, and it restarts capture there."""
    skip_id = uuid.uuid4().hex[:12]
    header = {"origin": origin, "to": to, "reason": reason, "id": skip_id}
    with admin_socket(config_path) as (sock, endpoint):
        sock.send_multipart(frames.encode(frames.CAPTURE_SKIP, header))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1):
                raise UnreachableError(
                    f"capture-skip {skip_id} for {origin} was not confirmed within "
                    f"{timeout:.0f} s (hub {endpoint}); it stays queued on the hub until "
                    f"{origin}'s agent connects",
                    f"is {origin}'s agent running? `binlogsync status` shows it",
                )
            message = frames.decode(sock.recv_multipart(), MAX_MESSAGE_BYTES)
            if message.kind == frames.SKIPPED and message.header["id"] == skip_id:
                return message.header["skipped_from"], message.header["to"]
            if message.kind == frames.ERROR:
                raise UsageError(f"the hub refused capture-skip: {message.header['message']}")


def detach(
    config_path: HubAccess, origin: str, target: str, reason: str, timeout: float = 10.0
) -> None:
    """Make the hub stop holding `origin`'s changes for `target` until a whole reseed."""
    detach_id = uuid.uuid4().hex[:12]
    header = {"origin": origin, "target": target, "reason": reason, "id": detach_id}
    with admin_socket(config_path) as (sock, endpoint):
        sock.send_multipart(frames.encode(frames.DETACH, header))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1):
                raise UnreachableError(
                    f"the hub at {endpoint} did not confirm the detach of {target} within "
                    f"{timeout:.0f} s",
                    "is `binlogsync server` running, and is this an admin key?",
                )
            message = frames.decode(sock.recv_multipart(), MAX_MESSAGE_BYTES)
            if message.kind == frames.DETACHED and message.header["id"] == detach_id:
                return
            if message.kind == frames.ERROR:
                raise UsageError(f"the hub refused the detach: {message.header['message']}")
