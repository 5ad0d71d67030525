"""Who may say what to the hub under CURVE (hub/access.py): REPAIR and CAPTURE_SKIP need an
admin key (or the hub's own), a host key speaks only for its own host whatever the message,
STATUS is open to every admitted key, and refused handshakes and messages are logged with the
key's name or fingerprint."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from binlogsync.config import Route, Security
from binlogsync.hub.access import fingerprint
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync.transport import curve, frames
from hubkit import HubThread, Peer, body, hello_header, tx

pytestmark = pytest.mark.integration

START = Position("binlog.000001", 4)
ALL = TableFilter(("*.*",))
# o1 → t1, t2 and o2 → t2: t1 has no business with o2, and nobody but o1 with o1's capture.
ROUTES = (Route("o1", ("t1", "t2"), ALL), Route("o2", ("t2",), ALL))
HOSTS = ("o1", "o2", "t1", "t2")


@dataclass
class Site:
    hub: HubThread
    keys: Path

    def peer(self, key: str, setup: Any = None) -> Peer:
        """A raw peer that signs with `key` (NAME.key_secret in the keys folder)."""

        def secure(sock: zmq.Socket[bytes]) -> None:
            curve.secure_client(sock, self.keys / f"{key}.key_secret", self.keys / "hub.key")
            if setup is not None:
                setup(sock)

        return Peer(self.hub.endpoint, setup=secure)

    def public(self, key: str) -> bytes:
        return curve.load_public(self.keys / f"{key}.key")


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    keys = tmp_path / "keys"
    authorized, admins = keys / "authorized", keys / "admins"
    authorized.mkdir(parents=True)
    admins.mkdir()
    for name in ("hub", *HOSTS, "admin", "stranger"):
        public, _ = curve.make_keys(keys, name)
        if name in HOSTS:
            shutil.copy(public, authorized / public.name)
        elif name == "admin":
            shutil.copy(public, admins / public.name)
    security = Security(
        secret_key_file=keys / "hub.key_secret",
        authorized_keys_dir=authorized,
        admin_keys_dir=admins,
    )
    # Peers of these tests stay online without pinging (20 s of silence).
    with HubThread(
        tmp_path / "hub",
        routes=ROUTES,
        security=security,
        heartbeat_interval=0.2,
        heartbeat_liveness=100,
    ) as h:
        yield Site(h, keys)
        assert h.hub.error is None


@dataclass
class Running:
    """o1 has stored tx 1; t1 and t2 have applied it."""

    site: Site
    origin: Peer
    targets: dict[str, Peer]

    @property
    def hub(self) -> Any:
        return self.site.hub.hub

    def assert_unchanged(self) -> None:
        """Nothing a refused message could have done happened: no repair, skip or halt is
        pending, and the next transaction of o1 reaches both targets as the next delivery,
        on the connections that said HELLO first."""
        hub = self.hub
        assert hub.error is None and hub.alive
        assert hub.origins.skips == {} and hub.origins.halted == {}
        assert all(not c.repairs for c in hub.delivery.cursors.values())
        o2 = hub.delivery.cursors[("t2", "o2")]
        assert o2.applied is None and o2.last_error == ""
        self.origin.batch("o1", 2, [body(tx(2))], after=tx(1).position)
        assert self.origin.recv(kind=frames.ACK).header["upto"] == tx(2).position
        for name, peer in self.targets.items():
            delivered = peer.recv(kind=frames.DELIVER)
            while delivered.header["origin"] != "o1":  # o2's start, when o2 said HELLO
                delivered = peer.recv(kind=frames.DELIVER)
            assert not delivered.header.get("repair"), name
            assert [t.position for t in delivered.transactions()] == [tx(2).position], name
            peer.applied(delivered)
        assert hub.log.head("o1") == tx(2).position


def running(site: Site) -> Running:
    origin = site.peer("o1")
    origin.hello("o1", ["origin"], start=START)
    origin.batch("o1", 1, [body(tx(1))])
    origin.recv(kind=frames.ACK)
    targets = {}
    for name in ("t1", "t2"):
        peer = site.peer(name)
        peer.hello(name, ["target"])
        delivered = peer.recv(kind=frames.DELIVER)
        assert [t.position for t in delivered.transactions()] == [tx(1).position]
        peer.applied(delivered)
        targets[name] = peer
    return Running(site, origin, targets)


def repair_header(target: str, id: str = "r1") -> dict[str, Any]:
    return {"origin": "o1", "target": target, "snapshot": tx(1).position, "id": id}


def skip_header(id: str = "s1") -> dict[str, Any]:
    return {"origin": "o1", "to": Position("binlog.000002", 4), "reason": "lost binlog", "id": id}


def refusal(peer: Peer) -> str:
    error = peer.recv(kind=frames.ERROR)
    assert error.header["code"] == "rejected"
    return str(error.header["message"])


# -- admin commands ------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["t1", "t2", "o1"])
@pytest.mark.parametrize("target", ["t1", "t2"])
def test_a_host_key_may_not_repair_any_target(site: Site, key: str, target: str) -> None:
    run = running(site)
    sender = run.targets.get(key) or run.origin
    sender.send(frames.REPAIR, repair_header(target), [body(tx(50))])
    message = refusal(sender)
    assert "REPAIR needs an admin key" in message and f"{key}'s key" in message
    run.assert_unchanged()  # tx 2 is the next delivery: no repair was queued ahead of it


@pytest.mark.parametrize("key", ["t1", "o1"])
def test_a_host_key_may_not_skip_capture(site: Site, key: str) -> None:
    run = running(site)
    sender = run.targets.get(key) or run.origin
    sender.send(frames.CAPTURE_SKIP, skip_header())
    assert "CAPTURE_SKIP needs an admin key" in refusal(sender)
    run.origin.send(frames.PING, {})  # o1 was not made to reconnect
    assert run.origin.recv().kind == frames.PONG
    run.assert_unchanged()
    assert site.hub.hub.log.capture_skips("o1") == []


DETACH_HEADER = {"origin": "o1", "target": "t1", "reason": "too far behind", "id": "d1"}


@pytest.mark.parametrize("key", ["t1", "o1"])
def test_a_host_key_may_not_detach_a_target(site: Site, key: str) -> None:
    run = running(site)
    sender = run.targets.get(key) or run.origin
    sender.send(frames.DETACH, DETACH_HEADER)
    assert "DETACH needs an admin key" in refusal(sender)
    assert site.hub.hub.delivery.detachments.all() == {}


def test_an_admin_key_may_detach_a_target(site: Site) -> None:
    running(site)
    admin = site.peer("admin")
    admin.send(frames.DETACH, DETACH_HEADER)
    assert admin.recv(kind=frames.DETACHED).header["id"] == "d1"
    assert set(site.hub.hub.delivery.detachments.all()) == {("t1", "o1")}


def test_an_admin_key_may_repair_a_target(site: Site) -> None:
    run = running(site)
    admin = site.peer("admin")
    admin.send(frames.REPAIR, repair_header("t2"), [body(tx(50))])
    t2 = run.targets["t2"]
    delivered = t2.recv(kind=frames.DELIVER)
    assert delivered.header["repair"] is True
    assert [t.position for t in delivered.transactions()] == [tx(50).position]
    t2.applied(delivered, upto=tx(1).position)
    assert admin.recv(kind=frames.REPAIRED).header["id"] == "r1"


@pytest.mark.parametrize("key", ["admin", "hub"])
def test_an_admin_key_and_the_hubs_own_key_may_skip_capture(site: Site, key: str) -> None:
    run = running(site)
    admin = site.peer(key)
    admin.send(frames.CAPTURE_SKIP, skip_header())
    # o1 is asked to reconnect; its HELLO moves the head, and the admin hears of it.
    assert run.origin.recv(kind=frames.ERROR).header["code"] == "hello-first"
    welcome = run.origin.hello("o1", ["origin"], start=START)
    assert welcome.header["resume"] == Position("binlog.000002", 4)
    skipped = admin.recv(kind=frames.SKIPPED)
    assert skipped.header["id"] == "s1" and skipped.header["to"] == Position("binlog.000002", 4)
    assert len(site.hub.hub.log.capture_skips("o1")) == 1


def test_the_hubs_own_key_may_repair_a_target(site: Site) -> None:
    run = running(site)
    operator = site.peer("hub")
    operator.send(frames.REPAIR, repair_header("t1"), [body(tx(50))])
    delivered = run.targets["t1"].recv(kind=frames.DELIVER)
    assert delivered.header["repair"] is True
    run.targets["t1"].applied(delivered, upto=tx(1).position)
    assert operator.recv(kind=frames.REPAIRED).header["id"] == "r1"


def test_status_is_answered_for_every_admitted_key_and_no_other(site: Site) -> None:
    """Current rule (access.py): STATUS needs no HELLO and no admin key, only a key the hub
    admits; a stranger's handshake is refused, so it hears nothing at all."""
    running(site)
    for key in ("t1", "o2", "admin", "hub"):
        peer = site.peer(key)
        peer.send(frames.STATUS, {})
        reply = peer.recv(kind=frames.STATUS_REPLY)
        assert {r["name"] for r in reply.header["status"]["hosts"]} == set(HOSTS), key
    stranger = site.peer("stranger")
    stranger.send(frames.STATUS, {})
    with pytest.raises(TimeoutError):
        stranger.recv(timeout=1.0)


# -- a host key speaks only for its own host ----------------------------------------------

# (sender's key, whether it said HELLO first, kind, header, what the ERROR says)
FOREIGN: list[tuple[str, bool, bytes, dict[str, Any], str]] = [
    ("t1", False, frames.HELLO, hello_header("t2", ["target"]), "speaks only for its own host"),
    ("t1", False, frames.HELLO, hello_header("o1", ["origin"], START), "its own host"),
    ("o2", False, frames.HELLO, hello_header("o1", ["origin"], START), "its own host"),
    ("admin", False, frames.HELLO, hello_header("t1", ["target"]), "its own host"),
    ("t1", True, frames.HELLO, hello_header("t1", ["target", "origin"]), "not the origin"),
    ("t1", True, frames.BATCH, {"origin": "o1", "seq": 9, "after": None}, "its own origin"),
    ("o2", True, frames.BATCH, {"origin": "o1", "seq": 9, "after": None}, "its own origin"),
    ("t1", True, frames.APPLIED, {"origin": "o2", "seq": 1, "upto": None}, "no route"),
    ("o1", True, frames.APPLIED, {"origin": "o1", "seq": 1, "upto": None}, "no route"),
    (
        "t1",
        True,
        frames.FAILED,
        {"origin": "o2", "position": None, "error": "boom", "retry_in": 1.0},
        "no route",
    ),
    (
        "t1",
        True,
        frames.HALTED,
        {"origin": "o1", "error": "x", "position": None, "at": "", "end": None},
        "its own capture",
    ),
    (
        "o2",
        True,
        frames.HALTED,
        {"origin": "o1", "error": "x", "position": None, "at": "", "end": None},
        "its own capture",
    ),
    (
        "t1",
        True,
        frames.SKIPPED,
        {"id": "s", "origin": "o1", "skipped_from": None, "to": START},
        "does not send SKIPPED",
    ),
    # An admitted key that did not say HELLO on this connection speaks for nobody.
    ("t2", False, frames.APPLIED, {"origin": "o1", "seq": 1, "upto": tx(1).position}, "HELLO"),
    ("admin", False, frames.BATCH, {"origin": "o1", "seq": 9, "after": None}, "HELLO first"),
    ("admin", False, frames.PING, {}, "HELLO first"),
]


@pytest.mark.parametrize(
    "key, said_hello, kind, header, says",
    FOREIGN,
    ids=[f"{k}-{m.decode()}-{h.get('host') or h.get('origin', '')}" for k, _, m, h, _ in FOREIGN],
)
def test_a_host_key_speaks_only_for_its_own_host(
    site: Site, key: str, said_hello: bool, kind: bytes, header: dict[str, Any], says: str
) -> None:
    run = running(site)
    if said_hello and key in ("o1", "t1", "t2"):
        sender = run.origin if key == "o1" else run.targets[key]
    else:
        sender = site.peer(key)
        if said_hello:
            sender.hello(key, ["origin"], start=START)
    bodies = [body(tx(2))] if kind == frames.BATCH else []
    sender.send(kind, header, bodies)
    assert says in sender.recv(kind=frames.ERROR).header["message"]
    run.assert_unchanged()
    assert site.hub.hub.log.log_rows("o1") == 2  # tx 1 and 2, from o1 alone


def test_a_refusal_quoting_a_long_host_name_is_still_a_valid_error(site: Site) -> None:
    """The ERROR quotes the host the HELLO named; at the longest name a header may carry it
    was longer than any ERROR may be, and the client could not read why it was refused."""
    running(site)
    peer = site.peer("t1")
    peer.send(frames.HELLO, hello_header("x" * frames.MAX_STRING, ["target"]))
    message = refusal(peer)  # decoded: every field within its limits
    assert message.startswith("HELLO for host 'xxx") and len(message) <= frames.MAX_STRING
    assert site.hub.hub.error is None


# -- refusals are logged with the key's name or fingerprint -------------------------------


def _wait_for(predicate: Any, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_refused_handshake_is_logged_with_the_keys_fingerprint_once_a_minute(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="binlogsync.hub")
    print_ = fingerprint(site.public("stranger"))

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if print_ in r.getMessage()]

    for attempt in range(2):
        # The stranger's own socket learns that the hub's ZAP handler refused it.
        assert _handshake_outcome(site, "stranger") == zmq.EVENT_HANDSHAKE_FAILED_AUTH
        _wait_for(lambda: lines(), "the refusal's log line")
        assert len(lines()) == 1, attempt  # the second refusal within a minute is not logged
    assert "neither in authorized_keys_dir nor in admin_keys_dir" in lines()[0]


def test_refused_messages_are_logged_with_the_keys_name(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="binlogsync.hub")
    run = running(site)
    run.targets["t1"].send(frames.REPAIR, repair_header("t2"), [body(tx(50))])
    refusal(run.targets["t1"])
    nameless = site.peer("t2")  # t2's key, on a connection that said no HELLO
    nameless.send(frames.CAPTURE_SKIP, skip_header())
    refusal(nameless)
    logged = [r.getMessage() for r in caplog.records if "rejected a message" in r.getMessage()]
    assert any(
        line.startswith("rejected a message from t1 ") and "REPAIR needs an admin key" in line
        for line in logged
    ), logged
    assert any(
        line.startswith("rejected a message from t2's key ") and "CAPTURE_SKIP" in line
        for line in logged
    ), logged


# -- no way in around the ZAP handler ------------------------------------------------------


def _handshake_outcome(site: Site, key: str) -> int:
    """Connect with `key`, send PING, and return the monitor event that ends the handshake."""
    events = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    events |= zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    monitored: list[zmq.Socket[bytes]] = []
    peer = site.peer(key, setup=lambda sock: monitored.append(sock.get_monitor_socket(events)))
    peer.send(frames.PING, {})
    monitor = monitored[0]
    try:
        assert monitor.poll(5000), "the handshake neither succeeded nor failed"
        return int(recv_monitor_message(monitor)["event"])
    finally:
        peer.sock.disable_monitor()
        monitor.close(linger=0)


def test_no_client_is_admitted_while_the_hub_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found here: the hub bound its socket before its ZAP handler ran, and libzmq admits any
    CURVE key when no handler is there; the first message of such a connection (it has no
    User-Id) then ended the hub with ZMQError EINVAL."""
    real = curve.start_authenticator
    outcomes: list[int] = []
    holder: list[Site] = []

    def slow_start(context: Any, admit: Any) -> Any:
        # The hub's thread is here: a stranger that can already connect tries it now.
        if holder[0].hub.hub.bound_endpoint:
            holder[0].hub.endpoint = holder[0].hub.hub.bound_endpoint
            outcomes.append(_handshake_outcome(holder[0], "stranger"))
        return real(context, admit)

    monkeypatch.setattr(curve, "start_authenticator", slow_start)
    keys = tmp_path / "keys"
    (keys / "authorized").mkdir(parents=True)
    for name in ("hub", "o1", "stranger"):
        public, _ = curve.make_keys(keys, name)
        if name == "o1":
            shutil.copy(public, keys / "authorized" / public.name)
    security = Security(
        secret_key_file=keys / "hub.key_secret", authorized_keys_dir=keys / "authorized"
    )
    hub = HubThread(tmp_path / "hub", security=security)
    holder.append(Site(hub, keys))
    with hub as h:
        if not outcomes:  # the socket was bound after the handler started: try it now
            outcomes.append(_handshake_outcome(holder[0], "stranger"))
        assert outcomes == [zmq.EVENT_HANDSHAKE_FAILED_AUTH]
        good = holder[0].peer("o1")
        assert good.hello("o1", ["origin"], start=START).kind == frames.WELCOME
        assert h.hub.error is None


def test_without_a_zap_handler_nobody_is_admitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Should the ZAP handler be missing, libzmq must refuse CURVE clients, not admit any key
    (the socket enforces its ZAP domain)."""

    class NoHandler:
        def stop(self) -> None:
            pass

    caplog.set_level(logging.WARNING, logger="binlogsync.hub")
    monkeypatch.setattr(curve, "start_authenticator", lambda context, admit: NoHandler())
    keys = tmp_path / "keys"
    (keys / "authorized").mkdir(parents=True)
    for name in ("hub", "o1"):
        curve.make_keys(keys, name)
    shutil.copy(keys / "o1.key", keys / "authorized" / "o1.key")
    security = Security(
        secret_key_file=keys / "hub.key_secret", authorized_keys_dir=keys / "authorized"
    )
    with HubThread(tmp_path / "hub", security=security) as h:
        peer = Site(h, keys).peer("o1")
        peer.send(frames.HELLO, hello_header("o1", ["origin"], START))
        _wait_for(
            lambda: any("handshake failed" in r.getMessage() for r in caplog.records),
            "the hub to fail the handshake",
        )
        with pytest.raises(TimeoutError):
            peer.recv(timeout=0.5)
        assert h.hub.hosts["o1"].online is False and h.hub.error is None


def test_a_message_without_a_curve_user_id_is_dropped_not_fatal(tmp_path: Path) -> None:
    """With CURVE on, a message that did not pass the ZAP handler carries no User-Id; reading
    it raised ZMQError in the hub's loop; now it is dropped (and counted as rejected)."""
    keys = tmp_path / "keys"
    curve.make_keys(keys, "hub")
    (keys / "authorized").mkdir()
    security = Security(
        secret_key_file=keys / "hub.key_secret", authorized_keys_dir=keys / "authorized"
    )
    hub = HubThread(tmp_path / "hub", security=security).hub  # not started: handle() only
    try:
        wire = [zmq.Frame(f) for f in (b"\x00peer", *frames.encode(frames.STATUS, {}))]
        hub.handle([wire])
        assert hub.metrics.rejected._value.get() == 1
    finally:
        hub.log.close()
