"""The target's apply worker defers garbage collection while it runs a group (its decoded
transactions are freed by reference counting when the group ends; a collector walking them
meanwhile cost a target 8-14 % of its CPU), and a group that keeps failing does not pile up
the cycles its failures leave: they are collected before each retry."""

from __future__ import annotations

import gc
import queue
import weakref
from typing import Any

import pymysql
import pytest

from binlogsync.client.target import ApplyWorker, Delivery, Outcome
from binlogsync.codec import pack
from binlogsync.config import DatabaseSettings, TargetConfig
from binlogsync.errors import ApplyError
from binlogsync.metrics import ClientMetrics
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Server

pytestmark = pytest.mark.integration


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _group(dbname: str, first: int) -> Delivery:
    txs = [
        Transaction(
            Position("binlog.000001", 100 * i),
            1.0,
            (Change("insert", dbname, "t", ("id", "v"), (), ((i, f"row {i}"),)),),
        )
        for i in range(first, first + 3)
    ]
    body = tuple(pack(tx.to_wire(packing=True)) for tx in txs)
    return Delivery(first, txs[-1].position, None, body, 0)


def test_a_group_runs_with_collection_deferred_and_a_failing_one_collects_between_tries(
    target: Server, dbname: str
) -> None:
    settings = DatabaseSettings(target.host, target.port, target.user, target.password)
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(f"CREATE TABLE `{dbname}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    outcomes: queue.Queue[Outcome] = queue.Queue()
    worker = ApplyWorker(
        f"gc-{dbname}", TargetConfig(database=settings), ClientMetrics(), outcomes.put,
        1 << 26, None, 0,
    )  # fmt: skip
    seen: list[bool] = []  # gc.isenabled() in each attempt
    left: list[weakref.ref[_Cycle]] = []  # a cycle each failed attempt left behind
    gone: list[bool] = []  # at each attempt: the cycles of the attempts before are collected
    apply = worker.applier.apply

    def attempt(*args: Any) -> Any:
        seen.append(gc.isenabled())
        gone.append(all(ref() is None for ref in left))
        if len(left) < 2:
            left.append(weakref.ref(_Cycle()))
            raise ApplyError("the target is away (a test's failure)")
        return apply(*args)

    worker.applier.apply = attempt  # type: ignore[method-assign]
    worker.backoff.initial = worker.backoff.current = 0.05
    assert gc.isenabled()
    worker.queue.put(_group(dbname, 1))
    worker.start()
    try:
        wait_until(lambda: len(seen) == 3, 30, what="three attempts at the group")
        got = [outcomes.get(timeout=10) for _ in range(3)]
        assert [bool(o.error) for o in got] == [
            True, True, False
        ], got  # fmt: skip
    finally:
        worker.close()
    assert seen == [False, False, False]
    # Each retry began after a collection: the failed attempts' cycles were gone already
    # (reference counting alone never frees them).
    assert gone == [True, True, True]
    assert gc.isenabled()
    with pymysql.connect(host=target.host, port=target.port, user=target.user,
                         password=target.password) as conn, conn.cursor() as cur:  # fmt: skip
        cur.execute(f"SELECT COUNT(*) FROM `{dbname}`.t")
        assert cur.fetchone() == (3,)
        cur.execute(f"DROP DATABASE `{dbname}`")
