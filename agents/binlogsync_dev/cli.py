"""The dev harness's commands, `python -m binlogsync_dev COMMAND` (`./dev` runs them): the live
demo, throwaway servers, the benchmarks, and Airflow over a sandbox site. They start throwaway
MariaDB servers and agents on this machine; none of this is in binlogsync's wheel.

    demo       the live demo (the main job of `./dev demo`)
    sandbox    start, stop or list throwaway MariaDB servers
    bench      the benchmarks (paper, large-tx, oltp, seed, apply, binlog-service)
    airflow    airflow standalone over a sandbox site, to look at (Ctrl-C stops)
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from binlogsync.cli import _HelpFormatter, _log_level, _logging
from binlogsync.errors import BinlogsyncError, UsageError
from binlogsync.seed.limits import DEFAULT_PARALLEL
from binlogsync_dev.fleet_bench import add_arguments as fleet_arguments


def _clean_up_on_sigterm() -> None:
    """SIGTERM ends the command through its `finally` blocks, so the servers and agents it
    started stop with it (by default Python would die at once and leave them running)."""

    def stop(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def cmd_sandbox(args: argparse.Namespace) -> int:
    from binlogsync_dev.sandbox import Sandbox

    if args.action == "start":
        box = Sandbox(args.dir)
        origin = box.start("origin", 1)
        servers = [origin] + [box.start(f"target{i}", 1 + i) for i in range(1, args.targets + 1)]
        if args.replica:
            replica = box.start("replica", 100)
            box.replicate(origin, replica)
            servers.append(replica)
        for s in servers:
            print(f"{s.name:10} {s.url}  server_id={s.server_id}  pid={s.pid}")
        return 0
    box = Sandbox.running(args.dir)  # stop and status need one that runs
    if args.action == "stop":
        count = len(box.servers)
        box.stop_all()
        print(f"stopped {count} server(s) of {box.root}")
    else:
        for s in box.servers.values():
            print(f"{s.name:10} {s.url}  server_id={s.server_id}  pid={s.pid}")
    return 0


def _scratch_parent(folder: str | None) -> None:
    """The folder a bench makes its scratch folder in (`--dir`): made when missing, as
    `mkdir -p` would (it was a traceback from deep in tempfile)."""
    if folder is None:
        return
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file of that name (a folder is fine: exist_ok)
        raise UsageError(
            f"bench --dir {folder}: not a folder", "name a folder, or leave --dir out"
        ) from None
    except OSError as e:
        raise UsageError(
            f"bench --dir {folder}: cannot make the folder ({e.strerror})",
            "name a folder this user can write, or leave --dir out",
        ) from None


def cmd_bench(args: argparse.Namespace) -> int:
    if args.which != "apply":  # apply's --dir is the sandbox itself, made by its bench
        _scratch_parent(args.dir)
    _clean_up_on_sigterm()
    if args.which == "large-tx":
        from binlogsync_dev.large_tx import main as large_tx_main

        args.sizes = args.sizes or "1000000,5000000"
        return large_tx_main(args)
    if args.which == "seed":
        from binlogsync_dev.seed_bench import main as seed_main

        args.sizes = args.sizes or "1000000,10000000"
        return seed_main(args)
    if args.which == "apply":
        if args.target_kind != "postgresql":
            raise UsageError(
                f"bench apply --target-kind {args.target_kind}: only postgresql is measured here",
                "for a MariaDB target run bench/apply_rate.py",
            )
        from binlogsync_dev.pg_apply_bench import main as pg_apply_main

        return pg_apply_main(args)
    if args.which == "fleet":
        from binlogsync_dev.fleet_bench import main as fleet_main

        args.seconds = args.seconds or 15
        args.out = args.out or "fleet.png"
        return fleet_main(args)
    args.seconds = args.seconds or 60
    args.out = args.out or "oltp-lag.png"
    if args.which == "oltp":
        from binlogsync_dev.oltp_bench import main as oltp_main

        return oltp_main(args)
    if args.which == "binlog-service":
        from binlogsync_dev.binlog_service_bench import main as service_main

        return service_main(args)
    from binlogsync_dev.paper_timing import main as paper_main

    return paper_main(args)


def cmd_airflow(args: argparse.Namespace) -> int:
    _clean_up_on_sigterm()
    from pathlib import Path

    from binlogsync_dev.airflow_dev import run

    return run(Path(args.dir), args.port)


def cmd_demo(args: argparse.Namespace) -> int:
    _clean_up_on_sigterm()
    from binlogsync_dev.demo import main as demo_main

    return demo_main(args)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m binlogsync_dev",
        description="binlogsync's dev harness: the demo, throwaway servers, benchmarks",
        formatter_class=_HelpFormatter,
    )
    _log_level(p, "info")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help, description=help, formatter_class=_HelpFormatter)
        _log_level(s, argparse.SUPPRESS)
        return s

    s = command("sandbox", "throwaway MariaDB servers on loopback")
    s.add_argument(
        "action", choices=["start", "stop", "status"], help="start, stop or list the servers"
    )
    s.add_argument("--dir", required=True, help="the sandbox's folder (datadirs, sandbox.json)")
    s.add_argument("--targets", type=int, default=1, help="target servers to start")
    s.add_argument("--replica", action="store_true", help="also a native replica of the origin")
    s.set_defaults(func=cmd_sandbox)

    s = command("bench", "benchmarks")
    s.add_argument(
        "which",
        choices=["paper", "large-tx", "oltp", "seed", "apply", "binlog-service", "fleet"],
        help="paper: the paper's Table 1; large-tx: 1M/5M-row transactions, time and memory; "
        "apply: catching up a backlog into a PostgreSQL target beside pg_chameleon; "
        "oltp: sysbench oltp_write_only beside a native replica (lag, catch-up, CPU); "
        "seed: binlogsync seed beside mariadb-dump | mariadb and mydumper/myloader, writes "
        "running; "
        "binlog-service: the hub's binlog service (row events/s to 1 and --subscribers "
        "subscribers, hub CPU, lag of a native replica via the hub beside a direct one); "
        "fleet: one hub with many synthetic origins and targets (no databases)",
    )
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.add_argument("--runs", type=int, default=3, help="runs per cell; the median is shown")
    s.add_argument(
        "--rows", default="100,200,400,600,1000", help="paper: statement counts, comma-separated"
    )
    s.add_argument(
        "--sizes",
        default=None,
        help="large-tx: rows per transaction (default 1000000,5000000); seed: rows of the "
        "table (default 1000000,10000000); comma-separated",
    )
    s.add_argument(
        "--subscribers", type=int, default=20, help="binlog-service: subscribers at once"
    )
    s.add_argument(
        "--rate", type=int, default=0, help="binlog-service: sysbench tx/s (0: unlimited)"
    )
    s.add_argument(
        "--parallel",
        type=int,
        default=DEFAULT_PARALLEL,
        help="seed: the seed's chunk readers (its --parallel, whose default is the default here)",
    )
    s.add_argument("--tables", type=int, default=4, help="oltp: sysbench tables")
    s.add_argument("--table-size", type=int, default=10_000, help="oltp: rows per table")
    s.add_argument("--threads", type=int, default=4, help="oltp: sysbench client threads")
    s.add_argument(
        "--seconds",
        type=int,
        default=None,
        help="oltp: length of each load, live and backlog (default 60); fleet: of each measured "
        "phase (default 15)",
    )
    s.add_argument(
        "--out",
        default=None,
        help="the PNG: oltp: both lag curves (default oltp-lag.png); fleet: the curves against "
        "the number of targets (default fleet.png)",
    )
    s.add_argument(
        "--targets",
        default="10,50,200",
        help="fleet: numbers of synthetic targets, comma-separated",
    )
    s.add_argument(
        "--origin-rate",
        type=float,
        default=20.0,
        help="fleet: transactions/s each synthetic origin writes in the paced phase",
    )
    s.add_argument(
        "--dir", default=None, help="folder for the sandbox (default: the system's temporary one)"
    )
    s.add_argument("--target-kind", default="postgresql", help="apply: the kind of target")
    s.add_argument(
        "--single", type=int, default=200_000, help="apply: single-row transactions of backlog"
    )
    s.add_argument(
        "--batches", type=int, default=2_000, help="apply: 100-row transactions of backlog"
    )
    fleet_arguments(s)
    s.set_defaults(func=cmd_bench)

    s = command("demo", "the live demo on throwaway servers")
    s.add_argument(
        "--dir",
        default="demo-run",
        help="folder for servers, configs and logs; the logs stay, the datadirs are removed, "
        "and a new run replaces the previous one",
    )
    s.add_argument("--rows", type=int, default=3000, help="INSERT statements of the workload")
    s.set_defaults(func=cmd_demo)

    s = command("airflow", "airflow standalone over a sandbox site, to look at (Ctrl-C stops)")
    s.add_argument("--dir", default="var/airflow", help="servers, site and AIRFLOW_HOME")
    s.add_argument("--port", type=int, default=8080, help="the Airflow UI and API on 127.0.0.1")
    s.set_defaults(func=cmd_airflow)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    _logging(args.log_level)
    try:
        return int(args.func(args))
    except BinlogsyncError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
