"""`./dev bench seed`: seeding a target through the hub beside dump and restore.

A realistic orders table (BIGINT key, a secondary index, ENUM, DECIMAL, DATETIME(6), TIMESTAMP,
VARCHAR of varying length; ~120 bytes a row) is filled on the origin without binlogging it
(the pipeline starts after it). Then, on the same machine and in the same run, for each size
and each of `--runs` runs:

    mariadb-dump   `mariadb-dump --single-transaction bench orders | mariadb` into another
                   database of the target server: the way a DBA seeds a replica by hand
    mydumper       `mydumper --trx-consistency-only -t 2 --rows R` into a folder, then
                   `myloader -t 2` of it into another database of the target server (0.10
                   has no pipe between them: the two times add up); the fast logical copy
    seed           `binlogsync seed --parallel N` of the same table through the hub

All three run while a writer keeps updating, inserting and deleting rows of the table on the
origin (the stream runs), and all three start from an empty table on the target (the anchors
restore into a new database; the target's table is emptied before each seed). `seed s` is until the target confirmed the last chunk; `in sync s`
until it has also replayed every change made meanwhile (the hand-over to the stream), when
CHECKSUM TABLE of origin and target are compared (the writer stops first). The table shows
the median of the runs of each size.

CPU s beside each time: the CPU seconds (user + system) that everything involved spent while it
ran: both MariaDB servers, the hub and both agents (/proc/PID/stat), this process (the seed's
driver and the writer) and its child processes (the tools, the seed's readers; getrusage). On
a machine shared with other work a time grows with the neighbours' load, CPU seconds much less:
they are the fairer comparison there. The writer and the stream it feeds run in every phase.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from binlogsync.config import DatabaseSettings
from binlogsync.seed.limits import DEFAULT_PARALLEL
from binlogsync.seed.progress import Progress
from binlogsync.seed.run import SeedOptions, seed

from .localsite import LocalSite, wait_until
from .oltp_bench import cpu_seconds
from .paper_timing import machine
from .sandbox import Sandbox, Server
from .verify import caught_up, origin_gtid

SCHEMA, TABLE, DUMPED = "bench", "orders", "bench_dump"
MYDUMPER_ROWS = 100_000  # mydumper --rows: chunks of a table, so that -t 2 dumps it in two
# How long mydumper may take before it counts as hung (plus a second per 20,000 rows), how long
# it may spend no CPU at all before it does, and how often it is started
MYDUMPER_SECONDS, MYDUMPER_IDLE_SECONDS, MYDUMPER_ATTEMPTS = 60.0, 10.0, 3
DDL = (
    f"CREATE TABLE `{TABLE}` (id BIGINT NOT NULL PRIMARY KEY, customer_id INT NOT NULL, "
    "status ENUM('new','paid','shipped','cancelled') NOT NULL, amount DECIMAL(12,2) NOT NULL, "
    "created_at DATETIME(6) NOT NULL, updated_at TIMESTAMP(6) NULL, note VARCHAR(200), "
    "KEY customer (customer_id)) ENGINE=InnoDB"
)
FILL = (
    f"INSERT INTO `{TABLE}` SELECT seq, seq % 100003, ELT(1 + seq % 4, 'new', 'paid', "
    "'shipped', 'cancelled'), (seq % 1000003) / 100, TIMESTAMP'2024-01-01 00:00:00' + "
    "INTERVAL seq * 7 SECOND + INTERVAL seq % 1000000 MICROSECOND, NULL, "
    "CONCAT('order ', seq, ' ', REPEAT('x', seq % 80)) FROM seq.seq_{lo}_to_{hi}"
)


# The seed runs in this process, beside the bench's writer (a thread) and the tools' children.
THIS_PROCESS = "this process (the seed, the writer)"


class CpuMeter:
    """CPU seconds spent by the servers, the agents, this process and its children; in all,
    or by process (`names` labels `pids`; THIS_PROCESS is this process and its children)."""

    def __init__(self, pids: list[int], names: list[str] | None = None) -> None:
        self.pids = pids
        self.names = names or [str(pid) for pid in pids]
        self.began: dict[str, float] = {}

    def _parts(self) -> dict[str, float]:
        parts = {}
        for name, pid in zip(self.names, self.pids, strict=True):
            parts[name] = cpu_seconds(pid)
        own = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            usage = resource.getrusage(who)
            own += usage.ru_utime + usage.ru_stime
        parts[THIS_PROCESS] = own
        return parts

    def start(self) -> None:
        self.began = self._parts()

    def by_process(self) -> dict[str, float]:
        return {name: round(now - self.began[name], 1) for name, now in self._parts().items()}

    def seconds(self) -> float:
        return round(sum(self._parts().values()) - sum(self.began.values()), 1)


@dataclass
class Cell:
    rows: int
    dump_seconds: float  # mariadb-dump | mariadb
    mydumper_seconds: float  # mydumper, then myloader
    seed_seconds: float
    in_sync_seconds: float
    writes_during_seed: int
    equal: bool
    parallel: int = 1
    runs: int = 1
    dump_cpu: float = 0.0  # CPU seconds of everything involved (CpuMeter)
    mydumper_cpu: float = 0.0
    seed_cpu: float = 0.0  # until in sync
    # The seed's CPU seconds by process (CpuMeter names): where its time goes.
    seed_cpu_by: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """In sync (the seed and its hand-over to the stream) against mariadb-dump."""
        return self.in_sync_seconds / max(self.dump_seconds, 1e-3)

    @property
    def ratio_mydumper(self) -> float:
        return self.in_sync_seconds / max(self.mydumper_seconds, 1e-3)


class Writer:
    """A steady trickle of changes to the table on the origin (~200 transactions/s)."""

    def __init__(self, server: Server, rows: int) -> None:
        self.server, self.rows = server, rows
        self.stop = threading.Event()
        self.count = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rnd = random.Random(1)
        with self.server.connect(SCHEMA) as conn, conn.cursor() as cur:
            while not self.stop.wait(0.005):
                i = rnd.randrange(1, self.rows + 1000)
                kind = rnd.random()
                if kind < 0.6:
                    cur.execute(
                        f"UPDATE `{TABLE}` SET status = 'paid', amount = amount + 1, "
                        "updated_at = NOW(6) WHERE id = %s",
                        (i,),
                    )
                elif kind < 0.9:
                    cur.execute(
                        f"INSERT INTO `{TABLE}` VALUES (%s, 1, 'new', 9.99, NOW(6), NULL, 'w') "
                        "ON DUPLICATE KEY UPDATE note = 'again'",
                        (self.rows + 1000 + i,),
                    )
                else:
                    cur.execute(f"DELETE FROM `{TABLE}` WHERE id = %s", (i,))
                self.count += 1

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _fill(origin: Server, rows: int) -> None:
    with origin.connect(SCHEMA) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")  # the pipeline starts after the fill
        cur.execute(f"DROP TABLE IF EXISTS `{TABLE}`")
        cur.execute(DDL)
        for lo in range(1, rows + 1, 1_000_000):
            cur.execute(FILL.format(lo=lo, hi=min(rows, lo + 999_999)))
            conn.commit()
        cur.execute(f"ANALYZE TABLE `{TABLE}`")
        cur.fetchall()


def _dump_restore(origin: Server, target: Server, meter: CpuMeter) -> tuple[float, float]:
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DUMPED}`")
        cur.execute(f"CREATE DATABASE `{DUMPED}`")
    meter.start()
    start = time.perf_counter()
    dump = subprocess.Popen(
        ["mariadb-dump", "--single-transaction", "-h127.0.0.1", f"-P{origin.port}", "-uroot",
         SCHEMA, TABLE],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    restore = subprocess.run(
        ["mariadb", "-h127.0.0.1", f"-P{target.port}", "-uroot", DUMPED],
        stdin=dump.stdout,
        capture_output=True,
    )
    assert dump.stdout is not None
    dump.stdout.close()
    if dump.wait() != 0 or restore.returncode != 0:
        raise RuntimeError(f"dump and restore failed: {restore.stderr.decode()[-500:]}")
    seconds, cpu = time.perf_counter() - start, meter.seconds()
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{DUMPED}`")
    return seconds, cpu


def _mydumper(
    origin: Server, target: Server, folder: Path, meter: CpuMeter, rows: int
) -> tuple[float, float]:
    """mydumper of the table (about `rows` rows) into `folder`, then myloader of it into
    DUMPED; both timed."""
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DUMPED}`")
        cur.execute(f"CREATE DATABASE `{DUMPED}`")
    # 0.10: `--tables-list` silently dumps nothing; `--regex` selects the table.
    command = [
        "mydumper", "-h", "127.0.0.1", "-P", str(origin.port), "-u", "root",
        "--trx-consistency-only", "-t", "2", "--rows", str(MYDUMPER_ROWS),
        "--regex", rf"^{SCHEMA}\.{TABLE}$", "-o", str(folder), "-v", "1",
    ]  # fmt: skip
    limit = MYDUMPER_SECONDS + rows / 20_000
    for attempt in range(1, MYDUMPER_ATTEMPTS + 1):
        shutil.rmtree(folder, ignore_errors=True)
        meter.start()
        start = time.perf_counter()
        dumped, why = _run_unless_hung(command, limit, MYDUMPER_IDLE_SECONDS)
        if dumped is not None:
            break
        # mydumper 0.10 deadlocks in about 1 run of 100 on a loaded machine (two threads left,
        # both in a futex wait, no query running, no CPU spent): it is timed again from the start
        print(
            f"mydumper hung ({why}; attempt {attempt} of {MYDUMPER_ATTEMPTS}): "
            "killed" + (", running it again" if attempt < MYDUMPER_ATTEMPTS else ""),
            file=sys.stderr,
        )
    else:
        raise RuntimeError(f"mydumper hung {MYDUMPER_ATTEMPTS} times: no anchor")
    loaded = subprocess.run(
        ["myloader", "-h", "127.0.0.1", "-P", str(target.port), "-u", "root", "-t", "2",
         "-s", SCHEMA, "-B", DUMPED, "-d", str(folder), "-o", "-v", "1"],
        capture_output=True,
    )  # fmt: skip
    seconds, cpu = time.perf_counter() - start, meter.seconds()
    if dumped.returncode != 0 or loaded.returncode != 0:
        raise RuntimeError(
            f"mydumper/myloader failed: {(dumped.stderr + loaded.stderr).decode()[-500:]}"
        )
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{DUMPED}`.`{TABLE}`")
        copied = int(cur.fetchone()[0])
        cur.execute(f"DROP DATABASE `{DUMPED}`")
    if copied == 0:
        raise RuntimeError("mydumper/myloader copied no rows (is the --regex right?)")
    shutil.rmtree(folder, ignore_errors=True)
    return seconds, cpu


def _run_unless_hung(
    command: list[str], limit: float, idle: float
) -> tuple[subprocess.CompletedProcess[bytes] | None, str]:
    """Runs `command` to its end, or kills it once it has run `limit` seconds or spent no CPU
    for `idle` seconds (a deadlock waits without working; a dump in progress never does):
    (the finished process, "") or (None, why it was killed)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err)
        began = time.monotonic()
        cpu, cpu_moved = -1.0, began
        why = ""
        while proc.poll() is None:
            now = time.monotonic()
            spent = cpu_seconds(proc.pid)
            if spent != cpu:
                cpu, cpu_moved = spent, now
            if now - began > limit:
                why = f"running over {limit:.0f} s"
            elif now - cpu_moved > idle:
                why = f"no CPU spent for {idle:.0f} s"
            if why:
                proc.kill()
                proc.wait()
                return None, why
            try:
                proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(command, proc.returncode, out.read(), err.read()), ""


def _checksum(server: Server) -> int:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{SCHEMA}`.`{TABLE}`")
        return int(cur.fetchone()[1])


def measure(site: LocalSite, rows: int, progress: bool, parallel: int, scratch: Path) -> Cell:
    """One run at `rows` rows (the table filled before): the three copies, the seed last."""
    origin, target = site.origin, site.targets[0]
    options = SeedOptions(
        config=str(site.agents["hub"].config),
        origin="origin",
        target=target.name,
        source=DatabaseSettings(origin.host, origin.port, origin.user, origin.password),
        tables=(f"{SCHEMA}.{TABLE}",),
        parallel=parallel,
        restart=True,
    )
    labels = {"hub": "hub", "origin": "origin agent", target.name: "target agent"}
    running = [(label, site.agents[name].process) for name, label in labels.items()]
    agents = [(label, process.pid) for label, process in running if process is not None]
    meter = CpuMeter(
        [origin.pid, target.pid, *(pid for _, pid in agents)],
        ["origin server", "target server", *(label for label, _ in agents)],
    )
    with Writer(origin, rows) as writer:
        dump_seconds, dump_cpu = _dump_restore(origin, target, meter)
        mydumper_seconds, mydumper_cpu = _mydumper(
            origin, target, scratch / "mydumper", meter, rows
        )
        # A new target, as the anchors restore into a new database: the table empty (the
        # previous run's seed filled it; the seed's first chunk would delete those rows in one
        # transaction, work the anchors do not do).
        with target.connect(SCHEMA) as conn, conn.cursor() as cur:
            cur.execute(f"TRUNCATE TABLE `{TABLE}`")
        before = writer.count
        meter.start()
        start = time.perf_counter()
        seed(options, Progress(quiet=not progress))
        seed_seconds = time.perf_counter() - start
        writes = writer.count - before
    gtid = origin_gtid(origin)
    wait_until(lambda: caught_up(target, "origin", gtid), 600, 0.05, "the target in sync")
    in_sync, seed_cpu, seed_cpu_by = (
        time.perf_counter() - start,
        meter.seconds(),
        meter.by_process(),
    )
    return Cell(
        rows,
        round(dump_seconds, 2),
        round(mydumper_seconds, 2),
        round(seed_seconds, 2),
        round(in_sync, 2),
        writes,
        _checksum(origin) == _checksum(target),
        parallel,
        dump_cpu=dump_cpu,
        mydumper_cpu=mydumper_cpu,
        seed_cpu=seed_cpu,
        seed_cpu_by=seed_cpu_by,
    )


def median(cells: list[Cell]) -> Cell:
    """The median of each figure over the runs of one size (equal only if every run was)."""

    def mid(name: str) -> float:
        return round(float(statistics.median(getattr(c, name) for c in cells)), 2)

    return Cell(
        cells[0].rows,
        mid("dump_seconds"),
        mid("mydumper_seconds"),
        mid("seed_seconds"),
        mid("in_sync_seconds"),
        int(mid("writes_during_seed")),
        all(c.equal for c in cells),
        cells[0].parallel,
        len(cells),
        mid("dump_cpu"),
        mid("mydumper_cpu"),
        mid("seed_cpu"),
        {
            name: round(float(statistics.median(c.seed_cpu_by[name] for c in cells)), 1)
            for name in cells[0].seed_cpu_by
        },
    )


def run(
    root: Path,
    sizes: list[int],
    progress: bool = True,
    runs: int = 1,
    parallel: int = DEFAULT_PARALLEL,
) -> list[Cell]:
    box = Sandbox(root / "servers")
    site = None
    try:
        origin, target = box.start("origin", 1), box.start("target", 2)
        for server in (origin, target):
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{SCHEMA}`")
        site = LocalSite(root / "site", origin, [target], tables=(f"{SCHEMA}.*",))
        site.start()
        site.wait_online()
        cells = []
        for rows in sizes:
            _fill(origin, rows)
            with target.connect(SCHEMA) as conn, conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS `{TABLE}`")
                cur.execute(DDL)
            done = []
            for number in range(1, runs + 1):
                cell = measure(site, rows, progress, parallel, root)
                done.append(cell)
                if progress:
                    print(
                        f"  {rows:,} rows, run {number}: mariadb-dump {cell.dump_seconds:.1f} s, "
                        f"mydumper {cell.mydumper_seconds:.1f} s, seed {cell.seed_seconds:.1f} "
                        f"s, in sync {cell.in_sync_seconds:.1f} s, equal: {cell.equal}; CPU s: "
                        f"{cell.dump_cpu:.0f} / {cell.mydumper_cpu:.0f} / {cell.seed_cpu:.0f}",
                        flush=True,
                    )
            cells.append(median(done))
        return cells
    finally:
        if site is not None:
            site.stop()
        box.stop_all()


def render(cells: list[Cell]) -> str:
    runs = cells[0].runs if cells else 0
    parallel = cells[0].parallel if cells else 0
    lines = [
        f"./dev bench seed — {machine()}; median of {runs} run(s) per size",
        "one orders table (~120 B a row, a secondary index); a writer changes it all along;",
        "DUMP: mariadb-dump --single-transaction | mariadb; MYDUMPER: mydumper -t 2 then",
        f"myloader -t 2; SEED: binlogsync seed --parallel {parallel} until the last chunk is applied;",
        "IN SYNC: until the changes made meanwhile are applied too (the hand-over to the stream)",
        "CPU s: CPU seconds of both servers, the hub, both agents and the tools while each ran",
        "",
        f"{'ROWS':>11}{'DUMP s':>8}{'MYDUMPER s':>12}{'SEED s':>8}{'IN SYNC s':>11}{'rows/s':>9}"
        f"{'SYNC/DUMP':>11}{'SYNC/MYDUMPER':>15}{'WRITES':>8}  EQUAL",
    ]
    for c in cells:
        lines.append(
            f"{c.rows:>11,}{c.dump_seconds:>8.1f}{c.mydumper_seconds:>12.1f}"
            f"{c.seed_seconds:>8.1f}{c.in_sync_seconds:>11.1f}"
            f"{c.rows / max(c.in_sync_seconds, 1e-3):>9,.0f}{c.ratio:>10.2f}x"
            f"{c.ratio_mydumper:>14.2f}x{c.writes_during_seed:>8,}  {'yes' if c.equal else 'NO'}"
        )
        lines.append(
            f"{'CPU s':>11}{c.dump_cpu:>8.0f}{c.mydumper_cpu:>12.0f}{'':>8}{c.seed_cpu:>11.0f}"
            f"{'':>9}{c.seed_cpu / max(c.dump_cpu, 1e-3):>10.2f}x"
            f"{c.seed_cpu / max(c.mydumper_cpu, 1e-3):>14.2f}x"
        )
        if c.seed_cpu_by:
            lines.append(
                f"{'':>11}the seed's CPU s by process: "
                + ", ".join(f"{name} {seconds:.1f}" for name, seconds in c.seed_cpu_by.items())
            )
    lines.append(
        "goal: IN SYNC <= MYDUMPER and <= 0.7x DUMP; the machine is shared: other work may run"
    )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="binlogsync-bench-", dir=args.dir) as tmp:
        cells = run(
            Path(tmp), sizes, progress=not args.json, runs=args.runs, parallel=args.parallel
        )
    if args.json:
        print(
            json.dumps(
                [
                    {
                        **asdict(c),
                        "ratio": round(c.ratio, 3),
                        "ratio_mydumper": round(c.ratio_mydumper, 3),
                    }
                    for c in cells
                ],
                indent=2,
            )
        )
    else:
        print(render(cells))
    return 0 if all(c.equal for c in cells) else 1
