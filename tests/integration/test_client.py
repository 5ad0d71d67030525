"""The client agent in-process against a real hub (HubThread) and real MariaDB servers: what it
says when the hub cannot be reached, how it comes back after the hub restarts or pauses, stale
deliveries, the outbox window, and a loop thread that never blocks."""

from __future__ import annotations

import dataclasses
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from binlogsync.client import origin as origin_module
from binlogsync.client.agent import ClientAgent
from binlogsync.config import (
    ClientConfig,
    DatabaseSettings,
    OriginConfig,
    Route,
    Security,
    TargetConfig,
)
from binlogsync.engines.mariadb import checkpoint
from binlogsync.hub.server import Hub
from binlogsync.metrics import HUB_LINK_STATES
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync.transport import curve, frames
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Server
from binlogsync_dev.verify import gtid_seq, origin_gtid
from hubkit import HubThread, Peer
from sitekit import create

pytestmark = pytest.mark.integration

T = "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(2000))"


# -- helpers ---------------------------------------------------------------------------------
def wait_for(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.005) -> Any:
    """wait_until, failing the test (AssertionError) when `what` does not come in time."""
    try:
        return wait_until(predicate, timeout, every, what)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


def names(dbname: str) -> tuple[str, str]:
    """Host names unique to one test (the target's checkpoint rows are per origin name)."""
    return f"o{dbname[2:]}", f"t{dbname[2:]}"


def config(
    name: str,
    hub: str,
    *,
    origin: Server | None = None,
    target: Server | None = None,
    tables: str = "*.*",
    heartbeat: float = 0.2,
    security: Security | None = None,
    batch_transactions: int = 500,
    group_transactions: int = 2000,
) -> ClientConfig:
    return ClientConfig(
        name=name,
        hub=hub,
        origin=(
            OriginConfig(
                DatabaseSettings(port=origin.port),
                server_id=4000 + abs(hash(name)) % 100_000,
                tables=TableFilter((tables,)),
                batch_transactions=batch_transactions,
            )
            if origin
            else None
        ),
        target=(
            TargetConfig(
                DatabaseSettings(port=target.port),
                group_transactions=group_transactions,
                retry_initial=0.1,
                retry_max=0.5,
            )
            if target
            else None
        ),
        security=security or Security(),
        heartbeat_interval=heartbeat,
    )


@contextmanager
def running(cfg: ClientConfig) -> Iterator[ClientAgent]:
    agent = ClientAgent(cfg)
    agent.preflight()
    agent.start()
    try:
        yield agent
    finally:
        agent.stop()
        assert agent.join(15), "the client did not stop within 15 s"
    assert agent.error is None, agent.error


def metric(agent: ClientAgent, name: str, **labels: str) -> float | None:
    return agent.metrics.registry.get_sample_value(name, labels)


def link_state(agent: ClientAgent) -> str:
    """The state the binlogsync_hub_link metric shows."""
    shown = [
        state
        for state in HUB_LINK_STATES
        if metric(agent, "binlogsync_hub_link", binlogsync_hub_link=state) == 1.0
    ]
    return ",".join(shown) or "none"


def hub_status(endpoint: str) -> dict[str, Any]:
    peer = Peer(endpoint)
    try:
        peer.send(frames.STATUS, {})
        return peer.recv(kind=frames.STATUS_REPLY).header["status"]  # type: ignore[no-any-return]
    finally:
        peer.close()


def online(endpoint: str, *hosts: str) -> bool:
    found = {h["name"]: h["online"] for h in hub_status(endpoint)["hosts"]}
    return all(found[h] for h in hosts)


def messages(caplog: pytest.LogCaptureFixture, logger: str, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and text in r.getMessage()]


def write(server: Server, db: str, ids: range, size: int = 10) -> None:
    with server.connect(db) as conn, conn.cursor() as cur:
        for i in ids:  # one transaction each (autocommit)
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, "x" * size))


def applied(target: Server, origin_name: str) -> checkpoint.Checkpoint | None:
    found = checkpoint.fetch_all(DatabaseSettings(port=target.port))
    return found.get(origin_name)


def hub_head_gtid(endpoint: str, origin_name: str) -> str | None:
    """The GTID of the last transaction of `origin_name` the hub stored."""
    for row in hub_status(endpoint)["origins"]:
        if row["origin"] == origin_name and row["head"]:
            return Position.from_json(row["head"]).gtid
    return None


class LoopWatch:
    """Samples the client's loop thread; the longest time it spent away from its poll.

    The loop must only wait in `poll` (its tick is at most 0.25 s): a database connect, a
    thread join or a sleep on it shows as a long stretch elsewhere, with the stack."""

    def __init__(self, agent: ClientAgent) -> None:
        self.agent = agent
        self.longest = 0.0
        self.stack = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loop-watch", daemon=True)

    def __enter__(self) -> LoopWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        since: float | None = None
        while not self._stop.is_set():
            thread = self.agent._thread
            ident = thread.ident if thread is not None else None
            frame = sys._current_frames().get(ident) if ident else None
            now = time.monotonic()
            if frame is None:
                since = None
            else:
                names_ = []
                f: Any = frame
                while f is not None:
                    names_.append(f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_code.co_name}")
                    f = f.f_back
                in_poll = any(n.endswith(":poll") for n in names_[:3])
                if in_poll:
                    since = None
                elif since is None:
                    since = now
                elif now - since > self.longest:
                    self.longest = now - since
                    self.stack = " <- ".join(names_[:8])
            time.sleep(0.002)


@contextmanager
def held(hub: Hub) -> Iterator[None]:
    """Hold the hub's loop (as SIGSTOP would a hub process): its sockets still take bytes in,
    nothing is read or answered until the block ends."""
    gate, entered = threading.Event(), threading.Event()
    original = hub._drain

    def drain(sock: Any) -> bool:
        entered.set()
        gate.wait(60)
        return original(sock)

    hub._drain = drain  # type: ignore[method-assign]
    try:
        wait_for(entered.is_set, 5, "the hub's loop held")
        yield
    finally:
        hub._drain = original  # type: ignore[method-assign]
        gate.set()


def routes(origin_name: str, target_name: str, db: str) -> tuple[Route, ...]:
    return (Route(origin_name, (target_name,), TableFilter((f"{db}.*",))),)


# -- wrong endpoint, wrong key, refused HELLO ------------------------------------------------
def test_nothing_listening_names_the_endpoint(
    tmp_path: Path, target: Server, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="binlogsync")
    _, t = names(dbname)
    with HubThread(tmp_path / "hub") as h:  # the OS chooses a port; nothing listens once it stops
        endpoint = h.endpoint
    with running(config(t, endpoint, target=target)) as agent:
        wait_for(
            lambda: messages(caplog, "binlogsync.client", "no WELCOME after 3"), 10, "diagnosis"
        )
        assert messages(caplog, "binlogsync.client", f"connecting to {endpoint}")
        (said,) = messages(caplog, "binlogsync.client", "no WELCOME after 3")
        assert f"nothing answers at {endpoint}" in said, said
        assert "client.hub" in said and "Not a CURVE key problem" in said, said
        assert link_state(agent) == "refused"
        assert metric(agent, "binlogsync_hub_unanswered_hellos") >= 3  # type: ignore[operator]
        assert metric(agent, "binlogsync_hub_online") == 0


@contextmanager
def announced(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Wait for the hub's "listening" line: its ZAP handler is configured by then. (A client
    that connects between the hub's bind and that moment is refused by pyzmq's authenticator
    before the hub's own check runs, so nothing about it reaches the hub's log.)"""
    wait_for(lambda: messages(caplog, "binlogsync.hub", "listening on"), 5, "the hub's ZAP")
    yield


def _keys(tmp_path: Path, *names_: str) -> tuple[Path, Path]:
    keys, authorized = tmp_path / "keys", tmp_path / "keys" / "authorized"
    authorized.mkdir(parents=True)
    for name in names_:
        public, _ = curve.make_keys(keys, name)
        if name not in ("hub", "other"):
            (authorized / public.name).write_bytes(public.read_bytes())
    return keys, authorized


def test_wrong_hub_public_key_is_named_by_client_metrics_and_hub(
    tmp_path: Path, target: Server, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="binlogsync")
    o, t = names(dbname)
    keys, authorized = _keys(tmp_path, "hub", "other", t)
    hub_security = Security(secret_key_file=keys / "hub.key_secret", authorized_keys_dir=authorized)
    wrong = Security(
        secret_key_file=keys / f"{t}.key_secret", hub_public_key_file=keys / "other.key"
    )
    with (
        HubThread(tmp_path / "hub", routes(o, t, dbname), security=hub_security) as h,
        announced(caplog),
        running(config(t, h.endpoint, target=target, security=wrong)) as agent,
    ):
        wait_for(
            lambda: messages(caplog, "binlogsync.client", "no WELCOME after 3"), 10, "diagnosis"
        )
        (said,) = messages(caplog, "binlogsync.client", "no WELCOME after 3")
        assert h.endpoint in said and "CURVE handshake" in said, said
        assert "hub_public_key_file" in said, said
        assert link_state(agent) == "handshake_failed"
        assert metric(agent, "binlogsync_hub_handshake_failures") >= 1  # type: ignore[operator]
        wait_for(
            lambda: messages(caplog, "binlogsync.hub", "different hub public key"),
            5,
            "the hub's log line about the failed handshake",
        )
        assert not h.hub.hosts[t].online


def test_unauthorised_client_key_is_refused_logged_and_welcomed_once_authorised(
    tmp_path: Path, target: Server, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A key the hub does not know is refused by ZAP, and libzmq then never reconnects that
    endpoint by itself: the link must, or the client stays locked out after the operator
    authorises its key and restarts the hub."""
    caplog.set_level(logging.INFO, logger="binlogsync")
    o, t = names(dbname)
    keys, authorized = _keys(tmp_path, "hub", "other", t)
    hub_security = Security(secret_key_file=keys / "hub.key_secret", authorized_keys_dir=authorized)
    stranger = Security(
        secret_key_file=keys / "other.key_secret", hub_public_key_file=keys / "hub.key"
    )
    with (
        HubThread(tmp_path / "hub", routes(o, t, dbname), security=hub_security) as h,
        announced(caplog),
        running(config(t, h.endpoint, target=target, security=stranger)) as agent,
    ):
        wait_for(
            lambda: messages(caplog, "binlogsync.client", "no WELCOME after 3"), 10, "diagnosis"
        )
        (said,) = messages(caplog, "binlogsync.client", "no WELCOME after 3")
        assert "authorized_keys_dir" in said, said
        assert link_state(agent) == "handshake_failed"
        wait_for(
            lambda: messages(
                caplog, "binlogsync.hub", "refused a CURVE handshake from unknown key"
            ),
            5,
            "the hub's log line about the refused key",
        )
        # The operator authorises the key for this host and restarts the hub.
        (authorized / f"{t}.key").write_bytes((keys / "other.key").read_bytes())
        h.__exit__()
        with restarted(h) as h2:
            wait_for(lambda: agent.welcomed, 10, "WELCOME once the key is authorised")
            assert h2.hub.hosts[t].online
            assert link_state(agent) == "welcomed"


def test_refused_hello_is_the_diagnosis_not_silence(
    tmp_path: Path, target: Server, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="binlogsync")
    o, t = names(dbname)
    with (
        HubThread(tmp_path / "hub", routes(o, t, dbname)) as h,
        running(config("nobody", h.endpoint, target=target)) as agent,
    ):
        wait_for(
            lambda: messages(caplog, "binlogsync.client", "no WELCOME after 3"), 10, "diagnosis"
        )
        (said,) = messages(caplog, "binlogsync.client", "no WELCOME after 3")
        assert "refuses" in said and "not in any [[route]]" in said, said
        assert "does not answer" not in said, said
        assert link_state(agent) == "rejected"
        assert len(messages(caplog, "binlogsync.client", "hub refused")) == 1


# -- heartbeats, hub restart, hub pause -------------------------------------------------------
def test_client_pings_at_the_hubs_shorter_heartbeat(
    tmp_path: Path, target: Server, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The hub (heartbeat 0.2 s, liveness 3) takes a host for gone after 0.6 s of silence; a
    client with a 2 s heartbeat must PING at the hub's pace or it flaps offline and back."""
    caplog.set_level(logging.INFO, logger="binlogsync")
    o, t = names(dbname)
    with (
        HubThread(tmp_path / "hub", routes(o, t, dbname)) as h,
        running(config(t, h.endpoint, target=target, heartbeat=2.0)) as agent,
    ):
        wait_for(lambda: agent.welcomed, 10, "WELCOME")
        for _ in range(25):  # 2.5 s: over four of the hub's liveness limits
            assert online(h.endpoint, t), caplog.text
            time.sleep(0.1)
        assert not messages(caplog, "binlogsync.hub", f"host {t} offline")
        assert len(messages(caplog, "binlogsync.hub", f"host {t} online")) == 1
        assert not messages(caplog, "binlogsync.client", "saying HELLO again")
        assert link_state(agent) == "welcomed"


@contextmanager
def pair(
    tmp_path: Path,
    origin: Server,
    target: Server,
    dbname: str,
    heartbeat: float,
    group_transactions: int = 2000,
    **hub: Any,
) -> Iterator[tuple[HubThread, ClientAgent, ClientAgent]]:
    """A hub, an origin agent and a target agent for one test database, all welcomed."""
    create([origin, target], dbname, T)
    o, t = names(dbname)
    tables = f"{dbname}.*"
    target_config = config(
        t, "", target=target, heartbeat=heartbeat, group_transactions=group_transactions
    )
    with (
        HubThread(tmp_path / "hub", routes(o, t, dbname), **hub) as h,
        running(config(o, h.endpoint, origin=origin, tables=tables, heartbeat=heartbeat)) as oa,
        running(dataclasses.replace(target_config, hub=h.endpoint)) as ta,
    ):
        wait_for(lambda: oa.welcomed and ta.welcomed, 15, "both agents welcomed")
        yield h, oa, ta


def wait_applied(target: Server, origin_name: str, count: int, timeout: float = 20) -> None:
    def done() -> bool:
        found = applied(target, origin_name)
        return found is not None and found.applied_transactions >= count

    wait_for(done, timeout, f"{count} transactions applied", every=0.02)
    found = applied(target, origin_name)
    assert found is not None and found.applied_transactions == count, found


# InnoDB refreshes its information_schema view of transactions only when nobody has read it
# for 100 ms: polled faster, the view stays as it was at the first poll for ever. A worker that
# entered its lock wait after that poll was never seen (while PROCESSLIST showed its UPDATE
# waiting), and the test polling every 5 ms failed in 3 of 28 runs on a loaded machine.
INNODB_TRX_POLL = 0.15


def lock_waits(server: Server) -> int:
    """Transactions waiting for a lock; poll it at INNODB_TRX_POLL or slower."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'"
        )
        return int(cur.fetchone()[0])


def wait_for_lock_wait(server: Server, timeout: float) -> None:
    """Until a transaction on `server` (the apply worker) waits for a row lock."""
    wait_for(
        lambda: lock_waits(server), timeout, "the worker waiting for the row lock",
        every=INNODB_TRX_POLL,
    )  # fmt: skip


def restarted(h: HubThread) -> HubThread:
    """A new hub on the same endpoint and data directory, with the same heartbeat."""
    return HubThread(
        h.config.data_dir,
        h.config.routes,
        security=h.config.security,
        bind=h.endpoint,
        heartbeat_interval=h.config.heartbeat_interval,
        heartbeat_liveness=h.config.heartbeat_liveness,
    )


def rejected(h: HubThread) -> float:
    value = h.hub.metrics.registry.get_sample_value("binlogsync_rejected_messages_total")
    return value or 0.0


def welcomed_after(caplog: pytest.LogCaptureFixture, name: str, since: float) -> float | None:
    """Seconds from `since` (time.time()) to the first WELCOME `name` logged after it."""
    for r in caplog.records:
        if r.name == "binlogsync.client" and f"welcomed {name}" in r.getMessage():
            if r.created >= since:
                return r.created - since
    return None


def listening_since(caplog: pytest.LogCaptureFixture) -> float:
    """When the last hub started to listen (its log line)."""
    times = [r.created for r in caplog.records if "listening on" in r.getMessage()]
    return times[-1]


def test_hub_restart_quick_hello_first_no_stale_messages(
    tmp_path: Path, origin: Server, target: Server, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The hub is back before the agents' liveness runs out: they must not send PINGs,
    APPLIEDs or BATCHes on the new connection (the hub does not know it) but HELLO first,
    within one heartbeat interval."""
    caplog.set_level(logging.INFO, logger="binlogsync")
    o, t = names(dbname)
    # The hub's own liveness long: in a loaded suite it once took both agents offline (0.6 s
    # without a PING), and their next messages were refused for that, not for the restart.
    patient = {"heartbeat_liveness": 100}
    with pair(tmp_path, origin, target, dbname, heartbeat=1.0, **patient) as (h, oa, ta):
        write(origin, dbname, range(20))
        wait_applied(target, o, 20)
        h.__exit__()
        with restarted(h) as h2, LoopWatch(oa) as watch_o, LoopWatch(ta) as watch_t:
            bound = listening_since(caplog)
            write(origin, dbname, range(20, 40))
            took = {
                n: wait_for(lambda n=n: welcomed_after(caplog, n, bound), 5, f"{n} welcomed")
                for n in (o, t)
            }
            assert all(seconds < 1.0 for seconds in took.values()), took
            wait_applied(target, o, 40)
            assert online(h2.endpoint, o, t)
            assert rejected(h2) == 0, caplog.text
            assert not messages(caplog, "binlogsync.client", "asks for HELLO"), caplog.text
            assert watch_o.longest < 0.5, watch_o.stack
            assert watch_t.longest < 0.5, watch_t.stack


def test_hub_back_after_an_outage_hello_within_one_heartbeat_no_flapping(
    tmp_path: Path, origin: Server, target: Server, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The hub is gone for several heartbeats (the agents keep saying HELLO into nothing):
    once it listens again, each agent is welcomed within one heartbeat interval — no back-off
    left over — and goes online once and stays online."""
    caplog.set_level(logging.INFO, logger="binlogsync")
    o, t = names(dbname)
    with pair(tmp_path, origin, target, dbname, heartbeat=1.0) as (h, oa, ta):
        write(origin, dbname, range(20))
        wait_applied(target, o, 20)
        h.__exit__()
        write(origin, dbname, range(20, 40))  # the binlog keeps them meanwhile
        for agent in (oa, ta):  # several HELLOs into nothing: libzmq backs off its reconnects
            wait_for(
                lambda a=agent: (metric(a, "binlogsync_hub_unanswered_hellos") or 0) >= 3,
                10,
                "three unanswered HELLOs",
            )
            assert link_state(agent) == "refused"
        mark = len(caplog.records)
        with restarted(h) as h2:
            bound = listening_since(caplog)
            took = {
                n: wait_for(lambda n=n: welcomed_after(caplog, n, bound), 5, f"{n} welcomed")
                for n in (o, t)
            }
            assert all(seconds < 1.0 for seconds in took.values()), took
            wait_applied(target, o, 40)
            for _ in range(10):  # a second: five of the hub's heartbeats
                assert online(h2.endpoint, o, t)
                time.sleep(0.1)
            later = [r.getMessage() for r in caplog.records[mark:]]
            for name in (o, t):
                assert sum(m.startswith(f"host {name} online") for m in later) == 1, later
                assert not [m for m in later if m.startswith(f"host {name} offline")], later
            assert rejected(h2) == 0, later
            assert all(link_state(a) == "welcomed" for a in (oa, ta))


def test_hub_paused_no_stale_burst_and_no_unknown_connection(
    tmp_path: Path,
    origin: Server,
    target: Server,
    dbname: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hub's loop stops for several heartbeats (as SIGSTOP would stop it) while its
    sockets stay open: the agents declare it silent and say HELLO, but the connection is up
    and the hub has it, so they repeat it only at growing gaps instead of queueing one per
    heartbeat for the hub to work through (each would reset the target's cursor to a stale
    checkpoint). Once it runs again they are welcomed once, nothing they sent is refused, and
    rows are applied exactly once."""
    caplog.set_level(logging.INFO, logger="binlogsync")
    o, t = names(dbname)
    with pair(tmp_path, origin, target, dbname, heartbeat=0.2) as (h, oa, ta):
        write(origin, dbname, range(20))
        wait_applied(target, o, 20)
        hellos: list[str] = []
        hello = h.hub._hello

        def counted(identity: bytes, message: frames.Message, user_id: str | None) -> None:
            hellos.append(message.header["host"])
            hello(identity, message, user_id)

        monkeypatch.setattr(h.hub, "_hello", counted)
        with held(h.hub):
            write(origin, dbname, range(20, 40))
            for agent in (oa, ta):  # eight heartbeat intervals of HELLO without an answer
                wait_for(
                    lambda a=agent: (metric(a, "binlogsync_hub_unanswered_hellos") or 0) >= 8,
                    10,
                    "eight HELLO intervals",
                )
                assert link_state(agent) == "silent"
            mark = len(caplog.records)
        wait_for(lambda: oa.welcomed and ta.welcomed, 5, "welcomed again")
        wait_applied(target, o, 40)
        later = [r.getMessage() for r in caplog.records[mark:]]
        assert rejected(h) == 0, later
        assert not [m for m in later if "asks for HELLO" in m], later
        assert not [m for m in later if " offline" in m], later
        for agent in (oa, ta):  # HELLO after 0, 3 and 9 intervals at most, and one WELCOME
            assert hellos.count(agent.config.name) <= 3, hellos
            assert len([m for m in later if f"welcomed {agent.config.name}" in m]) == 1, later


# -- stale deliveries, the outbox window, a loop that never blocks -----------------------------
def test_deliveries_of_an_earlier_connection_are_not_applied_twice(
    tmp_path: Path, origin: Server, target: Server, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The target's worker is stuck (its checkpoint row locked) with deliveries queued when
    the hub restarts; the new hub sends them again from the checkpoint the HELLO read. The
    old ones must be dropped, the group in progress lands once, and nothing is applied twice
    (a trigger on the target counts every row written)."""
    caplog.set_level(logging.INFO, logger="binlogsync")
    o, t = names(dbname)
    with pair(
        tmp_path, origin, target, dbname, heartbeat=0.5, group_transactions=5, batch_transactions=5
    ) as (h, oa, ta):
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE audit (n INT AUTO_INCREMENT PRIMARY KEY, id INT)")
            cur.execute(
                "CREATE TRIGGER t_audit BEFORE INSERT ON t FOR EACH ROW "
                "INSERT INTO audit (id) VALUES (NEW.id)"
            )
        write(origin, dbname, range(10))
        wait_applied(target, o, 10)
        lock = target.connect()
        try:
            with lock.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute(
                    "SELECT * FROM binlogsync.checkpoint WHERE origin = %s FOR UPDATE", (o,)
                )
            write(origin, dbname, range(10, 40))

            def delivered(hub: HubThread) -> float:
                value = hub.hub.metrics.registry.get_sample_value(
                    "binlogsync_hub_delivered_transactions_total", {"target": t, "origin": o}
                )
                return value or 0.0

            worker = ta.target.workers[o]  # type: ignore[union-attr]
            wait_for(lambda: delivered(h) > 10, 10, "deliveries beyond the first 10")
            wait_for_lock_wait(target, 10)
            wait_for(lambda: worker.queue.qsize() > 0, 5, "deliveries queued behind the lock")
            h.__exit__()
            with restarted(h) as h2, LoopWatch(ta) as watch:
                wait_for(lambda: welcomed_after(caplog, t, listening_since(caplog)), 5, "WELCOME")
                wait_for(lambda: delivered(h2) > 0, 10, "the new hub delivering from 10")
                stale = sum(d.generation != worker.generation for d in list(worker.queue.queue))
                lock.rollback()  # the worker goes on: first its group of the old connection
                wait_applied(target, o, 40)
                assert rejected(h2) == 0, caplog.text
                assert watch.longest < 0.5, watch.stack
        finally:
            lock.close()
        assert stale > 0  # there were deliveries of the old connection left to drop
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SELECT id, COUNT(*) FROM audit GROUP BY id HAVING COUNT(*) > 1")
            assert cur.fetchall() == ()
            cur.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM audit")
            assert cur.fetchone() == (40, 40)
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM t")
            assert cur.fetchone() == (40,)


def test_outbox_is_bounded_while_the_hub_does_not_acknowledge(
    tmp_path: Path,
    origin: Server,
    dbname: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the hub does not ACK, WINDOW batches are in flight and the outbox fills to its
    byte limit: then capture stops reading the binlog instead of growing memory. Once the hub
    answers, everything arrives."""
    limit = 64 * 1024
    monkeypatch.setattr(origin_module, "_OUTBOX_BYTES", limit)
    create([origin], dbname, T)
    o, t = names(dbname)
    cfg = config(
        o,
        "",
        origin=origin,
        tables=f"{dbname}.*",
        heartbeat=5.0,  # the hub's silence below stays within the agent's liveness
        batch_transactions=5,
    )
    with HubThread(tmp_path / "hub", routes(o, t, dbname)) as h:
        with running(dataclasses.replace(cfg, hub=h.endpoint)) as agent:
            wait_for(lambda: agent.welcomed, 10, "WELCOME")
            role = agent.origin
            assert role is not None
            total, size = 400, 1000
            with held(h.hub):
                write(origin, dbname, range(total), size=size)
                wait_for(lambda: role.outbox_bytes >= limit, 10, "the outbox full")
                captured = metric(agent, "binlogsync_captured_transactions_total")
                for _ in range(10):  # half a second: capture waits, memory stays bounded
                    assert len(role.inflight) == origin_module.WINDOW
                    assert role.outbox_bytes < limit + 2 * size
                    assert metric(agent, "binlogsync_captured_transactions_total") == captured
                    time.sleep(0.05)
                assert captured is not None and captured < total / 2, captured
            last = gtid_seq(origin_gtid(origin))
            wait_for(lambda: gtid_seq(hub_head_gtid(h.endpoint, o)) >= last, 20, "all at the hub")
            (row,) = [r for r in hub_status(h.endpoint)["origins"] if r["origin"] == o]
            assert row["appended"] == total
            assert agent.welcomed  # the hub was silent, never lost


def test_a_partial_batch_waits_for_the_ack_of_the_one_in_flight(
    tmp_path: Path, origin: Server, dbname: str
) -> None:
    """Nagle's rule (client/origin.py): while a BATCH is unacknowledged, what capture adds
    waits and goes out as one BATCH after the ACK, instead of one BATCH per transaction."""
    create([origin], dbname, T)
    o, t = names(dbname)
    cfg = config(o, "", origin=origin, tables=f"{dbname}.*", heartbeat=5.0)
    with HubThread(tmp_path / "hub", routes(o, t, dbname)) as h:
        with running(dataclasses.replace(cfg, hub=h.endpoint)) as agent:
            wait_for(lambda: agent.welcomed, 10, "WELCOME")
            role = agent.origin
            assert role is not None
            with held(h.hub):
                write(origin, dbname, range(1))
                wait_for(lambda: len(role.inflight) == 1, 10, "the first BATCH in flight")
                write(origin, dbname, range(1, 30))
                wait_for(lambda: len(role.outbox) >= 29, 10, "29 more captured")
                for _ in range(12):  # 0.6 s, over two ticks of the agent's loop
                    assert len(role.inflight) == 1  # partial batches are not pipelined
                    time.sleep(0.05)
                sent = role.next_seq
            last = gtid_seq(origin_gtid(origin))
            wait_for(lambda: gtid_seq(hub_head_gtid(h.endpoint, o)) >= last, 20, "all at the hub")
            assert role.next_seq - sent == 1  # the 29 travelled in one BATCH
            (row,) = [r for r in hub_status(h.endpoint)["origins"] if r["origin"] == o]
            assert row["appended"] == 30


def test_loop_never_blocks_on_an_unreachable_database(
    tmp_path: Path, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The target database accepts TCP connections and never answers (a connect hangs until
    its timeout): reading checkpoints for HELLO waits on its own thread; the loop keeps
    turning and the agent stops at once when asked."""
    caplog.set_level(logging.INFO, logger="binlogsync")
    _, t = names(dbname)
    with socket.socket() as blackhole:
        blackhole.bind(("127.0.0.1", 0))
        blackhole.listen(16)
        dead = Server("dead", blackhole.getsockname()[1], 99, "", 0)
        with HubThread(tmp_path / "hub") as h:
            agent = ClientAgent(config(t, h.endpoint, target=dead))
            agent.start()
            try:
                with LoopWatch(agent) as watch:
                    wait_for(lambda: agent.hello_info is not None, 5, "reading for HELLO")
                    for _ in range(20):  # a second: the loop turns, nothing is sent
                        assert agent.alive and not agent.welcomed
                        time.sleep(0.05)
                assert watch.longest < 0.5, watch.stack
            finally:
                asked = time.monotonic()
                agent.stop()
                assert agent.join(3), "the agent waited for a database connect to stop"
            assert time.monotonic() - asked < 1.0
            assert agent.error is None


def test_closing_a_stuck_apply_worker_leaves_its_connection_alone(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    """At a stop, an apply worker stuck in the database (a lock wait) is given its time and
    then left to the process's end: closing must neither wait for the database nor close the
    connection the worker's thread is using."""
    o, _ = names(dbname)
    # The hub's liveness at 1.5 s, not 0.6 s: the hub and both agents share this process's
    # GIL; in a full suite run on a loaded machine the hub took both agents for offline during
    # this test, and the writes did not reach the lock within 10 s.
    with pair(tmp_path, origin, target, dbname, 0.5, heartbeat_interval=0.5) as (h, oa, ta):
        write(origin, dbname, range(5))
        wait_applied(target, o, 5)
        lock = target.connect()
        try:
            with lock.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute(
                    "SELECT * FROM binlogsync.checkpoint WHERE origin = %s FOR UPDATE", (o,)
                )
            write(origin, dbname, range(5, 10))
            worker = ta.target.workers[o]  # type: ignore[union-attr]
            wait_for_lock_wait(target, 30)
            asked = time.monotonic()
            worker.close(timeout=0.2)
            assert time.monotonic() - asked < 1.0
            assert worker.alive  # still in its lock wait
            lock.rollback()
        finally:
            lock.close()
        assert worker.join(10)
        assert worker.error is None
        found = applied(target, o)  # its group landed on the connection it kept
        assert found is not None and 5 < found.applied_transactions <= 10, found


def test_apply_lag_is_the_age_of_the_oldest_unapplied_change_then_zero(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    """binlogsync_apply_lag_seconds once read 0.88 s for a change applied in < 50 ms and kept
    that value while idle; it is the age of the oldest change delivered but not applied."""
    o, _t = names(dbname)
    with pair(tmp_path, origin, target, dbname, heartbeat=0.2) as (h, oa, ta):
        lag = lambda: metric(ta, "binlogsync_apply_lag_seconds", origin=o)  # noqa: E731
        blocker = target.connect(dbname)
        try:
            with blocker.cursor() as cur:  # the target's apply waits on this row's lock
                cur.execute("BEGIN")
                cur.execute("INSERT INTO t VALUES (1, 'blocker')")
            write(origin, dbname, range(1, 2))
            wait_for(lambda: (lag() or 0) >= 1.0, 20, "the lag growing while apply waits")
        finally:
            blocker.rollback()
            blocker.close()
        wait_applied(target, o, 1)
        wait_for(lambda: lag() == 0.0, 10, "the lag back to 0 once caught up")
        write(origin, dbname, range(2, 3))
        wait_applied(target, o, 2)
        assert wait_for(lambda: lag() == 0.0, 10, "0 while idle") is True


def test_apply_says_when_it_recovers(
    tmp_path: Path,
    origin: Server,
    target: Server,
    dbname: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    o, _t = names(dbname)
    caplog.set_level(logging.INFO, logger="binlogsync")
    with pair(tmp_path, origin, target, dbname, heartbeat=0.2) as (h, oa, ta):
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("RENAME TABLE t TO t_away")
        write(origin, dbname, range(1, 2))
        wait_for(
            lambda: (metric(ta, "binlogsync_apply_errors_total", origin=o) or 0) >= 2,
            20,
            "apply failing",
        )
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("RENAME TABLE t_away TO t")
        wait_applied(target, o, 1)
        recovered = wait_for(
            lambda: messages(caplog, "binlogsync.target", "recovered after"), 10, "the log line"
        )
        assert f"apply of {o} recovered after" in recovered[0]
