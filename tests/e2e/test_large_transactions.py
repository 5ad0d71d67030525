"""Transactions of any size: they travel in parts, the hub stores the parts and delivers them
(to a target at the head as they are stored), the target applies all of them in one database
transaction — so no reader of the target ever sees part of one — and every agent's memory
stays bounded.

Before parts existed, a 1M-row INSERT … SELECT was over the 64 MiB message limit: the hub
dropped the connection, the origin re-read the transaction every ~30 s forever, and its agent
peaked at 615 MB (issue 6, defect 1).
"""

from __future__ import annotations

import signal
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from binlogsync.hubcommands import fetch_status
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Server
from binlogsync_dev.verify import caught_up, origin_gtid
from sitekit import create, site

pytestmark = pytest.mark.e2e

ROWS = 1_000_000
PEAK_RSS_MB = 200
BIG = "CREATE TABLE big (id INT PRIMARY KEY, n INT NOT NULL, pad VARCHAR(100))"


def _checksum(server: Server, db: str, table: str) -> int:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{db}`.`{table}`")
        return int(cur.fetchone()[1])


class Watcher:
    """Reads (COUNT(*), SUM(n)) of the target's table over and over, on its own connection,
    and keeps every distinct answer."""

    def __init__(self, target: Server, db: str) -> None:
        self.target, self.db = target, db
        self.seen: set[tuple[int, int]] = set()
        self.reads = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with self.target.connect(self.db) as conn, conn.cursor() as cur:
            while not self.stop.is_set():
                cur.execute("SELECT COUNT(*), COALESCE(SUM(n), 0) FROM big")
                count, total = cur.fetchone()
                self.seen.add((int(count), int(total)))
                self.reads += 1

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _replicate(s: LocalSite, db: str, sql: str, timeout: float = 600) -> None:
    with s.origin.connect(db) as conn, conn.cursor() as cur:
        cur.execute(sql)
    gtid = origin_gtid(s.origin)
    for target in s.targets:
        try:
            wait_until(lambda t=target: caught_up(t, "origin", gtid), timeout, 0.05, "catch-up")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{s.logs()}") from None


# Three million-row statements: 176 s in a loaded suite; the 300 s default was hit beside a bench.
@pytest.mark.timeout(900)
def test_a_million_rows_in_one_transaction_replicate_whole_with_bounded_memory(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, BIG)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        steps = [
            f"INSERT INTO big SELECT seq, seq % 1000, REPEAT('x', 88) FROM seq.seq_1_to_{ROWS}",
            "UPDATE big SET n = n + 1",
            "DELETE FROM big",
        ]
        total = sum(i % 1000 for i in range(1, ROWS + 1))
        states = [(0, 0), (ROWS, total), (ROWS, total + ROWS), (0, 0)]
        for i, sql in enumerate(steps):
            with Watcher(target, dbname) as watcher:
                _replicate(s, dbname, sql)
                done = watcher.reads
                wait_until(lambda w=watcher, d=done: w.reads > d + 1, 30, 0.01, "a read after")
            before, after = states[i], states[i + 1]
            # Whatever a reader of the target saw was the state before or after, never a part.
            assert watcher.seen <= {before, after}, (sql[:30], sorted(watcher.seen)[:5])
            assert after in watcher.seen
            assert _checksum(origin, dbname, "big") == _checksum(target, dbname, "big")
        peaks = {name: s.peak_rss_mb(name) for name in ("hub", "origin", target.name)}
        print(f"\npeak RSS of each agent for {ROWS} rows (MiB): {peaks}")
        assert all(peak <= PEAK_RSS_MB for peak in peaks.values()), peaks
        # The target's checkpoint is there; the hub learns of it from the target's next ACK.
        hub = str(s.agents["hub"].config)
        wait_until(lambda: fetch_status(hub)["targets"][0]["backlog"] == 0, 30, 0.1,
                   "the hub's backlog for the target at 0")  # fmt: skip
        assert all(o["halted"] is None for o in fetch_status(hub)["origins"])


def _applied_transactions(target: Server) -> int:
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT applied_transactions FROM binlogsync.checkpoint WHERE origin = 'origin'"
        )
        return int(cur.fetchone()[0])


@contextmanager
def _parts_site(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> Iterator[tuple[LocalSite, Path, int]]:
    """A running site in parts of 500 rows, the target caught up: (the site, the hub's log
    file, the target's count of applied transactions)."""
    create([origin, target], dbname, BIG)
    with site(tmp_path, origin, [target], dbname, origin_extra="part_rows = 500") as s:
        s.start()
        s.wait_online()
        wait_until(lambda: caught_up(target, "origin", origin_gtid(origin)), 60, 0.05, "ready")
        yield s, s.root / "hub-data" / "hub.sqlite3", _applied_transactions(target)


def _insert_big(origin: Server, dbname: str, rows: int) -> str:
    """One transaction inserting `rows` rows into `big` on the origin; its GTID."""
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO big SELECT seq, 1, REPEAT('y', 88) FROM seq.seq_1_to_{rows}")
    return origin_gtid(origin)


def _stored(hub_data: Path) -> tuple[int, int]:
    """In the hub's log: (parts stored, transactions in parts stored whole)."""
    with sqlite3.connect(hub_data) as db:
        parts = db.execute("SELECT COUNT(*) FROM parts").fetchone()[0]
        whole = db.execute("SELECT COUNT(*) FROM log WHERE parts > 0").fetchone()[0]
        return int(parts), int(whole)


def _caught_up_and_read(s: LocalSite, target: Server, gtid: str, watcher: Watcher) -> None:
    """Wait until the target has applied `gtid` (its logs in the failure), then for a read of
    the target's table after that."""
    try:
        wait_until(lambda: caught_up(target, "origin", gtid), 300, 0.05, "catch-up")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{s.logs()}") from None
    done = watcher.reads
    wait_until(lambda: watcher.reads > done + 1, 30, 0.01, "a read after")


def _whole_and_equal(
    watcher: Watcher, rows: int, origin: Server, target: Server, dbname: str
) -> None:
    """No reader saw part of the `rows`-row insert, one saw all of it, and the copies agree."""
    assert watcher.seen <= {(0, 0), (rows, rows)}, sorted(watcher.seen)[:5]
    assert (rows, rows) in watcher.seen
    assert _checksum(origin, dbname, "big") == _checksum(target, dbname, "big")


class Blocker:
    """Holds an uncommitted insert of one row id on the target, so that a stream inserting the
    same id waits there with its transaction open: a mid-stream moment the test can choose."""

    def __init__(self, target: Server, db: str, row: int) -> None:
        self.conn = target.connect(db)
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("INSERT INTO big VALUES (%s, 0, 'blocker')", (row,))

            def own_trx() -> Any:
                # InnoDB refreshes its information_schema view only when it is 100 ms old:
                # polling faster than that reads the same stale view for ever.
                cur.execute(
                    "SELECT trx_id FROM information_schema.INNODB_TRX "
                    "WHERE trx_mysql_thread_id = CONNECTION_ID()"
                )
                return cur.fetchone()

            self.trx = str(wait_until(own_trx, 10, 0.15, "the blocker's transaction")[0])

    def stream_waits(self) -> bool:
        """True while some other transaction (the target's stream) waits for this row."""
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.INNODB_LOCK_WAITS "
                "WHERE blocking_trx_id = %s",
                (self.trx,),
            )
            return bool(cur.fetchone()[0])

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


@pytest.mark.timeout(600)
def test_parts_survive_kill_9_of_every_agent_mid_transaction(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    """60,000 rows in 120 parts of 500. The origin dies while the hub receives parts; the hub
    dies while the target's stream waits (on a row lock the test holds) halfway through its
    open transaction, and the target dies at the same point of the next stream. The target
    still ends with all of it, applied once, and no reader saw part of it."""
    rows = 60_000
    with _parts_site(tmp_path, origin, target, dbname) as (s, hub_data, applied_before):
        first, second = Blocker(target, dbname, rows // 3), Blocker(target, dbname, 2 * rows // 3)
        try:
            with Watcher(target, dbname) as watcher:
                gtid = _insert_big(origin, dbname, rows)
                wait_until(lambda: _stored(hub_data)[0] >= 5, 120, 0.005, "parts arriving")
                s.kill("origin")  # it reads the transaction again; the hub starts its parts over
                s.start("origin")
                wait_until(first.stream_waits, 120, 0.15, "the stream at the first row lock")
                s.kill("hub")
                s.start("hub")
                first.release()
                wait_until(second.stream_waits, 120, 0.15, "the stream at the second row lock")
                s.kill(target.name)
                s.start(target.name)
                wait_until(second.stream_waits, 120, 0.15, "the new stream at the second lock")
                second.release()
                _caught_up_and_read(s, target, gtid, watcher)
        finally:
            for blocker in (first, second):
                if blocker.conn.open:
                    blocker.release()
        _whole_and_equal(watcher, rows, origin, target, dbname)
        # Applied once, though three streams of it began.
        assert _applied_transactions(target) == applied_before + 1


@pytest.mark.parametrize("limited", ["origin", "hub"])
def test_a_row_too_large_for_a_message_halts_capture_with_one_clear_error(
    tmp_path: Path, origin: Server, target: Server, dbname: str, limited: str
) -> None:
    """The limit set on the origin's agent, or only on the hub (which tells the origin in its
    WELCOME; before, the origin sent the batch anyway and the hub's socket dropped it)."""
    create([origin, target], dbname, "CREATE TABLE blobs (id INT PRIMARY KEY, b LONGBLOB)")
    extra = {limited: "max_message_bytes = 1048576"}
    with site(tmp_path, origin, [target], dbname, agent_extra=extra) as s:
        s.start()
        s.wait_online()
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO blobs VALUES (1, 'small')")
            cur.execute("INSERT INTO blobs VALUES (2, REPEAT('z', 3000000))")
            cur.execute("INSERT INTO blobs VALUES (3, 'after')")

        def halted() -> dict[str, Any] | None:
            return fetch_status(str(s.agents["hub"].config))["origins"][0]["halted"]

        info = wait_until(halted, 60, 0.05, "the halt in status")
        assert "max_message_bytes" in info["error"] and "packs to" in info["error"]

        def rows() -> list[int]:
            with target.connect(dbname) as conn, conn.cursor() as cur:
                cur.execute("SELECT id FROM blobs ORDER BY id")
                return [r[0] for r in cur.fetchall()]

        def settled() -> bool:  # row 1 applied and nothing else held for the target (on a
            # busy machine the halt showed before the target had applied the row before it)
            backlog = fetch_status(str(s.agents["hub"].config))["targets"][0]["backlog"]
            return bool(rows()) and backlog == 0

        wait_until(settled, 60, 0.05, "the target applying what the hub holds")
        assert rows() == [1]  # stopped there, nothing skipped
        # It stays stopped and says so once: no reconnect loop, the origin stays online.
        log = s.agents["origin"].log
        wait_until(lambda: "capture stopped" in log.read_text(), 10, 0.05, "the log line")
        status = fetch_status(str(s.agents["hub"].config))
        assert {h["name"]: h["online"] for h in status["hosts"]}["origin"] is True
        text = log.read_text()
        assert text.count("capture stopped") == 1, text
        assert "saying HELLO again" not in text, text


def test_a_backlog_ships_in_batches_within_the_hubs_smaller_limit(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    """The hub's max_message_bytes (1 MiB, told in its WELCOME) is below the 4 MiB of bodies
    an origin puts in one BATCH: a backlog of 400 kB transactions still arrives whole, in
    BATCHes the hub takes, on one connection. Before, the origin sent them up to 4 MiB at a
    time: with a frame per body the hub refused the BATCH and the stream stopped there for
    good; with the bodies in one frame the hub's socket dropped the connection each time, and
    the rows came one per reconnection (the first of a fresh connection goes alone)."""
    create([origin, target], dbname, "CREATE TABLE blobs (id INT PRIMARY KEY, b LONGBLOB)")
    extra = {"hub": "max_message_bytes = 1048576"}
    with site(tmp_path, origin, [target], dbname, agent_extra=extra) as s:
        s.start()
        s.wait_online()
        s.stop("origin")
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            for key in range(1, 11):
                cur.execute("INSERT INTO blobs VALUES (%s, REPEAT('z', 400000))", (key,))
        s.start("origin")

        def copied() -> list[tuple[int, int]]:
            with target.connect(dbname) as conn, conn.cursor() as cur:
                cur.execute("SELECT id, LENGTH(b) FROM blobs ORDER BY id")
                return list(cur.fetchall())

        wait_until(lambda: len(copied()) == 10, 60, 0.1, "the ten rows on the target")
        assert copied() == [(key, 400000) for key in range(1, 11)]
        assert fetch_status(str(s.agents["hub"].config))["origins"][0]["halted"] is None
        text = s.agents["origin"].log.read_text()
        assert "dropped" not in text and "saying HELLO again" not in text, text


@pytest.mark.timeout(600)
def test_a_hub_silent_mid_stream_then_the_next_large_transaction(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    """The hub stops answering (SIGSTOP, longer than the target's liveness) while the target
    streams a large transaction; the target says HELLO again, the old stream ends one way or
    the other, and the next large transaction replicates too. The benchmark once stalled here
    for good: 8 parts in flight, the target's worker idle, no error anywhere."""
    rows = 20_000
    create([origin, target], dbname, BIG)
    with site(tmp_path, origin, [target], dbname, origin_extra="part_rows = 500") as s:
        s.start()
        s.wait_online()
        blocker = Blocker(target, dbname, rows // 2)
        try:
            with origin.connect(dbname) as conn, conn.cursor() as cur:
                cur.execute(
                    f"INSERT INTO big SELECT seq, 1, REPEAT('y', 88) FROM seq.seq_1_to_{rows}"
                )
            wait_until(blocker.stream_waits, 120, 0.15, "the stream at the row lock")
            hub = s.agents["hub"].process
            assert hub is not None
            log = s.agents[target.name].log
            hub.send_signal(signal.SIGSTOP)
            try:
                wait_until(lambda: "saying HELLO again" in log.read_text(), 30, 0.05, "link lost")
            finally:
                hub.send_signal(signal.SIGCONT)
            wait_until(lambda: "welcomed target after" in log.read_text(), 30, 0.05, "welcomed")
        finally:
            blocker.release()
        for sql in ("UPDATE big SET n = n + 1", "DELETE FROM big"):
            try:
                _replicate(s, dbname, sql, timeout=120)
            except AssertionError:
                status = fetch_status(str(s.agents["hub"].config))
                raise AssertionError(f"{sql}: {status['targets']}\n{s.logs()}") from None
        assert _checksum(origin, dbname, "big") == _checksum(target, dbname, "big")


@pytest.mark.timeout(600)
def test_the_target_applies_a_transaction_while_its_origin_still_reads_it(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    """The hub sends a transaction's parts as it stores them, to a target that has all before
    it: with the origin's agent stopped (SIGSTOP) a few parts into a 200,000-row transaction,
    the hub has not stored its last part, yet the target's open transaction already waits on
    a row of part 1 (held by the test). The origin's agent is then killed (kill -9) and reads
    the transaction again from its start: the target keeps what it has of the same parts and
    ends with the transaction applied once, never seen in part by a reader."""
    rows = 200_000
    with _parts_site(tmp_path, origin, target, dbname) as (s, hub_data, applied_before):
        blocker = Blocker(target, dbname, 10)
        reader = s.agents["origin"].process
        assert reader is not None
        try:
            with Watcher(target, dbname) as watcher:
                gtid = _insert_big(origin, dbname, rows)
                wait_until(lambda: _stored(hub_data)[0] >= 3, 120, 0.002, "parts arriving")
                reader.send_signal(signal.SIGSTOP)
                wait_until(blocker.stream_waits, 120, 0.15, "the stream at part 1's row")
                parts, whole = _stored(hub_data)
                assert whole == 0 and parts < rows // 500, (parts, whole)
                s.kill("origin")
                s.start("origin")
                blocker.release()
                _caught_up_and_read(s, target, gtid, watcher)
        finally:
            if blocker.conn.open:
                blocker.release()
        _whole_and_equal(watcher, rows, origin, target, dbname)
        assert _applied_transactions(target) == applied_before + 1
