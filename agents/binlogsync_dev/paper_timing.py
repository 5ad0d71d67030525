"""The paper's Table 1, measured here: binlogsync beside native MariaDB replication.

The paper's `trx` table gets 100/200/400/600/1000 single-statement INSERTs, UPDATEs and
DELETEs (updates and deletes out of 1,000 rows). Every cell is timed from the first statement
until the target is equal (`seconds`), and from the last statement's return until then
(`lag_ms`). The same statements replicate natively to a MariaDB replica of the origin in the
same run, so both figures share the machine and the moment. "Equal" is detected by the
target's checkpoint reaching the origin's last GTID (binlogsync) and MASTER_GTID_WAIT (native),
then checked row for row after the clock stops.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from binlogsync.engines.mariadb import checkpoint as checkpoints
from binlogsync.paper import PAPER

from .localsite import LocalSite, wait_until
from .sandbox import Sandbox, Server
from .verify import caught_up, differences, gtid_seq, origin_gtid

SCHEMA, TABLE = "paper", "trx"
DDL = (
    f"CREATE TABLE IF NOT EXISTS `{SCHEMA}`.`{TABLE}` ("
    " id INT AUTO_INCREMENT PRIMARY KEY, NIM VARCHAR(20) NOT NULL,"
    " nominal DECIMAL(15,2) NOT NULL, flag TINYINT NOT NULL DEFAULT 0,"
    " tgl DATETIME NOT NULL)"
)


@dataclass
class Cell:
    dml: str
    rows: int
    seconds: float
    lag_ms: float
    native_seconds: float
    paper_seconds: float


class Clock:
    """Waits, in two threads, for binlogsync and for the native replica to reach a GTID."""

    def __init__(
        self, origin: Server, target: Server, replica: Server, timeout: float = 120
    ) -> None:
        self.origin, self.target, self.replica = origin, target, replica
        self.timeout = timeout
        self.target_conn = target.connect()
        self.replica_conn = replica.connect()

    def close(self) -> None:
        self.target_conn.close()
        self.replica_conn.close()

    def _ours(self, gtid: str, out: dict[str, float]) -> None:
        want = gtid_seq(gtid)
        with self.target_conn.cursor() as cur:
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                position = checkpoints.read(cur, "origin")
                if position and gtid_seq(position.gtid) >= want:
                    out["ours"] = time.perf_counter()
                    return
                time.sleep(0.001)  # 1 ms resolution; faster polling would slow the target

    def _native(self, gtid: str, out: dict[str, float]) -> None:
        with self.replica_conn.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (gtid, self.timeout))
            if cur.fetchone()[0] == 0:
                out["native"] = time.perf_counter()

    def wait(self, gtid: str) -> dict[str, float]:
        out: dict[str, float] = {}
        threads = [threading.Thread(target=f, args=(gtid, out)) for f in (self._ours, self._native)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if set(out) != {"ours", "native"}:
            raise RuntimeError(
                f"replication did not finish within {self.timeout:.0f} s: reached {sorted(out)}"
            )
        return out


def _settle(origin: Server, target: Server, replica: Server) -> None:
    gtid = origin_gtid(origin)
    wait_until(lambda: caught_up(target, "origin", gtid), 60, what="binlogsync catch-up")
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT MASTER_GTID_WAIT(%s, 60)", (gtid,))


def _prepare(origin: Server, rows: int) -> None:
    with origin.connect(SCHEMA) as conn, conn.cursor() as cur:
        cur.execute(f"DELETE FROM `{TABLE}`")
        if rows:
            cur.execute(
                f"INSERT INTO `{TABLE}` (id, NIM, nominal, flag, tgl) VALUES "
                + ",".join(
                    f"({i}, '{1500000 + i}', {i}.50, 0, '2018-01-01 10:00:00')"
                    for i in range(1, rows + 1)
                )
            )


def _statements(dml: str, n: int) -> list[tuple[str, tuple[Any, ...]]]:
    if dml == "insert":
        return [
            (
                f"INSERT INTO `{TABLE}` (NIM, nominal, flag, tgl) VALUES (%s, %s, 0, NOW())",
                (str(1700000 + i), 1000 + i),
            )
            for i in range(n)
        ]
    if dml == "update":
        return [
            (f"UPDATE `{TABLE}` SET nominal = nominal + 1, flag = 1 WHERE id = %s", (i,))
            for i in range(1, n + 1)
        ]
    return [(f"DELETE FROM `{TABLE}` WHERE id = %s", (i,)) for i in range(1, n + 1)]


def measure_cell(
    origin: Server, target: Server, replica: Server, clock: Clock, dml: str, n: int
) -> Cell:
    _prepare(origin, 0 if dml == "insert" else 1000)
    _settle(origin, target, replica)
    statements = _statements(dml, n)
    with origin.connect(SCHEMA) as conn, conn.cursor() as cur:
        start = time.perf_counter()
        for sql, params in statements:
            cur.execute(sql, params)  # autocommit: one transaction per statement, as the paper
        last = time.perf_counter()
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = cur.fetchone()[0]
    done = clock.wait(gtid)
    for server in (target, replica):
        problem = differences(origin, server, SCHEMA, TABLE)
        if problem:
            raise RuntimeError(f"{server.name} is not equal after {dml} {n}: {problem}")
    return Cell(
        dml,
        n,
        round(done["ours"] - start, 4),
        round((done["ours"] - last) * 1000, 2),
        round(done["native"] - start, 4),
        PAPER[dml][n],
    )


def machine() -> str:
    version = "?"
    try:
        version = (
            subprocess.run(["mariadbd", "--version"], capture_output=True, text=True, check=False)
            .stdout.split("Ver ")[-1]
            .split(" for")[0]
        )
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"MariaDB {version}"
    )


def start_servers(
    box: Sandbox, schema: str, ddl: str | None, target_name: str = "target"
) -> tuple[Server, Server, Server]:
    """An origin, a binlogsync target and a native replica of the origin, each with `schema`
    (and the table `ddl` makes: the replica gets it by replication, the target from us, as a
    DBA would create it)."""
    origin = box.start("origin", 1)
    target = box.start(target_name, 2)
    replica = box.start("replica", 100)
    for server in (origin, target, replica):
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{schema}`")
            if ddl and server is not origin:
                cur.execute(ddl)
    box.replicate(origin, replica)
    if ddl:
        with origin.connect() as conn, conn.cursor() as cur:
            cur.execute(ddl)
    return origin, target, replica


def run(root: Path, rows: list[int], runs: int, progress: bool = True) -> list[Cell]:
    box = Sandbox(root / "servers")
    site = None
    try:
        origin, target, replica = start_servers(box, SCHEMA, DDL, "target1")
        site = LocalSite(root / "site", origin, [target], tables=(f"{SCHEMA}.*",))
        site.start()
        _settle(origin, target, replica)
        clock = Clock(origin, target, replica)
        cells: list[Cell] = []
        try:
            for dml in ("insert", "update", "delete"):
                for n in rows:
                    samples = [
                        measure_cell(origin, target, replica, clock, dml, n) for _ in range(runs)
                    ]
                    cell = Cell(
                        dml,
                        n,
                        statistics.median(s.seconds for s in samples),
                        statistics.median(s.lag_ms for s in samples),
                        statistics.median(s.native_seconds for s in samples),
                        PAPER[dml][n],
                    )
                    cells.append(cell)
                    if progress:
                        print(
                            f"  measured {dml} {n}: {cell.seconds:.3f} s "
                            f"(native {cell.native_seconds:.3f} s)",
                            flush=True,
                        )
        finally:
            clock.close()
        return cells
    finally:
        if site is not None:
            site.stop()
        box.stop_all()


def render(cells: list[Cell], runs: int) -> str:
    lines = [
        f"./dev bench paper — {machine()}; median of {runs} run(s) per cell",
        "seconds: first statement until the target is equal; lag: last statement until equal",
        "",
        f"{'DML':7}{'ROWS':>6}{'OURS s':>9}{'LAG ms':>8}{'NATIVE s':>10}{'OURS/NATIVE':>13}"
        f"{'PAPER s':>9}{'PAPER/OURS':>12}",
    ]
    for c in cells:
        lines.append(
            f"{c.dml:7}{c.rows:>6}{c.seconds:>9.3f}{c.lag_ms:>8.1f}{c.native_seconds:>10.3f}"
            f"{c.seconds / c.native_seconds:>12.2f}x{c.paper_seconds:>9.0f}"
            f"{c.paper_seconds / c.seconds:>11.0f}x"
        )
    worst = max(c.seconds / c.native_seconds for c in cells)
    worst_lag = max(c.lag_ms for c in cells)
    lines += [
        "",
        f"goal: OURS/NATIVE <= 1.10 in every cell (worst {worst:.2f}), "
        f"LAG <= 10 ms (worst {worst_lag:.1f} ms)",
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    rows = [int(x) for x in args.rows.split(",")]
    for n in rows:
        if n not in PAPER["insert"]:
            raise SystemExit(f"--rows takes the paper's sizes only: {sorted(PAPER['insert'])}")
    with tempfile.TemporaryDirectory(prefix="binlogsync-bench-", dir=args.dir) as tmp:
        cells = run(Path(tmp), rows, args.runs, progress=not args.json)
    if args.json:
        print(json.dumps([asdict(c) for c in cells], indent=2))
    else:
        print(render(cells, args.runs))
    return 0
