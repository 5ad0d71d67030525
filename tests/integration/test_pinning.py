"""Snapshot positions on a busy MariaDB: a seed chunk's lower-bound position must not name a
transaction its snapshot misses (the replay after it would skip that transaction for good)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pymysql
import pytest

from binlogsync.reconcile import pinning
from binlogsync_dev.sandbox import Sandbox, Server
from sitekit import create

pytestmark = pytest.mark.integration

WRITERS = 6


@pytest.fixture(scope="module")
def origin(sandbox: Sandbox) -> Server:
    """A server of this module's own: the checks count every transaction on the server as one
    of their rows, so a write by anything else (an earlier test's leftovers on the shared
    origin) would read as a snapshot that misses a transaction."""
    return sandbox.start("pinning_origin", 69)


@contextmanager
def _inserting(origin: Server, db: str) -> Iterator[None]:
    """Writers committing one single-row INSERT per transaction, as fast as they can."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with origin.connect(db) as conn, conn.cursor() as cur:
                while not stop.is_set():
                    cur.execute("INSERT INTO t VALUES ()")
                    conn.commit()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(WRITERS)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors, errors


def _sequence(state: str, domain: int) -> int:
    for gtid in filter(None, state.split(",")):
        d, _server, seq = gtid.split("-")
        if int(d) == domain:
            return int(seq)
    return 0


def _misses(
    origin: Server, db: str, snapshots: int, user: str = "", password: str = ""
) -> list[str]:
    """Snapshots whose position counts more transactions than they show rows: each row is one
    transaction, and nothing else writes to the server meanwhile."""
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_domain_id, @@gtid_binlog_pos")
        domain, state = cur.fetchone()
    base = _sequence(str(state), int(domain))
    missed = []
    reader = dataclasses.replace(origin, user=user, password=password) if user else origin
    with _inserting(origin, db), reader.connect(db) as conn:
        for _ in range(snapshots):
            position = pinning.snapshot(conn, lower_bound=True)
            with conn.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM t")
                seen = cur.fetchone()[0]
            pinning.end(conn)
            counted = _sequence(str(position.gtid), int(domain)) - base
            if counted > seen:
                missed.append(f"{position.gtid}: {counted} transactions, {seen} rows")
    return missed


def test_lower_bound_position_is_in_its_snapshot_under_busy_writers(
    origin: Server, dbname: str
) -> None:
    # Before the fix, the state read before the snapshot named transactions written to the
    # binlog but not yet committed in InnoDB: about one snapshot in 200 here.
    create([origin], dbname, "CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY)")
    missed = _misses(origin, dbname, 2000)
    assert not missed, missed[:5]


def test_exact_position_is_in_its_snapshot_across_binlog_rotations(
    origin: Server, dbname: str
) -> None:
    """Without BINLOG MONITOR the seed computes the exact state, as reconcile always does.
    MariaDB's own one (BINLOG_GTID_POS at binlog_snapshot_position) named a group its snapshot
    lacked right after a rotation (the session's 64 KiB binlogs rotate every few hundred
    transactions): about one snapshot in 100 here, before the fix."""
    create([origin], dbname, "CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY)")
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'pin_reader'@'127.0.0.1' IDENTIFIED BY 'pw'")
        cur.execute(f"GRANT SELECT ON `{dbname}`.* TO 'pin_reader'@'127.0.0.1'")
    reader = dataclasses.replace(origin, user="pin_reader", password="pw")
    with reader.connect(dbname) as conn, conn.cursor() as cur:
        with pytest.raises(pymysql.err.OperationalError, match="BINLOG MONITOR"):
            cur.execute("SHOW MASTER STATUS")
    missed = _misses(origin, dbname, 1500, user="pin_reader", password="pw")
    assert not missed, missed[:5]


@pytest.mark.parametrize("lower_bound", [True, False])
def test_quiet_origin_after_a_rotation_pins_to_its_head(
    origin: Server, dbname: str, lower_bound: bool
) -> None:
    """Nothing committed in the newest file: its start is believed once it has settled (a
    pin below the head would be older than what a compacted hub still holds, and a seed of a
    quiet origin could never go on); the next commit moves the pin."""
    create([origin], dbname, "CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY)")
    with origin.connect(dbname) as conn:
        for _round in range(2):
            with conn.cursor() as cur:
                cur.execute("INSERT INTO t VALUES ()")
                cur.execute("FLUSH BINARY LOGS")
                cur.execute("SELECT @@gtid_binlog_pos")
                head = str(cur.fetchone()[0])
            for _again in range(2):  # the second time from what the first one settled
                position = pinning.snapshot(conn, lower_bound=lower_bound)
                with conn.cursor() as cur:
                    cur.execute("SELECT COUNT(*) FROM t")
                    seen = cur.fetchone()[0]
                pinning.end(conn)
                assert position.gtid == head
                assert seen == _round + 1


def _checkpoint_after_a_group(origin: Server, db: str) -> tuple[str, int, int]:
    """A binlog file, the end of a Binlog_checkpoint event the server wrote after a group of
    that file (after a rotation, when the file before is no longer needed for recovery), and
    the end of the group's Xid before it."""
    deadline = time.monotonic() + 60
    with origin.connect(db) as conn, conn.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute("FLUSH BINARY LOGS")
            for _ in range(5):
                cur.execute("INSERT INTO t VALUES ()")
                conn.commit()
            cur.execute("SHOW MASTER STATUS")
            file = str(cur.fetchone()[0])
            cur.execute("SHOW BINLOG EVENTS IN %s", (file,))
            events = [(str(kind), int(end)) for _f, _p, kind, _s, end, *_ in cur.fetchall()]
            for (kind, end), (after, after_end) in zip(events, events[1:], strict=False):
                if kind == "Xid" and after == "Binlog_checkpoint":
                    return file, after_end, end
    raise AssertionError("no binlog checkpoint event after a group within 60 s")


def test_a_commit_point_at_a_checkpoint_after_a_group_is_settled_before_it_is_believed(
    origin: Server, dbname: str
) -> None:
    # The checkpoint's write sets the commit point past its end whether or not the group
    # before it has committed; before the fix a state holding that group was believed at once
    # (a seed chunk's lower bound named a transaction its snapshot lacked, once in CI).
    create([origin], dbname, "CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY)")
    file, checkpoint_end, xid_end = _checkpoint_after_a_group(origin, dbname)
    with origin.connect() as conn, conn.cursor() as cur:
        state = pinning._state_at(cur, file, checkpoint_end)
        assert state is not None
        assert pinning._ends_at_checkpoint(conn, cur, file, checkpoint_end)
        assert not pinning._ends_at_checkpoint(conn, cur, file, xid_end)
        assert pinning._settled(conn, cur, file, xid_end, state)  # a group's commit: exact
        started = time.monotonic()
        assert not pinning._settled(conn, cur, file, checkpoint_end, state)
        deadline = started + 10
        while not pinning._settled(conn, cur, file, checkpoint_end, state):
            assert time.monotonic() < deadline, "a checkpoint's commit point never settled"
            time.sleep(0.02)
        assert time.monotonic() - started >= pinning._SETTLE
    # Without BINLOG MONITOR (no SHOW BINLOG EVENTS) the event is told by its length.
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'ckpt_reader'@'127.0.0.1' IDENTIFIED BY 'pw'")
    reader = dataclasses.replace(origin, user="ckpt_reader", password="pw")
    with reader.connect() as conn, conn.cursor() as cur:
        with pytest.raises(pymysql.err.OperationalError, match="BINLOG MONITOR"):
            cur.execute("SHOW BINLOG EVENTS IN %s LIMIT 1", (file,))
        assert pinning._ends_at_checkpoint(conn, cur, file, checkpoint_end)
        assert not pinning._ends_at_checkpoint(conn, cur, file, xid_end)
