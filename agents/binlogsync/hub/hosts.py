"""The hosts the hub knows (every origin and target of its routes), which connection speaks
for each, and whether it is alive.

A host is online from the HELLO the hub accepts until `heartbeat_liveness` intervals pass in
silence (any message counts as life) or its connection is gone. A new HELLO from another
connection takes the host over: the old connection's routing id is forgotten, so anything it
still sends is answered `hello-first`, never taken for the host.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..transport.limits import MAX_MESSAGE_BYTES

log = logging.getLogger("binlogsync.hub")


@dataclass
class Host:
    name: str
    identity: bytes = b""
    roles: tuple[str, ...] = ()
    online: bool = False
    last_seen: float | None = None
    user_id: str | None = None  # the CURVE key (z85) that said HELLO, when CURVE is on
    max_message_bytes: int = MAX_MESSAGE_BYTES  # the largest message this client accepts
    open_parts: bool = False  # takes a transaction's parts before its end is stored


class Hosts:
    def __init__(self, names: Iterable[str]) -> None:
        self.by_name: dict[str, Host] = {name: Host(name) for name in sorted(names)}
        self.by_identity: dict[bytes, str] = {}

    def __getitem__(self, name: str) -> Host:
        return self.by_name[name]

    def get(self, name: str) -> Host | None:
        return self.by_name.get(name)

    def values(self) -> Iterable[Host]:
        return self.by_name.values()

    def speaking(self, identity: bytes) -> Host | None:
        """The host whose accepted HELLO came from this connection, if any."""
        name = self.by_identity.get(identity)
        return self.by_name[name] if name else None

    def welcome(
        self,
        host: Host,
        identity: bytes,
        roles: tuple[str, ...],
        user_id: str | None,
        max_message_bytes: int,
    ) -> None:
        if host.identity and host.identity != identity:
            self.by_identity.pop(host.identity, None)
        host.identity, host.roles, host.user_id = identity, roles, user_id
        host.max_message_bytes = max_message_bytes
        host.last_seen = time.time()
        self.by_identity[identity] = host.name
        if not host.online:
            host.online = True
            log.info("host %s online (%s)", host.name, ", ".join(roles) or "no roles")

    def heard(self, host: Host) -> None:
        host.last_seen = time.time()

    def offline(self, host: Host, why: str) -> bool:
        """Mark `host` offline and forget its connection; True when it was online."""
        was = host.online
        if was:
            log.warning("host %s offline: %s", host.name, why)
        host.online = False
        self.by_identity.pop(host.identity, None)
        host.identity = b""
        return was

    def silent(self, limit: float) -> list[Host]:
        """Online hosts not heard from for more than `limit` seconds."""
        now = time.time()
        return [
            h
            for h in self.by_name.values()
            if h.online and h.last_seen is not None and now - h.last_seen > limit
        ]
