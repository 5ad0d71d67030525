"""How fast BinlogReader turns single-row transactions into Transactions.

    .venv/bin/python bench/capture_rate.py [--rows 10000] [--runs 3]

Starts a throwaway MariaDB (sandbox), inserts N single-row transactions (autocommit INSERTs),
then reads them back from the binlog several times and prints the median rate of:
  - BinlogReader (our capture, Table_map cache on),
  - BinlogReader with the Table_map cache off,
  - python-mysql-replication alone (decoding the same events, no assembly) as the anchor.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import pymysqlreplication
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import WriteRowsEvent

from binlogsync.capture.positions import current_position
from binlogsync.capture.reader import BinlogReader
from binlogsync.config import DatabaseSettings
from binlogsync.devsite.sandbox import Sandbox
from binlogsync.position import Position
from binlogsync.tables import TableFilter


def read_ours(db: DatabaseSettings, start: Position, end: Position, cache: bool) -> float:
    reader = BinlogReader(db, 4242, start, TableFilter(("bench.*",)), cache_table_maps=cache)
    count = 0
    began = time.perf_counter()
    for txn in reader.transactions():
        count += 1
        if txn.position >= end:
            break
    elapsed = time.perf_counter() - began
    reader.close()
    return count / elapsed


def read_library(db: DatabaseSettings, start: Position, end: Position) -> float:
    stream = BinLogStreamReader(
        connection_settings=db.connect_args(),
        server_id=4243,
        log_file=start.file,
        log_pos=start.offset,
        resume_stream=True,
        blocking=True,
        only_events=[MariadbGtidEvent, QueryEvent, XidEvent, RotateEvent, WriteRowsEvent],
        enable_logging=False,
    )
    count = 0
    file = start.file
    began = time.perf_counter()
    for event in stream:
        if isinstance(event, RotateEvent):
            file = event.next_binlog
        elif isinstance(event, WriteRowsEvent):
            event.rows  # noqa: B018 - decode the row, as capture does
        elif isinstance(event, XidEvent):
            count += 1
            if Position(file, event.packet.log_pos) >= end:
                break
    elapsed = time.perf_counter() - began
    stream.close()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root, Sandbox(root) as box:
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
        results = {
            "BinlogReader (Table_map cache on)": [
                read_ours(db, start, end, True) for _ in range(args.runs)
            ],
            "BinlogReader (Table_map cache off)": [
                read_ours(db, start, end, False) for _ in range(args.runs)
            ],
            "anchor: python-mysql-replication alone": [
                read_library(db, start, end) for _ in range(args.runs)
            ],
        }
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            version = cur.fetchone()[0]
    anchor = statistics.median(results["anchor: python-mysql-replication alone"])
    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()}, Python "
        f"{sys.version.split()[0]}, MariaDB {version}, python-mysql-replication "
        f"{getattr(pymysqlreplication, '__version__', '1.0.17')}"
    )
    print(
        f"{args.rows} single-row transactions written at {write_rate:,.0f}/s (one PyMySQL client)"
    )
    print(f"{'reader':<42} {'median txn/s':>12} {'runs':>26} {'vs anchor':>9}")
    for name, rates in results.items():
        median = statistics.median(rates)
        runs = ", ".join(f"{r:,.0f}" for r in rates)
        print(f"{name:<42} {median:>12,.0f} {runs:>26} {median / anchor:>8.2f}x")


if __name__ == "__main__":
    main()
