"""`./dev bench fleet`: how far one hub goes with many origins and targets.

The real hub (`binlogsync server`, its own process) and real ZeroMQ; the origin and target
agents are synthetic (fleet_peers.py: no databases), packed into a few processes. Routes: each
origin goes to `--fanout` targets, spread round-robin, so every target hears from
origins × fanout / targets origins and the deliveries out are fanout × the transactions in,
whatever the number of targets. For each number of targets (`--targets`, default 10,50,200):

    paced      every origin writes `--rate` sysbench-shaped transactions/s (the offered load)
               for `--seconds`; after a warm-up the bench measures transactions/s in (stored
               and acknowledged), deliveries/s out (transactions received by targets), the
               delivery latency (commit on the origin to arrival on a target; p50/p99), and
               the hub's CPU, RSS, open files and disk
    ramp       offered loads (`--ramp`, transactions/s in all) one after another, until one is
               not carried (every transaction delivered to its targets within 30 s of the end,
               p99 under 1 s): where one hub stops on this machine (the peers share it)

Then `detach` (unless --no-detach): one more target, subscribed to every origin, never
connects; its backlog holds the whole log, so the hub's disk grows with the load, until the
outbox job's detach limit (`ops.outbox.run`, as the outbox_retries DAG runs it) detaches it;
compaction then drops what it held, and the disk stops growing.

`--hubs 2` splits the origins between two hubs (by origin, docs/benchmarks.md: "a site across
hubs"): each hub gets half the origins and their routes; a target that hears from origins of
both hubs runs one agent per hub (here: one peer per hub).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any


def machine() -> str:
    import platform
    import sqlite3

    import zmq

    return (
        f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"libzmq {zmq.zmq_version()}, SQLite {sqlite3.sqlite_version}"
    )


TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
WARM_UP = 4.0  # seconds of each phase before the measured window


@dataclass
class HubSample:
    at: float
    cpu: float  # seconds, user + system, since the hub started
    rss_mb: float
    files: int
    disk_mb: float


@dataclass
class Phase:
    targets: int
    mode: str  # "paced" (--origin-rate) or "ramp" (a step of --ramp)
    hubs: int
    offered: float | None  # transactions/s offered in all
    tx_in: float  # transactions/s stored and acknowledged
    deliveries_out: float  # transactions/s received by targets
    p50_ms: float | None
    p99_ms: float | None
    delivered_share: float  # of the transactions committed in the window, x fanout
    hub_cpu: float  # cores (1.0 = one core busy) over the window, all hubs together
    hub_us_per_tx: float  # hub CPU per transaction in (with its deliveries)
    peers_cpu: float  # cores used by the synthetic peers' processes
    rss_mb: float  # the largest hub's peak RSS in the window
    files: int  # the largest hub's open files at the end of the window
    disk_mb: float  # all hubs' data directories at the end of the window


@dataclass
class DetachRun:
    origins: int
    targets: int
    rate: float
    detach_bytes: int
    detached_at: float  # seconds into the run
    series: list[dict[str, float]] = field(default_factory=list)  # at, disk_mb, stored rows


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def sample(pid: int, data_dir: Path) -> HubSample:
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    files = len(os.listdir(f"/proc/{pid}/fd"))
    disk = sum(f.stat().st_size for f in data_dir.iterdir() if f.is_file())
    return HubSample(time.time(), cpu_seconds(pid), rss / 1024, files, disk / 1e6)


# -- the site ---------------------------------------------------------------------------------
def routes(origins: int, targets: int, fanout: int) -> dict[str, list[str]]:
    """origin name → its targets: `fanout` each, round-robin over the targets."""
    out = {}
    for i in range(origins):
        picked = {f"t{(i * fanout + k) % targets + 1}" for k in range(min(fanout, targets))}
        out[f"o{i + 1}"] = sorted(picked)
    return out


class Hub:
    """One `binlogsync server` for a share of the routes."""

    def __init__(self, root: Path, name: str, routes: dict[str, list[str]]) -> None:
        self.data = root / f"{name}-data"
        self.config = root / f"{name}.toml"
        lines = [f'[hub]\nname = "{name}"\nbind = "tcp://127.0.0.1:*"\ndata_dir = "{self.data}"\n']
        for origin, targets in routes.items():
            names = ", ".join(f'"{t}"' for t in targets)
            lines.append(f'[[route]]\norigin = "{origin}"\ntables = ["*.*"]\ntargets = [{names}]\n')
        self.config.write_text("".join(lines))
        self.log = (root / f"{name}.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "binlogsync.cli", "--log-level", "warning", "server",
             "--config", str(self.config)],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not (self.data / "endpoint").exists():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"hub {name} did not start: see {root / f'{name}.log'}")
            time.sleep(0.02)  # polling a file another process writes: nothing to wait on
        self.endpoint = (self.data / "endpoint").read_text().strip()

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


class Peers:
    """The synthetic peers' processes (fleet_peers.serve), `per_process` peers each at most."""

    def __init__(
        self,
        hubs: list[tuple[Hub, dict[str, list[str]]]],
        processes: int,
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.procs: list[Any] = []
        jobs: list[tuple[str, list[tuple[str, int]], list[str]]] = []
        for hub, share in hubs:
            origins = [(o, int(o[1:])) for o in share]
            targets = sorted({t for ts in share.values() for t in ts if t != "dead"})
            per = max(1, processes // 2)
            for k in range(per):
                jobs.append((hub.endpoint, origins[k::per], []))
                jobs.append((hub.endpoint, [], targets[k::per]))
        for endpoint, origins, targets in jobs:
            if not origins and not targets:
                continue
            mine, theirs = ctx.Pipe()
            from .fleet_peers import serve

            proc = ctx.Process(target=serve, args=(theirs, endpoint, origins, targets))
            proc.start()
            self.pipes.append(mine)
            self.procs.append(proc)
        for pipe in self.pipes:
            if not pipe.poll(180):
                raise TimeoutError("a peer process was not ready within 180 s")
            if pipe.recv() != "ready":
                raise RuntimeError("a peer process failed")

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.procs)

    def run(self, order: dict[str, float]) -> list[dict[str, Any]]:
        for pipe in self.pipes:
            pipe.send(order)
        out = []
        for pipe in self.pipes:
            if not pipe.poll(order["drain"] + order["end"] - time.time() + 120):
                raise TimeoutError("a peer process did not report")
            out.append(pipe.recv())
        return out

    def stop(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send("quit")
            except OSError:
                pass
        for proc in self.procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()


class Sampler:
    """Samples every hub twice a second while a phase runs."""

    def __init__(self, hubs: list[Hub]) -> None:
        self.hubs = hubs
        self.samples: list[list[HubSample]] = [[] for _ in hubs]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            for i, hub in enumerate(self.hubs):
                self.samples[i].append(sample(hub.pid, hub.data))
            if self.stop.wait(0.5):
                return

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _between(samples: list[HubSample], first: float, last: float) -> list[HubSample]:
    inside = [s for s in samples if first <= s.at <= last]
    return inside or samples[-1:]


def phase(
    hubs: list[Hub],
    peers: Peers,
    targets: int,
    origins: int,
    fanout: int,
    rate: float,
    seconds: float,
    profile: str | None = None,
) -> Phase:
    start = time.time() + 0.5
    measure, end = start + WARM_UP, start + WARM_UP + seconds
    order = {"rate": rate, "start": start, "measure": measure, "end": end, "drain": 30.0}
    peers_before = peers.cpu()
    spies: list[subprocess.Popen[bytes]] = []
    if profile:  # py-spy on the (first) hub for the measured window; raw: collapsed stacks
        kind = "raw" if profile.endswith(".txt") else "flamegraph"
        spy = Path(sys.executable).parent / "py-spy"
        command = [str(spy) if spy.exists() else "py-spy", "record", "--pid", str(hubs[0].pid),
                   "--rate", "200", "--idle", "--duration", str(int(seconds)), "--format", kind,
                   "--output", profile]  # fmt: skip
        timer = threading.Timer(
            max(0.0, measure - time.time()),
            lambda: spies.append(subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL)),
        )  # fmt: skip
        timer.start()
    with Sampler(hubs) as sampler:
        figures = peers.run(order)
    for spying in spies:
        spying.wait(60)
    peers_used = peers.cpu() - peers_before
    span = end - measure
    latencies = array("d")
    for f in figures:
        latencies.frombytes(f["latencies"])
    made_in_window = sum(f["made_in_window"] for f in figures)
    expected = made_in_window * min(fanout, targets)
    ordered = sorted(latencies)

    def pct(q: float) -> float | None:
        if not ordered:
            return None
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)

    cpu = rss = files = 0.0
    disk = 0.0
    for per_hub in sampler.samples:
        inside = _between(per_hub, measure, end)
        cpu += (inside[-1].cpu - inside[0].cpu) / max(inside[-1].at - inside[0].at, 1e-3)
        rss = max(rss, max(s.rss_mb for s in inside))
        files = max(files, inside[-1].files)
        disk += inside[-1].disk_mb
    tx_in = sum(f["acked_in_window"] for f in figures) / span
    return Phase(
        targets=targets,
        mode="paced",
        hubs=len(hubs),
        offered=rate * origins if rate else None,
        tx_in=round(tx_in, 1),
        deliveries_out=round(sum(f["delivered_in_window"] for f in figures) / span, 1),
        p50_ms=pct(0.50),
        p99_ms=pct(0.99),
        delivered_share=round(len(latencies) / expected, 4) if expected else 0.0,
        hub_cpu=round(cpu, 3),
        hub_us_per_tx=round(cpu / tx_in * 1e6, 1) if tx_in else 0.0,
        peers_cpu=round(peers_used / (time.time() - start), 3),
        rss_mb=round(rss, 1),
        files=int(files),
        disk_mb=round(disk, 2),
    )


def sustained(p: Phase) -> bool:
    """Whether a phase's load was carried: nearly every transaction delivered to every target
    within the drain, with a p99 latency under a second."""
    return p.delivered_share >= 0.99 and p.p99_ms is not None and p.p99_ms < 1000


def split(all_routes: dict[str, list[str]], hubs: int) -> list[dict[str, list[str]]]:
    """The routes by origin across `hubs` hubs (origin i to hub i mod hubs)."""
    shares: list[dict[str, list[str]]] = [{} for _ in range(hubs)]
    for i, (origin, targets) in enumerate(sorted(all_routes.items(), key=lambda r: int(r[0][1:]))):
        shares[i % hubs][origin] = targets
    return shares


def cell(root: Path, origins: int, targets: int, args: argparse.Namespace) -> list[Phase]:
    shares = split(routes(origins, targets, args.fanout), args.hubs)
    hubs: list[Hub] = []
    peers = None
    try:
        for i, share in enumerate(shares):
            hubs.append(Hub(root, f"hub{i + 1}", share))
        peers = Peers(list(zip(hubs, shares, strict=True)), args.processes)
        profile = args.profile if args.profile and targets == max(args.target_counts) else None
        out = [
            phase(hubs, peers, targets, origins, args.fanout, args.origin_rate, args.seconds,
                  profile)
        ]  # fmt: skip
        for total in args.ramp_rates:  # until one hub (or the machine) no longer keeps up
            spied = None
            if profile:
                stem, dot, ext = profile.rpartition(".")
                spied = f"{stem}-{total:.0f}.{ext}" if dot else f"{profile}-{total:.0f}"
            step = phase(hubs, peers, targets, origins, args.fanout, total / origins,
                         args.seconds, spied)  # fmt: skip
            step.mode = "ramp"
            out.append(step)
            if not sustained(step):
                break
        return out
    finally:
        if peers is not None:
            peers.stop()
        for hub in hubs:
            hub.stop()


def detach_run(root: Path, args: argparse.Namespace) -> DetachRun:
    """A dead target subscribed to every origin, detached halfway by the outbox job's limit."""
    from binlogsync.hubcommands import fetch_status
    from binlogsync.ops import outbox

    targets = min(50, max(args.target_counts))
    share = routes(args.origins, targets, args.fanout)
    share = {o: [*ts, "dead"] for o, ts in share.items()}
    hub = Hub(root, "hub-detach", share)
    peers = None
    seconds = args.detach_seconds
    out = DetachRun(args.origins, targets, args.origin_rate, args.detach_bytes, seconds / 2)
    try:
        peers = Peers([(hub, share)], args.processes)
        start = time.time() + 0.5
        order = {"rate": args.origin_rate, "start": start, "measure": start, "end": start + seconds,
                 "drain": 10.0}  # fmt: skip
        done: list[list[dict[str, Any]]] = []
        runner = threading.Thread(target=lambda: done.append(peers.run(order)), daemon=True)
        runner.start()
        detached = False
        while runner.is_alive():
            now = time.time() - start
            if now >= seconds / 2 and not detached:
                limits = outbox.Limits(max_offline=None, max_age=None,
                                       detach_bytes=args.detach_bytes)  # fmt: skip
                report = outbox.run(str(hub.config), limits)
                out.detached_at = round(now, 2)
                detached = bool(report.detached)
            status = fetch_status(str(hub.config))
            stored = sum(o["stored"] for o in status["origins"])
            got = sample(hub.pid, hub.data)
            out.series.append(
                {"at": round(now, 2), "disk_mb": round(got.disk_mb, 2), "stored": stored}
            )
            runner.join(1.0)
        return out
    finally:
        if peers is not None:
            peers.stop()
        hub.stop()


# -- report -------------------------------------------------------------------------------
def render(phases: list[Phase], detach: DetachRun | None, args: argparse.Namespace) -> str:
    lines = [
        f"./dev bench fleet — {machine()}",
        f"{args.origins} synthetic origins, each to {args.fanout} targets (round-robin); "
        f"sysbench-shaped transactions (4 row changes); {args.hubs} hub(s); "
        f"median of {args.runs} run(s)",
        f"paced: {args.origin_rate:g} tx/s per origin ({args.origin_rate * args.origins:,.0f} in "
        f"all) for {args.seconds:g} s; ramp: offered loads in all, until one is not carried "
        "(delivered within 30 s, p99 < 1 s; marked *)",
        "",
        f"{'TARGETS':>7} {'MODE':<8} {'OFFERED':>8} {'TX/S IN':>9} {'DELIV/S':>9} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'DELIV%':>7} {'HUB CPU':>8} {'µs/TX':>7} {'PEERS':>6} {'RSS MB':>7} {'FILES':>6}"
        f" {'DISK MB':>8}",
    ]
    for p in phases:
        lines.append(
            f"{p.targets:>7} {p.mode:<8} {p.offered or 0:>8,.0f} {p.tx_in:>9,.0f} {p.deliveries_out:>9,.0f}"
            f" {_ms(p.p50_ms):>8} {_ms(p.p99_ms):>8} {p.delivered_share * 100:>6.1f}%"
            f" {p.hub_cpu:>8.2f} {p.hub_us_per_tx:>7.0f} {p.peers_cpu:>6.2f} {p.rss_mb:>7.0f}"
            f" {p.files:>6} {p.disk_mb:>8.1f}{'' if sustained(p) else ' *'}"
        )
    for targets in args.target_counts:
        carried = [p.tx_in for p in phases if p.targets == targets and sustained(p)]
        if carried:
            lines.append(f"{targets} targets: one hub carried {max(carried):,.0f} tx/s in "
                         f"({max(carried) * args.fanout:,.0f} deliveries/s)")  # fmt: skip
    lines.append(
        "HUB CPU: cores the hub(s) used; PEERS: cores of the synthetic agents' processes on "
        "the same machine"
    )
    if detach is not None and detach.series:
        before = [s for s in detach.series if s["at"] < detach.detached_at]
        after = [s for s in detach.series if s["at"] >= detach.detached_at]
        lines += [
            "",
            f"dead target: subscribed to all {detach.origins} origins, never connects; "
            f"{detach.targets} live targets; detached by the outbox job (detach_bytes "
            f"{detach.detach_bytes:,}) at {detach.detached_at:.0f} s",
            f"  disk: {before[0]['disk_mb']:.1f} MB at start, {before[-1]['disk_mb']:.1f} MB "
            f"just before the detach, {max(s['disk_mb'] for s in after):.1f} MB at most after it, "
            f"{after[-1]['disk_mb']:.1f} MB at the end"
            if before and after
            else "  (too short to show)",
            f"  log rows held: {before[-1]['stored']:,} before the detach, "
            f"{after[-1]['stored']:,} at the end"
            if before and after
            else "",
        ]
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def plot(phases: list[Phase], detach: DetachRun | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    paced = [p for p in phases if p.mode == "paced"]
    counts = sorted({p.targets for p in phases})
    best = []
    for n in counts:
        carried = [p for p in phases if p.targets == n and sustained(p)]
        best.append(max(carried, key=lambda p: p.tx_in) if carried else None)
    ax = axes[0][0]
    ax.plot([p.targets for p in paced], [p.tx_in for p in paced], "o-", label="in, paced")
    ax.plot([p.targets for p in paced], [p.deliveries_out for p in paced], "o-",
            label="deliveries out, paced")  # fmt: skip
    most = [(n, b) for n, b in zip(counts, best, strict=True) if b is not None]
    ax.plot([n for n, _ in most], [b.tx_in for _, b in most], "s--", label="in, most carried")
    ax.plot([n for n, _ in most], [b.deliveries_out for _, b in most], "s--",
            label="deliveries out, most carried")  # fmt: skip
    ax.set_title("transactions/s")
    ax.legend(fontsize=7)
    for ax, key, title in (
        (axes[0][1], "p99_ms", "p99 delivery latency, ms (paced)"),
        (axes[0][2], "rss_mb", "hub RSS, MB (paced)"),
        (axes[1][0], "files", "hub open files (paced)"),
        (axes[1][1], "disk_mb", "hub disk, MB (paced)"),
    ):
        ax.plot([p.targets for p in paced], [getattr(p, key) or 0 for p in paced], "o-")
        ax.set_title(title)
    for row in axes:
        for ax in row[:3]:
            ax.set_xlabel("targets")
            ax.set_xscale("log")
    ax = axes[1][2]
    if detach is not None and detach.series:
        ax.plot([s["at"] for s in detach.series], [s["disk_mb"] for s in detach.series], "-",
                label="disk MB")  # fmt: skip
        ax.axvline(detach.detached_at, color="red", linestyle=":", label="detach")
        ax.set_xlabel("seconds")
        ax.set_xscale("linear")
        ax.set_title("a dead target's backlog, bounded by detach")
        ax.legend(fontsize=7)
    fig.suptitle(f"bench fleet: {phases[0].hubs if phases else 1} hub(s) — {machine()}",
                 fontsize=9)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def median_phases(runs: list[list[Phase]]) -> list[Phase]:
    """The median of each figure over the runs that measured the same phase (a ramp may stop
    at another step in another run)."""
    groups: dict[tuple[int, str, float | None], list[Phase]] = {}
    for run in runs:
        for p in run:
            groups.setdefault((p.targets, p.mode, p.offered), []).append(p)
    out = []
    for same in groups.values():
        values: dict[str, Any] = {}
        for name, first in asdict(same[0]).items():
            numeric = isinstance(first, int | float) and not isinstance(first, bool)
            if numeric and name not in ("targets", "hubs", "offered"):
                got = [getattr(p, name) for p in same if getattr(p, name) is not None]
                values[name] = statistics.median(got) if got else None
            else:
                values[name] = first
        out.append(Phase(**values))
    return out


def main(args: argparse.Namespace) -> int:
    args.target_counts = [int(x) for x in str(args.targets).split(",")]
    args.ramp_rates = [float(x) for x in str(args.ramp).split(",") if x.strip()]
    with tempfile.TemporaryDirectory(prefix="binlogsync-fleet-", dir=args.dir) as tmp:
        root = Path(tmp)
        runs: list[list[Phase]] = []
        for run in range(args.runs):
            phases: list[Phase] = []
            for targets in args.target_counts:
                folder = root / f"run{run}-t{targets}"
                folder.mkdir()
                got = cell(folder, args.origins, targets, args)
                phases.extend(got)
                if not args.json:
                    for p in got:
                        print(f"  run {run + 1}, {targets} targets, {p.mode}: {p.tx_in:,.0f} tx/s "
                              f"in, {p.deliveries_out:,.0f} out, p99 {_ms(p.p99_ms)} ms, hub "
                              f"{p.hub_cpu:.2f} cores", flush=True)  # fmt: skip
            runs.append(phases)
        phases = median_phases(runs)
        detach = None
        if not args.no_detach:
            folder = root / "detach"
            folder.mkdir()
            detach = detach_run(folder, args)
    if args.json:
        print(json.dumps({"machine": machine(), "origins": args.origins, "fanout": args.fanout,
                          "rate": args.origin_rate, "hubs": args.hubs, "runs": args.runs,
                          "phases": [asdict(p) for p in phases],
                          "detach": asdict(detach) if detach else None}, indent=2))  # fmt: skip
    else:
        print(render(phases, detach, args))
    if args.out:
        plot(phases, detach, Path(args.out))
        if not args.json:
            print(f"curves: {args.out}")
    return 0


def add_arguments(s: argparse.ArgumentParser) -> None:
    """`bench fleet`'s own options (the bench command's shared ones are in cli.py)."""
    s.add_argument("--origins", type=int, default=50, help="fleet: synthetic origins")
    s.add_argument("--fanout", type=int, default=4, help="fleet: targets each origin is routed to")
    s.add_argument("--hubs", type=int, default=1, help="fleet: hubs the origins are split over")
    s.add_argument(
        "--processes", type=int, default=4, help="fleet: processes the synthetic peers run in"
    )
    s.add_argument(
        "--profile",
        help="fleet: py-spy the hub during the phases of the most targets into this file (the "
        "ramp's steps: FILE-RATE.EXT; .svg: a flame graph; .txt: collapsed stacks)",
    )
    s.add_argument(
        "--ramp",
        default="2000,4000,8000,16000,32000",
        help="fleet: offered loads (transactions/s in all), measured one after another until "
        "one is not carried (delivered within the drain, p99 under 1 s); '' for none",
    )
    s.add_argument("--no-detach", action="store_true", help="fleet: skip the dead-target run")
    s.add_argument(
        "--detach-seconds", type=float, default=40.0, help="fleet: length of the dead-target run"
    )
    s.add_argument(
        "--detach-bytes",
        type=int,
        default=20_000_000,
        help="fleet: the outbox job's detach limit in the dead-target run",
    )
