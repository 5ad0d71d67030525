"""How fast the applier applies origin transactions to a target, beside native replication.

    .venv/bin/python bench/apply_rate.py [--runs 5] [--sandbox DIR]

Starts a throwaway MariaDB target (binlogsync_dev.sandbox), then measures, median of --runs:

  * single-row INSERT transactions: 10,000 of them, 1,000 per `Applier.apply` call
    (one target transaction each, checkpoint included) -> transactions/s
  * 100-row INSERT transactions: 500 of them, 50 per call -> rows/s

The anchor is the native replica SQL thread on the same kind of machine (MACHINE-NOTES:
~9.5k single-row transactions/s, ~240k rows/s for 100-row transactions); it is quoted, not
re-measured here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

import pymysql

from binlogsync.apply import Applier
from binlogsync.config import DatabaseSettings
from binlogsync.engines.mariadb.statements import DEFAULT_MAX_ROWS
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync_dev.sandbox import Sandbox, Server

ANCHOR_TPS = 9_500.0  # native replica SQL thread, single-row transactions/s
ANCHOR_ROWS = 240_000.0  # native replica SQL thread, rows/s in 100-row transactions
COLUMNS = ("id", "k", "name", "amount", "created")
TABLE = (
    "CREATE TABLE {db}.t (id BIGINT PRIMARY KEY, k INT NOT NULL, name VARCHAR(64), "
    "amount DECIMAL(12,2), created DATETIME(6), KEY (k)) ENGINE=InnoDB"
)


def transactions(db: str, count: int, rows: int) -> list[Transaction]:
    out = []
    base = dt.datetime(2024, 1, 1)
    for i in range(count):
        first = i * rows
        image = tuple(
            (n, n % 1000, f"customer {n}", n / 100, base + dt.timedelta(seconds=n))
            for n in range(first, first + rows)
        )
        out.append(
            Transaction(
                Position("binlog.000001", 4 + 200 * (i + 1)),
                0.0,
                (Change("insert", db, "t", COLUMNS, (), image),),
            )
        )
    return out


MAX_ROWS = DEFAULT_MAX_ROWS


def run(server: Server, name: str, count: int, rows: int, group: int) -> float:
    """Seconds to apply `count` transactions of `rows` rows, `group` per call, into a new table."""
    db = f"bench_{name}"
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(TABLE.format(db=db))
    log = transactions(db, count, rows)
    settings = DatabaseSettings(server.host, server.port, server.user, server.password)
    with Applier(settings, f"bench-{uuid.uuid4().hex[:8]}-{name}", max_rows=MAX_ROWS) as applier:
        applier.checkpoint()  # connect and create the checkpoint schema outside the timing
        start = time.perf_counter()
        for i in range(0, count, group):
            applier.apply(log[i : i + group])
        elapsed = time.perf_counter() - start
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {db}.t")
        (applied,) = cur.fetchone()
        cur.execute(f"DROP DATABASE {db}")
    if applied != count * rows:
        raise SystemExit(f"{name}: {applied} rows applied, expected {count * rows}")
    return elapsed


def median_of(runs: int, measure: Callable[[int], float]) -> tuple[float, list[float]]:
    values = [measure(i) for i in range(runs)]
    return statistics.median(values), values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sandbox", help="sandbox folder (default: a temporary one)")
    parser.add_argument(
        "--max-rows",
        type=int,
        default=DEFAULT_MAX_ROWS,
        help="rows per statement (Applier max_rows)",
    )
    args = parser.parse_args(argv)
    global MAX_ROWS
    MAX_ROWS = args.max_rows

    root = args.sandbox or tempfile.mkdtemp(prefix="binlogsync-bench-")
    with Sandbox(root) as box:
        server = box.start("bench-target", 91)
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            (version,) = cur.fetchone()

        single_n, single_group = 10_000, 1_000
        multi_n, multi_rows, multi_group = 500, 100, 50
        single, single_all = median_of(
            args.runs, lambda i: single_n / run(server, f"single{i}", single_n, 1, single_group)
        )
        multi, multi_all = median_of(
            args.runs,
            lambda i: (
                multi_n * multi_rows / run(server, f"multi{i}", multi_n, multi_rows, multi_group)
            ),
        )

    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()}, Python "
        f"{platform.python_version()}, MariaDB {version}, PyMySQL {pymysql.__version__}"
    )
    print(
        f"median of {args.runs} runs, {MAX_ROWS} rows per statement at most; "
        "anchor = native replica SQL thread (MACHINE-NOTES)"
    )
    print()
    header = f"{'measure':<52} {'binlogsync':>12} {'anchor':>10} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    print(
        f"{'single-row transactions/s (10,000; 1,000 per call)':<52} {single:>12,.0f} "
        f"{ANCHOR_TPS:>10,.0f} {single / ANCHOR_TPS:>6.2f}x"
    )
    print(
        f"{'rows/s in 100-row transactions (500; 50 per call)':<52} {multi:>12,.0f} "
        f"{ANCHOR_ROWS:>10,.0f} {multi / ANCHOR_ROWS:>6.2f}x"
    )
    print()
    print("runs, transactions/s:", ", ".join(f"{v:,.0f}" for v in single_all))
    print("runs, rows/s:        ", ", ".join(f"{v:,.0f}" for v in multi_all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
