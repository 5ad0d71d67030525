"""An OLTP load, measured here: `sysbench oltp_write_only` against a sandbox origin with one
binlogsync target and one native MariaDB replica of the same origin, in the same run.

Set-up: sysbench's tables are prepared on the origin while the replica is attached (so it gets
them by replication), copied to the target with mariadb-dump, and compared with CHECKSUM TABLE
on all three; only then do the agents start, at the origin's current position.

1. Live phase: sysbench runs for `seconds` with `threads` clients. Every 0.5 s the lag of both
   is sampled: the age of the oldest origin transaction the target (its checkpoint) or the
   replica (`gtid_slave_pos`) has not applied yet, 0 when it has everything. The origin's
   `gtid_binlog_pos` is polled every 20 ms to know when each GTID appeared, so a lag is at
   most 20 ms short. After the load: the seconds until each is equal (catch-up).
2. Backlog phase: the target agent and the replica's SQL thread are stopped, sysbench runs
   again for `seconds`, then both are started together; the backlog's transactions (origin
   GTIDs) and row changes (4 single-row changes per oltp_write_only transaction) divided by the seconds until each is equal
   give the catch-up rates.
3. Backlog, each draining alone: both stopped again, sysbench runs again for `seconds`; the
   target agent is started (from cold: its start-up counts) and timed until the target is
   equal, then the replica's SQL thread is started and timed until the replica is equal. No
   drain shares the two cores with the other, as an outside test measures them.

CPU per transaction: utime+stime of each agent process (/proc/PID/stat) from the start of the
live load until both are equal again, divided by the transactions sysbench committed. After
each run CHECKSUM TABLE compares every table on the three servers. Exit 0 when the data are
equal (the goals are printed as met or missed), 1 when they differ.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from binlogsync.engines.mariadb import checkpoint as checkpoints

from .localsite import LocalSite, wait_until
from .paper_timing import machine, start_servers
from .sandbox import Sandbox, Server
from .verify import gtid_seq

SCHEMA = "sbtest"
AGENTS = ("origin", "hub", "target")
SAMPLE_INTERVAL = 0.5
ORIGIN_POLL = 0.02
TICKS = os.sysconf("SC_CLK_TCK")
# Issue 7's first measurement of binlogsync (4 tables × 10,000 rows, 4 threads, 60 s), and its
# goals for this machine.
ISSUE7 = {
    "tps": 690.0,
    "ours_lag_p50": 23.7,
    "ours_lag_p99": 46.0,
    "ours_lag_max": 46.6,
    "native_lag_p50": 0.16,
    "native_lag_p99": 0.98,
    "native_lag_max": 1.1,
    "ours_catchup_s": 87.0,
    "native_catchup_s": 0.0,
    "ours_backlog_tps": 547.0,
    "ours_backlog_rows_s": 2189.0,
    "native_backlog_tps": 3064.0,
    "native_backlog_rows_s": 12255.0,
}
# Issue 24's goals (issue 7 asked a catch-up of 2x native; issue 24 raised it to 5x).
GOAL_LAG_MARGIN_S = 0.5
GOAL_CATCHUP_RATIO = 5.0
GOAL_CPU_US = 100.0


@dataclass
class Run:
    tps: float  # sysbench, live phase
    transactions: int  # sysbench, live phase
    row_changes: int  # 4 per committed transaction, live phase
    ours_lag_p50: float
    ours_lag_p99: float
    ours_lag_max: float
    native_lag_p50: float
    native_lag_p99: float
    native_lag_max: float
    ours_catchup_s: float  # load stopped → target equal
    native_catchup_s: float
    backlog_transactions: int
    backlog_rows: int
    ours_backlog_s: float  # both restarted → equal
    native_backlog_s: float
    ours_backlog_tps: float
    native_backlog_tps: float
    ours_backlog_rows_s: float
    native_backlog_rows_s: float
    catchup_ratio: float  # ours_backlog_tps / native_backlog_tps
    alone_backlog_transactions: int  # phase 3: each draining alone, one after the other
    ours_alone_s: float  # target agent started (cold) → target equal
    native_alone_s: float  # SQL thread started → replica equal
    alone_ratio: float  # native_alone_s / ours_alone_s
    cpu_us_per_tx: dict[str, float]
    equal: bool
    load_seconds: float  # the live load's length, as run
    curve: dict[str, list[float]] = field(default_factory=dict)  # t, ours, native (seconds)


# -- sysbench -------------------------------------------------------------------------------


def _sysbench(server: Server, args: argparse.Namespace, *command: str) -> list[str]:
    binary = shutil.which("sysbench")
    if binary is None:
        raise RuntimeError("sysbench is not installed: apt-get install -y sysbench (./dev does)")
    return [
        binary,
        "oltp_write_only",
        "--db-driver=mysql",
        "--mysql-host=127.0.0.1",
        f"--mysql-port={server.port}",
        "--mysql-user=root",
        f"--mysql-db={SCHEMA}",
        f"--tables={args.tables}",
        f"--table-size={args.table_size}",
        *command,
    ]


def _run_sysbench(cmd: list[str]) -> str:
    """Run sysbench to its end; a SIGTERM to the bench (SystemExit) stops it too."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:2])} failed ({proc.returncode}): {out[-2000:]}")
    return out


ROWS_PER_TX = 4  # oltp_write_only: UPDATE k, UPDATE c, DELETE, INSERT; one row by id each


def _transactions(output: str) -> tuple[int, float]:
    """Committed transactions and transactions/s of a sysbench run. (Its count of write
    statements also holds those of transactions rolled back and retried after a deadlock, so
    row changes are taken as 4 per committed transaction.)"""
    found = re.search(r"transactions:\s+(\d+)\s+\(([\d.]+) per sec", output)
    if not found:
        raise RuntimeError(f"no transaction count in sysbench's output: {output[-1000:]}")
    return int(found.group(1)), float(found.group(2))


# -- servers --------------------------------------------------------------------------------


def _query(server: Server, sql: str) -> Any:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def _origin_seq(cur: Any) -> int:
    cur.execute("SELECT @@gtid_binlog_pos")
    return gtid_seq(cur.fetchone()[0])


def _checksums(server: Server, tables: int) -> dict[str, int]:
    names = ", ".join(f"`{SCHEMA}`.`sbtest{i}`" for i in range(1, tables + 1))
    return {str(name): int(value) for name, value in _query(server, f"CHECKSUM TABLE {names}")}


def _copy_schema(origin: Server, target: Server) -> None:
    """The origin's sysbench tables, rows and all, into the target (mariadb-dump | mariadb)."""
    dump = subprocess.Popen(
        [
            shutil.which("mariadb-dump") or "mysqldump",
            "--no-defaults",
            "-h127.0.0.1",
            f"-P{origin.port}",
            "-uroot",
            "--single-transaction",
            SCHEMA,
        ],
        stdout=subprocess.PIPE,
    )
    try:
        subprocess.run(
            [
                shutil.which("mariadb") or "mysql",
                "--no-defaults",
                "-h127.0.0.1",
                f"-P{target.port}",
                "-uroot",
                SCHEMA,
            ],
            stdin=dump.stdout,
            check=True,
        )
    finally:
        if dump.stdout is not None:
            dump.stdout.close()
        if dump.wait() != 0:
            raise RuntimeError("mariadb-dump of the sysbench tables failed")


# -- measuring ------------------------------------------------------------------------------


class Positions:
    """Where the target (checkpoint) and the replica (gtid_slave_pos) are, as GTID seqs."""

    def __init__(self, target: Server, replica: Server) -> None:
        self.target = target.connect()
        self.replica = replica.connect()

    def close(self) -> None:
        self.target.close()
        self.replica.close()

    def ours(self) -> int:
        try:
            with self.target.cursor() as cur:
                position = checkpoints.read(cur, "origin")
        except pymysql.err.ProgrammingError:
            return -1  # no checkpoint table yet
        return gtid_seq(position.gtid) if position else -1

    def native(self) -> int:
        with self.replica.cursor() as cur:
            cur.execute("SELECT @@gtid_slave_pos")
            return gtid_seq(cur.fetchone()[0])


class LagSampler:
    """A thread that polls the origin's GTID every 20 ms and both followers every 0.5 s.

    Lag at a sample = seconds since the first origin transaction the follower lacks appeared
    on the origin (0 when it lacks none)."""

    def __init__(self, origin: Server, target: Server, replica: Server) -> None:
        self.origin_conn = origin.connect()
        self.positions = Positions(target, replica)
        self.appeared_seq: list[int] = []
        self.appeared_at: list[float] = []
        self.samples: list[tuple[float, float, float]] = []  # t, ours, native
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lag-sampler", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self.t0 = time.monotonic()
        self._thread.start()

    def _lag(self, now: float, have: int) -> float:
        i = bisect.bisect_right(self.appeared_seq, have)
        return 0.0 if i == len(self.appeared_seq) else now - self.appeared_at[i]

    def _loop(self) -> None:
        try:
            next_sample = time.monotonic()
            with self.origin_conn.cursor() as cur:
                while not self._stop.is_set():
                    now = time.monotonic()
                    seq = _origin_seq(cur)
                    if not self.appeared_seq or seq > self.appeared_seq[-1]:
                        self.appeared_seq.append(seq)
                        self.appeared_at.append(now)
                    if now >= next_sample:
                        ours, native = self.positions.ours(), self.positions.native()
                        t = time.monotonic()
                        self.samples.append((t - self.t0, self._lag(t, ours), self._lag(t, native)))
                        # no burst of samples after a slow turn
                        next_sample = max(next_sample + SAMPLE_INTERVAL, t)
                    self._stop.wait(ORIGIN_POLL)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.origin_conn.close()
        self.positions.close()
        if self.error is not None:
            raise RuntimeError(f"lag sampling failed: {self.error}") from self.error


def wait_equal(
    origin: Server,
    target: Server,
    replica: Server,
    timeout: float,
    which: tuple[str, ...] = ("ours", "native"),
) -> dict[str, float]:
    """time.monotonic() at which the target ("ours") and the replica ("native"), those named
    in `which`, each reached the origin's GTID now (polled every 10 ms: finer polling would
    slow the target)."""
    with origin.connect() as conn, conn.cursor() as cur:
        want = _origin_seq(cur)
    positions = Positions(target, replica)
    done: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(done) < len(which):
            if "ours" in which and "ours" not in done and positions.ours() >= want:
                done["ours"] = time.monotonic()
            if "native" in which and "native" not in done and positions.native() >= want:
                done["native"] = time.monotonic()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"not equal within {timeout:.0f} s: reached {sorted(done)} of ours, native"
                )
            time.sleep(0.01)
    finally:
        positions.close()
    return done


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def _agent_cpu(site: LocalSite) -> dict[str, float]:
    out = {}
    for name in AGENTS:
        process = site.agents[name].process
        assert process is not None, f"{name} is not running"
        out[name] = cpu_seconds(process.pid)
    return out


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _queue_backlog(site: LocalSite, origin: Server, replica: Server, load: list[str]) -> int:
    """Stop the target agent and the replica's SQL thread, run the load again: the number of
    transactions both now have to apply."""
    site.stop("target")
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute("STOP SLAVE SQL_THREAD")
    with origin.connect() as conn, conn.cursor() as cur:
        seq_before = _origin_seq(cur)
    _run_sysbench(load)
    with origin.connect() as conn, conn.cursor() as cur:
        return _origin_seq(cur) - seq_before


def measure(
    site: LocalSite,
    origin: Server,
    target: Server,
    replica: Server,
    args: argparse.Namespace,
    progress: bool,
) -> Run:
    timeout = max(600.0, args.seconds * 20)
    load = _sysbench(
        origin,
        args,
        f"--threads={args.threads}",
        f"--time={args.seconds}",
        "--report-interval=0",
        "run",
    )
    # 1. live
    sampler = LagSampler(origin, target, replica)
    cpu_before = _agent_cpu(site)
    sampler.start()
    try:
        load_start = time.monotonic() - sampler.t0
        output = _run_sysbench(load)
        load_end = time.monotonic()
        done = wait_equal(origin, target, replica, timeout)
        cpu_after = _agent_cpu(site)
        time.sleep(SAMPLE_INTERVAL)  # one sample of both at 0 after the catch-up
    finally:
        sampler.stop()
    transactions, tps = _transactions(output)
    rows = ROWS_PER_TX * transactions
    end = load_end - sampler.t0
    during = [s for s in sampler.samples if load_start <= s[0] <= end]
    ours_lag = [s[1] for s in during]
    native_lag = [s[2] for s in during]
    cpu = {
        name: round((cpu_after[name] - cpu_before[name]) / max(transactions, 1) * 1e6, 1)
        for name in AGENTS
    }
    if progress:
        print(
            f"  live: {tps:.0f} tx/s; lag p99 ours {_percentile(ours_lag, 0.99):.2f} s, "
            f"native {_percentile(native_lag, 0.99):.2f} s; catch-up ours "
            f"{done['ours'] - load_end:.1f} s, native {done['native'] - load_end:.1f} s",
            flush=True,
        )

    # 2. backlog
    backlog = _queue_backlog(site, origin, replica, load)
    backlog_rows = ROWS_PER_TX * backlog
    with replica.connect() as conn, conn.cursor() as cur:
        started = time.monotonic()
        site.start("target")
        cur.execute("START SLAVE SQL_THREAD")
    caught = wait_equal(origin, target, replica, timeout)
    ours_s = caught["ours"] - started
    native_s = caught["native"] - started
    if progress:
        print(
            f"  backlog of {backlog:,} transactions, {backlog_rows:,} rows: ours {ours_s:.1f} s, "
            f"native {native_s:.1f} s",
            flush=True,
        )

    # 3. backlog, each draining alone
    alone = _queue_backlog(site, origin, replica, load)
    started = time.monotonic()
    site.start("target")
    ours_alone_s = wait_equal(origin, target, replica, timeout, ("ours",))["ours"] - started
    with replica.connect() as conn, conn.cursor() as cur:
        started = time.monotonic()
        cur.execute("START SLAVE SQL_THREAD")
    native_alone_s = wait_equal(origin, target, replica, timeout, ("native",))["native"] - started
    if progress:
        print(
            f"  backlog of {alone:,} transactions, each draining alone: ours {ours_alone_s:.1f} s "
            f"(its start included), native {native_alone_s:.1f} s",
            flush=True,
        )
    sums = [_checksums(s, args.tables) for s in (origin, target, replica)]
    ours_tps = backlog / max(ours_s, 1e-3)
    native_tps = backlog / max(native_s, 1e-3)
    return Run(
        tps=tps,
        transactions=transactions,
        row_changes=rows,
        ours_lag_p50=round(_percentile(ours_lag, 0.5), 3),
        ours_lag_p99=round(_percentile(ours_lag, 0.99), 3),
        ours_lag_max=round(max(ours_lag, default=0.0), 3),
        native_lag_p50=round(_percentile(native_lag, 0.5), 3),
        native_lag_p99=round(_percentile(native_lag, 0.99), 3),
        native_lag_max=round(max(native_lag, default=0.0), 3),
        ours_catchup_s=round(done["ours"] - load_end, 2),
        native_catchup_s=round(done["native"] - load_end, 2),
        backlog_transactions=backlog,
        backlog_rows=backlog_rows,
        ours_backlog_s=round(ours_s, 2),
        native_backlog_s=round(native_s, 2),
        ours_backlog_tps=round(ours_tps, 1),
        native_backlog_tps=round(native_tps, 1),
        ours_backlog_rows_s=round(backlog_rows / max(ours_s, 1e-3), 1),
        native_backlog_rows_s=round(backlog_rows / max(native_s, 1e-3), 1),
        catchup_ratio=round(ours_tps / native_tps, 3),
        alone_backlog_transactions=alone,
        ours_alone_s=round(ours_alone_s, 2),
        native_alone_s=round(native_alone_s, 2),
        alone_ratio=round(native_alone_s / max(ours_alone_s, 1e-3), 3),
        cpu_us_per_tx=cpu,
        equal=sums[0] == sums[1] == sums[2],
        load_seconds=round(end - load_start, 2),
        curve={
            "t": [round(s[0] - load_start, 2) for s in sampler.samples],
            "ours": [round(s[1], 3) for s in sampler.samples],
            "native": [round(s[2], 3) for s in sampler.samples],
        },
    )


def run(root: Path, args: argparse.Namespace, progress: bool = True) -> list[Run]:
    box = Sandbox(root / "servers")
    site = None
    try:
        origin, target, replica = start_servers(box, SCHEMA, None)
        if progress:
            print(
                f"  preparing {args.tables} × {args.table_size:,} rows (sysbench prepare)…",
                flush=True,
            )
        _run_sysbench(_sysbench(origin, args, f"--threads={min(args.tables, 4)}", "prepare"))
        _copy_schema(origin, target)
        gtid = _query(origin, "SELECT @@gtid_binlog_pos")[0][0]
        with replica.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, 300)", (gtid,))
            if cur.fetchone()[0] != 0:
                raise RuntimeError("the replica did not get the prepared tables")
        sums = [_checksums(s, args.tables) for s in (origin, target, replica)]
        if not sums[0] == sums[1] == sums[2]:
            raise RuntimeError(f"the seeded tables differ: {sums}")
        site = LocalSite(root / "site", origin, [target], tables=(f"{SCHEMA}.*",))
        site.start()
        site.wait_online()
        wait_until(lambda: _has_checkpoint_table(target), 30, 0.05, "the target's checkpoint table")
        runs: list[Run] = []
        for number in range(1, args.runs + 1):
            if progress:
                print(f"  run {number} of {args.runs}", flush=True)
            runs.append(measure(site, origin, target, replica, args, progress))
        return runs
    finally:
        if site is not None:
            site.stop()
        box.stop_all()


def _has_checkpoint_table(target: Server) -> bool:
    """The target agent has made its checkpoint table (so its position reads)."""
    rows = _query(
        target,
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'binlogsync' "
        "AND TABLE_NAME = 'checkpoint'",
    )
    return bool(rows[0][0])


# -- output ---------------------------------------------------------------------------------

FIGURES = [
    f.name
    for f in Run.__dataclass_fields__.values()
    if f.name not in ("cpu_us_per_tx", "curve", "equal", "load_seconds")
]


def summary(runs: list[Run]) -> dict[str, Any]:
    """Medians over the runs, and the goals checked against them."""
    median: dict[str, Any] = {
        name: round(statistics.median(getattr(r, name) for r in runs), 3) for name in FIGURES
    }
    median["cpu_us_per_tx"] = {
        name: round(statistics.median(r.cpu_us_per_tx[name] for r in runs), 1) for name in AGENTS
    }
    goals = {
        "lag_p99": median["ours_lag_p99"] <= median["native_lag_p99"] + GOAL_LAG_MARGIN_S,
        "catchup_ratio": median["catchup_ratio"] >= GOAL_CATCHUP_RATIO,
        "alone_ratio": median["alone_ratio"] >= GOAL_CATCHUP_RATIO,
        **{f"cpu_{name}": median["cpu_us_per_tx"][name] <= GOAL_CPU_US for name in AGENTS},
    }
    return {"median": median, "goals": goals, "equal": all(r.equal for r in runs)}


def plot(runs: list[Run], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    for number, r in enumerate(runs, 1):
        suffix = f" (run {number})" if len(runs) > 1 else ""
        ax.plot(r.curve["t"], r.curve["ours"], color="tab:blue", label="binlogsync" + suffix)
        ax.plot(
            r.curve["t"],
            r.curve["native"],
            color="tab:orange",
            linestyle="--",
            label="native replica" + suffix,
        )
    ax.axvspan(0, runs[0].load_seconds, color="0.9", label="sysbench load")
    ax.set_xlabel("seconds since the load started")
    ax.set_ylabel("lag, s (age of the oldest unapplied transaction)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _label(agent: str) -> str:
    return "hub" if agent == "hub" else f"{agent} agent"


def _ok(met: bool) -> str:
    return "met" if met else "MISSED"


def render(runs: list[Run], args: argparse.Namespace, png: Path) -> str:
    s = summary(runs)
    m, g, cpu = s["median"], s["goals"], s["median"]["cpu_us_per_tx"]
    i7 = ISSUE7

    def row(label: str, ours: float, native: float, fmt: str, ratio: bool, issue: str) -> str:
        r = f"{ours / native:>10.2f}x" if ratio and native else f"{'':>11}"
        return f"{label:34}{ours:>12{fmt}}{native:>12{fmt}}{r}   {issue}".rstrip()

    lines = [
        f"./dev bench oltp — {machine()}; sysbench oltp_write_only, {args.tables} tables × "
        f"{args.table_size:,} rows, {args.threads} threads, {args.seconds} s; "
        f"median of {len(runs)} run(s)",
        f"sysbench during the live phase: {m['tps']:.0f} tx/s ({m['transactions']:,.0f} "
        f"transactions, {m['row_changes']:,.0f} row changes)   [issue 7: ~{i7['tps']:.0f} tx/s]",
        "lag: age of the oldest origin transaction not applied yet, sampled every 0.5 s",
        "",
        f"{'':34}{'OURS':>12}{'NATIVE':>12}{'OURS/NAT':>11}   ISSUE 7 (ours / native, before)",
        row(
            "lag during the load p50, s",
            m["ours_lag_p50"],
            m["native_lag_p50"],
            ".2f",
            False,
            f"{i7['ours_lag_p50']} / {i7['native_lag_p50']}",
        ),
        row(
            "lag during the load p99, s",
            m["ours_lag_p99"],
            m["native_lag_p99"],
            ".2f",
            False,
            f"{i7['ours_lag_p99']} / {i7['native_lag_p99']}",
        ),
        row(
            "lag during the load max, s",
            m["ours_lag_max"],
            m["native_lag_max"],
            ".2f",
            False,
            f"{i7['ours_lag_max']} / {i7['native_lag_max']}",
        ),
        row(
            "catch-up after the load, s",
            m["ours_catchup_s"],
            m["native_catchup_s"],
            ".1f",
            False,
            f"{i7['ours_catchup_s']:.0f} / {i7['native_catchup_s']:.0f}",
        ),
        f"backlog: {m['backlog_transactions']:,.0f} transactions, {m['backlog_rows']:,.0f} "
        "row changes; both restarted together",
        row(
            "backlog catch-up, s",
            m["ours_backlog_s"],
            m["native_backlog_s"],
            ".1f",
            False,
            "",
        ),
        row(
            "backlog catch-up, tx/s",
            m["ours_backlog_tps"],
            m["native_backlog_tps"],
            ",.0f",
            True,
            f"{i7['ours_backlog_tps']:,.0f} / {i7['native_backlog_tps']:,.0f}",
        ),
        row(
            "backlog catch-up, rows/s",
            m["ours_backlog_rows_s"],
            m["native_backlog_rows_s"],
            ",.0f",
            True,
            f"{i7['ours_backlog_rows_s']:,.0f} / {i7['native_backlog_rows_s']:,.0f}",
        ),
        f"backlog: {m['alone_backlog_transactions']:,.0f} transactions; each draining alone, "
        "ours first (the target agent's start included), then native",
        row("backlog catch-up alone, s", m["ours_alone_s"], m["native_alone_s"], ".1f", False, ""),
        "CPU per sysbench transaction (live load until equal), µs: "
        + ", ".join(f"{_label(name)} {cpu[name]:.0f}" for name in AGENTS),
        "",
        "goals (issue 24, same run):",
        f"  lag p99 <= native p99 + {GOAL_LAG_MARGIN_S} s: {m['ours_lag_p99']:.2f} <= "
        f"{m['native_lag_p99'] + GOAL_LAG_MARGIN_S:.2f}  {_ok(g['lag_p99'])}",
        f"  catch-up >= {GOAL_CATCHUP_RATIO:.0f}x native: {m['catchup_ratio']:.2f}x  "
        f"{_ok(g['catchup_ratio'])}",
        f"  catch-up >= {GOAL_CATCHUP_RATIO:.0f}x native, each draining alone: "
        f"{m['alone_ratio']:.2f}x  {_ok(g['alone_ratio'])}",
        *(
            f"  {_label(name)} <= {GOAL_CPU_US:.0f} µs CPU per transaction: {cpu[name]:.0f} µs  "
            f"{_ok(g['cpu_' + name])}"
            for name in AGENTS
        ),
        "",
        f"data equal on origin, target and replica (CHECKSUM TABLE): "
        f"{'yes' if s['equal'] else 'NO'}",
        f"lag curves: {png}",
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    png = Path(args.out or "oltp-lag.png").resolve()
    with tempfile.TemporaryDirectory(prefix="binlogsync-bench-", dir=args.dir) as tmp:
        runs = run(Path(tmp), args, progress=not args.json)
    title = (
        f"sysbench oltp_write_only, {args.tables}×{args.table_size:,} rows, {args.threads} "
        f"threads, {args.seconds} s — {machine()}"
    )
    plot(runs, png, title)
    if args.json:
        print(
            json.dumps(
                {
                    "machine": machine(),
                    "settings": {
                        k: getattr(args, k)
                        for k in ("tables", "table_size", "threads", "seconds", "runs")
                    },
                    **summary(runs),
                    "png": str(png),
                    "runs": [asdict(r) for r in runs],
                },
                indent=2,
            )
        )
    else:
        print(render(runs, args, png))
    return 0 if all(r.equal for r in runs) else 1
