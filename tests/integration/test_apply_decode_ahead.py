"""While a group's LOAD DATA runs in the target's server, its apply worker decodes the bodies
queued for the next group on the same thread (idle.py), and the next group is applied
from them: same rows, same checkpoint. A malformed body queued behind is left to its own
turn, which refuses it as before."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from binlogsync import idle
from binlogsync.client.target import ApplyWorker, Delivery, Outcome
from binlogsync.codec import pack
from binlogsync.config import DatabaseSettings, TargetConfig
from binlogsync.engines.mariadb.statements import BULK_ROWS
from binlogsync.metrics import ClientMetrics
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Server

pytestmark = pytest.mark.integration

ROWS = BULK_ROWS + 44  # each transaction's insert goes as LOAD DATA


def _delivery(dbname: str, seq: int, body: bytes | None = None) -> Delivery:
    tx = Transaction(
        Position("binlog.000001", 100 * (seq + 1)),
        1.0,
        (
            Change(
                "insert", dbname, "t", ("id", "v"), (),
                tuple((seq * ROWS + i, f"r{seq}-{i}" * 10) for i in range(ROWS)),
            ),
        ),
    )  # fmt: skip
    return Delivery(seq, tx.position, None, (body or pack(tx.to_wire(packing=True)),), 0)


@pytest.fixture
def table(target: Server, dbname: str) -> Iterator[DatabaseSettings]:
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL local_infile = 1")
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(f"CREATE TABLE `{dbname}`.t (id INT PRIMARY KEY, v VARCHAR(200))")
    yield DatabaseSettings(target.host, target.port, target.user, target.password)
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{dbname}`")


def _run(
    settings: DatabaseSettings, dbname: str, deliveries: list[Delivery], until: Any
) -> tuple[ApplyWorker, list[Outcome], dict[str, int]]:
    """`deliveries` queued before the worker starts (groups of two transactions); what it
    reported, and counts: LOAD DATA statements that had idle work, pieces of it done, and
    deliveries that came to their turn decoded ahead (wholly)."""
    outcomes: queue.Queue[Outcome] = queue.Queue()
    config = TargetConfig(database=settings, group_transactions=2)
    worker = ApplyWorker(f"ahead-{dbname}", config, ClientMetrics(), outcomes.put, 1 << 26, None, 0)
    counts = {"idled": 0, "pieces": 0, "ahead": 0}
    run, ahead, decode = idle.run, worker._decode_ahead, worker._decode

    def counted_run(nbytes: int) -> None:
        counts["idled"] += idle.available()
        run(nbytes)

    def counted_ahead() -> bool:
        did = ahead()
        counts["pieces"] += did
        return did

    def counted_decode(delivery: Delivery) -> Any:
        kept = worker._ahead.get(id(delivery))
        counts["ahead"] += kept is not None and len(kept[2]) == len(delivery.bodies)
        return decode(delivery)

    worker._decode_ahead = counted_ahead  # type: ignore[method-assign]
    worker._decode = counted_decode  # type: ignore[method-assign]
    for delivery in deliveries:
        worker.queue.put(delivery)
    reported: list[Outcome] = []
    idle_run = idle.run
    idle.run = counted_run  # type: ignore[assignment]
    try:
        worker.start()
        wait_until(lambda: until(reported, outcomes), 30, what="the groups answered")
    finally:
        worker.close()
        idle.run = idle_run  # type: ignore[assignment]
    return worker, reported, counts


def _drain(reported: list[Outcome], outcomes: queue.Queue[Outcome]) -> list[Outcome]:
    while not outcomes.empty():
        reported.append(outcomes.get_nowait())
    return reported


def _rows(settings: DatabaseSettings, dbname: str) -> int:
    with pymysql.connect(host=settings.host, port=settings.port, user=settings.user,
                         password=settings.password) as conn, conn.cursor() as cur:  # fmt: skip
        cur.execute(f"SELECT COUNT(*), COUNT(DISTINCT v) FROM `{dbname}`.t")
        count, distinct = cur.fetchone()
        assert count == distinct
        return int(count)


def test_the_next_group_is_decoded_while_the_server_loads_and_applied_alike(
    table: DatabaseSettings, dbname: str
) -> None:
    deliveries = [_delivery(dbname, seq) for seq in range(6)]  # three groups of two
    worker, reported, counts = _run(
        table, dbname, deliveries,
        lambda r, q: any(o.upto == deliveries[-1].upto for o in _drain(r, q)),
    )  # fmt: skip
    assert not [o.error for o in reported if o.error]
    assert _rows(table, dbname) == 6 * ROWS
    assert counts["idled"] == 2  # the LOAD DATA of groups one and two, the next one queued
    assert counts["pieces"] >= 2 and counts["ahead"] >= 2  # groups two and three came decoded
    assert not worker._ahead  # nothing decoded ahead is left behind


def test_a_malformed_body_queued_behind_is_refused_in_its_own_turn(
    table: DatabaseSettings, dbname: str
) -> None:
    deliveries = [_delivery(dbname, 0), _delivery(dbname, 1), _delivery(dbname, 2, b"\xc1")]
    _, reported, counts = _run(
        table, dbname, deliveries, lambda r, q: any(o.error for o in _drain(r, q))
    )
    assert [o.upto for o in reported if not o.error] == [deliveries[1].upto]
    assert "msgpack" in [o.error for o in reported if o.error][0]
    assert _rows(table, dbname) == 2 * ROWS
    assert counts["idled"] >= 1 and counts["ahead"] == 0


def test_only_whole_transactions_of_this_generation_are_decoded_ahead(
    table: DatabaseSettings, dbname: str
) -> None:
    """A large transaction's parts keep the worker thread's way (each part's LOAD DATA beside
    the decoding of the next part), so their LOAD DATA finds no idle work."""
    config = TargetConfig(database=table)
    worker = ApplyWorker(f"ahead-{dbname}", config, ClientMetrics(), print, 1 << 26, None, 0)
    try:
        assert not worker._next_is_whole()  # nothing queued
        whole = _delivery(dbname, 0)
        for queued, expected in (
            (whole, True),
            (Delivery(1, whole.upto, None, whole.bodies, 0, part=1), False),
            (Delivery(1, whole.upto, None, whole.bodies, 0, repair=True), False),
            (Delivery(1, whole.upto, None, whole.bodies, 7), False),  # an older link's
        ):
            worker.queue.queue.clear()
            worker.queue.put(queued)
            assert worker._next_is_whole() is expected
            assert worker._decode_ahead() is expected
    finally:
        worker.applier.close()
