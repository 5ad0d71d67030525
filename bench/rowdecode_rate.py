"""CPU per Rows event: RowsDecoder against python-mysql-replication + TableShape.row.

    PYTHONPATH=agents .venv/bin/python bench/rowdecode_rate.py [--events 2000] [--runs 7]

Starts a throwaway MariaDB (sandbox), writes sysbench's table (INT, INT, CHAR(120), CHAR(60))
with one-row INSERT, UPDATE and DELETE statements, keeps the raw bytes of every Rows event
(as the library reads them from the server), then decodes the same bytes over and over, in
memory, both ways:
  - ours: `RowsDecoder.decode` on the event's bytes (the decoder built once per table);
  - anchor: the library's event built from the same packet (`BinLogPacketWrapper`, which
    reads the header and post-header), its `.rows`, then `TableShape.row` on each row; this
    is what capture paid per Rows event before.
Prints the median µs per event of several runs, for each kind, and the ratio.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from typing import Any

from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from binlogsync.capture.positions import current_position
from binlogsync.capture.rowdecode import RowsDecoder
from binlogsync.capture.tablemap import CHECKSUM_ATTRIBUTE
from binlogsync.capture.values import TableShape
from binlogsync.config import DatabaseSettings
from binlogsync_dev.sandbox import Sandbox

KINDS = {23: "write", 24: "update", 25: "delete", 30: "write", 31: "update", 32: "delete"}


class _Control:
    """What the library's events ask of the control connection while parsing."""

    charset = "utf8mb4"

    def _get_dbms(self) -> str:
        return "mariadb"


def _sysbench_text(rng: random.Random, groups: int) -> str:
    return "-".join(f"{rng.randrange(10**11):011d}" for _ in range(groups))


def write_events(box: Sandbox, count: int) -> tuple[DatabaseSettings, Any]:
    server = box.start("bench", 1)
    db = DatabaseSettings(server.host, server.port, server.user, server.password)
    rng = random.Random(1)
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench")
        cur.execute(
            "CREATE TABLE bench.sbtest1 (id INT PRIMARY KEY, k INT NOT NULL DEFAULT 0,"
            " c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '')"
            " DEFAULT CHARSET=utf8mb4"
        )
        start = current_position(db)
        for i in range(count):
            cur.execute(
                "INSERT INTO bench.sbtest1 VALUES (%s, %s, %s, %s)",
                (i, rng.randrange(10**6), _sysbench_text(rng, 10), _sysbench_text(rng, 5)),
            )
            cur.execute("UPDATE bench.sbtest1 SET k = k + 1 WHERE id = %s", (i,))
            if i % 2:
                cur.execute("DELETE FROM bench.sbtest1 WHERE id = %s", (i - 1,))
            conn.commit()
    return db, start


def read_events(db: DatabaseSettings, start: Any) -> tuple[list[tuple[int, bytes, int]], Any, Any]:
    stream = BinLogStreamReader(
        connection_settings=db.connect_args(),
        server_id=4244,
        log_file=start.file,
        log_pos=start.offset,
        resume_stream=True,
        blocking=False,
        only_events=[TableMapEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=["bench"],
        enable_logging=False,
    )
    events, table, checksum = [], None, None
    for event in stream:
        if isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
            data = bytes(event.packet.packet.get_all_data())
            checksum = getattr(stream, CHECKSUM_ATTRIBUTE)
            events.append((data[5], data, len(data) - 4 if checksum else len(data)))
            table = stream.table_map[event.table_id]
    stream.close()
    return events, table, checksum


def time_ours(decoder: RowsDecoder, events: list[tuple[int, bytes, int]]) -> float:
    decode = decoder.decode
    began = time.perf_counter()
    for kind, data, end in events:
        decode(kind, data, 20, end)
    return (time.perf_counter() - began) / len(events)


def time_library(table: Any, checksum: bool, events: list[tuple[int, bytes, int]]) -> float:
    shape = TableShape.of(table)
    table_map = {table.table_id: table}
    control = _Control()
    allowed = frozenset({WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent})
    began = time.perf_counter()
    for kind, data, _ in events:
        wrapper = BinLogPacketWrapper(
            MysqlPacket(data, "utf8"), table_map, control, (10, 11, 0), checksum, allowed,
            None, None, None, None, False, False, False, False, False,
        )  # fmt: skip
        event = wrapper.event
        if kind in (24, 31):
            rows = [
                (
                    shape.row(r["before_values"], r["before_none_sources"]),
                    shape.row(r["after_values"], r["after_none_sources"]),
                )
                for r in event.rows
            ]
        else:
            rows = [shape.row(r["values"], r["none_sources"]) for r in event.rows]
        assert rows
    return (time.perf_counter() - began) / len(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2000, help="rows inserted (and updated)")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    box = Sandbox(tempfile.mkdtemp(prefix="bls-"))
    try:
        db, start = write_events(box, args.events)
        events, table, checksum = read_events(db, start)
    finally:
        box.stop_all()
    decoder = RowsDecoder.of(table)
    assert decoder is not None
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {sys.version.split()[0]}, mysql-replication {version('mysql-replication')}"
    )
    print(
        f"# sysbench table (INT, INT, CHAR(120), CHAR(60)), one row per event, median of {args.runs}"
    )
    print(f"{'event':<8} {'events':>7} {'ours µs':>9} {'library µs':>11} {'ratio':>7}")
    for kind in ("write", "update", "delete"):
        chosen = [e for e in events if KINDS[e[0]] == kind]
        ours = statistics.median(time_ours(decoder, chosen) for _ in range(args.runs)) * 1e6
        lib = (
            statistics.median(time_library(table, checksum, chosen) for _ in range(args.runs)) * 1e6
        )
        print(f"{kind:<8} {len(chosen):>7} {ours:>9.2f} {lib:>11.2f} {lib / ours:>6.1f}x")


if __name__ == "__main__":
    main()
