"""A transaction in parts, applied on a real MariaDB target: all parts in one database
transaction (no reader sees part of it), a failure rolls all of it back, a part that does not
continue the stream is refused, parts already applied are skipped; and a target agent that
dropped deliveries asks the hub to send again instead of waiting for ever."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pymysql
import pytest
import zmq

from binlogsync.apply import Applier
from binlogsync.apply.applier import StaleStream
from binlogsync.client.agent import ClientAgent
from binlogsync.codec import pack
from binlogsync.config import ClientConfig, DatabaseSettings, TargetConfig
from binlogsync.engines.mariadb import checkpoint
from binlogsync.errors import BinlogsyncError
from binlogsync.model import Change, Part, Transaction
from binlogsync.position import Position
from binlogsync.transport import frames
from binlogsync_dev.sandbox import Server

pytestmark = pytest.mark.integration

BEGIN = Position("binlog.000001", 1000, None)
END = Position("binlog.000001", 9000, "0-1-7")


def _part(db: str, number: int, ids: range, last: bool = False) -> Part:
    change = Change("insert", db, "t", ("id", "v"), (), tuple((i, f"v{i}") for i in ids))
    return Part(BEGIN, number, last, (change,), END if last else None, 1.7e9 if last else 0.0)


@pytest.fixture
def table(target: Server, dbname: str) -> Iterator[pymysql.Connection]:
    conn = target.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(f"CREATE TABLE `{dbname}`.t (id INT PRIMARY KEY, v VARCHAR(8) NOT NULL)")
    yield conn
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{dbname}`")
    conn.close()


def _rows(conn: pymysql.Connection, db: str) -> int:
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{db}`.t")
        return int(cur.fetchone()[0])


@pytest.fixture
def applier(target: Server, dbname: str) -> Iterator[Applier]:
    with Applier(DatabaseSettings(port=target.port), f"o-{dbname}") as a:
        yield a


@pytest.mark.parametrize("end", [END, None], ids=["end known", "end not known yet"])
def test_parts_land_in_one_transaction(
    applier: Applier, table: pymysql.Connection, dbname: str, end: Position | None
) -> None:
    """On a target with no checkpoint yet; the hub names the end from part 1, or (a target at
    the head while the origin still sends the transaction) only with the last part."""
    assert applier.apply_part(_part(dbname, 1, range(0, 100)), end, b"1") is None
    assert applier.apply_part(_part(dbname, 2, range(100, 200)), end, b"2") is None
    assert _rows(table, dbname) == 0  # another session: nothing of it yet
    assert applier.apply_part(_part(dbname, 3, range(200, 300), last=True), END, b"3") == END
    assert _rows(table, dbname) == 300
    with table.cursor() as cur:
        assert checkpoint.read(cur, f"o-{dbname}") == END


def test_a_failing_part_rolls_back_every_part_and_a_resend_applies(
    applier: Applier, table: pymysql.Connection, dbname: str
) -> None:
    applier.apply_part(_part(dbname, 1, range(0, 100)), END)
    too_long = Change("insert", dbname, "t", ("id", "v"), (), ((500, "x" * 20),))
    bad = Part(BEGIN, 2, True, (too_long,), END)
    with pytest.raises(BinlogsyncError) as error:  # v is VARCHAR(8), the target is strict
        applier.apply_part(bad, END)
    assert str(END) in str(error.value)
    assert _rows(table, dbname) == 0
    with table.cursor() as cur:
        assert checkpoint.read(cur, f"o-{dbname}") is None
    with pytest.raises(StaleStream):  # after a failure only part 1 starts over
        applier.apply_part(_part(dbname, 2, range(100, 200), last=True), END)
    applier.apply_part(_part(dbname, 1, range(0, 100)), END)
    assert applier.apply_part(_part(dbname, 2, range(100, 200), last=True), END) == END
    assert _rows(table, dbname) == 200


def test_a_part_that_does_not_continue_is_refused_and_part_1_starts_over(
    applier: Applier, table: pymysql.Connection, dbname: str
) -> None:
    applier.apply_part(_part(dbname, 1, range(0, 10)), END)
    with pytest.raises(StaleStream):
        applier.apply_part(_part(dbname, 3, range(20, 30), last=True), END)
    applier.apply_part(_part(dbname, 1, range(0, 10)), END)  # a re-send: the old stream goes
    applier.apply_part(_part(dbname, 2, range(10, 20), last=True), END)
    assert _rows(table, dbname) == 20


def _ids(conn: pymysql.Connection, db: str) -> list[int]:
    conn.commit()  # a fresh snapshot
    with conn.cursor() as cur:
        cur.execute(f"SELECT id FROM `{db}`.t ORDER BY id")
        return [int(r[0]) for r in cur.fetchall()]


def test_the_same_hub_sending_the_open_transaction_again_continues_it(
    target: Server, table: pymysql.Connection, dbname: str
) -> None:
    # After a reconnect the hub rewinds to the committed checkpoint and sends part 1 again.
    # Parts of the same bytes (the same digests) applied already are dropped as they come (the
    # re-sent ones here carry other ids, to show that they are not applied), the rest
    # continues the open transaction.
    with Applier(DatabaseSettings(port=target.port), f"o-{dbname}", epoch="hub-1") as applier:
        applier.apply_part(_part(dbname, 1, range(0, 10)), END, b"d1")
        applier.apply_part(_part(dbname, 2, range(10, 20)), END, b"d2")
        session = applier.connection_id
        assert applier.apply_part(_part(dbname, 1, range(100, 110)), END, b"d1") is None
        with pytest.raises(StaleStream):  # while sent again, the parts still come in order
            applier.apply_part(_part(dbname, 3, range(20, 30)), END, b"d3")
        assert applier.apply_part(_part(dbname, 2, range(110, 120)), END, b"d2") is None
        applier.apply_part(_part(dbname, 3, range(20, 30)), END, b"d3")
        assert applier.apply_part(_part(dbname, 4, range(30, 40), last=True), END, b"d4") == END
        assert applier.connection_id == session
    assert _ids(table, dbname) == list(range(40))


def test_parts_cut_anew_start_the_transaction_over(
    target: Server, table: pymysql.Connection, dbname: str
) -> None:
    """The origin's agent read the transaction again and cut it otherwise (another part_rows):
    the same begin, the same hub, other bytes. What the open target transaction holds of the
    old cut must go, whether the difference shows in part 1 or only in a later part."""
    with Applier(DatabaseSettings(port=target.port), f"o-{dbname}", epoch="hub-1") as applier:
        applier.apply_part(_part(dbname, 1, range(0, 10)), None, b"old1")
        applier.apply_part(_part(dbname, 2, range(10, 20)), None, b"old2")
        # Part 1 differs: a new target transaction from it.
        applier.apply_part(_part(dbname, 1, range(0, 15)), None, b"new1")
        assert applier.apply_part(_part(dbname, 2, range(15, 20), last=True), END, b"new2") == END
    assert _ids(table, dbname) == list(range(20))
    with table.cursor() as cur:
        cur.execute(f"DELETE FROM `{dbname}`.t")
        cur.execute(f"DELETE FROM binlogsync.checkpoint WHERE origin = 'o-{dbname}'")
    table.commit()
    with Applier(DatabaseSettings(port=target.port), f"o-{dbname}", epoch="hub-1") as applier:
        applier.apply_part(_part(dbname, 1, range(0, 10)), None, b"same1")
        applier.apply_part(_part(dbname, 2, range(10, 20)), None, b"old2")
        applier.apply_part(_part(dbname, 1, range(0, 10)), None, b"same1")  # continues…
        with pytest.raises(StaleStream):  # …until a part differs: all of it goes
            applier.apply_part(_part(dbname, 2, range(10, 25)), None, b"new2")
        assert applier.streaming is None
        applier.apply_part(_part(dbname, 1, range(0, 10)), None, b"same1")
        applier.apply_part(_part(dbname, 2, range(10, 25)), None, b"new2")
        assert applier.apply_part(_part(dbname, 3, range(25, 30), last=True), END, b"3") == END
    assert _ids(table, dbname) == list(range(30))


def test_parts_before_their_end_is_known(
    applier: Applier, table: pymysql.Connection, dbname: str
) -> None:
    """The hub sends the parts of a transaction still arriving (`upto` nil): they go into
    the open target transaction, whose first write marks the checkpoint row unchanged; the
    last part, which carries the end, moves it and commits."""
    origin = f"o-{dbname}"
    before = Position("binlog.000001", 1000, None)  # the transaction before, at BEGIN
    applier.apply([Transaction(before, 1.7e9, ())], None)
    assert applier.apply_part(_part(dbname, 1, range(0, 100)), None, b"1") is None
    assert applier.apply_part(_part(dbname, 2, range(100, 200)), None, b"2") is None
    table.commit()
    with table.cursor() as cur:
        assert checkpoint.read(cur, origin) == before  # another session: unchanged so far
        cur.execute("SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_rows_locked > 0")
        assert cur.fetchone()[0] >= 1  # the open transaction holds the rows and the marker
    assert _rows(table, dbname) == 0
    assert applier.apply_part(_part(dbname, 3, range(200, 300), last=True), END, b"3") == END
    assert _rows(table, dbname) == 300
    with table.cursor() as cur:
        assert checkpoint.read(cur, origin) == END


def test_parts_before_their_end_of_a_transaction_applied_already_are_skipped(
    applier: Applier, table: pymysql.Connection, dbname: str
) -> None:
    """A checkpoint above the transaction's begin is at or above its end (no checkpoint
    lies inside a transaction): its parts are dropped though their end is not known."""
    applier.apply_part(_part(dbname, 1, range(0, 10), last=True), END, b"1")
    with table.cursor() as cur:
        cur.execute(f"DELETE FROM `{dbname}`.t")
    table.commit()
    assert applier.apply_part(_part(dbname, 1, range(0, 5)), None, b"a") is None
    assert applier.apply_part(_part(dbname, 2, range(5, 10), last=True), END, b"b") == END
    assert _rows(table, dbname) == 0


def test_another_hub_sending_the_open_transaction_again_starts_it_over(
    target: Server, table: pymysql.Connection, dbname: str
) -> None:
    with Applier(DatabaseSettings(port=target.port), f"o-{dbname}", epoch="hub-1") as applier:
        applier.apply_part(_part(dbname, 1, range(0, 10)), END)
        applier.apply_part(_part(dbname, 2, range(10, 20)), END)
        applier.epoch = "hub-2"  # a new hub (lost log): its parts may be cut elsewhere
        applier.apply_part(_part(dbname, 1, range(100, 110)), END)
        assert applier.apply_part(_part(dbname, 2, range(110, 120), last=True), END) == END
    assert _ids(table, dbname) == list(range(100, 120))


def test_parts_of_a_transaction_already_applied_are_skipped(
    applier: Applier, table: pymysql.Connection, dbname: str
) -> None:
    applier.apply_part(_part(dbname, 1, range(0, 10), last=True), END)
    with table.cursor() as cur:
        cur.execute(f"DELETE FROM `{dbname}`.t")
    # The same transaction again (a re-send after a reconnect): nothing is written twice.
    assert applier.apply_part(_part(dbname, 1, range(0, 10), last=True), END) == END
    assert _rows(table, dbname) == 0


def test_a_target_that_dropped_a_part_asks_for_it_again(target: Server, dbname: str) -> None:
    """A hub (a raw ROUTER here) sends part 2 of a transaction whose part 1 never came: the
    target cannot use it. It must say so (FAILED, resend) rather than leave the hub's window
    full and both sides waiting for ever — which a benchmark once showed after a hub hiccup."""
    context = zmq.Context.instance()
    hub = context.socket(zmq.ROUTER)
    hub.linger = 0
    hub.bind("tcp://127.0.0.1:*")
    endpoint = hub.getsockopt_string(zmq.LAST_ENDPOINT)
    name = f"t-{dbname}"
    cfg = ClientConfig(
        name=name,
        hub=endpoint,
        target=TargetConfig(DatabaseSettings(port=target.port)),
        heartbeat_interval=0.2,
    )
    agent = ClientAgent(cfg)
    agent.start()
    try:
        identity, message = _receive(hub, frames.HELLO)
        hub.send_multipart([identity, *frames.encode(frames.WELCOME, WELCOME)])
        body = pack(_part(dbname, 2, range(0, 10)).to_wire())
        header = {"origin": "o1", "seq": 1, "upto": END, "after": None, "part": 2}
        hub.send_multipart([identity, *frames.encode(frames.DELIVER, header, [body])])
        _, failed = _receive(hub, frames.FAILED, timeout=30)
        assert failed.header["resend"] is True and failed.header["origin"] == "o1"
    finally:
        agent.stop()
        assert agent.join(15)
        hub.close(linger=0)


WELCOME = {"hub": "hub", "epoch": "e1", "resume": None, "heartbeat": 0.2}


def _receive(sock: zmq.Socket, kind: bytes, timeout: float = 10) -> tuple[bytes, frames.Message]:
    """The next message of `kind`; meanwhile the raw hub answers as a hub must (PONG for
    PING, the same WELCOME for a HELLO), or the client would rightly think it gone."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not sock.poll(int(left * 1000)):
            raise TimeoutError(f"no {kind!r} within {timeout} s")
        identity, *parts = sock.recv_multipart()
        message = frames.decode(parts, 1 << 26)
        if message.kind == kind:
            return identity, message
        if message.kind == frames.PING:
            sock.send_multipart([identity, *frames.encode(frames.PONG, {})])
        elif message.kind == frames.HELLO:
            sock.send_multipart([identity, *frames.encode(frames.WELCOME, WELCOME)])
