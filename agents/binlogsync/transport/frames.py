"""Messages on the wire (docs/protocol.md is the reference).

Every message is a multipart ZeroMQ message:

    frame 0   b"BLS1"            protocol name and version
    frame 1   kind               ASCII, one of KINDS
    frame 2   header             msgpack map, fields per kind (checked here)
    frame 3…  bodies             BATCH and DELIVER only: one msgpack transaction per frame

The ROUTER on the hub sees the peer's routing id in front of frame 0. `decode` checks
everything a peer could get wrong (frame count, version, kind, sizes, header fields and
types) and raises ProtocolError naming the problem; the agents log it and carry on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..codec import pack, unpack
from ..errors import ProtocolError
from ..model import Transaction
from ..position import Position

VERSION = b"BLS1"

HELLO, WELCOME, BATCH, ACK = b"HELLO", b"WELCOME", b"BATCH", b"ACK"
DELIVER, APPLIED, FAILED = b"DELIVER", b"APPLIED", b"FAILED"
PING, PONG, STATUS, STATUS_REPLY, ERROR = b"PING", b"PONG", b"STATUS", b"STATUS_REPLY", b"ERROR"
REPAIR, REPAIRED = b"REPAIR", b"REPAIRED"

_STR, _INT, _NUM, _POS, _OPTPOS, _LIST, _MAP = "str", "int", "num", "pos", "pos?", "list", "map"

# Required header fields and their types, per kind. Extra fields are ignored (forward
# compatible); missing or mistyped ones are a ProtocolError.
SCHEMAS: dict[bytes, dict[str, str]] = {
    HELLO: {"host": _STR, "roles": _LIST, "checkpoints": _MAP, "start": _OPTPOS, "agent": _STR},
    WELCOME: {"hub": _STR, "resume": _OPTPOS, "heartbeat": _NUM},
    BATCH: {"origin": _STR, "seq": _INT},
    ACK: {"origin": _STR, "seq": _INT, "upto": _POS},
    DELIVER: {"origin": _STR, "seq": _INT, "upto": _POS},
    APPLIED: {"origin": _STR, "seq": _INT, "upto": _POS},
    FAILED: {"origin": _STR, "position": _OPTPOS, "error": _STR, "retry_in": _NUM},
    PING: {},
    PONG: {},
    STATUS: {},
    STATUS_REPLY: {"status": _MAP},
    ERROR: {"code": _STR, "message": _STR},
    REPAIR: {"origin": _STR, "target": _STR, "snapshot": _POS, "id": _STR},
    REPAIRED: {"id": _STR, "upto": _POS},
}
KINDS = frozenset(SCHEMAS)
_WITH_BODIES = frozenset({BATCH, DELIVER, REPAIR})


@dataclass(frozen=True, slots=True)
class Message:
    kind: bytes
    header: dict[str, Any]
    bodies: tuple[bytes, ...] = ()

    def transactions(self) -> list[Transaction]:
        return [Transaction.from_wire(unpack(body)) for body in self.bodies]


def encode(
    kind: bytes, header: dict[str, Any], bodies: list[bytes] | tuple[bytes, ...] = ()
) -> list[bytes]:
    wire = {k: (v.to_json() if isinstance(v, Position) else v) for k, v in header.items()}
    return [VERSION, kind, pack(wire), *bodies]


def _check(kind: bytes, header: Any) -> dict[str, Any]:
    name = kind.decode()
    if not isinstance(header, dict):
        raise ProtocolError(f"{name} header is not a map")
    checked = dict(header)
    for field, typ in SCHEMAS[kind].items():
        if field not in header:
            raise ProtocolError(f"{name} header lacks field {field!r}")
        value = header[field]
        if typ == _STR and isinstance(value, str) and len(value) <= 65536:
            continue
        if typ == _INT and isinstance(value, int) and not isinstance(value, bool):
            continue
        if typ == _NUM and isinstance(value, int | float) and not isinstance(value, bool):
            continue
        if typ == _LIST and isinstance(value, list):
            continue
        if typ == _MAP and isinstance(value, dict):
            continue
        if typ == _OPTPOS and value is None:
            continue
        if typ in (_POS, _OPTPOS):
            checked[field] = Position.from_json(value)
            continue
        raise ProtocolError(f"{name} field {field!r} must be {typ}, got {type(value).__name__}")
    return checked


def decode(frames: list[bytes], max_bytes: int) -> Message:
    """Validate and decode the frames after the routing id. Raises ProtocolError."""
    if len(frames) < 3:
        raise ProtocolError(f"message has {len(frames)} frames, at least 3 are needed")
    if frames[0] != VERSION:
        raise ProtocolError(
            f"protocol {bytes(frames[0][:16])!r} is not {VERSION!r}",
            "run the same binlogsync version on the hub and the clients",
        )
    kind = bytes(frames[1])
    if kind not in KINDS:
        raise ProtocolError(f"unknown message kind {kind[:32]!r}")
    size = sum(len(f) for f in frames)
    if size > max_bytes:
        raise ProtocolError(f"message of {size} bytes is over the limit of {max_bytes}")
    if len(frames) > 3 and kind not in _WITH_BODIES:
        raise ProtocolError(f"{kind.decode()} carries no bodies, got {len(frames) - 3}")
    header = _check(kind, unpack(frames[2], max_bytes))
    return Message(kind, header, tuple(bytes(f) for f in frames[3:]))
