"""Messages on the wire (docs/protocol.md is the reference).

Every message is a multipart ZeroMQ message:

    frame 0   b"BLS4"            protocol name and version
    frame 1   kind               ASCII, one of KINDS
    frame 2   header             msgpack map, fields per kind (checked here)
    frame 3   bodies             BATCH, DELIVER and REPAIR only, when they carry any: a msgpack
                                 array of bin, each one msgpack transaction or transaction part

The ROUTER on the hub sees the peer's routing id in front of frame 0. `decode` checks
everything a peer could get wrong (frame count, version, kind, sizes, header fields, their
types and ranges) and raises ProtocolError naming the problem; the agents log it and carry on.
A value that passes `decode` is safe to store and compare: integers fit 63 bits, numbers are
finite, strings are bounded, positions are valid; HELLO's checkpoints are checked whole and its
`halted` report is put in HALTED's shape (`halt_report`). A value nested too deep to show in
an error message is refused too (RecursionError never leaves `decode` or `decode_body`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..codec import pack, unpack
from ..errors import ProtocolError
from ..model import CheckedBody, Part, Transaction, body_from_wire
from ..model import check_body as model_check_body
from ..position import Position
from .limits import MAX_MESSAGE_BYTES

# BLS4: a message's bodies in one frame (BLS3 sent a frame per body: a BLS3 peer would take
# the array for one body). BLS3: GTID positions (a BLS2 peer would misread them).
VERSION = b"BLS4"

HELLO, WELCOME, BATCH, ACK = b"HELLO", b"WELCOME", b"BATCH", b"ACK"
DELIVER, APPLIED, FAILED, HALTED = b"DELIVER", b"APPLIED", b"FAILED", b"HALTED"
PING, PONG, STATUS, STATUS_REPLY, ERROR = b"PING", b"PONG", b"STATUS", b"STATUS_REPLY", b"ERROR"
REPAIR, REPAIRED = b"REPAIR", b"REPAIRED"
CAPTURE_SKIP, SKIPPED = b"CAPTURE_SKIP", b"SKIPPED"
DETACH, DETACHED = b"DETACH", b"DETACHED"

# Field types: str, int (0 ≤ n < 2**63), num (finite, 0 ≤ x ≤ 1e12), bool, pos (a position),
# pos? (a position or nil), list, map, str? (a string or nil).
_STR, _INT, _NUM, _BOOL = "str", "int", "num", "bool"
_POS, _OPTPOS, _LIST, _MAP, _OPTSTR = "pos", "pos?", "list", "map", "str?"

# Required header fields and their types, per kind; then optional ones, checked when present.
# Other fields are ignored (forward compatible); a missing or mistyped one is a ProtocolError.
SCHEMAS: dict[bytes, dict[str, str]] = {
    HELLO: {
        "host": _STR,
        "roles": _LIST,
        "checkpoints": _MAP,
        "start": _OPTPOS,
        "oldest": _OPTPOS,
        "agent": _STR,
        "max_message_bytes": _INT,
    },
    WELCOME: {"hub": _STR, "epoch": _STR, "resume": _OPTPOS, "heartbeat": _NUM},
    BATCH: {"origin": _STR, "seq": _INT, "after": _OPTPOS},
    ACK: {"origin": _STR, "seq": _INT, "upto": _POS},
    DELIVER: {"origin": _STR, "seq": _INT, "upto": _OPTPOS, "after": _OPTPOS},
    APPLIED: {"origin": _STR, "seq": _INT, "upto": _OPTPOS},
    FAILED: {"origin": _STR, "position": _OPTPOS, "error": _STR, "retry_in": _NUM},
    HALTED: {"origin": _STR, "error": _STR, "position": _OPTPOS, "at": _STR, "end": _OPTPOS},
    PING: {},
    PONG: {},
    STATUS: {},
    STATUS_REPLY: {"status": _MAP},
    ERROR: {"code": _STR, "message": _STR},
    REPAIR: {"origin": _STR, "target": _STR, "snapshot": _POS, "id": _STR},
    REPAIRED: {"id": _STR, "upto": _POS},
    CAPTURE_SKIP: {"origin": _STR, "to": _OPTPOS, "reason": _STR, "id": _STR},
    DETACH: {"origin": _STR, "target": _STR, "reason": _STR, "id": _STR},
    DETACHED: {"id": _STR, "origin": _STR, "target": _STR},
    SKIPPED: {"id": _STR, "origin": _STR, "skipped_from": _OPTPOS, "to": _POS},
}
OPTIONAL: dict[bytes, dict[str, str]] = {
    HELLO: {"halted": _MAP, "current": _OPTPOS, "open_parts": _BOOL},
    WELCOME: {"max_message_bytes": _INT},
    STATUS: {"detail": _BOOL, "history": _BOOL},
    DELIVER: {"part": _INT, "repair": _BOOL, "ts": _NUM, "seed": _BOOL, "reset": _BOOL},
    REPAIR: {"seed": _MAP},
    FAILED: {"seq": _INT, "repair": _BOOL, "resend": _BOOL},
    BATCH: {"maps": _LIST},  # Table_map bodies for the binlog service (hub/tablemaps.py)
}
KINDS = frozenset(SCHEMAS)
_WITH_BODIES = frozenset({BATCH, DELIVER, REPAIR})
MAX_STRING = 65536
MAX_INT = (1 << 63) - 1
MAX_NUM = 1e12  # commit times (seconds since 1970) fit, with room
# What the bodies frame adds to a body at most (a bin's header), which a sender counts in a
# message's size. One frame for all bodies, not a frame each: each ZeroMQ frame costs a few µs
# to send and to receive, a bin's copy out of the array a fraction of one (docs/protocol.md).
BODY_FRAMING = 5
_BYTES = frozenset({bytes})


@dataclass(frozen=True, slots=True)
class Message:
    kind: bytes
    header: dict[str, Any]
    bodies: tuple[bytes, ...] = ()

    def bodies_decoded(self, max_bytes: int) -> list[Transaction | Part]:
        return [decode_body(body, max_bytes) for body in self.bodies]

    def transactions(self, max_bytes: int = MAX_MESSAGE_BYTES) -> list[Transaction]:
        """The bodies as whole transactions (REPAIR); a part here is a ProtocolError."""
        out = []
        for item in self.bodies_decoded(max_bytes):
            if not isinstance(item, Transaction):
                raise ProtocolError(f"{self.kind.decode()} carries whole transactions only")
            out.append(item)
        return out


def encode(kind: bytes, header: dict[str, Any], bodies: Sequence[bytes] = ()) -> list[bytes]:
    wire = {k: (v.to_json() if isinstance(v, Position) else v) for k, v in header.items()}
    if not bodies:
        return [VERSION, kind, pack(wire)]
    return [VERSION, kind, pack(wire), pack(list(bodies))]


def _bodies(kind: bytes, frame: bytes) -> tuple[bytes, ...]:
    """The bodies frame: a msgpack array of bin, each a body. Raises ProtocolError."""
    bodies = unpack(frame, tuples=True)  # its size is the message's, checked in `decode`
    if type(bodies) is not tuple or not _BYTES.issuperset(map(type, bodies)):
        raise ProtocolError(f"{kind.decode()} bodies frame must be an array of bin")
    return bodies


def _value(name: str, field: str, typ: str, value: Any) -> Any:
    """`value` checked against `typ` (positions decoded); ProtocolError when it does not fit."""
    if typ in (_STR, _OPTSTR):
        if isinstance(value, str) and len(value) <= MAX_STRING:
            return value
        if typ == _OPTSTR and value is None:
            return None
    elif typ == _INT:
        if type(value) is int and 0 <= value <= MAX_INT:
            return value
    elif typ == _NUM:
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and 0 <= value <= MAX_NUM
        ):
            return value
    elif typ == _BOOL:
        if isinstance(value, bool):
            return value
    elif typ == _LIST:
        if isinstance(value, list):
            return value
    elif typ == _MAP:
        if isinstance(value, dict):
            return value
    elif typ in (_POS, _OPTPOS):
        if value is None and typ == _OPTPOS:
            return None
        return Position.from_json(value)
    shown = repr(value)[:60]
    raise ProtocolError(f"{name} field {field!r} must be {typ}, got {type(value).__name__} {shown}")


def _check(kind: bytes, header: Any) -> dict[str, Any]:
    name = kind.decode()
    if not isinstance(header, dict):
        raise ProtocolError(f"{name} header is not a map")
    checked = dict(header)
    for field, typ in SCHEMAS[kind].items():
        if field not in header:
            raise ProtocolError(f"{name} header lacks field {field!r}")
        checked[field] = _value(name, field, typ, header[field])
    for field, typ in OPTIONAL.get(kind, {}).items():
        if field in header:
            checked[field] = _value(name, field, typ, header[field])
    if kind == HELLO:
        checkpoints(checked)  # checked whole before the hub acts on any part of the HELLO
        if "halted" in checked:
            checked["halted"] = halt_report(checked["halted"])
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
        raise ProtocolError(f"{kind.decode()} carries no bodies, got {len(frames) - 3} frames")
    if len(frames) > 4:
        raise ProtocolError(
            f"{kind.decode()} has {len(frames)} frames: its bodies go in one frame",
            "run the same binlogsync version on the hub and the clients",
        )
    try:
        header = _check(kind, unpack(frames[2], max_bytes))
    except RecursionError:  # a value nested ~1000 deep, met while showing it in an error
        raise ProtocolError(f"{kind.decode()} header is nested too deep") from None
    return Message(kind, header, _bodies(kind, frames[3]) if len(frames) == 4 else ())


def decode_body(body: bytes, max_bytes: int) -> Transaction | Part:
    """One body frame (BATCH, DELIVER, REPAIR) as a transaction or a part. Raises
    ProtocolError."""
    try:
        return body_from_wire(unpack(body, max_bytes, tuples=True))
    except RecursionError:
        raise ProtocolError("a transaction body is nested too deep") from None


def checkpoints(header: dict[str, Any]) -> dict[str, tuple[Position, str | None]]:
    """HELLO's `checkpoints` map: origin → (position, epoch of the hub that delivered it)."""
    out: dict[str, tuple[Position, str | None]] = {}
    for origin, value in header["checkpoints"].items():
        if not isinstance(origin, str) or not 0 < len(origin) <= 64:
            raise ProtocolError(f"HELLO checkpoints: origin name {str(origin)[:80]!r} is invalid")
        epoch = value.get("epoch") if isinstance(value, dict) else None
        if epoch is not None and (not isinstance(epoch, str) or len(epoch) > 64):
            raise ProtocolError(f"HELLO checkpoints: epoch of {origin!r} is invalid")
        out[origin] = (Position.from_json(value), epoch)
    return out


def halt_report(value: Any) -> dict[str, Any] | None:
    """HELLO's `halted` map in the shape HALTED carries (error, at, position, end), or None
    when it reports no halt. It is a report for people: a field that does not fit is dropped
    (shown as unknown), never a reason to refuse the HELLO."""
    if not isinstance(value, dict):
        return None
    error, at = value.get("error"), value.get("at")
    if not isinstance(error, str) or not error:
        return None
    return {
        "error": error[:MAX_STRING],
        "at": at[:300] if isinstance(at, str) else "",
        "position": _reported(value.get("position")),
        "end": _reported(value.get("end")),
    }


def _reported(value: Any) -> Position | None:
    try:
        return Position.from_json(value) if value is not None else None
    except (ProtocolError, RecursionError):  # RecursionError: nested too deep to show
        return None


def check_body(body: bytes, max_bytes: int) -> CheckedBody:
    """One body frame checked as `decode_body` checks it, without building the objects (the
    hub keeps the bytes). Raises ProtocolError."""
    try:
        return model_check_body(unpack(body, max_bytes))
    except RecursionError:
        raise ProtocolError("a transaction body is nested too deep") from None
