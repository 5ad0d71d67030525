"""The target's apply worker defers garbage collection while it runs a group (its decoded
transactions are freed by reference counting when the group ends; a collector walking them
meanwhile cost a target 8-14 % of its CPU), also across groups queued one behind another for a
while, and a group that keeps failing does not pile up the cycles its failures leave: they are
collected before each retry."""

from __future__ import annotations

import gc
import queue
import weakref
from typing import Any

import pymysql
import pytest

from binlogsync import runloop
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


class _CountingGC:
    """The gc module as runloop.py sees it, counting the times the collector is re-enabled."""

    def __init__(self) -> None:
        self.enabled = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(gc, name)

    def enable(self) -> None:
        self.enabled += 1
        gc.enable()


@pytest.mark.parametrize("across", [1.0, 0.0], ids=["queued groups", "no deferral across"])
def test_queued_groups_keep_collection_deferred_between_them(
    target: Server, dbname: str, monkeypatch: pytest.MonkeyPatch, across: float
) -> None:
    """Three groups queued before the worker starts run one after another with the collector
    off from the first to the end of the last (a drain: each group's end re-enabled it, and the
    collection that set off walked the next group's transactions, decoded ahead and alive: 4 %
    of a draining target's CPU, one collection per group). With no time allowed across groups
    it is re-enabled after each; and it is on again once the queue is empty."""
    settings = DatabaseSettings(target.host, target.port, target.user, target.password)
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(f"CREATE TABLE `{dbname}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    counting = _CountingGC()
    monkeypatch.setattr(runloop, "gc", counting)
    outcomes: queue.Queue[Outcome] = queue.Queue()
    config = TargetConfig(database=settings, group_transactions=3)  # one delivery a group
    worker = ApplyWorker(
        f"gc-{dbname}", config, ClientMetrics(), outcomes.put, 1 << 26, None, 0,
    )  # fmt: skip
    worker.DEFER_ACROSS_GROUPS_S = across
    seen: list[tuple[bool, int]] = []  # per group: gc.isenabled(), re-enables so far
    apply = worker.applier.apply

    def attempt(*args: Any) -> Any:
        seen.append((gc.isenabled(), counting.enabled))
        return apply(*args)

    worker.applier.apply = attempt  # type: ignore[method-assign]
    for first in (1, 4, 7):
        worker.queue.put(_group(dbname, first))
    worker.start()
    try:
        got = [outcomes.get(timeout=30) for _ in range(3)]
        assert not any(o.error for o in got), got
        wait_until(lambda: gc.isenabled(), 10, what="the collector on again, the queue empty")
    finally:
        worker.close()
    if across:
        assert seen == [(False, 0), (False, 0), (False, 0)]
        assert counting.enabled == 1
    else:
        assert seen == [(False, 0), (False, 1), (False, 2)]
        assert counting.enabled == 3
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{dbname}`.t")
        assert cur.fetchone() == (9,)
        cur.execute(f"DROP DATABASE `{dbname}`")
