"""Transactions of any size: they travel in parts, the hub stores the parts and delivers them
once complete, the target applies all of them in one database transaction — so no reader of
the target ever sees part of one — and every agent's memory stays bounded.

Before parts existed, a 1M-row INSERT … SELECT was over the 64 MiB message limit: the hub
dropped the connection, the origin re-read the transaction every ~30 s forever, and its agent
peaked at 615 MB (issue 6, defect 1).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from binlogsync.devsite.localsite import LocalSite, wait_until
from binlogsync.devsite.sandbox import Server
from binlogsync.devsite.verify import caught_up, origin_gtid
from binlogsync.hubcommands import fetch_status
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
        status = fetch_status(str(s.agents["hub"].config))
        assert status["targets"][0]["backlog"] == 0
        assert all(o["halted"] is None for o in status["origins"])


def _streaming(target: Server) -> bool:
    """True while the target has an open transaction that has changed rows (a stream)."""
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_rows_modified > 0"
        )
        return bool(cur.fetchone()[0])


@pytest.mark.timeout(900)
def test_parts_survive_kill_9_of_every_agent_mid_transaction(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    """100,000 rows in 100 parts of 1,000; the origin dies while the hub receives parts, the
    hub and then the target while the target streams them into its open transaction; the
    target still ends with all of it, applied once, and no reader saw part of it."""
    rows = int(os.environ.get("BIG_ROWS", "100000"))
    create([origin, target], dbname, BIG)
    with site(tmp_path, origin, [target], dbname, origin_extra="part_rows = 1000") as s:
        s.start()
        s.wait_online()
        hub_data = s.root / "hub-data" / "hub.sqlite3"

        def parts_stored() -> int:
            with sqlite3.connect(hub_data) as db:
                return int(db.execute("SELECT COUNT(*) FROM parts").fetchone()[0])

        with Watcher(target, dbname) as watcher:
            with origin.connect(dbname) as conn, conn.cursor() as cur:
                cur.execute(
                    f"INSERT INTO big SELECT seq, 1, REPEAT('y', 88) FROM seq.seq_1_to_{rows}"
                )
            gtid = origin_gtid(origin)
            wait_until(lambda: parts_stored() >= 20, 120, 0.01, "parts arriving")
            s.kill("origin")  # it reads the transaction again; the hub starts its parts over
            s.start("origin")
            for victim in ("hub", target.name):
                wait_until(lambda: _streaming(target), 300, 0.02, f"a stream before {victim} dies")
                s.kill(victim)
                print(f"killed {victim} while the target streamed", flush=True)
                s.start(victim)
            try:
                wait_until(lambda: caught_up(target, "origin", gtid), 600, 0.05, "catch-up")
            except TimeoutError as exc:
                raise AssertionError(f"{exc}\n{s.logs()}") from None
            done = watcher.reads
            wait_until(lambda: watcher.reads > done + 1, 30, 0.01, "a read after")
        assert watcher.seen <= {(0, 0), (rows, rows)}, sorted(watcher.seen)[:5]
        assert (rows, rows) in watcher.seen
        assert _checksum(origin, dbname, "big") == _checksum(target, dbname, "big")


def test_a_row_too_large_for_a_message_halts_capture_with_one_clear_error(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, "CREATE TABLE blobs (id INT PRIMARY KEY, b LONGBLOB)")
    extra = {"origin": "max_message_bytes = 1048576"}
    with site(tmp_path, origin, [target], dbname, client_extra=extra) as s:
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
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM blobs ORDER BY id")
            assert [r[0] for r in cur.fetchall()] == [1]  # stopped there, nothing skipped
        # It stays stopped and says so once: no reconnect loop, the origin stays online.
        log = s.agents["origin"].log
        wait_until(lambda: "capture stopped" in log.read_text(), 10, 0.05, "the log line")
        status = fetch_status(str(s.agents["hub"].config))
        assert {h["name"]: h["online"] for h in status["hosts"]}["origin"] is True
        text = log.read_text()
        assert text.count("capture stopped") == 1, text
        assert "saying HELLO again" not in text, text
