"""What a seed chunk costs in Python, today's typed form against the origin server's own text.

    PYTHONPATH=agents .venv/bin/python bench/seed_text_probe.py [--rows 1000000] [--chunk 10000]

A probe for a design not built (docs/benchmarks.md, seeding): starts two throwaway MariaDB
servers (sandbox), fills `bench seed`'s orders table on one, and copies it to the other twice,
chunk by chunk in key order, in this one process, each chunk one LOAD DATA LOCAL REPLACE and a
commit, as the target agent does:

  typed   what the seed does today, every step in one process (no hub, no agents, no ZeroMQ):
          the reader's query and row reader and packing (seed/readers.py `read`), the hub's
          check of the body (`check_body`), the target's decode (`unpack`, `body_from_wire`),
          the LOAD DATA text made from the values (`loaddata.rows`), the LOAD DATA itself;
  text    the origin server writes each row as LOAD DATA's text (CONCAT_WS, escapes by
          REPLACE, NULL as \\N); Python only joins the lines and sends them.

Prints the CPU seconds of each Python step, of both servers, the wall time of each copy, and
whether the copy equals the origin (CHECKSUM TABLE). Only for this table's column types (BIGINT,
INT, ENUM, DECIMAL, DATETIME(6), TIMESTAMP(6), VARCHAR): a real text form needs a rule per type
(BLOBs as hex, FLOAT's exact text, zero dates, character sets) and a parser for targets that
take values, not LOAD DATA.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pymysql

from binlogsync.codec import text_conversions, unpack
from binlogsync.engines.mariadb import loaddata
from binlogsync.model import Transaction, body_from_wire
from binlogsync.seed import readers
from binlogsync.seed.rowread import fetch_all
from binlogsync.seed.tables import plan
from binlogsync.transport.frames import check_body
from binlogsync_dev import seed_bench
from binlogsync_dev.sandbox import Sandbox, Server

COLUMNS = ["id", "customer_id", "status", "amount", "created_at", "updated_at", "note"]


def _escaped(column: str) -> str:
    """SQL for LOAD DATA's escapes of a text column (backslash first)."""
    out = column
    for raw, escaped in (
        ("\\\\", "\\\\\\\\"),
        ("\\t", "\\\\t"),
        ("\\n", "\\\\n"),
        ("\\r", "\\\\r"),
    ):
        out = f"REPLACE({out}, '{raw}', '{escaped}')"
    return f"REPLACE({out}, CHAR(0), '\\\\0')"


TEXT = (
    "CONCAT_WS('\\t', id, customer_id, status, amount, created_at, "
    f"IFNULL(updated_at, '\\\\N'), IFNULL({_escaped('note')}, '\\\\N'))"
)


def cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def connect(server: Server, **extra: Any) -> pymysql.Connection:
    return pymysql.connect(
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password,
        database=seed_bench.SCHEMA,
        init_command="SET time_zone = '+00:00'",
        **extra,
    )


def load(dst: pymysql.Connection, data: bytes) -> None:
    sql, name = loaddata.statement(
        f"`{seed_bench.TABLE}`", [f"`{c}`" for c in COLUMNS], [False] * len(COLUMNS)
    )
    with dst.cursor() as cur:
        loaddata.execute(cur, sql, name, data, 1 << 20)
    dst.commit()


def empty(target: Server) -> pymysql.Connection:
    with connect(target) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{seed_bench.TABLE}`")
        cur.execute(seed_bench.DDL)
    dst = connect(target, local_infile=True, autocommit=False)
    loaddata.mark(dst)
    return dst


def typed(origin: Server, target: Server, chunk: int) -> dict[str, float]:
    src = connect(origin, conv=text_conversions())
    with connect(origin) as conn, conn.cursor() as cur:
        (table,) = plan(cur, [f"{seed_bench.SCHEMA}.{seed_bench.TABLE}"], None)
    dst = empty(target)
    spent: dict[str, float] = defaultdict(float)
    after, number = None, 0
    while True:
        t = time.process_time()
        got = readers.read(src, readers.Task(number, table, after, None, chunk, False, 1 << 30))
        spent["read and pack (reader)"] += time.process_time() - t
        if not got.rows:
            break
        for piece in got.pieces:
            t = time.process_time()
            check_body(piece.body, 1 << 30)
            spent["check (hub)"] += time.process_time() - t
            t = time.process_time()
            tx = body_from_wire(unpack(piece.body))
            spent["decode (target)"] += time.process_time() - t
            assert isinstance(tx, Transaction)
            t = time.process_time()
            data, _ = loaddata.rows(tx.changes[0].after, range(len(COLUMNS)))
            spent["LOAD DATA text (target)"] += time.process_time() - t
            load(dst, data)
        after, number = got.next_after, number + 1
    src.close()
    dst.close()
    return spent


def text(origin: Server, target: Server, chunk: int) -> dict[str, float]:
    src = connect(origin)
    dst = empty(target)
    spent: dict[str, float] = defaultdict(float)
    after = -1
    while True:
        t = time.process_time()
        rows = fetch_all(
            src,
            f"SELECT id, {TEXT} FROM `{seed_bench.TABLE}` WHERE id > {after} "
            f"ORDER BY id LIMIT {chunk}",
        )
        data = ("\n".join(r[1] for r in rows) + "\n").encode() if rows else b""
        spent["read the server's text (reader)"] += time.process_time() - t
        if not rows:
            break
        load(dst, data)
        after = rows[-1][0]
    src.close()
    dst.close()
    return spent


def checksum(server: Server) -> int:
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{seed_bench.TABLE}`")
        found = cur.fetchone()
    return int(found[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    args = parser.parse_args()
    loaddata.install()
    with tempfile.TemporaryDirectory(prefix="binlogsync-probe-") as tmp:
        box = Sandbox(Path(tmp) / "servers")
        try:
            origin, target = box.start("origin", 1), box.start("target", 2)
            for server in (origin, target):
                with server.connect() as conn, conn.cursor() as cur:
                    cur.execute(f"CREATE DATABASE IF NOT EXISTS `{seed_bench.SCHEMA}`")
                    cur.execute("SET GLOBAL local_infile = 1")
            seed_bench._fill(origin, args.rows)
            expected = checksum(origin)
            print(f"{args.rows:,} rows of bench seed's orders table, chunks of {args.chunk:,}")
            for name, copy in (("typed", typed), ("text", text)):
                servers = cpu(origin.pid), cpu(target.pid)
                wall = time.perf_counter()
                spent = copy(origin, target, args.chunk)
                wall = time.perf_counter() - wall
                origin_cpu, target_cpu = cpu(origin.pid) - servers[0], cpu(target.pid) - servers[1]
                print(
                    f"\n{name}: {wall:.2f} s, equal to the origin: {checksum(target) == expected}"
                )
                for step, seconds in spent.items():
                    print(f"  {step:<34} {seconds:6.2f} CPU s")
                print(f"  {'Python, in all':<34} {sum(spent.values()):6.2f} CPU s")
                print(f"  {'origin server':<34} {origin_cpu:6.2f} CPU s")
                print(f"  {'target server':<34} {target_cpu:6.2f} CPU s")
        finally:
            box.stop_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
