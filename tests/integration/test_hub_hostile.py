"""Hostile messages: well-formed on the wire (valid msgpack, known kinds) but carrying values
no honest peer sends, of every kind the hub accepts, and random mutations of valid messages.

After each one the hub must still be alive, the sender must get an ERROR (or nothing, or the
harmless answer said below), and nothing of it may be stored or change what the hub holds:
checked on the hub's state after every message, and at the end of every test through a good
target that must receive exactly the good transaction sent after them.

Found here (each fixed; the cases stay): a value nested ~1000 deep in a header or a body
ended the hub with RecursionError (repr/str of it in an error message); a HELLO whose
checkpoints were refused had already taken the host over; a transaction part that ends before
it begins was stored; HALTED's positions never reached `status`; a peer varying its refused
messages made the hub log, and remember, every one of them; a BATCH from an origin with no
start position was stored with no floor; an ERROR quoting long names, ids or errors was too
long for the client to decode.
Before the hub range-checked positions, `binlog.99999999999:4` ended it with OverflowError
(SQLite INTEGER): that exact position is the first case of every field that carries one.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from binlogsync.codec import pack
from binlogsync.config import Route
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync.transport import frames
from hubkit import HubThread, Peer, body, hello_header, tx

pytestmark = pytest.mark.integration

START = Position("binlog.000001", 4)
OVERFLOW = "binlog.99999999999"  # a file number no position key can hold
DEEP = 1000  # nesting that msgpack still decodes (its own limit is 1024 levels)
BIG = 70_000  # longer than any string a header may carry (frames.MAX_STRING)


def pos(file: Any = "binlog.000001", offset: Any = 4, gtid: Any = None) -> dict[str, Any]:
    return {"file": file, "offset": offset, "gtid": gtid}


def deep(depth: int = DEEP) -> Any:
    value: Any = None
    for _ in range(depth):
        value = [value]
    return value


def raw(kind: bytes, header: Any, bodies: tuple[bytes, ...] = ()) -> list[bytes]:
    """A message as frames, with any header value msgpack can carry (NaN, 2**64-1, …); the
    bodies in one frame, as the protocol has them."""
    if isinstance(header, dict):
        header = {k: v.to_json() if isinstance(v, Position) else v for k, v in header.items()}
    return [frames.VERSION, kind, pack(header), *([msgpack.packb(list(bodies))] if bodies else [])]


def ext(code: int, payload: bytes) -> msgpack.ExtType:
    return msgpack.ExtType(code, payload)


# -- building blocks of transactions on the wire -------------------------------------------

TX2 = tx(2)
GOOD_CHANGE = TX2.changes[0].to_wire()
NOW = 1_700_000_000.0


def wire_tx(position: Any = None, ts: Any = NOW, changes: Any = None) -> bytes:
    return pack(
        [
            TX2.position.to_wire() if position is None else position,
            ts,
            [GOOD_CHANGE] if changes is None else changes,
        ]
    )


def wire_part(
    number: Any = 1,
    last: Any = False,
    end: Any = None,
    begin: Any = None,
    ts: Any = 0.0,
    changes: Any = None,
) -> bytes:
    begin = Position("binlog.000001", 2000).to_wire() if begin is None else begin
    return pack([begin, number, last, end, ts, [GOOD_CHANGE] if changes is None else changes])


def change(**fields: Any) -> list[Any]:
    base = dict(
        kind="insert", schema="shop", table="t", columns=["id", "v"], before=[], after=[[9, "x"]]
    )
    base.update(fields)
    return [*base.values(), ""]


# -- the site: a hub, its origin o1 with tx 1 stored, its target t1 with tx 1 applied ------


@dataclass
class Site:
    thread: HubThread
    origin: Peer  # o1, routing id b"good-o1"
    target: Peer  # t1, routing id b"good-t1"

    @property
    def hub(self) -> Any:
        return self.thread.hub

    def fresh(self) -> Peer:
        return Peer(self.thread.endpoint)

    def sender(self, role: str) -> Peer:
        return {"origin": self.origin, "target": self.target}.get(role) or self.fresh()

    def assert_nothing_changed(self, case: str, target_connected: bool = True) -> None:
        """The hub lives (a fresh peer's HELLO is welcomed) and holds what it held: tx 1, no
        skip, no repair, no halt, no error on t1's cursor, t1 still on its own connection."""
        hub = self.hub
        assert hub.error is None and hub.alive, case
        probe = self.fresh()
        assert probe.hello("t2", ["target"]).kind == frames.WELCOME, case
        probe.close()
        assert hub.log.head("o1") == tx(1).position, case
        assert hub.log.log_rows("o1") == 1, case
        assert not hub.origins.skips and not hub.origins.halted, case
        cursor = hub.delivery.cursors[("t1", "o1")]
        assert not cursor.repairs and cursor.last_error == "" and not cursor.blocked, case
        assert cursor.applied == tx(1).position, case
        if target_connected:
            t1 = hub.hosts["t1"]
            assert t1.online and t1.identity == b"good-t1", case

    def assert_good_data_flows(self) -> None:
        """A fresh origin is welcomed where the log ends, its next transaction is stored and
        t1 receives exactly that one (re-saying HELLO from its checkpoint if it was made to);
        STATUS is answered."""
        assert self.hub.error is None and self.hub.alive
        origin = self.fresh()
        welcome = origin.hello("o1", ["origin"], start=START)
        assert welcome.header["resume"] == tx(1).position
        origin.batch("o1", 2, [body(TX2)], after=tx(1).position)
        assert origin.recv(kind=frames.ACK).header["upto"] == TX2.position
        got: list[Position] = []
        self.target.send(frames.PING, {})
        while TX2.position not in got:
            message = self.target.recv()
            if message.kind == frames.ERROR and message.header["code"] == "hello-first":
                self.target.hello("t1", ["target"], checkpoints={"o1": tx(1).position.to_json()})
            elif message.kind == frames.DELIVER:
                assert not message.header.get("repair")
                got += [t.position for t in message.transactions()]
                self.target.applied(message)
        assert got == [TX2.position]
        assert self.hub.log.log_rows("o1") == 2
        status = self.fresh()
        status.send(frames.STATUS, {})
        assert status.recv(kind=frames.STATUS_REPLY).header["status"]["hub"] == "hub"
        assert self.hub.error is None and self.hub.alive


def _named(name: bytes) -> Callable[[zmq.Socket[bytes]], None]:
    def setup(sock: zmq.Socket[bytes]) -> None:
        sock.setsockopt(zmq.IDENTITY, name)

    return setup


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    # o2 never connects: t2 is the host a fresh probe says HELLO as, changing nothing.
    routes = (Route("o1", ("t1",), TableFilter(("*.*",))), Route("o2", ("t2",)))
    # Good peers stay online without pinging (20 s of silence); the loop turns every 50 ms.
    with HubThread(tmp_path, routes=routes, heartbeat_interval=0.2, heartbeat_liveness=100) as h:
        origin = Peer(h.endpoint, setup=_named(b"good-o1"))
        origin.hello("o1", ["origin"], start=START)
        origin.batch("o1", 1, [body(tx(1))])
        assert origin.recv(kind=frames.ACK).header["upto"] == tx(1).position
        target = Peer(h.endpoint, setup=_named(b"good-t1"))
        target.hello("t1", ["target"])
        delivered = target.recv(kind=frames.DELIVER)
        target.applied(delivered)
        # The APPLIED is in when a PING sent after it is answered.
        target.send(frames.PING, {})
        assert target.recv(kind=frames.PONG).kind == frames.PONG
        yield Site(h, origin, target)
        assert h.hub.error is None


def refused(site: Site, role: str, parts: list[bytes], case: str) -> str:
    """Send `parts` from `role`; it must be answered with ERROR `rejected`. Its message."""
    sender = site.sender(role)
    sender.send_raw(parts)
    reply = sender.recv()
    assert reply.kind == frames.ERROR, (case, reply)
    expected = "stale-snapshot" if "below the floor" in case else "rejected"
    assert reply.header["code"] == expected, (case, reply.header)
    site.assert_nothing_changed(case)
    return str(reply.header["message"])


# -- positions no message may carry -------------------------------------------------------

BAD_POSITIONS: list[tuple[str, Any]] = [
    ("binlog.99999999999:4", pos(OVERFLOW)),  # ended the hub with OverflowError (SQLite)
    ("offset 2**63", pos(offset=2**63)),
    ("offset 2**64-1", pos(offset=2**64 - 1)),
    ("offset 2**40", pos(offset=2**40)),
    ("offset -1", pos(offset=-1)),
    ("offset -2**63", pos(offset=-(2**63))),
    ("offset str", pos(offset="4")),
    ("offset float", pos(offset=4.0)),
    ("offset NaN", pos(offset=float("nan"))),
    ("offset inf", pos(offset=float("inf"))),
    ("offset bool", pos(offset=True)),
    ("offset missing", {"file": "binlog.000001"}),
    ("file without number", pos("binlog")),
    ("file number 2**63", pos(f"binlog.{2**63}")),
    ("file int", pos(5)),
    ("file huge", pos("binlog." + "0" * 100_000 + "1")),
    ("file nested deep", pos(deep())),
    ("gtid int", pos(gtid=5)),
    ("gtid huge", pos(gtid="0-1-" + "9" * 1000)),
    ("list", ["binlog.000001", 4, None]),
    ("text", "binlog.000001:4"),
    ("nested deep", deep()),
]


def as_wire(value: Any) -> Any:
    """The list form bodies use; a JSON-form dict stays a dict (wrong there too)."""
    if isinstance(value, dict) and "file" in value and "offset" in value:
        return [value["file"], value["offset"], value["gtid"]]
    if isinstance(value, list) and len(value) == 3 and value[0] == "binlog.000001":
        return {"file": "binlog.000001", "offset": 4}  # the wire form is a list: a map is wrong
    return value


def _hello_with(field: str) -> Callable[[Any], tuple[str, list[bytes]]]:
    def build(bad: Any) -> tuple[str, list[bytes]]:
        if field == "checkpoints":
            return "fresh", raw(
                frames.HELLO, hello_header("t1", ["target"], checkpoints={"o1": bad})
            )
        header = hello_header("o1", ["origin"], start=START)
        header[field] = bad
        return "fresh", raw(frames.HELLO, header)

    return build


def _header_with(kind: bytes, role: str, header: dict[str, Any], field: str) -> Any:
    def build(bad: Any) -> tuple[str, list[bytes]]:
        bodies = (body(tx(50)),) if kind == frames.REPAIR else ()
        return role, raw(kind, {**header, field: bad}, bodies)

    return build


REPAIR = {"origin": "o1", "target": "t1", "snapshot": tx(1).position.to_json(), "id": "r1"}
FAILED = {"origin": "o1", "position": None, "error": "boom", "retry_in": 1.0}
HALTED = {"origin": "o1", "error": "stopped", "position": None, "at": "", "end": None}
WELCOME = {"hub": "hub", "epoch": "e", "resume": None, "heartbeat": 1.0}
DELIVER = {"origin": "o1", "seq": 1, "upto": pos(), "after": None}
SKIPPED = {"id": "s1", "origin": "o1", "skipped_from": None, "to": pos()}

# Every field that carries a position → how to build a message with `bad` in it.
POSITION_FIELDS: dict[str, Callable[[Any], tuple[str, list[bytes]]]] = {
    "HELLO checkpoints": _hello_with("checkpoints"),
    "HELLO start": _hello_with("start"),
    "HELLO oldest": _hello_with("oldest"),
    "HELLO current": _hello_with("current"),
    "BATCH after": lambda bad: (
        "origin",
        raw(frames.BATCH, {"origin": "o1", "seq": 2, "after": bad}, (body(TX2),)),
    ),
    "BATCH transaction": lambda bad: (
        "origin",
        raw(frames.BATCH, {"origin": "o1", "seq": 2, "after": None}, (wire_tx(as_wire(bad)),)),
    ),
    "BATCH part begin": lambda bad: (
        "origin",
        raw(
            frames.BATCH,
            {"origin": "o1", "seq": 2, "after": None},
            (wire_part(begin=as_wire(bad)),),
        ),
    ),
    "BATCH part end": lambda bad: (
        "origin",
        raw(
            frames.BATCH,
            {"origin": "o1", "seq": 2, "after": None},
            (wire_part(last=True, end=as_wire(bad), ts=NOW),),
        ),
    ),
    "APPLIED upto": _header_with(frames.APPLIED, "target", {"origin": "o1", "seq": 1}, "upto"),
    "FAILED position": _header_with(frames.FAILED, "target", FAILED, "position"),
    "HALTED position": _header_with(frames.HALTED, "origin", HALTED, "position"),
    "HALTED end": _header_with(frames.HALTED, "origin", HALTED, "end"),
    "REPAIR snapshot": _header_with(frames.REPAIR, "fresh", REPAIR, "snapshot"),
    "REPAIR transaction": lambda bad: (
        "fresh",
        raw(frames.REPAIR, REPAIR, (wire_tx(as_wire(bad)),)),
    ),
    "CAPTURE_SKIP to": _header_with(
        frames.CAPTURE_SKIP, "fresh", {"origin": "o1", "reason": "x", "id": "s1"}, "to"
    ),
    # Kinds only the hub sends, sent to it with a position in them.
    "WELCOME resume": _header_with(frames.WELCOME, "origin", WELCOME, "resume"),
    "ACK upto": _header_with(frames.ACK, "origin", {"origin": "o1", "seq": 1}, "upto"),
    "DELIVER upto": _header_with(frames.DELIVER, "origin", DELIVER, "upto"),
    "DELIVER after": _header_with(frames.DELIVER, "origin", DELIVER, "after"),
    "REPAIRED upto": _header_with(frames.REPAIRED, "origin", {"id": "r1"}, "upto"),
    "SKIPPED to": _header_with(frames.SKIPPED, "origin", SKIPPED, "to"),
    "SKIPPED skipped_from": _header_with(frames.SKIPPED, "origin", SKIPPED, "skipped_from"),
}


@pytest.mark.parametrize("field", list(POSITION_FIELDS))
def test_positions_out_of_range_are_refused_in_every_field(site: Site, field: str) -> None:
    """binlog.99999999999:4 first: it ended the hub with OverflowError (SQLite INTEGER)."""
    for name, bad in BAD_POSITIONS:
        role, parts = POSITION_FIELDS[field](bad)
        refused(site, role, parts, f"{field}: {name}")
    site.assert_good_data_flows()


def test_positions_in_a_hello_halt_report_are_dropped_not_stored(site: Site) -> None:
    """HELLO `halted` is a report for people: a bad position in it is shown as unknown."""
    for name, bad in BAD_POSITIONS:
        origin = site.fresh()
        halted = {"error": "stopped", "position": bad, "end": bad, "at": "x"}
        welcome = origin.hello("o1", ["origin"], start=START, halted=halted)
        assert welcome.header["resume"] == tx(1).position, name
        shown = site.hub.status()["origins"][0]["halted"]
        assert shown["error"] == "stopped" and shown["position"] is None, name
        assert shown["end"] is None, name
    origin = site.fresh()  # an `at` that is no text is dropped, whatever it holds
    origin.hello("o1", ["origin"], start=START, halted={"error": "stopped", "at": deep()})
    assert site.hub.status()["origins"][0]["halted"]["at"] == ""
    site.assert_good_data_flows()  # o1 stores tx 2: no longer halted


# -- every other field of every kind ------------------------------------------------------


def _hello(**fields: Any) -> list[bytes]:
    header = hello_header("t1", ["target"])
    header.update(fields)
    return raw(frames.HELLO, header)


HELLO_CASES: list[tuple[str, list[bytes]]] = [
    ("host int", _hello(host=5)),
    ("host huge", _hello(host="t" * BIG)),
    ("host at the limit", _hello(host="t" * frames.MAX_STRING)),
    ("host empty", _hello(host="")),
    ("host nested deep", _hello(host=deep())),
    ("roles map", _hello(roles={"target": True})),
    ("roles text", _hello(roles="target")),
    ("roles only origin", _hello(roles=["origin"])),
    ("checkpoints list", _hello(checkpoints=[pos()])),
    ("checkpoints int key", _hello(checkpoints={1: pos()})),
    ("checkpoints value text", _hello(checkpoints={"o1": "binlog.000001:4"})),
    ("checkpoints epoch int", _hello(checkpoints={"o1": {**pos(), "epoch": 5}})),
    ("checkpoints epoch huge", _hello(checkpoints={"o1": {**pos(), "epoch": "e" * 1000}})),
    ("checkpoints origin huge", _hello(checkpoints={"o" * 100: pos()})),
    ("checkpoints origin empty", _hello(checkpoints={"": pos()})),
    ("checkpoints nested deep", _hello(checkpoints={"o1": deep()})),
    ("checkpoints epoch deep", _hello(checkpoints={"o1": {**pos(), "epoch": deep()}})),
    ("max_message_bytes -1", _hello(max_message_bytes=-1)),
    ("max_message_bytes -2**63", _hello(max_message_bytes=-(2**63))),
    ("max_message_bytes 2**63", _hello(max_message_bytes=2**63)),
    ("max_message_bytes 2**64-1", _hello(max_message_bytes=2**64 - 1)),
    ("max_message_bytes 0", _hello(max_message_bytes=0)),
    ("max_message_bytes text", _hello(max_message_bytes="64M")),
    ("max_message_bytes float", _hello(max_message_bytes=float(1 << 26))),
    ("max_message_bytes NaN", _hello(max_message_bytes=float("nan"))),
    ("max_message_bytes inf", _hello(max_message_bytes=float("inf"))),
    ("max_message_bytes bool", _hello(max_message_bytes=True)),
    ("agent huge", _hello(agent="a" * BIG)),
    ("agent nil", _hello(agent=None)),
    ("halted list", _hello(halted=["stopped"])),
    ("halted nested deep", _hello(halted=deep())),
    (
        "no host",
        raw(frames.HELLO, {k: v for k, v in hello_header("t1", []).items() if k != "host"}),
    ),
    ("header a list", raw(frames.HELLO, list(hello_header("t1", ["target"]).items()))),
    ("extra frame", [*_hello(), b"x"]),
]


@pytest.mark.parametrize("case, parts", HELLO_CASES, ids=[c for c, _ in HELLO_CASES])
def test_hostile_hello_is_refused_and_takes_nothing_over(
    site: Site, case: str, parts: list[bytes]
) -> None:
    """Each claims to be t1: refused, it must leave t1 on its own connection."""
    refused(site, "fresh", parts, case)
    site.assert_good_data_flows()


def _batch(header: dict[str, Any] | None = None, *bodies: bytes) -> list[bytes]:
    return raw(frames.BATCH, {"origin": "o1", "seq": 2, "after": None, **(header or {})}, bodies)


def _batch_frames(*after_header: bytes) -> list[bytes]:
    """A BATCH whose frames after the header are `after_header`, as they are."""
    return [*_batch()[:3], *after_header]


BATCH_CASES: list[tuple[str, list[bytes]]] = [
    # The bodies frame itself (BLS4: one msgpack array of bin).
    ("bodies frame not msgpack", _batch_frames(b"\xc1")),
    ("bodies frame truncated", _batch_frames(msgpack.packb([body(TX2)])[:-3])),
    ("bodies frame trailing bytes", _batch_frames(msgpack.packb([body(TX2)]) + b"\x00")),
    ("bodies frame a map", _batch_frames(msgpack.packb({"a": body(TX2)}))),
    ("bodies frame a bin", _batch_frames(msgpack.packb(body(TX2)))),
    ("bodies frame of strings", _batch_frames(msgpack.packb(["transaction"]))),
    ("bodies frame of ints", _batch_frames(msgpack.packb([1, 2]))),
    ("bodies frame a good bin then an int", _batch_frames(msgpack.packb([body(TX2), 5]))),
    ("bodies frame nested", _batch_frames(msgpack.packb([[body(TX2)]]))),
    ("bodies frame nested too deep", _batch_frames(b"\x91" * 5000 + b"\xc0")),
    ("bodies frame array too long", _batch_frames(b"\xdd\xff\xff\xff\xff")),
    # A BLS3 sender: a frame per body (the first would be read as an array of bodies).
    ("bodies in two frames", _batch_frames(msgpack.packb([body(TX2)]), msgpack.packb([]))),
    ("bodies as BLS3 sent them", _batch_frames(body(TX2), body(TX2))),
    ("a BLS3 body frame", _batch_frames(body(TX2))),
    *[
        (f"seq {name}", _batch({"seq": v}, body(TX2)))
        for name, v in [
            ("-1", -1),
            ("2**63", 2**63),
            ("2**64-1", 2**64 - 1),
            ("text", "2"),
            ("float", 2.0),
            ("nil", None),
            ("bool", True),
            ("nested deep", deep()),
        ]
    ],  # fmt: skip
    *[
        (f"origin {name}", _batch({"origin": v}, body(TX2)))
        for name, v in [
            ("t1", "t1"),
            ("huge", "o" * BIG),
            ("int", 5),
            ("nil", None),
            ("nested deep", deep()),
        ]
    ],  # fmt: skip
    ("body empty frame", _batch(None, b"")),
    ("body not msgpack", _batch(None, b"\xc1\xc1\xc1")),
    ("body trailing bytes", _batch(None, body(TX2) + b"\x00")),
    ("body a map", _batch(None, pack({"position": TX2.position.to_json()}))),
    ("body text", _batch(None, pack("transaction"))),
    ("body empty list", _batch(None, pack([]))),
    ("body 3 ints", _batch(None, pack([1, 2, 3]))),
    ("body 3 nils", _batch(None, pack([None, None, None]))),
    ("body 4 items", _batch(None, pack([TX2.position.to_wire(), NOW, [], 1]))),
    ("body 7 items", _batch(None, pack([None] * 7))),
    ("body nested deep", _batch(None, pack(deep()))),
    *[
        (f"timestamp {name}", _batch(None, wire_tx(ts=v)))
        for name, v in [
            ("text", "now"),
            ("NaN", float("nan")),
            ("inf", float("inf")),
            ("-inf", float("-inf")),
            ("-1", -1.0),
            ("2**40", float(2**40)),
            ("2**64-1", 2**64 - 1),
            ("bool", True),
            ("nil", None),
            ("nested deep", deep()),
        ]
    ],  # fmt: skip
    ("changes a map", _batch(None, wire_tx(changes={}))),
    ("changes nested deep", _batch(None, wire_tx(changes=deep()))),
    ("change kind unknown", _batch(None, wire_tx(changes=[change(kind="drop")]))),
    ("change kind nested deep", _batch(None, wire_tx(changes=[change(kind=deep())]))),
    ("change 6 items", _batch(None, wire_tx(changes=[change()[:6]]))),
    ("change schema int", _batch(None, wire_tx(changes=[change(schema=5)]))),
    ("change schema deep", _batch(None, wire_tx(changes=[change(schema=deep())]))),
    ("change columns deep", _batch(None, wire_tx(changes=[change(columns=deep())]))),
    ("change row too wide", _batch(None, wire_tx(changes=[change(after=[[1, "x", 3]])]))),
    ("change rows a map", _batch(None, wire_tx(changes=[change(after={"1": "x"})]))),
    ("change rows deep", _batch(None, wire_tx(changes=[change(after=deep())]))),
    ("change value a list", _batch(None, wire_tx(changes=[change(after=[[1, [2]]])]))),
    ("change value deep", _batch(None, wire_tx(changes=[change(after=[[1, deep(900)]])]))),
    (
        "change value msgpack timestamp",
        _batch(None, wire_tx(changes=[change(after=[[1, msgpack.Timestamp(1)]])])),
    ),
    (
        "change value unknown ext",
        _batch(None, wire_tx(changes=[change(after=[[1, ext(42, b"")]])])),
    ),
    (
        "change value bad decimal",
        _batch(None, wire_tx(changes=[change(after=[[1, ext(1, b"1x")]])])),
    ),
    (
        "change value bad time",
        _batch(None, wire_tx(changes=[change(after=[[1, ext(4, b"\xc1")]])])),
    ),
    (
        "change value bad date",
        _batch(None, wire_tx(changes=[change(after=[[1, ext(3, b"2024-13-45")]])])),
    ),
    (
        "change value set of ints",
        _batch(None, wire_tx(changes=[change(after=[[1, ext(5, msgpack.packb([1, 2]))]])])),
    ),
    ("change update uneven", _batch(None, wire_tx(changes=[change(kind="update", before=[])]))),
    ("a good body then a bad one", _batch(None, body(TX2), b"\xc1")),
    ("5000 bad bodies", _batch(None, *([b"\xc1"] * 5000))),
    *[
        (f"part {name}", _batch(None, wire_part(**fields)))
        for name, fields in [
            ("number 0", {"number": 0}),
            ("number -1", {"number": -1}),
            ("number 2**31", {"number": 2**31}),
            ("number 2**64-1", {"number": 2**64 - 1}),
            ("number text", {"number": "1"}),
            ("number float", {"number": 1.0}),
            ("last int", {"last": 1}),
            ("last without end", {"last": True}),
            ("end without last", {"end": TX2.position.to_wire()}),
            ("timestamp NaN", {"ts": float("nan")}),
            ("timestamp inf", {"ts": float("inf")}),
            ("changes deep", {"changes": deep()}),
            # A part must end after it begins (found here: it was stored).
            (
                "ends before it begins",
                {
                    "last": True,
                    "ts": NOW,
                    "begin": Position("binlog.000001", 5000).to_wire(),
                    "end": Position("binlog.000001", 3000).to_wire(),
                },
            ),
        ]
    ],  # fmt: skip
]


@pytest.mark.parametrize("case, parts", BATCH_CASES, ids=[c for c, _ in BATCH_CASES])
def test_hostile_batch_is_refused_and_nothing_of_it_stored(
    site: Site, case: str, parts: list[bytes]
) -> None:
    refused(site, "origin", parts, case)
    site.assert_good_data_flows()


def test_parts_out_of_order_are_not_stored_and_the_origin_starts_over(site: Site) -> None:
    """Parts that do not continue what is stored make the origin send its transaction
    again (ERROR hello-first); none of them is stored or delivered."""
    begin = Position("binlog.000001", 2000).to_wire()
    end = TX2.position.to_wire()
    cases: list[tuple[str, list[list[bytes]]]] = [
        ("part 2 without part 1", [_batch(None, wire_part(2, begin=begin))]),
        ("parts 1 and 3", [_batch(None, wire_part(1, begin=begin), wire_part(3, begin=begin))]),
        (
            "part 1, then part 3 in the next batch",
            [
                _batch(None, wire_part(1, begin=begin)),
                _batch({"seq": 3}, wire_part(3, begin=begin)),
            ],
        ),
        (
            "a last part 2 of another transaction",
            [
                _batch(None, wire_part(1, begin=begin)),
                _batch(
                    {"seq": 3},
                    wire_part(2, True, end, Position("binlog.000001", 1010).to_wire(), NOW),
                ),
            ],
        ),
    ]
    for case, batches in cases:
        origin = site.fresh()
        origin.hello("o1", ["origin"], start=START)
        for parts in batches:
            origin.send_raw(parts)
        while True:
            reply = origin.recv()
            assert reply.kind in (frames.ACK, frames.ERROR), case
            if reply.kind == frames.ERROR:
                assert reply.header["code"] == "hello-first", (case, reply.header)
                break
            assert reply.header["upto"] == tx(1).position, case  # a first part: nothing yet
        site.assert_nothing_changed(case)
    site.assert_good_data_flows()


APPLIED = {"origin": "o1", "seq": 1, "upto": tx(1).position.to_json()}
TARGET_CASES: list[tuple[str, list[bytes]]] = [
    *[
        (f"APPLIED seq {name}", raw(frames.APPLIED, {**APPLIED, "seq": v}))
        for name, v in [
            ("-1", -1),
            ("2**63", 2**63),
            ("2**64-1", 2**64 - 1),
            ("text", "1"),
            ("float", 1.0),
            ("nil", None),
            ("nested deep", deep()),
        ]
    ],  # fmt: skip
    *[
        (f"APPLIED origin {name}", raw(frames.APPLIED, {**APPLIED, "origin": v}))
        for name, v in [
            ("unknown", "o9"),
            ("huge", "o" * BIG),
            ("int", 5),
            ("nested deep", deep()),
        ]
    ],  # fmt: skip
    ("APPLIED lacks seq", raw(frames.APPLIED, {"origin": "o1", "upto": None})),
    ("APPLIED extra frame", [*raw(frames.APPLIED, APPLIED), b"x"]),
    *[
        (f"FAILED retry_in {name}", raw(frames.FAILED, {**FAILED, "retry_in": v}))
        for name, v in [
            ("NaN", float("nan")),
            ("inf", float("inf")),
            ("-1", -1.0),
            ("1e13", 1e13),
            ("2**64-1", 2**64 - 1),
            ("text", "1"),
            ("nil", None),
            ("nested deep", deep()),
        ]
    ],  # fmt: skip
    *[
        (f"FAILED error {name}", raw(frames.FAILED, {**FAILED, "error": v}))
        for name, v in [
            ("nil", None),
            ("int", 5),
            ("huge", "e" * BIG),
            ("nested deep", deep()),
        ]
    ],  # fmt: skip
    ("FAILED seq -1", raw(frames.FAILED, {**FAILED, "seq": -1})),
    ("FAILED repair text", raw(frames.FAILED, {**FAILED, "repair": "yes"})),
    ("FAILED resend int", raw(frames.FAILED, {**FAILED, "resend": 1})),
    ("FAILED origin unknown", raw(frames.FAILED, {**FAILED, "origin": "o9"})),
    (
        "SKIPPED from a target",
        raw(frames.SKIPPED, {"id": "s", "origin": "o1", "skipped_from": None, "to": pos()}),
    ),  # fmt: skip
]


@pytest.mark.parametrize("case, parts", TARGET_CASES, ids=[c for c, _ in TARGET_CASES])
def test_hostile_target_messages_are_refused(site: Site, case: str, parts: list[bytes]) -> None:
    refused(site, "target", parts, case)
    site.assert_good_data_flows()


ORIGIN_CASES: list[tuple[str, list[bytes]]] = [
    *[
        (f"HALTED error {name}", raw(frames.HALTED, {**HALTED, "error": v}))
        for name, v in [
            ("nil", None),
            ("int", 5),
            ("huge", "e" * BIG),
            ("nested deep", deep()),
        ]
    ],  # fmt: skip
    *[
        (f"HALTED at {name}", raw(frames.HALTED, {**HALTED, "at": v}))
        for name, v in [
            ("int", 5),
            ("huge", "a" * BIG),
            ("nested deep", deep()),
        ]
    ],  # fmt: skip
    ("HALTED origin t1", raw(frames.HALTED, {**HALTED, "origin": "t1"})),
    ("HALTED origin unknown", raw(frames.HALTED, {**HALTED, "origin": "o9"})),
    ("HALTED header nested deep", raw(frames.HALTED, deep())),
    ("PING header a list", raw(frames.PING, [])),
    ("PING header nil", raw(frames.PING, None)),
    ("PING 1000 extra frames", [*raw(frames.PING, {}), *([b""] * 1000)]),
    # Kinds only the hub sends.
    ("WELCOME", raw(frames.WELCOME, {"hub": "h", "epoch": "e", "resume": None, "heartbeat": 1})),
    ("ACK", raw(frames.ACK, {"origin": "o1", "seq": 1, "upto": pos()})),
    (
        "DELIVER",
        raw(frames.DELIVER, {"origin": "o1", "seq": 1, "upto": pos(), "after": None}, (body(TX2),)),
    ),
    ("PONG", raw(frames.PONG, {})),
    ("STATUS_REPLY", raw(frames.STATUS_REPLY, {"status": {}})),
    ("ERROR", raw(frames.ERROR, {"code": "rejected", "message": "no"})),
    ("REPAIRED", raw(frames.REPAIRED, {"id": "r", "upto": pos()})),
    (
        "SKIPPED",
        raw(frames.SKIPPED, {"id": "s", "origin": "o1", "skipped_from": None, "to": pos()}),
    ),
    # Kinds nobody sends, and frames that are not a message.
    *[
        (f"kind {name}", [frames.VERSION, kind, pack({})])
        for name, kind in [
            ("empty", b""),
            ("NOPE", b"NOPE"),
            ("lower case", b"hello"),
            ("binary", b"\xff" * 64),
            ("huge", b"K" * 100_000),
            ("with nul", b"PING\x00"),
        ]
    ],  # fmt: skip
    ("version BLS1", [b"BLS1", frames.PING, pack({})]),
    ("version BLS2", [b"BLS2", frames.PING, pack({})]),  # before GTID positions
    ("version empty", [b"", frames.PING, pack({})]),
    ("one frame", [frames.VERSION]),
    ("two frames", [frames.VERSION, frames.PING]),
    ("three empty frames", [b"", b"", b""]),
    ("header not msgpack", [frames.VERSION, frames.PING, b"\xc1"]),
    ("header trailing bytes", [frames.VERSION, frames.PING, b"\x80\x80"]),
    ("header truncated", [frames.VERSION, frames.HELLO, pack(hello_header("o1", []))[:-3]]),
    ("header an int", raw(frames.PING, 5)),
    ("header nested deep", raw(frames.PING, deep())),
    ("header nested too deep", [frames.VERSION, frames.PING, b"\x91" * 5000 + b"\xc0"]),
    ("header map key int", [frames.VERSION, frames.PING, b"\x81\x01\x01"]),
]


@pytest.mark.parametrize("case, parts", ORIGIN_CASES, ids=[c for c, _ in ORIGIN_CASES])
def test_hostile_messages_from_a_connected_host_are_refused(
    site: Site, case: str, parts: list[bytes]
) -> None:
    refused(site, "origin", parts, case)
    site.assert_good_data_flows()


def _repair(header: dict[str, Any] | None = None, *bodies: bytes) -> list[bytes]:
    return raw(frames.REPAIR, {**REPAIR, **(header or {})}, bodies or (body(tx(50)),))


def _seed(**fields: Any) -> dict[str, Any]:
    """A seed map (hub/seeds.py) with `fields` changed (None: left out)."""
    seed = {
        "run": "run1", "schema": "db", "table": "t", "first": True, "reset": False,
        "last_key": None, "rows": 1, "done_rows": 1, "total_rows": 1, "done": False,
        "started": NOW,
    }  # fmt: skip
    seed.update(fields)
    return {k: v for k, v in seed.items() if v is not None or k == "last_key"}


SKIP = {"origin": "o1", "to": pos("binlog.000002"), "reason": "lost", "id": "s1"}
DETACH = {"origin": "o1", "target": "t1", "reason": "behind", "id": "d1"}
ADMIN_CASES: list[tuple[str, list[bytes]]] = [
    ("REPAIR target unknown", _repair({"target": "t9"})),
    ("REPAIR target an origin", _repair({"target": "o1"})),
    ("REPAIR target nested deep", _repair({"target": deep()})),
    ("REPAIR origin unknown", _repair({"origin": "o9"})),
    # Names as long as a header string may be: the ERROR must still be a valid message.
    ("REPAIR target at the limit", _repair({"target": "t" * frames.MAX_STRING})),
    ("REPAIR origin at the limit", _repair({"origin": "o" * frames.MAX_STRING})),
    (
        "CAPTURE_SKIP origin at the limit",
        raw(frames.CAPTURE_SKIP, {**SKIP, "origin": "o" * frames.MAX_STRING}),
    ),
    ("REPAIR id int", _repair({"id": 5})),
    ("REPAIR id huge", _repair({"id": "r" * BIG})),
    ("REPAIR id nested deep", _repair({"id": deep()})),
    ("REPAIR snapshot below the floor", _repair({"snapshot": pos(offset=1)})),
    ("DETACH target unknown", raw(frames.DETACH, {**DETACH, "target": "t9"})),
    ("DETACH origin unknown", raw(frames.DETACH, {**DETACH, "origin": "o9"})),
    ("DETACH reason blank", raw(frames.DETACH, {**DETACH, "reason": "  "})),
    ("DETACH without an id", raw(frames.DETACH, {k: v for k, v in DETACH.items() if k != "id"})),
    ("DETACH reason nested deep", raw(frames.DETACH, {**DETACH, "reason": deep()})),
    ("REPAIR seed not a map", _repair({"seed": [1]})),
    ("REPAIR seed empty", _repair({"seed": {}})),
    ("REPAIR seed run missing", _repair({"seed": _seed(run=None)})),
    ("REPAIR seed run huge", _repair({"seed": _seed(run="r" * 65)})),
    ("REPAIR seed schema empty", _repair({"seed": _seed(schema="")})),
    ("REPAIR seed table too long", _repair({"seed": _seed(table="t" * 65)})),
    ("REPAIR seed table nested deep", _repair({"seed": _seed(table=deep())})),
    ("REPAIR seed rows negative", _repair({"seed": _seed(rows=-1)})),
    ("REPAIR seed rows bool", _repair({"seed": _seed(rows=True)})),
    ("REPAIR seed rows float", _repair({"seed": _seed(done_rows=1.5)})),
    ("REPAIR seed last_key text", _repair({"seed": _seed(last_key="5")})),
    ("REPAIR seed last_key huge", _repair({"seed": _seed(last_key=b"k" * 70_000)})),
    ("REPAIR seed first int", _repair({"seed": _seed(first=1)})),
    ("REPAIR seed started in the far future", _repair({"seed": _seed(started=1e13)})),
    ("REPAIR without a body", raw(frames.REPAIR, REPAIR)),
    ("REPAIR two bodies", _repair(None, body(tx(50)), body(tx(51)))),
    ("REPAIR a part", _repair(None, wire_part(1, True, TX2.position.to_wire(), ts=NOW))),
    ("REPAIR body not msgpack", _repair(None, b"\xc1")),
    ("REPAIR body a map", _repair(None, pack({}))),
    ("REPAIR body nested deep", _repair(None, pack(deep()))),
    ("REPAIR body timestamp NaN", _repair(None, wire_tx(ts=float("nan")))),
    ("REPAIR change kind nested deep", _repair(None, wire_tx(changes=[change(kind=deep())]))),
    # A seed chunk's rows as text (rowtext.py): every line and field in its form's grammar.
    *[
        (f"REPAIR rows text {name}", _repair(None, wire_tx(changes=[change(after=after)])))
        for name, after in (
            ("a field short", {"forms": ["int", "text"], "text": b"9\n"}),
            ("a field over", {"forms": ["int", "text"], "text": b"9\tx\ty\n"}),
            ("no newline at the end", {"forms": ["int", "text"], "text": b"9\tx"}),
            ("an int that is not", {"forms": ["int", "text"], "text": b"9a\tx\n"}),
            ("an unknown escape", {"forms": ["int", "text"], "text": b"9\tx\\q\n"}),
            ("not utf-8", {"forms": ["int", "text"], "text": b"9\t\xff\n"}),
            ("hex that is not", {"forms": ["int", "bytes"], "text": b"9\tXY\n"}),
            ("an unknown form", {"forms": ["int", "sql"], "text": b"9\tx\n"}),
            ("forms short", {"forms": ["int"], "text": b"9\tx\n"}),
            ("text a string", {"forms": ["int", "text"], "text": "9\tx\n"}),
            ("forms nested deep", {"forms": deep(), "text": b"9\tx\n"}),
            ("an extra key", {"forms": ["int", "text"], "text": b"9\tx\n", "sql": "x"}),
        )
    ],
    (
        "REPAIR rows text on an update",
        _repair(
            None,
            wire_tx(
                changes=[change(kind="update", after={"forms": ["int", "text"], "text": b"9\tx\n"})]
            ),
        ),
    ),
    ("CAPTURE_SKIP origin unknown", raw(frames.CAPTURE_SKIP, {**SKIP, "origin": "o9"})),
    ("CAPTURE_SKIP origin a target", raw(frames.CAPTURE_SKIP, {**SKIP, "origin": "t1"})),
    ("CAPTURE_SKIP origin nested deep", raw(frames.CAPTURE_SKIP, {**SKIP, "origin": deep()})),
    (
        "CAPTURE_SKIP to the head",
        raw(frames.CAPTURE_SKIP, {**SKIP, "to": tx(1).position.to_json()}),
    ),
    ("CAPTURE_SKIP to below the head", raw(frames.CAPTURE_SKIP, {**SKIP, "to": pos()})),
    ("CAPTURE_SKIP reason empty", raw(frames.CAPTURE_SKIP, {**SKIP, "reason": ""})),
    ("CAPTURE_SKIP reason blank", raw(frames.CAPTURE_SKIP, {**SKIP, "reason": " \t\n"})),
    ("CAPTURE_SKIP reason int", raw(frames.CAPTURE_SKIP, {**SKIP, "reason": 5})),
    ("CAPTURE_SKIP reason huge", raw(frames.CAPTURE_SKIP, {**SKIP, "reason": "r" * BIG})),
    ("CAPTURE_SKIP id nil", raw(frames.CAPTURE_SKIP, {**SKIP, "id": None})),
    ("CAPTURE_SKIP extra frame", [*raw(frames.CAPTURE_SKIP, SKIP), b"x"]),
    ("STATUS header a list", raw(frames.STATUS, [])),
    ("STATUS extra frame", [*raw(frames.STATUS, {}), b"x"]),
    ("STATUS history int", raw(frames.STATUS, {"history": 1})),
    ("STATUS history string", raw(frames.STATUS, {"history": "yes"})),
    ("STATUS history nested deep", raw(frames.STATUS, {"history": deep()})),
]


@pytest.mark.parametrize("case, parts", ADMIN_CASES, ids=[c for c, _ in ADMIN_CASES])
def test_hostile_admin_messages_are_refused(site: Site, case: str, parts: list[bytes]) -> None:
    """Sent without CURVE, where anyone may send admin messages: refused all the same."""
    refused(site, "fresh", parts, case)
    site.assert_good_data_flows()


def test_a_message_before_hello_is_answered_hello_first(site: Site) -> None:
    for kind, header in [
        (frames.PING, {}),
        (frames.BATCH, {"origin": "o1", "seq": 2, "after": None}),
        (frames.APPLIED, APPLIED),
        (frames.FAILED, FAILED),
        (frames.HALTED, HALTED),
    ]:
        peer = site.fresh()
        peer.send_raw(raw(kind, header, (body(TX2),) if kind == frames.BATCH else ()))
        reply = peer.recv()
        assert reply.kind == frames.ERROR and reply.header["code"] == "hello-first", kind
        site.assert_nothing_changed(kind.decode())
    site.assert_good_data_flows()


# Well-formed messages with odd but harmless content: answered as usual, nothing changes.
# (role, frames, the answer's kind)
HARMLESS: list[tuple[str, str, list[bytes], bytes]] = [
    (
        "HELLO with unknown fields, one nested deep and one huge",
        "fresh",
        raw(frames.HELLO, {**hello_header("o1", ["origin"], START), "x": deep(), "y": "z" * BIG}),
        frames.WELCOME,
    ),
    (
        "HELLO whose roles hold junk",
        "fresh",
        raw(frames.HELLO, hello_header("o1", [["origin"], 5, None, deep(), "origin"], START)),
        frames.WELCOME,
    ),
    (
        "HELLO with a halt report whose `at` is nested deep",
        "fresh",
        raw(frames.HELLO, hello_header("o1", ["origin"], START, halted={"error": 5, "at": deep()})),
        frames.WELCOME,
    ),
    (
        "HELLO with the largest max_message_bytes",
        "fresh",
        raw(frames.HELLO, hello_header("o1", ["origin"], START, max_message_bytes=2**63 - 1)),
        frames.WELCOME,
    ),
    (
        "HELLO with 20000 checkpoints of origins the hub does not know",
        "fresh",
        raw(
            frames.HELLO,
            hello_header(
                "o1", ["origin"], START, checkpoints={f"x{i}": pos(offset=i) for i in range(20_000)}
            ),
        ),  # fmt: skip
        frames.WELCOME,
    ),
    ("BATCH without bodies", "origin", _batch(None), frames.ACK),
    ("BATCH of what is stored already", "origin", _batch(None, body(tx(1))), frames.ACK),
    ("PING with fields, one nested deep", "origin", raw(frames.PING, {"x": deep()}), frames.PONG),
    (
        "STATUS with a huge field",
        "fresh",
        raw(frames.STATUS, {"x": "y" * BIG}),
        frames.STATUS_REPLY,
    ),
]


@pytest.mark.parametrize("case, role, parts, answer", HARMLESS, ids=[c[0] for c in HARMLESS])
def test_odd_but_harmless_messages_are_answered_and_change_nothing(
    site: Site, case: str, role: str, parts: list[bytes], answer: bytes
) -> None:
    sender = site.sender(role)
    sender.send_raw(parts)
    assert sender.recv().kind == answer
    if answer == frames.ACK:
        assert site.hub.log.head("o1") == tx(1).position
    if answer == frames.WELCOME:  # o1 said HELLO from here: its halt report is not an error
        assert site.hub.hosts["o1"].identity != b"good-o1"
    site.assert_nothing_changed(case)
    site.assert_good_data_flows()


def test_a_halt_report_shows_its_positions(site: Site) -> None:
    """HALTED's positions reach `status` (they were dropped: decoded positions were taken
    for malformed ones), and the next stored transaction ends the halt."""
    halted = {**HALTED, "position": tx(1).position.to_json(), "end": pos(offset=1500)}
    site.origin.send(frames.HALTED, {**halted, "at": "UPDATE shop.t", "error": "row image"})
    site.origin.send(frames.PING, {})
    assert site.origin.recv().kind == frames.PONG
    shown = site.hub.status()["origins"][0]["halted"]
    assert shown["error"] == "row image" and shown["at"] == "UPDATE shop.t"
    assert shown["position"] == tx(1).position.to_json()
    assert shown["end"] == pos(offset=1500)
    site.hub.origins.halted.clear()  # what assert_good_data_flows expects of the rest
    site.assert_good_data_flows()


def test_target_reports_for_sequences_never_sent_are_ignored(site: Site) -> None:
    """APPLIED for a seq the hub never sent, with no position: nothing moves, nothing breaks."""
    for seq in (0, 2, 2**63 - 1):
        site.target.send(frames.APPLIED, {"origin": "o1", "seq": seq, "upto": None})
    site.target.send(frames.PING, {})  # answered after the APPLIEDs: they were handled
    assert site.target.recv().kind == frames.PONG
    site.assert_nothing_changed("APPLIED for unknown seqs")
    site.assert_good_data_flows()


def test_a_flood_of_distinct_refusals_is_logged_within_bounds(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """Refusals are logged once a minute per sender and reason; a sender that varies the
    reason must not grow the hub's memory or its log without bound (each line was kept)."""
    caplog.set_level(logging.WARNING, logger="binlogsync.hub")
    flood = 3000
    peer = site.fresh()
    for i in range(flood):
        peer.send_raw(_hello(host=f"intruder{i}"))  # "host 'intruderN' is not in any route"
    for _ in range(flood):
        assert peer.recv().kind == frames.ERROR
    assert site.hub.metrics.rejected._value.get() >= flood
    lines = [r for r in caplog.records if r.getMessage().startswith("rejected a message")]
    assert 0 < len(lines) <= 1000
    assert len(site.hub.access._logged) <= 1000
    site.assert_nothing_changed("flood")
    site.assert_good_data_flows()


# -- random mutations of valid messages ---------------------------------------------------

FUZZ_SEED = 20260611
FUZZ_ITERATIONS = 2000
FUZZ_SECONDS = 15.0  # with set-up and checks the test stays within 20 s


def _valid_messages() -> list[tuple[str, list[bytes]]]:
    """Valid messages of every kind the hub accepts, and from whom."""
    begin = Position("binlog.000002", 100)
    part_end = Position("binlog.000002", 900)
    return [
        (
            "fresh",
            raw(
                frames.HELLO,
                hello_header(
                    "t1", ["target"], checkpoints={"o1": {**tx(1).position.to_json(), "epoch": "e"}}
                ),
            ),
        ),  # fmt: skip
        (
            "fresh",
            raw(
                frames.HELLO,
                hello_header("o1", ["origin"], START, oldest=pos(), current=pos("binlog.000003")),
            ),
        ),  # fmt: skip
        (
            "origin",
            raw(
                frames.BATCH,
                {"origin": "o1", "seq": 5, "after": tx(1).position.to_json()},
                (body(tx(3)), body(tx(4))),
            ),
        ),  # fmt: skip
        (
            "origin",
            _batch(
                None,
                wire_part(1, begin=begin.to_wire()),
                wire_part(2, True, part_end.to_wire(), begin.to_wire(), NOW),
            ),
        ),  # fmt: skip
        ("target", raw(frames.APPLIED, APPLIED)),
        ("target", raw(frames.FAILED, {**FAILED, "seq": 1, "resend": True, "repair": False})),
        ("origin", raw(frames.HALTED, {**HALTED, "position": pos(), "end": pos(offset=9)})),
        ("fresh", _repair()),
        ("fresh", raw(frames.CAPTURE_SKIP, SKIP)),
        ("fresh", raw(frames.STATUS, {})),
        ("origin", raw(frames.PING, {})),
    ]


def _mutate(rng: random.Random, parts: list[bytes], pool: list[list[bytes]]) -> list[bytes]:
    parts = list(parts)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        i = rng.randrange(len(parts))
        frame = bytearray(parts[i])
        how = rng.randrange(8)
        if how == 0 and frame:  # flip bytes
            for _ in range(rng.randint(1, 8)):
                frame[rng.randrange(len(frame))] ^= rng.randint(1, 255)
        elif how == 1:  # truncate
            del frame[rng.randrange(len(frame) + 1) :]
        elif how == 2 and len(parts) > 1:  # swap two frames
            j = rng.randrange(len(parts))
            parts[i], parts[j] = parts[j], parts[i]
            continue
        elif how == 3 and len(parts) > 1:  # drop a frame
            del parts[i]
            continue
        elif how == 4:  # duplicate a frame
            parts.insert(i, parts[i])
            continue
        elif how == 5:  # insert random bytes
            at = rng.randrange(len(frame) + 1)
            frame[at:at] = rng.randbytes(rng.randint(1, 16))
        elif how == 6:  # a frame of another message
            other = rng.choice(pool)
            frame = bytearray(other[rng.randrange(len(other))])
        else:  # set a byte to a msgpack type marker (ints, floats, containers)
            if frame:
                frame[rng.randrange(len(frame))] = rng.choice(
                    (0xCB, 0xCF, 0xD3, 0xDC, 0xDE, 0xC0, 0xC2, 0xC3, 0xD9, 0xC7, 0xFF, 0x7F)
                )
        parts[i] = bytes(frame)
    return parts


# Values a structured mutation puts somewhere inside a header or body.
HOSTILE_VALUES: list[Any] = [
    -1, -(2**63), 2**31, 2**40, 2**63 - 1, 2**63, 2**64 - 1, 0, 1.5, float("nan"),
    float("inf"), float("-inf"), True, False, None, "", "x" * BIG, b"\xff" * 8, [], {},
    deep(), pos(OVERFLOW), pos(offset=2**63), OVERFLOW, msgpack.Timestamp(1), ext(42, b""),
    ext(1, b"NaN"), ext(4, msgpack.packb(2**63)), {"file": deep()}, [None] * 7,
]  # fmt: skip


def _mutate_value(rng: random.Random, value: Any) -> Any:
    """`value` with one place inside it (or itself) replaced by a hostile value."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(list(value))
        return {**value, key: _mutate_value(rng, value[key])}
    if isinstance(value, list) and value and rng.random() < 0.8:
        i = rng.randrange(len(value))
        return [*value[:i], _mutate_value(rng, value[i]), *value[i + 1 :]]
    return rng.choice(HOSTILE_VALUES)


def _mutate_structure(rng: random.Random, parts: list[bytes]) -> list[bytes]:
    """Well-formed msgpack still: one value inside the header or a body made hostile."""
    i = rng.randrange(2, len(parts))
    value = msgpack.unpackb(parts[i], raw=False, strict_map_key=False)
    return [*parts[:i], pack(_mutate_value(rng, value)), *parts[i + 1 :]]


def _drain(peer: Peer) -> None:
    while peer.sock.poll(0):
        peer.sock.recv_multipart()


def test_fuzzed_messages_never_stop_the_hub(site: Site) -> None:
    rng = random.Random(FUZZ_SEED)
    valid = _valid_messages()
    pool = [parts for _, parts in valid]
    rejected_before = site.hub.metrics.rejected._value.get()
    deadline = time.monotonic() + FUZZ_SECONDS
    senders: dict[str, Peer] = {}
    done = 0
    while done < FUZZ_ITERATIONS and time.monotonic() < deadline:
        if done % 100 == 0:  # fresh senders now and then: fuzzed HELLOs and kicks unseat them
            for peer in senders.values():
                _drain(peer)
                peer.close()
            senders = {"origin": site.fresh(), "target": site.fresh(), "fresh": site.fresh()}
            senders["origin"].hello("o1", ["origin"], start=START)
            senders["target"].hello("t1", ["target"], checkpoints={"o1": tx(1).position.to_json()})
        role, parts = rng.choice(valid)
        if rng.random() < 0.5:
            mutated = _mutate(rng, parts, pool)
        else:
            mutated = _mutate_structure(rng, parts)
        senders[role].send_raw(mutated)
        done += 1
        if done % 100 == 0:
            assert site.hub.error is None and site.hub.alive, f"after {done} messages"
            probe = site.fresh()  # answered only after what was sent before it arrived
            probe.send(frames.STATUS, {})
            assert probe.recv(kind=frames.STATUS_REPLY).kind == frames.STATUS_REPLY
            probe.close()
    assert done >= 500, f"only {done} fuzzed messages within {FUZZ_SECONDS} s"
    assert site.hub.error is None and site.hub.alive
    assert site.hub.metrics.rejected._value.get() - rejected_before > done // 4
    fresh = site.fresh()
    assert fresh.hello("o1", ["origin"], start=START).kind == frames.WELCOME


def test_a_batch_before_the_hub_knows_where_capture_starts_is_refused(site: Site) -> None:
    """o2 was welcomed without a place to resume (no start, no target checkpoint): an honest
    client says HELLO again; transactions sent anyway would be stored with no floor, so a
    target's older checkpoint could never be told from a gap."""
    o2 = site.fresh()
    assert o2.hello("o2", ["origin"]).header["resume"] is None
    o2.batch("o2", 1, [body(tx(1))])
    reply = o2.recv()
    assert reply.kind == frames.ERROR and reply.header["code"] == "rejected", reply
    assert site.hub.log.head("o2") is None and site.hub.log.log_rows("o2") == 0
    site.assert_nothing_changed("BATCH before registration")
    site.assert_good_data_flows()


def test_answers_quoting_long_ids_and_errors_are_valid_messages(site: Site) -> None:
    """An id and an error as long as a header string may be, quoted together in one ERROR
    (repair-failed, skip-failed): the requester must still be able to read it."""
    admin = site.fresh()
    admin.send_raw(_repair({"id": "r" * frames.MAX_STRING}))
    delivered = site.target.recv(kind=frames.DELIVER)
    assert delivered.header["repair"] is True
    failed = {**FAILED, "error": "e" * frames.MAX_STRING, "seq": delivered.header["seq"]}
    site.target.send(frames.FAILED, {**failed, "repair": True})
    answer = admin.recv()  # decoded: within every limit
    assert answer.kind == frames.ERROR and answer.header["code"] == "repair-failed"
    first, second = site.fresh(), site.fresh()
    first.send_raw(raw(frames.CAPTURE_SKIP, {**SKIP, "id": "a" * frames.MAX_STRING}))
    assert site.origin.recv().header["code"] == "hello-first"  # asked to reconnect
    second.send_raw(raw(frames.CAPTURE_SKIP, {**SKIP, "id": "b" * frames.MAX_STRING}))
    answer = first.recv()
    assert answer.kind == frames.ERROR and answer.header["code"] == "skip-failed"
    assert "replaced by capture-skip bbb" in answer.header["message"]
    assert site.hub.error is None and site.hub.alive
