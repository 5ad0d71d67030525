"""Who may say what to the hub.

With CURVE on, the ZAP handler admits only known public keys: host keys (`NAME.key` in
`authorized_keys_dir`, each bound to host NAME), admin keys (`admin_keys_dir`) and the hub's
own key (the operator on the hub's machine, with the hub's config, is an admin). Then, per
message:

    HELLO                       the key must belong to the host the HELLO names
    BATCH APPLIED FAILED HALTED PING
                                from the connection whose HELLO was accepted, signed by the
                                same key; a host speaks only for itself (checked again by the
                                handlers: an origin only for its own origin, a target only for
                                its own cursors)
    STATUS                      any admitted key
    REPAIR CAPTURE_SKIP DETACH  admin keys only: they change what a target holds, where
                                capture stands, or what the hub keeps

Refused handshakes and refused messages are logged with the key's name, or its fingerprint
when the key is unknown: once a minute per key (handshakes) or per sender and reason
(messages), and at most a thousand distinct ones a minute. A message on a connection that
did not pass the ZAP handler (no User-Id) is dropped unanswered. With CURVE off there are no
keys, so nothing can be told apart: every peer may do everything, which is why the hub then
warns unless it listens on loopback.
"""

from __future__ import annotations

import logging
import time

from ..errors import ProtocolError
from ..transport import frames
from ..transport.frames import Message
from .hosts import Host, Hosts

log = logging.getLogger("binlogsync.hub")

ADMIN_KINDS = frozenset({frames.REPAIR, frames.CAPTURE_SKIP, frames.DETACH})
_TOOL_KINDS = ADMIN_KINDS | {frames.STATUS}
_LOG_EVERY = 60.0  # seconds between two log lines about the same refused key
# At most this many distinct refusals are remembered (and so logged) per minute: a peer that
# varies what it sends can neither grow the hub's memory nor flood its log.
_MAX_SUBJECTS = 1000


def fingerprint(z85: bytes | str) -> str:
    text = z85.decode("ascii", "replace") if isinstance(z85, bytes) else z85
    return f"key {text[:8]}…"


class Access:
    def __init__(
        self,
        enabled: bool,
        host_keys: dict[bytes, str] | None = None,
        admin_keys: dict[bytes, str] | None = None,
    ) -> None:
        self.enabled = enabled
        self.host_keys = dict(host_keys or {})
        self.admin_keys = dict(admin_keys or {})
        self._logged: dict[str, float] = {}
        self._quiet_until = 0.0  # full of subjects logged within the last minute until then

    def admitted(self, key: bytes) -> bool:
        """The ZAP decision for a public key (z85); refusals are logged, at most once a minute
        per key."""
        if key in self.host_keys or key in self.admin_keys:
            return True
        self.once(
            fingerprint(key),
            "refused a CURVE handshake from unknown %s: it is neither in authorized_keys_dir "
            "nor in admin_keys_dir",
        )
        return False

    def once(self, subject: str, message: str) -> None:
        """Log `message` % `subject` unless the same subject was logged within a minute."""
        now = time.monotonic()
        if subject not in self._logged and len(self._logged) >= _MAX_SUBJECTS:
            if now < self._quiet_until:
                return
            self._logged = {s: t for s, t in self._logged.items() if now - t < _LOG_EVERY}
            if len(self._logged) >= _MAX_SUBJECTS:
                self._quiet_until = min(self._logged.values()) + _LOG_EVERY
                return
        if now - self._logged.get(subject, -_LOG_EVERY) >= _LOG_EVERY:
            self._logged[subject] = now
            log.warning(message, subject)

    def name_of(self, user_id: str | None) -> str:
        """Who signed a message, for log lines."""
        if user_id is None:
            return "a peer"
        key = user_id.encode()
        name = self.host_keys.get(key) or self.admin_keys.get(key)
        return f"{name}'s key" if name else fingerprint(user_id)

    def check(
        self, hosts: Hosts, identity: bytes, message: Message, user_id: str | None
    ) -> Host | None:
        """The host this message speaks for (None for HELLO and tool messages), or
        ProtocolError saying why it is refused."""
        kind = message.kind
        if kind == frames.HELLO:
            if self.enabled:
                name = message.header["host"]
                owner = self.host_keys.get(user_id.encode()) if user_id else None
                if owner != name:
                    raise ProtocolError(
                        f"HELLO for host {name!r} signed by {self.name_of(user_id)}; a host key "
                        "speaks only for its own host"
                    )
            return None
        if kind in _TOOL_KINDS:
            if kind in ADMIN_KINDS and self.enabled:
                if user_id is None or user_id.encode() not in self.admin_keys:
                    raise ProtocolError(
                        f"{kind.decode()} needs an admin key; it was signed by "
                        f"{self.name_of(user_id)}",
                        "run it with the hub's config or an admin config whose key is in the "
                        "hub's admin_keys_dir",
                    )
            return hosts.speaking(identity)
        host = hosts.speaking(identity)
        if host is None:
            raise ProtocolError("send HELLO first")
        if self.enabled and host.user_id != user_id:
            raise ProtocolError(
                f"message for {host.name} signed by {self.name_of(user_id)}, not by its own key"
            )
        return host
