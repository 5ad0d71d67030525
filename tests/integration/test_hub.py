"""The hub with real ZeroMQ sockets: storing, deduplicating, delivering, surviving restarts,
refusing what it must refuse."""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

import pytest

from binlogsync.config import Route, Security
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync.transport import curve, frames
from hubkit import HubThread, Peer, body, hello_header, tx

pytestmark = pytest.mark.integration

START = Position("binlog.000001", 4)


def test_batches_are_acknowledged_after_storing_and_duplicates_dropped(tmp_path: Path) -> None:
    with HubThread(tmp_path) as h:
        origin = Peer(h.endpoint)
        welcome = origin.hello("o1", ["origin"], start=START)
        assert welcome.header["resume"] == START
        origin.batch("o1", 1, [body(tx(i)) for i in range(1, 6)])
        ack = origin.recv(kind=frames.ACK)
        assert ack.header["seq"] == 1 and ack.header["upto"] == tx(5).position
        # A client restarted from an older position sends some again: they are dropped.
        origin.batch("o1", 2, [body(tx(i)) for i in range(3, 8)])
        assert origin.recv(kind=frames.ACK).header["upto"] == tx(7).position
        assert h.hub.log.log_rows("o1") == 7
        assert h.hub.log.head("o1") == tx(7).position
        origin.close()


def test_a_turn_runs_with_collection_deferred(tmp_path: Path) -> None:
    """What a turn decodes to check the bodies is freed when the turn ends: the collector
    does not walk it meanwhile (runloop.collection_deferred), and is back on after."""
    with HubThread(tmp_path) as h:
        enabled: list[bool] = []
        handle = h.hub.handle

        def turn(received: list[list[Any]]) -> None:
            enabled.append(gc.isenabled())
            handle(received)

        h.hub.handle = turn  # type: ignore[method-assign]
        origin = Peer(h.endpoint)
        origin.hello("o1", ["origin"], start=START)
        origin.batch("o1", 1, [body(tx(i)) for i in range(1, 6)])
        assert origin.recv(kind=frames.ACK).header["upto"] == tx(5).position
        origin.close()
    assert enabled and not any(enabled)
    assert gc.isenabled()


def test_delivery_in_order_within_window_and_cursor_moves_on_applied(tmp_path: Path) -> None:
    # The peers send no heartbeats and the test waits 0.5 s on purpose: a long liveness keeps
    # a loaded machine from taking the target offline before its APPLIED (3 x 0.2 s).
    with HubThread(tmp_path, batch_transactions=3, window=2, heartbeat_liveness=100) as h:
        origin, target = Peer(h.endpoint), Peer(h.endpoint)
        origin.hello("o1", ["origin"], start=START)
        origin.batch("o1", 1, [body(tx(i)) for i in range(1, 11)])
        origin.recv(kind=frames.ACK)
        reads: list[int] = []  # entries per read of the log
        read = h.hub.log.read

        def counted(origin: str, after_key: int, limit: int) -> list[Any]:
            entries = read(origin, after_key, limit)
            reads.append(len(entries))
            return entries

        h.hub.log.read = counted  # type: ignore[method-assign]
        target.hello("t1", ["target"])
        first = target.recv(kind=frames.DELIVER)
        second = target.recv(kind=frames.DELIVER)
        assert [t.position for t in first.transactions()] == [tx(i).position for i in (1, 2, 3)]
        assert [t.position for t in second.transactions()] == [tx(i).position for i in (4, 5, 6)]
        with pytest.raises(TimeoutError):  # the window is full until the target answers
            target.recv(timeout=0.5, kind=frames.DELIVER)
        target.send(frames.PING, {})
        target.recv(kind=frames.PONG)  # answered in a later turn: the one that sent is over
        # A full window reads nothing: a backlog's drain once read each batch a second time,
        # in vain, after every DELIVER.
        assert reads == [3, 3]
        target.send(
            frames.APPLIED,
            {"origin": "o1", "seq": first.header["seq"], "upto": first.header["upto"]},
        )
        third = target.recv(kind=frames.DELIVER)
        assert [t.position.key for t in third.transactions()] == [
            tx(i).position.key for i in (7, 8, 9)
        ]
        assert reads == [3, 3, 3]
        status = h.hub.status()
        assert status["targets"][0]["applied"] == tx(3).position.to_json()
        assert status["targets"][0]["backlog"] == 7


def test_offline_target_catches_up_from_its_own_checkpoint(tmp_path: Path) -> None:
    with HubThread(tmp_path) as h:
        origin = Peer(h.endpoint)
        origin.hello("o1", ["origin"], start=START)
        origin.batch("o1", 1, [body(tx(i)) for i in range(1, 6)])
        origin.recv(kind=frames.ACK)
        # The target comes back saying (from its database) it applied up to tx 3.
        target = Peer(h.endpoint)
        target.hello("t1", ["target"], checkpoints={"o1": tx(3).position.to_json()})
        delivered = target.recv(kind=frames.DELIVER)
        assert [t.position for t in delivered.transactions()] == [tx(4).position, tx(5).position]


def test_hub_restart_loses_nothing(tmp_path: Path) -> None:
    with HubThread(tmp_path) as h:
        origin = Peer(h.endpoint)
        origin.hello("o1", ["origin"], start=START)
        origin.batch("o1", 1, [body(tx(i)) for i in range(1, 4)])
        origin.recv(kind=frames.ACK)
        origin.close()
    with HubThread(tmp_path) as h2:
        origin = Peer(h2.endpoint)
        assert origin.hello("o1", ["origin"], start=START).header["resume"] == tx(3).position
        target = Peer(h2.endpoint)
        target.hello("t1", ["target"])
        delivered = target.recv(kind=frames.DELIVER)
        assert len(delivered.transactions()) == 3


def test_routing_filters_tables_and_renames_schema(tmp_path: Path) -> None:
    routes = (Route("o1", ("t1",), TableFilter(("shop.keep",)), {"shop": "copy"}),)
    with HubThread(tmp_path, routes=routes) as h:
        origin = Peer(h.endpoint)
        origin.hello("o1", ["origin"], start=START)
        origin.batch("o1", 1, [body(tx(1, "keep")), body(tx(2, "drop")), body(tx(3, "keep"))])
        origin.recv(kind=frames.ACK)
        target = Peer(h.endpoint)
        target.hello("t1", ["target"])
        delivered = target.recv(kind=frames.DELIVER)
        got = delivered.transactions()
        assert [t.position for t in got] == [tx(1).position, tx(3).position]
        assert {c.schema for t in got for c in t.changes} == {"copy"}
        assert delivered.header["upto"] == tx(3).position


def test_heartbeats_mark_hosts_online_and_offline(tmp_path: Path) -> None:
    with HubThread(tmp_path) as h:
        target = Peer(h.endpoint)
        target.hello("t1", ["target"])
        target.send(frames.PING, {})
        assert target.recv(kind=frames.PONG).kind == frames.PONG
        online = {x["name"]: x["online"] for x in h.hub.status()["hosts"]}
        assert online["t1"] is True
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and h.hub.hosts["t1"].online:
            time.sleep(0.05)  # polling the hub's view; the hub declares it after 3 x 0.2 s
        assert h.hub.hosts["t1"].online is False


@pytest.mark.parametrize(
    "parts, reason",
    [
        ([frames.VERSION], "frames"),
        ([b"XXX9", b"PING", b"\x80"], "protocol"),
        ([frames.VERSION, b"NOPE", b"\x80"], "unknown message kind"),
        ([frames.VERSION, b"HELLO", b"\xc1\xc1garbage"], "msgpack"),
        ([frames.VERSION, b"HELLO", b"\x81\xa4host\x01"], "must be str"),
        ([frames.VERSION, b"HELLO", b"\x80"], "lacks field"),
        ([frames.VERSION, b"BATCH", b"\x80"], "lacks field 'origin'"),
        ([frames.VERSION, b"PING", b"\x80"], "HELLO first"),
        ([frames.VERSION, b"PING", b"\x80", b"extra"], "carries no bodies"),
    ],
)
def test_malformed_frames_are_rejected_and_the_hub_carries_on(
    tmp_path: Path, parts: list[bytes], reason: str
) -> None:
    with HubThread(tmp_path) as h:
        bad = Peer(h.endpoint)
        bad.send_raw(parts)
        error = bad.recv(kind=frames.ERROR)
        assert reason in error.header["message"]
        assert h.hub.metrics.rejected._value.get() == 1
        good = Peer(h.endpoint)
        assert good.hello("o1", ["origin"], start=START).kind == frames.WELCOME


def test_a_truncated_transaction_body_is_rejected(tmp_path: Path) -> None:
    with HubThread(tmp_path) as h:
        origin = Peer(h.endpoint)
        origin.hello("o1", ["origin"], start=START)
        origin.batch("o1", 1, [body(tx(1))[:-3]])
        assert origin.recv(kind=frames.ERROR).header["code"] == "rejected"
        assert h.hub.log.log_rows("o1") == 0


def test_oversized_message_is_dropped(tmp_path: Path) -> None:
    with HubThread(tmp_path, max_message_bytes=10_000) as h:
        origin = Peer(h.endpoint)
        origin.hello("o1", ["origin"], start=START)
        origin.batch("o1", 1, [b"\x00" * 200_000])
        origin.close()
        fresh = Peer(h.endpoint)  # libzmq drops the oversized peer; the hub lives on
        assert fresh.hello("o1", ["origin"], start=START).kind == frames.WELCOME
        assert h.hub.log.log_rows("o1") == 0


def test_unknown_host_and_foreign_origin_are_refused(tmp_path: Path) -> None:
    with HubThread(tmp_path) as h:
        peer = Peer(h.endpoint)
        peer.send(frames.HELLO, hello_header("intruder", ["origin"]))
        assert "not in any [[route]]" in peer.recv(kind=frames.ERROR).header["message"]
        target = Peer(h.endpoint)
        target.hello("t1", ["target"])
        target.batch("o1", 1, [body(tx(1))])
        assert "own origin" in target.recv(kind=frames.ERROR).header["message"]
        assert h.hub.log.log_rows("o1") == 0


def _curve_peer(endpoint: str, keys: Path, name: str) -> Peer:
    return Peer(
        endpoint,
        setup=lambda sock: curve.secure_client(sock, keys / f"{name}.key_secret", keys / "hub.key"),
    )


def test_curve_admits_authorised_keys_only_and_binds_keys_to_hosts(tmp_path: Path) -> None:
    keys, authorized = tmp_path / "keys", tmp_path / "keys" / "authorized"
    authorized.mkdir(parents=True)
    for name in ("hub", "o1", "t1", "stranger"):
        public, _ = curve.make_keys(keys, name)
        if name in ("o1", "t1"):
            (authorized / public.name).write_bytes(public.read_bytes())
    security = Security(secret_key_file=keys / "hub.key_secret", authorized_keys_dir=authorized)
    with HubThread(tmp_path / "hub", security=security) as h:
        good = _curve_peer(h.endpoint, keys, "o1")
        assert good.hello("o1", ["origin"], start=START).kind == frames.WELCOME
        stranger = _curve_peer(h.endpoint, keys, "stranger")
        stranger.send(frames.PING, {})
        with pytest.raises(TimeoutError):  # the handshake is refused: nothing comes back
            stranger.recv(timeout=1.0)
        impostor = _curve_peer(h.endpoint, keys, "t1")  # t1's key claiming to be o1
        impostor.send(frames.HELLO, hello_header("o1", ["origin"]))
        assert "speaks only for its own host" in impostor.recv(kind=frames.ERROR).header["message"]
        plain = Peer(h.endpoint)  # no CURVE at all
        plain.send(frames.PING, {})
        with pytest.raises(TimeoutError):
            plain.recv(timeout=1.0)


def test_every_ack_follows_the_commit_of_what_it_acknowledges(tmp_path: Path) -> None:
    """A stream of one-transaction batches, eight in flight, as an origin under load sends
    them: the hub commits them in groups (origins.py: group commit) and acknowledges each
    group once, for its last batch. Whenever an ACK arrives, another connection to the log
    file already sees everything up to it (persist, then acknowledge)."""
    import sqlite3

    count = 200
    with HubThread(tmp_path) as h:
        origin = Peer(h.endpoint)
        origin.hello("o1", ["origin"], start=START)
        db = sqlite3.connect(h.hub.log.path)
        sent = acked = acks = 0
        after: Position | None = START
        deadline = time.monotonic() + 60
        while acked < count:
            assert time.monotonic() < deadline, f"stuck at {acked} of {count}"
            while sent < count and sent - acked < 8:
                sent += 1
                origin.batch("o1", sent, [body(tx(sent))], after=after)
                after = tx(sent).position
            ack = origin.recv(kind=frames.ACK)
            acks += 1
            seq, upto = ack.header["seq"], ack.header["upto"]
            assert seq > acked and upto == tx(seq).position
            stored = db.execute("SELECT MAX(pos_key) FROM log WHERE origin='o1'").fetchone()[0]
            assert stored >= upto.key, f"ACK {seq} before its commit"
            acked = seq
        db.close()
        assert h.hub.log.log_rows("o1") == count
        assert acks <= count
