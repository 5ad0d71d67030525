"""What a seed chunk costs in Python, in its two forms: rows as text and rows as values.

    PYTHONPATH=agents .venv/bin/python bench/seed_forms_probe.py [--rows 1000000] [--chunk 10000]

Starts two throwaway MariaDB servers (sandbox), fills `bench seed`'s orders table on one, and
copies it to the other twice, chunk by chunk in key order, in this one process, each chunk one
LOAD DATA LOCAL REPLACE and a commit, as the target agent does, with the seed's own code for
every step (no hub, no agents, no ZeroMQ in between):

  text    what the seed does (rowtext.py): the origin server writes each row as LOAD DATA's
          text (seed/chunks.py `text_sql`); the reader collects the lines and packs them; the
          hub's check of the body (`check_body`: the grammar); the target's decode
          (`body_from_wire`); the text as it came (`loaddata.rows`); the LOAD DATA itself;
  values  the form of a table whose description is not exact (seed/chunks.py `text_forms`):
          the same steps over typed rows, each value read, packed, checked, decoded and
          printed again as LOAD DATA's text.

Prints the CPU seconds of each Python step, of both servers, the wall time of each copy, and
whether the copy equals the origin (CHECKSUM TABLE).
"""

from __future__ import annotations

import argparse
import dataclasses
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
from binlogsync.seed.tables import SeedTable, plan
from binlogsync.transport.frames import check_body
from binlogsync_dev import seed_bench
from binlogsync_dev.sandbox import Sandbox, Server


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


def empty(target: Server) -> pymysql.Connection:
    with connect(target) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{seed_bench.TABLE}`")
        cur.execute(seed_bench.DDL)
    dst = connect(target, local_infile=True, autocommit=False)
    loaddata.mark(dst)
    return dst


def copy(origin: Server, target: Server, table: SeedTable, chunk: int) -> dict[str, float]:
    src = connect(origin, conv=text_conversions())
    dst = empty(target)
    names = [f"`{c}`" for c in table.columns]
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
            data, hexed = loaddata.rows(tx.changes[0].after, range(len(names)))
            spent["LOAD DATA text (target)"] += time.process_time() - t
            sql, name = loaddata.statement(f"`{seed_bench.TABLE}`", names, hexed)
            with dst.cursor() as cur:
                loaddata.execute(cur, sql, name, data, 1 << 20)
            dst.commit()
        after, number = got.next_after, number + 1
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
            with connect(origin) as conn, conn.cursor() as cur:
                (table,) = plan(cur, [f"{seed_bench.SCHEMA}.{seed_bench.TABLE}"], None)
            as_values = dataclasses.replace(
                table, definition=dataclasses.replace(table.definition, unsupported="probe")
            )
            print(f"{args.rows:,} rows of bench seed's orders table, chunks of {args.chunk:,}")
            for name, form in (("text", table), ("values", as_values)):
                servers = cpu(origin.pid), cpu(target.pid)
                wall = time.perf_counter()
                spent = copy(origin, target, form, args.chunk)
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
