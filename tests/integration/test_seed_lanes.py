"""Seed chunks applied side by side on a MariaDB target (Target.repair_in_lane, the target
worker's `_side_by_side`): each chunk is still one target transaction with the checkpoint at
min(checkpoint, snapshot); the lanes write their rows at the same time and only their commits
wait for each other."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from binlogsync.apply import Applier
from binlogsync.client import target as target_module
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


@pytest.fixture
def db(target: Server, dbname: str) -> Iterator[pymysql.Connection]:
    conn = target.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(f"CREATE TABLE `{dbname}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    conn.commit()
    yield conn
    conn.rollback()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{dbname}`")
    conn.close()


@pytest.fixture
def settings(target: Server) -> DatabaseSettings:
    return DatabaseSettings(target.host, target.port, target.user, target.password)


def pos(i: int) -> Position:
    return Position("binlog.000001", 100 * i)


def rows(dbname: str, first: int, count: int) -> Transaction:
    """A seed chunk of rows only, as the seed sends its table's later chunks."""
    image = tuple((i, f"row {i}") for i in range(first, first + count))
    return Transaction(pos(0), 1.0, (Change("insert", dbname, "t", ("id", "v"), (), image),))


def q(conn: pymysql.Connection, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    conn.rollback()  # a fresh snapshot
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def checkpoint_key(conn: pymysql.Connection, origin: str) -> int:
    ((key,),) = q(conn, "SELECT pos_key FROM binlogsync.checkpoint WHERE origin = %s", (origin,))
    return int(key)


def test_lanes_write_their_rows_at_once_and_leave_the_lowest_checkpoint(
    target: Server, db: pymysql.Connection, settings: DatabaseSettings, dbname: str
) -> None:
    origin = f"lanes-{dbname}"
    lanes = [Applier(settings, origin), Applier(settings, origin)]
    try:
        lanes[0].apply([Transaction(pos(50), 1.0, ())])
        assert lanes[1].checkpoint() == pos(50)  # both connected before the lock is taken
        # A third session holds the checkpoint row: each lane must write all its rows anyway
        # and wait only to move the checkpoint (the plain repair would wait before its rows).
        locker = target.connect()
        with locker.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(
                "SELECT * FROM binlogsync.checkpoint WHERE origin = %s FOR UPDATE", (origin,)
            )
        results: dict[int, Position | BaseException] = {}

        def run(lane: int, chunk: Transaction, snapshot: Position) -> None:
            try:
                results[lane] = lanes[lane].repair_in_lane(chunk, snapshot, lane)
            except BaseException as exc:  # noqa: BLE001 - the test asserts on it
                results[lane] = exc

        threads = [
            threading.Thread(target=run, args=(0, rows(dbname, 0, 1000), pos(40))),
            threading.Thread(target=run, args=(1, rows(dbname, 1000, 1000), pos(60))),
        ]
        for thread in threads:
            thread.start()
        ids = [lane.connection_id for lane in lanes]

        def both_wrote_their_rows() -> bool:
            # A lane reads the checkpoint only once its rows are written (the pipeline waits).
            found = q(
                db,
                "SELECT id FROM information_schema.PROCESSLIST "
                "WHERE INFO LIKE 'SELECT origin, file%%FOR UPDATE'",
            )
            return all((i,) in found for i in ids)

        wait_until(both_wrote_their_rows, 30, 0.02, "both lanes' rows written, both waiting")
        assert not results  # neither got past the checkpoint
        locker.rollback()
        locker.close()
        for thread in threads:
            thread.join(30)
        assert all(isinstance(r, Position) for r in results.values()), results
        # min(50, 40, 60) whichever committed last; the lowest returned is that.
        assert min(p.key for p in results.values() if isinstance(p, Position)) == pos(40).key
        assert checkpoint_key(db, origin) == pos(40).key
        assert q(db, f"SELECT COUNT(*), MIN(id), MAX(id) FROM `{dbname}`.t") == [(2000, 0, 1999)]
        assert q(
            db,
            "SELECT lane, pos_key FROM binlogsync.lane WHERE origin = %s ORDER BY lane",
            (origin,),
        ) == [(0, pos(40).key), (1, pos(60).key)]
        applied = q(
            db,
            "SELECT applied_transactions FROM binlogsync.checkpoint WHERE origin = %s",
            (origin,),
        )
        assert applied == [(3,)]  # the first apply and one per chunk
    finally:
        for lane in lanes:
            lane.close()


def test_a_lane_starts_a_target_with_no_checkpoint_at_its_snapshot(
    db: pymysql.Connection, settings: DatabaseSettings, dbname: str
) -> None:
    origin = f"fresh-{dbname}"
    lane = Applier(settings, origin)
    try:
        assert lane.repair_in_lane(rows(dbname, 0, 10), pos(7), 1) == pos(7)
        assert checkpoint_key(db, origin) == pos(7).key
    finally:
        lane.close()


def test_a_chunk_with_its_tables_definition_is_never_applied_in_a_lane(
    db: pymysql.Connection, settings: DatabaseSettings, dbname: str
) -> None:
    origin = f"ddl-{dbname}"
    lane = Applier(settings, origin)
    try:
        chunk = Transaction(pos(1), 1.0, (Change("truncate", dbname, "t"),))
        with pytest.raises(ApplyError, match="cannot be applied beside others"):
            lane.repair_in_lane(chunk, pos(1), 1)
        assert q(db, "SELECT COUNT(*) FROM binlogsync.checkpoint WHERE origin = %s", (origin,)) == [
            (0,)
        ]
    finally:
        lane.close()


def _delivery(seq: int, tx: Transaction, snapshot: Position) -> Delivery:
    return Delivery(
        seq, snapshot, None, (pack(tx.to_wire(packing=True)),), 0, repair=True, seed=True
    )


def test_the_worker_applies_queued_seed_chunks_side_by_side_and_answers_each_in_order(
    db: pymysql.Connection, settings: DatabaseSettings, dbname: str
) -> None:
    origin = f"worker-{dbname}"
    outcomes: queue.Queue[Outcome] = queue.Queue()
    config = TargetConfig(database=settings, seed_connections=2)
    worker = ApplyWorker(origin, config, ClientMetrics(), outcomes.put, 1 << 26, None, 0)
    first = Transaction(
        pos(0),
        1.0,
        (Change("truncate", dbname, "t"), *rows(dbname, 0, 300).changes),
    )
    missing = Transaction(pos(0), 1.0, (Change("insert", dbname, "nowhere", ("id",), (), ((1,),)),))
    deliveries = [
        _delivery(1, first, pos(30)),  # its table's first chunk: alone
        _delivery(2, rows(dbname, 300, 300), pos(31)),  # these side by side
        _delivery(3, rows(dbname, 600, 300), pos(32)),
        _delivery(4, missing, pos(33)),  # in a lane, then alone: fails both times
        _delivery(5, rows(dbname, 900, 300), pos(34)),
    ]
    for delivery in deliveries:
        worker.queue.put(delivery)
    worker.start()
    try:
        got = [outcomes.get(timeout=60) for _ in deliveries]
    finally:
        worker.close()
    assert [o.seq for o in got] == [1, 2, 3, 4, 5]
    assert [o.upto for o in got] == [pos(30), pos(30), pos(30), None, pos(30)]
    assert got[3].repair and "nowhere" in got[3].error
    assert q(db, f"SELECT COUNT(*), MAX(id) FROM `{dbname}`.t") == [(1200, 1199)]
    lanes = q(db, "SELECT lane, pos_key FROM binlogsync.lane WHERE origin = %s", (origin,))
    assert {lane for lane, _ in lanes} == {1, 2}  # which took which depends on timing
    assert {key for _, key in lanes} <= {pos(31).key, pos(32).key, pos(34).key}


def test_one_seed_connection_applies_every_chunk_alone(
    db: pymysql.Connection, settings: DatabaseSettings, dbname: str
) -> None:
    origin = f"alone-{dbname}"
    outcomes: queue.Queue[Outcome] = queue.Queue()
    config = TargetConfig(database=settings, seed_connections=1)
    worker = ApplyWorker(origin, config, ClientMetrics(), outcomes.put, 1 << 26, None, 0)
    for seq in (1, 2, 3):
        worker.queue.put(_delivery(seq, rows(dbname, seq * 100, 100), pos(seq)))
    worker.start()
    try:
        got = [outcomes.get(timeout=60) for _ in range(3)]
    finally:
        worker.close()
    assert [o.upto for o in got] == [pos(1), pos(1), pos(1)]
    assert q(db, "SELECT COUNT(*) FROM binlogsync.lane WHERE origin = %s", (origin,)) == [(0,)]
    assert q(db, f"SELECT COUNT(*) FROM `{dbname}`.t") == [(300,)]


def test_the_lanes_close_their_connections_once_the_seed_goes_quiet(
    db: pymysql.Connection,
    settings: DatabaseSettings,
    dbname: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(target_module, "LANES_IDLE", 2.0)
    origin = f"quiet-{dbname}"
    outcomes: queue.Queue[Outcome] = queue.Queue()
    config = TargetConfig(database=settings, seed_connections=2)
    worker = ApplyWorker(origin, config, ClientMetrics(), outcomes.put, 1 << 26, None, 0)
    first = Transaction(pos(0), 1.0, (Change("truncate", dbname, "t"),))
    worker.queue.put(_delivery(1, first, pos(1)))
    worker.queue.put(_delivery(2, rows(dbname, 0, 300), pos(2)))
    worker.queue.put(_delivery(3, rows(dbname, 300, 300), pos(3)))
    worker.start()
    try:
        assert [outcomes.get(timeout=60).upto for _ in range(3)] == [pos(1)] * 3
        ids = [lane.connection_id for lane in list(worker.lanes)]
        assert len(ids) == 2 and None not in ids
        wait_until(lambda: not worker.lanes, 10, 0.05, "the lanes closed")

        def gone() -> bool:
            found = {i for (i,) in q(db, "SELECT id FROM information_schema.PROCESSLIST")}
            return not found & set(ids)

        wait_until(gone, 10, 0.05, "the lanes' connections gone from the server")
        # A later seed opens them again.
        worker.queue.put(_delivery(4, rows(dbname, 600, 300), pos(4)))
        worker.queue.put(_delivery(5, rows(dbname, 900, 300), pos(5)))
        assert [outcomes.get(timeout=60).upto for _ in range(2)] == [pos(1)] * 2
    finally:
        worker.close()
    assert q(db, f"SELECT COUNT(*) FROM `{dbname}`.t") == [(1200,)]
