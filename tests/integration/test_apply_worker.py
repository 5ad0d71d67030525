"""The target's apply worker (client/target.py) on a real MariaDB target, fed deliveries
directly: a large delivery waiting next is decoded ahead, on the worker's decode thread, while
the one before it is applied; a malformed one still fails when it is taken."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from binlogsync.client import target as target_module
from binlogsync.client.target import PREFETCH_BYTES, ApplyWorker, Delivery, Outcome
from binlogsync.codec import pack
from binlogsync.config import DatabaseSettings, TargetConfig
from binlogsync.engines.mariadb import checkpoint
from binlogsync.metrics import ClientMetrics
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync.transport.limits import MAX_MESSAGE_BYTES
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Server

pytestmark = pytest.mark.integration

ROWS = 100  # of 1,000 characters: each delivery is over PREFETCH_BYTES


def body(schema: str, number: int) -> bytes:
    rows = tuple((number * ROWS + i, "x" * 1000) for i in range(ROWS))
    change = Change("insert", schema, "t", ("id", "v"), (), rows)
    tx = Transaction(Position("binlog.000001", 100 * number), 1.7e9, (change,))
    packed = pack(tx.to_wire(packing=True))
    assert len(packed) >= PREFETCH_BYTES
    return packed


def delivery(number: int, data: bytes) -> Delivery:
    after = Position("binlog.000001", 100 * (number - 1)) if number > 1 else None
    return Delivery(number, Position("binlog.000001", 100 * number), after, (data,), 0)


def test_a_large_delivery_next_in_the_queue_is_decoded_ahead_and_a_malformed_one_fails_when_taken(
    target: Server, dbname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three transactions of 100 KB each, then a malformed body of the same size, all queued
    before the worker starts (one transaction a group): the second and third are decoded on
    the decode thread, each applied once; the fourth, decoded ahead too, fails only when taken
    (FAILED, then FAILED with a resend; the checkpoint at the third)."""
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(f"CREATE TABLE `{dbname}`.t (id INT PRIMARY KEY, v VARCHAR(2000))")
    decoded_on: list[str] = []
    real = target_module.body_from_wire

    def spy(data: Any) -> Any:
        decoded_on.append(threading.current_thread().name)
        return real(data)

    monkeypatch.setattr(target_module, "body_from_wire", spy)
    origin = f"o{dbname[2:]}"
    outcomes: list[Outcome] = []
    config = TargetConfig(
        DatabaseSettings(port=target.port), group_transactions=1, retry_initial=0.1, retry_max=0.1
    )
    worker = ApplyWorker(
        origin, config, ClientMetrics(), outcomes.append, MAX_MESSAGE_BYTES, None, 0
    )
    for number in (1, 2, 3):
        worker.queue.put(delivery(number, body(dbname, number)))
    worker.queue.put(delivery(4, b"\xc1" * PREFETCH_BYTES))  # 0xc1: never valid msgpack
    worker.start()
    try:
        wait_until(lambda: any(o.resend for o in outcomes), 20, 0.01, "the malformed one failing")
    finally:
        worker.close()
    assert [o.seq for o in outcomes if not o.error] == [1, 2, 3]
    # FAILED at once, then (after the back-off) FAILED asking the hub to send again
    failed = [o for o in outcomes if o.error]
    assert [(o.seq, o.resend) for o in failed] == [(4, False), (4, True)], failed
    assert "not valid msgpack" in failed[0].error, failed[0].error
    ahead = [name for name in decoded_on if name.startswith(f"decode-{origin}")]
    assert len(ahead) == 2, decoded_on  # 2 and 3 (4 never made a transaction)
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*), COUNT(DISTINCT id) FROM `{dbname}`.t")
        assert cur.fetchone() == (3 * ROWS, 3 * ROWS)
    found = checkpoint.fetch_all(DatabaseSettings(port=target.port))[origin]
    assert found.position == Position("binlog.000001", 300), found
