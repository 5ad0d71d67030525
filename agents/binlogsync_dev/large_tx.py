"""Large transactions, measured here: one INSERT, UPDATE and DELETE of 1M and 5M rows of
~100 bytes each, through binlogsync and, in the same run, through native MariaDB replication.

Each statement is one origin transaction. `seconds` runs from the origin's COMMIT returning
until the target's checkpoint reaches the transaction's GTID (binlogsync) or MASTER_GTID_WAIT
returns (native); the row data are then compared with CHECKSUM TABLE. Beside each cell stands
the peak resident memory of every binlogsync agent while it replicated that one transaction
(Linux VmHWM, reset through /proc/PID/clear_refs before each statement): the issue's bound is
200 MB per agent, where a 1M-row INSERT once took the origin agent to 615 MB and never arrived.
And the CPU seconds each agent, the target's server and the native replica's server used from
the statement's start until both were equal: where the time goes.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .localsite import LocalSite
from .oltp_bench import cpu_seconds
from .paper_timing import Clock, machine, start_servers
from .sandbox import Sandbox, Server

SCHEMA, TABLE = "bench", "big"
DDL = (
    f"CREATE TABLE IF NOT EXISTS `{SCHEMA}`.`{TABLE}` "
    "(id INT PRIMARY KEY, n INT NOT NULL, pad VARCHAR(100)) ENGINE=InnoDB"
)
RSS_BOUND_MB = 200
AGENTS = ("hub", "origin", "target")


@dataclass
class Cell:
    dml: str
    rows: int
    origin_seconds: float  # the statement itself, on the origin
    seconds: float  # COMMIT returned → target equal (binlogsync)
    native_seconds: float  # COMMIT returned → native replica equal
    peak_rss_mb: dict[str, float]
    # statement start → both equal: each agent, "target db" and "replica db" (their mariadbd)
    cpu_seconds: dict[str, float]


def _statement(dml: str, rows: int) -> str:
    if dml == "insert":
        return (
            f"INSERT INTO `{TABLE}` SELECT seq, seq % 1000, REPEAT('x', 88) "
            f"FROM seq.seq_1_to_{rows}"
        )
    if dml == "update":
        return f"UPDATE `{TABLE}` SET n = n + 1"
    return f"DELETE FROM `{TABLE}`"


def _checksum(server: Server) -> int:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{SCHEMA}`.`{TABLE}`")
        return int(cur.fetchone()[1])


def measure(site: LocalSite, clock: Clock, dml: str, rows: int) -> Cell:
    origin, target, replica = clock.origin, clock.target, clock.replica
    for name in AGENTS:
        site.reset_peak_rss(name)
    pids = {name: site.pid(name) for name in AGENTS}
    pids |= {"target db": target.pid, "replica db": replica.pid}
    cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
    with origin.connect(SCHEMA) as conn, conn.cursor() as cur:
        start = time.perf_counter()
        cur.execute(_statement(dml, rows))
        conn.commit()
        committed = time.perf_counter()
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = cur.fetchone()[0]
    done = clock.wait(gtid)
    cpu = {name: round(cpu_seconds(pid) - cpu[name], 1) for name, pid in pids.items()}
    want = _checksum(origin)
    for server in (target, replica):
        if _checksum(server) != want:
            raise RuntimeError(f"{server.name} differs from the origin after {dml} of {rows} rows")
    return Cell(
        dml,
        rows,
        round(committed - start, 2),
        round(done["ours"] - committed, 2),
        round(done["native"] - committed, 2),
        {name: round(site.peak_rss_mb(name), 1) for name in AGENTS},
        cpu,
    )


def run(root: Path, sizes: list[int], progress: bool = True) -> list[Cell]:
    box = Sandbox(root / "servers")
    site = None
    try:
        origin, target, replica = start_servers(box, SCHEMA, DDL)
        site = LocalSite(root / "site", origin, [target], tables=(f"{SCHEMA}.*",))
        site.start()
        site.wait_online()
        clock = Clock(origin, target, replica, timeout=max(600.0, max(sizes) / 5_000))
        cells: list[Cell] = []
        try:
            for rows in sizes:
                for dml in ("insert", "update", "delete"):
                    cell = measure(site, clock, dml, rows)
                    cells.append(cell)
                    if progress:
                        print(
                            f"  measured {dml} of {rows:,} rows: {cell.seconds:.1f} s "
                            f"(native {cell.native_seconds:.1f} s), peak RSS {cell.peak_rss_mb}",
                            flush=True,
                        )
        finally:
            clock.close()
        return cells
    finally:
        if site is not None:
            site.stop()
        box.stop_all()


def render(cells: list[Cell]) -> str:
    lines = [
        f"./dev bench large-tx — {machine()}",
        "one transaction per cell; seconds from the origin's COMMIT until the target is equal;",
        f"peak RSS of each binlogsync agent during that transaction (bound {RSS_BOUND_MB} MB)",
        "",
        f"{'DML':7}{'ROWS':>10}{'ORIGIN s':>10}{'OURS s':>9}{'NATIVE s':>10}{'OURS/NATIVE':>13}"
        f"{'HUB MB':>8}{'ORIGIN MB':>11}{'TARGET MB':>11}",
    ]
    for c in cells:
        rss = c.peak_rss_mb
        lines.append(
            f"{c.dml:7}{c.rows:>10,}{c.origin_seconds:>10.1f}{c.seconds:>9.1f}"
            f"{c.native_seconds:>10.1f}{c.seconds / max(c.native_seconds, 0.01):>12.2f}x"
            f"{rss['hub']:>8.0f}{rss['origin']:>11.0f}{rss['target']:>11.0f}"
        )
    lines += ["", "CPU seconds from the statement's start until both are equal:"]
    lines.append(
        f"{'DML':7}{'ROWS':>10}" + "".join(f"{n.upper():>12}" for n in cells[0].cpu_seconds)
    )
    for c in cells:
        lines.append(
            f"{c.dml:7}{c.rows:>10,}" + "".join(f"{v:>12.1f}" for v in c.cpu_seconds.values())
        )
    worst = max(max(c.peak_rss_mb.values()) for c in cells)
    lines += ["", f"worst peak RSS of any agent: {worst:.0f} MB (bound {RSS_BOUND_MB} MB)"]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="binlogsync-bench-", dir=args.dir) as tmp:
        cells = run(Path(tmp), sizes, progress=not args.json)
    if args.json:
        print(json.dumps([asdict(c) for c in cells], indent=2))
    else:
        print(render(cells))
    return 0 if all(max(c.peak_rss_mb.values()) <= RSS_BOUND_MB for c in cells) else 1
