"""Seed chunks to the hub as REPAIRs, several in flight, each confirmed by REPAIRED.

The hub queues a target's repairs in arrival order and the target applies them in that order,
so chunks may be pipelined; the driver (run.py) waits for a table's first chunk to be confirmed
before it sends the next one (see there). Any ERROR ends the seed: the hub refused a chunk, or
the target could not apply one, and the message says which and why.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import zmq

from ..errors import ApplyError, StaleSnapshotError
from ..position import Position
from ..transport import frames
from ..transport.admin import HubAccess, admin_socket
from ..transport.limits import MAX_MESSAGE_BYTES
from ..transport.seedchunk import SeedChunk


@dataclass(frozen=True, slots=True)
class Confirmed:
    id: str
    upto: Position  # the target's checkpoint after the chunk


class Sender:
    def __init__(self, sock: zmq.Socket[bytes], endpoint: str, origin: str, target: str) -> None:
        self.sock, self.endpoint, self.origin, self.target = sock, endpoint, origin, target

    def send(self, snapshot: Position, body: bytes, seed: SeedChunk) -> str:
        """Send one chunk (`body`: a packed transaction at `snapshot`); returns its id."""
        chunk_id = uuid.uuid4().hex[:12]
        header: dict[str, Any] = {
            "origin": self.origin,
            "target": self.target,
            "snapshot": snapshot,
            "id": chunk_id,
            "seed": seed.to_wire(),
        }
        self.sock.send_multipart(frames.encode(frames.REPAIR, header, [body]))
        return chunk_id

    def receive(self, timeout: float) -> Confirmed | None:
        """The next confirmation, or None after `timeout` seconds without one."""
        if not self.sock.poll(max(int(timeout * 1000), 0)):
            return None
        message = frames.decode(self.sock.recv_multipart(), MAX_MESSAGE_BYTES)
        if message.kind == frames.REPAIRED:
            return Confirmed(message.header["id"], message.header["upto"])
        if message.kind == frames.ERROR and message.header["code"] == "stale-snapshot":
            raise StaleSnapshotError(message.header["message"])
        if message.kind == frames.ERROR:
            raise ApplyError(
                f"the seed of {self.target} stopped: {message.header['message']}",
                "fix what it names, then run the same seed command again: it goes on from "
                "the last chunk the target applied",
            )
        return None  # nothing else is addressed to a seed


@contextmanager
def connect(config_path: HubAccess, origin: str, target: str) -> Iterator[Sender]:
    with admin_socket(config_path) as (sock, endpoint):
        yield Sender(sock, endpoint, origin, target)
