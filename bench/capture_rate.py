"""How fast BinlogReader turns binlog events into Transactions, and its CPU per transaction.

    .venv/bin/python bench/capture_rate.py [--rows 10000] [--runs 3]

Starts a throwaway MariaDB (sandbox) and writes two workloads:
  - N single-row transactions (autocommit INSERTs), the paper's shape;
  - N sysbench `oltp_write_only`-shaped transactions (UPDATE k, UPDATE c, DELETE, INSERT of one
    row of an INT, INT, CHAR(120), CHAR(60) table, written by 4 client threads), the OLTP shape;
then reads each back from the binlog several times and prints the median rate and CPU per
transaction of:
  - BinlogReader (our capture: events.py + rowdecode.py read the frequent events), by GTID
    as on MariaDB, and from a file position (no GTID state kept) to show what tracking costs,
  - BinlogReader with every event read by python-mysql-replication (capture before issue 7),
  - BinlogReader with the Table_map cache off as well (insert workload only),
  - python-mysql-replication alone (decoding the same events, no assembly) as the anchor.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import pymysqlreplication
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from binlogsync.capture.positions import current_position
from binlogsync.capture.reader import BinlogReader
from binlogsync.config import DatabaseSettings
from binlogsync.position import Position, file_number
from binlogsync.tables import TableFilter
from binlogsync_dev.sandbox import Sandbox


def read_ours(
    db: DatabaseSettings, start: Position, end: Position, cache: bool, fast: bool = True
) -> tuple[float, float]:
    """(transactions/s, µs of CPU per transaction)."""
    reader = BinlogReader(
        db, 4242, start, TableFilter(("bench.*",)), cache_table_maps=cache, fast_events=fast
    )
    count = 0
    began, cpu = time.perf_counter(), time.process_time()
    for txn in reader.transactions():
        count += 1
        if txn.position >= end:
            break
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    reader.close()
    return count / elapsed, cpu / count * 1e6


def read_library(db: DatabaseSettings, start: Position, end: Position) -> tuple[float, float]:
    stream = BinLogStreamReader(
        connection_settings=db.connect_args(),
        server_id=4243,
        log_file=start.file,
        log_pos=start.offset,
        resume_stream=True,
        blocking=True,
        only_events=[
            MariadbGtidEvent,
            QueryEvent,
            XidEvent,
            RotateEvent,
            WriteRowsEvent,
            UpdateRowsEvent,
            DeleteRowsEvent,
        ],
        enable_logging=False,
    )
    count = 0
    file = start.file
    began, cpu = time.perf_counter(), time.process_time()
    for event in stream:
        if isinstance(event, RotateEvent):
            file = event.next_binlog
        elif isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
            event.rows  # noqa: B018 - decode the row, as capture does
        elif isinstance(event, XidEvent):
            count += 1
            # `end` is a GTID position on MariaDB; its file and offset are on this server.
            if (file_number(file), event.packet.log_pos) >= (file_number(end.file), end.offset):
                break
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    stream.close()
    return count / elapsed, cpu / count * 1e6


def prepare_sysbench_shaped(server: Any) -> None:
    with server.connect("bench") as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE bench.sb (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, "
            "pad CHAR(60) NOT NULL, KEY k_1 (k))"
        )
        cur.execute(
            "INSERT INTO bench.sb SELECT seq, seq, REPEAT('c', 119), REPEAT('p', 59) "
            "FROM seq_1_to_10000"
        )


def write_sysbench_shaped(server: Any, transactions: int, threads: int = 4) -> float:
    """oltp_write_only's four statements per transaction, from `threads` clients; tx/s."""

    def client(n: int, seed: int) -> None:
        rng = random.Random(seed)
        with server.connect() as conn, conn.cursor() as cur:
            for _ in range(n):
                row = rng.randint(1, 10000)
                cur.execute("BEGIN")
                cur.execute("UPDATE bench.sb SET k = k + 1 WHERE id = %s", (row,))
                cur.execute("UPDATE bench.sb SET c = %s WHERE id = %s", ("x" * 119, row))
                cur.execute("DELETE FROM bench.sb WHERE id = %s", (row,))
                cur.execute(
                    "INSERT INTO bench.sb VALUES (%s, %s, %s, %s)",
                    (row, rng.randint(1, 10000), "c" * 119, "p" * 59),
                )
                cur.execute("COMMIT")

    began = time.perf_counter()
    workers = [
        threading.Thread(target=client, args=(transactions // threads, i)) for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return transactions / (time.perf_counter() - began)


Result = tuple[float, float]  # transactions/s, µs of CPU per transaction


def measure(
    db: DatabaseSettings, start: Position, end: Position, runs: int, insert_workload: bool
) -> dict[str, list[Result]]:
    results = {
        "BinlogReader (events.py + rowdecode.py)": [
            read_ours(db, start, end, True) for _ in range(runs)
        ],
        "  … from a file position (no GTID state kept)": [
            read_ours(db, Position(start.file, start.offset), Position(end.file, end.offset), True)
            for _ in range(runs)
        ],
        "BinlogReader, every event via the library": [
            read_ours(db, start, end, True, fast=False) for _ in range(runs)
        ],
    }
    if insert_workload:
        results["  … and the Table_map cache off"] = [
            read_ours(db, start, end, False, fast=False) for _ in range(runs)
        ]
    results[ANCHOR] = [read_library(db, start, end) for _ in range(runs)]
    return results


def report(title: str, results: dict[str, list[Result]]) -> None:
    anchor = statistics.median(rate for rate, _ in results[ANCHOR])
    print(title)
    print(
        f"{'reader':<44} {'median txn/s':>12} {'µs CPU/txn':>10} {'runs (txn/s)':>26} "
        f"{'vs anchor':>9}"
    )
    for name, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        text = ", ".join(f"{r:,.0f}" for r, _ in runs)
        print(f"{name:<44} {rate:>12,.0f} {cpu:>10.1f} {text:>26} {rate / anchor:>8.2f}x")
    print()


ANCHOR = "anchor: python-mysql-replication alone"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bls-") as root, Sandbox(root) as box:
        server = box.start("origin", 1)
        db = DatabaseSettings(host=server.host, port=server.port, user=server.user)
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench")
            cur.execute(
                "CREATE TABLE bench.t (id INT PRIMARY KEY, name VARCHAR(50), "
                "amount DECIMAL(12,2), created DATETIME(6))"
            )
            start = current_position(db)
            began = time.perf_counter()
            for i in range(args.rows):
                cur.execute(
                    "INSERT INTO bench.t VALUES (%s, %s, %s, NOW(6))", (i, f"name {i}", i / 100)
                )
            write_rate = args.rows / (time.perf_counter() - began)
        end = current_position(db)
        inserts = measure(db, start, end, args.runs, True)
        prepare_sysbench_shaped(server)
        start = current_position(db)
        oltp_rate = write_sysbench_shaped(server, args.rows)
        end = current_position(db)
        oltp = measure(db, start, end, args.runs, False)
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            version = cur.fetchone()[0]
    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()}, Python "
        f"{sys.version.split()[0]}, MariaDB {version}, python-mysql-replication "
        f"{getattr(pymysqlreplication, '__version__', '1.0.17')}; median of {args.runs} runs\n"
    )
    report(
        f"{args.rows} single-row INSERT transactions (written at {write_rate:,.0f}/s, one client)",
        inserts,
    )
    report(
        f"{args.rows} sysbench-shaped transactions, 4 row changes each (written at "
        f"{oltp_rate:,.0f}/s, 4 clients)",
        oltp,
    )


if __name__ == "__main__":
    main()
