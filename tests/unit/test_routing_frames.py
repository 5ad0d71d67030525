"""Routing rules, delivery cursors and frame validation, without sockets."""

from __future__ import annotations

import pytest

from binlogsync.codec import pack
from binlogsync.config import Route
from binlogsync.errors import ProtocolError
from binlogsync.hub.cursors import Cursor
from binlogsync.hub.routing import Router
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync.transport import frames

pytestmark = pytest.mark.unit


def _tx(*changes: Change) -> Transaction:
    return Transaction(Position("binlog.000001", 100), 1.0, changes)


def test_router_filters_by_table_and_renames_per_route() -> None:
    router = Router(
        (
            Route("o", ("a", "b"), TableFilter(("shop.*",))),
            Route("o", ("c",), TableFilter(("shop.orders",)), {"shop": "copy"}),
        )
    )
    orders = Change("insert", "shop", "orders", ("id",), (), ((1,),))
    users = Change("insert", "shop", "users", ("id",), (), ((1,),))
    other = Change("insert", "crm", "x", ("id",), (), ((1,),))
    ddl = Change("ddl", "shop", "", statement="CREATE VIEW v AS SELECT 1")
    tx = _tx(orders, users, other, ddl)
    assert router.targets_of("o") == {"a", "b", "c"}
    assert router.for_target("o", "a", tx).changes == (orders, users, ddl)
    to_c = router.for_target("o", "c", tx).changes
    # DDL whose table is unknown goes wherever its schema may be routed (it is information)
    assert [(c.schema, c.table) for c in to_c] == [("copy", "orders"), ("copy", "")]
    assert router.for_target("o", "c", _tx(other)).changes == ()  # position still travels
    assert not router.passes_whole("o", "a")
    assert Router((Route("o", ("a",)),)).passes_whole("o", "a")


def test_system_schemas_never_match() -> None:
    f = TableFilter(("*.*",))
    assert not f.matches("mysql", "user") and not f.matches("binlogsync", "checkpoint")
    assert f.matches("app", "t") and f.covers_schema("app") and not f.covers_schema("sys")


def test_cursor_window_acknowledge_and_rewind() -> None:
    c = Cursor("t", "o")
    p = [Position("binlog.000001", 100 * i) for i in range(1, 5)]
    s1, s2 = c.sent(p[0].key), c.sent(p[1].key)
    assert len(c.inflight) == 2 and c.sent_key == p[1].key
    c.acknowledge(s1, p[0])
    assert c.applied == p[0] and len(c.inflight) == 1 and c.dirty
    c.rewind()
    assert c.sent_key == p[0].key and not c.inflight
    c.acknowledge(s2, p[1])  # a late answer from before the rewind still moves `applied`
    assert c.applied == p[1]
    c.reset_to(p[3])  # the target's own checkpoint is the truth
    assert c.applied == p[3] and c.sent_key == p[3].key


def test_positions_order_by_file_then_offset() -> None:
    a, b, c = (
        Position("binlog.000002", 900),
        Position("binlog.000010", 4),
        Position("binlog.000010", 5),
    )
    assert a < b < c and max([c, a, b]) == c
    assert Position.parse("binlog.000010:4") == b
    with pytest.raises(ProtocolError, match="FILE:OFFSET"):
        Position.parse("binlog.000010")


def test_frames_round_trip_and_validation() -> None:
    pos = Position("binlog.000001", 42, "0-1-7")
    wire = frames.encode(frames.ACK, {"origin": "o", "seq": 3, "upto": pos})
    message = frames.decode(wire, 1 << 20)
    assert message.kind == frames.ACK and message.header["upto"] == pos
    with pytest.raises(ProtocolError, match="seq"):
        frames.decode(frames.encode(frames.ACK, {"origin": "o", "seq": "3", "upto": pos}), 1 << 20)
    with pytest.raises(ProtocolError, match="malformed position"):
        frames.decode(
            frames.encode(frames.ACK, {"origin": "o", "seq": 3, "upto": {"file": 1}}), 1 << 20
        )
    with pytest.raises(ProtocolError, match="over the limit"):
        frames.decode(frames.encode(frames.BATCH, {"origin": "o", "seq": 1}, [b"x" * 100]), 50)


def test_a_messages_bodies_travel_in_one_frame() -> None:
    """BLS4: however many bodies, one frame holds them all, and each comes back as it went,
    empty ones and one of a megabyte included; a message without bodies has no such frame.
    A sender counting BODY_FRAMING per body stays within the size it counted."""
    bodies = [
        b"",
        b"x",
        bytes(range(256)) * 300,
        b"y" * (1 << 20),
        *[b"tx%d" % i for i in range(1000)],
    ]
    header = {"origin": "o", "seq": 1, "after": None}
    wire = frames.encode(frames.BATCH, header, bodies)
    assert len(wire) == 4
    message = frames.decode(wire, 1 << 30)
    assert message.bodies == tuple(bodies)
    assert all(type(b) is bytes for b in message.bodies)
    assert len(wire[3]) <= sum(len(b) + frames.BODY_FRAMING for b in bodies)
    assert len(frames.encode(frames.BATCH, header, [])) == 3
    assert frames.decode(frames.encode(frames.BATCH, header, []), 1 << 20).bodies == ()
    with pytest.raises(ProtocolError, match="one frame"):
        frames.decode([*wire, wire[3]], 1 << 30)
    with pytest.raises(ProtocolError, match="array of bin"):
        frames.decode([*wire[:3], pack([1])], 1 << 30)
