"""`./dev bench binlog-service`: the hub's binlog service, measured with real clients.

One run, on sandbox servers:

1. Lag under load. An origin with two native MariaDB replicas: one replicates from the origin
   directly, the other from the hub's binlog service (the origin's agent captures, the hub
   stores, the service serves). sysbench oltp_write_only runs for `seconds` with `threads`
   clients. A probe row on the origin gets the time (µs) written into it every 20 ms, and
   every 0.25 s each replica's copy of it is read: its lag is now minus the probe time it has
   applied (so both are measured the same way, to within the probe's 20 ms). p50/p99/max of
   both, side by side. At the end every table is compared on the three servers (CHECKSUM
   TABLE).
2. Throughput. The hub is restarted (its cache of rendered transactions is then empty, so
   every transaction is made from the hub's log again); `mariadb-binlog
   --read-from-remote-server --raw --to-last-log` reads every file from the first, once
   alone and then 20 at once (after another restart). Row events/s = the Rows events of all
   subscribers (each sysbench one holds one row) / the wall time; the hub's CPU
   (utime+stime from /proc) over the same time / row events = its cost per row event.

The goals of issue 23 are printed as met or missed: ≥ 50,000 row events/s to one subscriber,
20 subscribers at once, lag p99 through the hub ≤ the direct replica's p99 + 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .localsite import LocalSite, wait_until
from .oltp_bench import _percentile, _run_sysbench, _sysbench, _transactions, cpu_seconds
from .paper_timing import machine
from .sandbox import Sandbox, Server, free_port

SCHEMA = "sbtest"
USER, PASSWORD, SERVICE_ID = "repl", "bench-service-pw", 900
PROBE_WRITE = 0.02
LAG_SAMPLE = 0.25
GOAL_ROWS_PER_S = 50_000
GOAL_SUBSCRIBERS = 20
GOAL_LAG_MARGIN_S = 0.5
ROWS_EVENTS = (23, 24, 25, 30, 31, 32)


@dataclass
class Throughput:
    subscribers: int
    seconds: float
    row_events: int  # over all subscribers
    events: int
    bytes: int
    hub_cpu_s: float
    all_complete: bool  # every subscriber read to the end without an error

    @property
    def row_events_per_s(self) -> float:
        return self.row_events / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_row_event(self) -> float:
        return self.hub_cpu_s * 1e6 / self.row_events if self.row_events else 0.0


@dataclass
class Result:
    tps: float
    transactions: int
    direct_lag: list[float] = field(default_factory=list)
    hub_lag: list[float] = field(default_factory=list)
    equal: bool = False
    hub_cpu_per_tx_us: float = 0.0  # during the load: the whole hub (capture intake + service)
    throughput: list[Throughput] = field(default_factory=list)
    files: int = 0


# -- the site -------------------------------------------------------------------------------


def _service_section(root: Path, port: int) -> str:
    (root / "service.pw").write_text(PASSWORD + "\n")
    return (
        f'\n[binlog_service]\nbind = "127.0.0.1:{port}"\nuser = "{USER}"\n'
        f'password_file = "{root / "service.pw"}"\nserver_id = {SERVICE_ID}\n'
        "file_bytes = 67108864\n"
    )


def _follow(replica: Server, port: int) -> None:
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute("STOP SLAVE")
        cur.execute("RESET SLAVE ALL")
        cur.execute("SET GLOBAL gtid_slave_pos = ''")
        cur.execute(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER=%s, "
            "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
            (port, USER, PASSWORD),
        )
        cur.execute("START SLAVE")


def _scalar(server: Server, sql: str) -> Any:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
        return None if row is None else row[0]


def _checksums(server: Server, tables: int) -> dict[str, Any]:
    names = ", ".join(f"`{SCHEMA}`.`sbtest{i}`" for i in range(1, tables + 1))
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE {names}")
        return dict(cur.fetchall())


def _wait_equal(origin: Server, replicas: list[Server], tables: int, timeout: float) -> bool:
    want = _checksums(origin, tables)

    def equal() -> bool:
        try:
            return all(_checksums(r, tables) == want for r in replicas)
        except Exception:  # noqa: BLE001 - a table not there yet
            return False

    try:
        wait_until(equal, timeout, 0.2, "the replicas equal to the origin")
    except TimeoutError:
        return False
    return True


# -- lag ------------------------------------------------------------------------------------


class Probe:
    """Writes the time into a row of the origin every 20 ms; reads each replica's copy."""

    def __init__(self, origin: Server, replicas: dict[str, Server]) -> None:
        self.origin, self.replicas = origin, replicas
        self.samples: dict[str, list[float]] = {name: [] for name in replicas}
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._write, daemon=True),
            threading.Thread(target=self._read, daemon=True),
        ]
        self.sampling = threading.Event()
        self.since = int(time.time() * 1e6)  # probe times from before are not samples

    def _write(self) -> None:
        with self.origin.connect(SCHEMA) as conn, conn.cursor() as cur:
            while not self.stop.is_set():
                cur.execute("UPDATE probe SET us = %s WHERE id = 1", (int(time.time() * 1e6),))
                self.stop.wait(PROBE_WRITE)

    def _read(self) -> None:
        conns = {name: r.connect(SCHEMA) for name, r in self.replicas.items()}
        try:
            while not self.stop.is_set():
                if self.sampling.is_set():
                    for name, conn in conns.items():
                        with conn.cursor() as cur:
                            cur.execute("SELECT us FROM probe WHERE id = 1")
                            row = cur.fetchone()
                        if row is not None and row[0] >= self.since:
                            self.samples[name].append(max(0.0, time.time() - row[0] / 1e6))
                self.stop.wait(LAG_SAMPLE)
        finally:
            for conn in conns.values():
                conn.close()

    def __enter__(self) -> Probe:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)


# -- throughput -----------------------------------------------------------------------------


def _read_all(port: int, out: Path, first: str) -> subprocess.Popen[bytes]:
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        ["mariadb-binlog", "--read-from-remote-server", "--raw", "--to-last-log",
         f"--result-file={out}/", "--host=127.0.0.1", f"--port={port}", f"--user={USER}",
         f"--password={PASSWORD}", first],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def _count(folder: Path) -> tuple[int, int, int]:
    """(Rows events, events, bytes) of the raw binlog files mariadb-binlog wrote."""
    rows = events = size = 0
    for file in sorted(folder.iterdir()):
        data = file.read_bytes()
        size += len(data)
        p = 4
        while p + 19 <= len(data):
            kind = data[p + 4]
            length = struct.unpack_from("<I", data, p + 9)[0]
            if length < 19:
                break
            events += 1
            rows += kind in ROWS_EVENTS
            p += length
    return rows, events, size


def _throughput(site: LocalSite, port: int, root: Path, subscribers: int) -> Throughput:
    site.stop("hub")
    site.start("hub")  # an empty cache: every transaction is made from the log
    _wait_service(port)
    first = _first_file(port)
    hub = site.agents["hub"].process
    assert hub is not None
    cpu = cpu_seconds(hub.pid)
    started = time.monotonic()
    procs = [_read_all(port, root / f"sub{i}", first) for i in range(subscribers)]
    errors = [p.communicate()[1] for p in procs]
    seconds = time.monotonic() - started
    cpu = cpu_seconds(hub.pid) - cpu
    complete = all(p.returncode == 0 for p in procs)
    rows = events = size = 0
    for i in range(subscribers):
        r, e, b = _count(root / f"sub{i}")
        rows, events, size = rows + r, events + e, size + b
        shutil.rmtree(root / f"sub{i}", ignore_errors=True)
    if not complete:
        print("a subscriber failed:", next(e for e in errors if e)[-500:].decode(errors="replace"))
    return Throughput(subscribers, seconds, rows, events, size, cpu, complete)


def _first_file(port: int) -> str:
    import pymysql

    with pymysql.connect(host="127.0.0.1", port=port, user=USER, password=PASSWORD) as conn:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            return str(cur.fetchall()[0][0])


def _wait_service(port: int) -> None:
    import pymysql

    def up() -> bool:
        try:
            pymysql.connect(host="127.0.0.1", port=port, user=USER, password=PASSWORD).close()
            return True
        except pymysql.err.OperationalError:
            return False

    wait_until(up, 60, 0.05, "the binlog service")


# -- the run ----------------------------------------------------------------------------------


def run(root: Path, args: argparse.Namespace, progress: bool = True) -> Result:
    def say(text: str) -> None:
        if progress:
            print(text, flush=True)

    box = Sandbox(root / "sandbox")
    try:
        origin = box.start("origin", 1)
        direct = box.start("direct", 100)
        via = box.start("via_hub", 101)
        box.replicate(origin, direct)
        port = free_port()
        site = LocalSite(
            root / "site", origin, [], tables=(f"{SCHEMA}.*",),
            agent_extra={"hub": _service_section(root, port)},
        )  # fmt: skip
        with site:
            site.start()
            site.wait_online()
            _wait_service(port)
            _follow(via, port)
            with origin.connect() as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE {SCHEMA}")
                cur.execute(f"CREATE TABLE {SCHEMA}.probe (id INT PRIMARY KEY, us BIGINT)")
                cur.execute(f"INSERT INTO {SCHEMA}.probe VALUES (1, 0)")
            say(f"preparing sysbench ({args.tables} × {args.table_size:,} rows) …")
            _run_sysbench(_sysbench(origin, args, "prepare"))
            if not _wait_equal(origin, [direct, via], args.tables, 300):
                raise RuntimeError(f"the replicas did not get the prepared tables\n{site.logs()}")
            hub = site.agents["hub"].process
            assert hub is not None
            say(f"sysbench oltp_write_only, {args.threads} threads, {args.seconds} s …")
            with Probe(origin, {"direct": direct, "hub": via}) as probe:
                wait_until(  # both replicas apply probe writes before the load starts
                    lambda: all(
                        (_scalar(r, f"SELECT us FROM {SCHEMA}.probe") or 0) >= probe.since
                        for r in (direct, via)
                    ),
                    60, 0.05, "the first probe on both replicas",
                )  # fmt: skip
                probe.sampling.set()
                cpu = cpu_seconds(hub.pid)
                output = _run_sysbench(
                    _sysbench(origin, args, f"--threads={args.threads}",
                              f"--time={args.seconds}", f"--rate={args.rate}",
                              "--report-interval=0", "run")
                )  # fmt: skip
                equal = _wait_equal(origin, [direct, via], args.tables, 300)
                cpu = cpu_seconds(hub.pid) - cpu
                probe.sampling.clear()
            transactions, tps = _transactions(output)
            result = Result(tps, transactions, probe.samples["direct"], probe.samples["hub"],
                            equal, cpu * 1e6 / max(1, transactions))  # fmt: skip
            for subscribers in (1, args.subscribers):
                say(f"throughput: {subscribers} subscriber(s) reading every file …")
                result.throughput.append(_throughput(site, port, root, subscribers))
            result.files = len(_files(port))
        return result
    finally:
        box.stop_all()


def _files(port: int) -> list[str]:
    import pymysql

    with pymysql.connect(host="127.0.0.1", port=port, user=USER, password=PASSWORD) as conn:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            return [str(r[0]) for r in cur.fetchall()]


def _ok(met: bool) -> str:
    return "met" if met else "MISSED"


def summary(result: Result) -> dict[str, Any]:
    lag = {
        name: {q: round(_percentile(samples, v), 3) for q, v in (("p50", 0.5), ("p99", 0.99))}
        | {"max": round(max(samples, default=0.0), 3)}
        for name, samples in (("direct", result.direct_lag), ("hub", result.hub_lag))
    }
    one = result.throughput[0] if result.throughput else None
    many = result.throughput[-1] if len(result.throughput) > 1 else None
    return {
        "tps": result.tps,
        "transactions": result.transactions,
        "equal": result.equal,
        "lag": lag,
        "hub_cpu_us_per_tx_under_load": round(result.hub_cpu_per_tx_us, 1),
        "throughput": [
            {
                **asdict(t),
                "row_events_per_s": round(t.row_events_per_s),
                "cpu_us_per_row_event": round(t.cpu_us_per_row_event, 2),
            }
            for t in result.throughput
        ],  # fmt: skip
        "goals": {
            "rows_per_s_one": bool(one and one.row_events_per_s >= GOAL_ROWS_PER_S),
            "twenty_subscribers": bool(
                many and many.subscribers >= GOAL_SUBSCRIBERS and many.all_complete
            ),
            "lag_p99": lag["hub"]["p99"] <= lag["direct"]["p99"] + GOAL_LAG_MARGIN_S,
        },
        "files": result.files,
    }


def render(result: Result, args: argparse.Namespace) -> str:
    s = summary(result)
    lag, goals = s["lag"], s["goals"]
    lines = [
        f"./dev bench binlog-service — {machine()}",
        f"sysbench oltp_write_only {args.tables}×{args.table_size:,} rows, {args.threads} "
        f"threads, {args.seconds} s, rate {args.rate or 'unlimited'}: {result.tps:.0f} tx/s, "
        f"{result.transactions:,} "
        f"transactions; replicas equal to the origin: {'yes' if result.equal else 'NO'}",
        "",
        f"{'lag of a native replica (s)':<34}{'p50':>8}{'p99':>8}{'max':>8}",
        f"{'  of the origin (direct)':<34}{lag['direct']['p50']:>8.3f}"
        f"{lag['direct']['p99']:>8.3f}{lag['direct']['max']:>8.3f}",
        f"{'  of the hub (binlog service)':<34}{lag['hub']['p50']:>8.3f}"
        f"{lag['hub']['p99']:>8.3f}{lag['hub']['max']:>8.3f}",
        f"goal p99 via the hub ≤ direct p99 + {GOAL_LAG_MARGIN_S} s: {_ok(goals['lag_p99'])}",
        f"hub CPU during the load (capture intake, log, service): "
        f"{s['hub_cpu_us_per_tx_under_load']:.0f} µs per transaction",
        "",
        f"{'throughput (mariadb-binlog --raw)':<36}{'row events/s':>14}{'per sub.':>10}"
        f"{'events/s':>11}{'MB/s':>7}{'hub µs/row ev':>15}",
    ]
    for t in result.throughput:
        per = t.row_events_per_s / t.subscribers
        lines.append(
            f"{f'  {t.subscribers} subscriber(s), {t.seconds:.2f} s':<36}"
            f"{t.row_events_per_s:>14,.0f}{per:>10,.0f}{t.events / t.seconds:>11,.0f}"
            f"{t.bytes / t.seconds / 1e6:>7.1f}{t.cpu_us_per_row_event:>15.2f}"
            + ("" if t.all_complete else "  (a subscriber FAILED)")
        )
    lines += [
        f"goal ≥ {GOAL_ROWS_PER_S:,} row events/s to one subscriber: {_ok(goals['rows_per_s_one'])}"
        f"; {GOAL_SUBSCRIBERS} subscribers at once: {_ok(goals['twenty_subscribers'])}",
        f"({s['files']} virtual files; each throughput run starts after a hub restart, so every "
        "transaction is made from the hub's log)",
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="binlogsync-bench-", dir=args.dir) as tmp:
        result = run(Path(tmp), args, progress=not args.json)
    if args.json:
        print(json.dumps({"machine": machine(), **summary(result)}, indent=2))
    else:
        print(render(result, args))
    return 0 if result.equal and all(t.all_complete for t in result.throughput) else 1
