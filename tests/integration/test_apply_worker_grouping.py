"""The target's apply worker groups the deliveries queued for an origin into one target
transaction, up to `group_transactions` transactions and GROUP_BYTES of their bodies: a
backlog drains in few large groups, and a backlog of wide rows does not take the agent's
memory with them."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from binlogsync.client import target as target_module
from binlogsync.client.target import ApplyWorker, Delivery, Outcome
from binlogsync.codec import pack
from binlogsync.config import DatabaseSettings, TargetConfig
from binlogsync.metrics import ClientMetrics
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Server

pytestmark = pytest.mark.integration

PER_DELIVERY = 3


def _delivery(dbname: str, seq: int) -> Delivery:
    first = seq * PER_DELIVERY
    txs = [
        Transaction(
            Position("binlog.000001", 100 * (i + 1)),
            1.0,
            (Change("insert", dbname, "t", ("id", "v"), (), ((i, "x" * 200),)),),
        )
        for i in range(first, first + PER_DELIVERY)
    ]
    bodies = tuple(pack(tx.to_wire(packing=True)) for tx in txs)
    return Delivery(seq, txs[-1].position, None, bodies, 0)


@pytest.fixture
def table(target: Server, dbname: str) -> Iterator[DatabaseSettings]:
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(f"CREATE TABLE `{dbname}`.t (id INT PRIMARY KEY, v VARCHAR(200))")
    yield DatabaseSettings(target.host, target.port, target.user, target.password)
    with pymysql.connect(host=target.host, port=target.port, user=target.user,
                         password=target.password) as conn, conn.cursor() as cur:  # fmt: skip
        cur.execute(f"DROP DATABASE `{dbname}`")


def _groups(settings: DatabaseSettings, dbname: str, config: TargetConfig, count: int) -> list[int]:
    """Queue `count` deliveries before the worker starts; the transactions in each group it
    applied."""
    outcomes: queue.Queue[Outcome] = queue.Queue()
    worker = ApplyWorker(f"group-{dbname}", config, ClientMetrics(), outcomes.put, 1 << 26, None, 0)
    sizes: list[int] = []
    apply = worker.applier.apply

    def recorded(txs: list[Transaction], upto: Any) -> Any:
        sizes.append(len(txs))
        return apply(txs, upto)

    worker.applier.apply = recorded  # type: ignore[method-assign]
    for seq in range(count):
        worker.queue.put(_delivery(dbname, seq))
    worker.start()
    try:
        wait_until(lambda: sum(sizes) == count * PER_DELIVERY, 30, what="every delivery applied")
    finally:
        worker.close()
    assert not any(outcomes.get_nowait().error for _ in range(outcomes.qsize()))
    with pymysql.connect(host=settings.host, port=settings.port, user=settings.user,
                         password=settings.password) as conn, conn.cursor() as cur:  # fmt: skip
        cur.execute(f"SELECT COUNT(*) FROM `{dbname}`.t")
        assert cur.fetchone() == (count * PER_DELIVERY,)
    return sizes


def test_queued_deliveries_make_one_group_up_to_group_transactions(
    table: DatabaseSettings, dbname: str
) -> None:
    assert TargetConfig(database=table).group_transactions == 4000
    assert _groups(table, dbname, TargetConfig(database=table), 5) == [15]
    # A delivery is taken whole: the group stops at the first delivery that reaches the count.
    config = TargetConfig(database=table, group_transactions=4)
    assert _groups(table, dbname, config, 5)[:2] == [6, 6]


def test_a_group_stops_taking_deliveries_at_group_bytes(
    table: DatabaseSettings, dbname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = sum(map(len, _delivery(dbname, 0).bodies))
    # Two deliveries' bodies reach the bound: each group is two deliveries, whatever the count.
    monkeypatch.setattr(target_module, "GROUP_BYTES", 2 * one - 1)
    assert _groups(table, dbname, TargetConfig(database=table), 5) == [6, 6, 3]
