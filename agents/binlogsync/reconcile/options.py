"""The command line of `binlogsync reconcile` and of `spark_jobs/reconcile_job.py` (the same
options for both), and the run of one reconciliation from it. Importing this module is cheap:
PySpark is imported only when a run starts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import BinlogsyncError, ConfigError
from .checksums import HASH_CHOICES, JSON_MODES
from .pinning import PIN_MODES
from .urls import parse_url

SOURCE_PASSWORD_ENV = "BINLOGSYNC_SOURCE_PASSWORD"
TARGET_PASSWORD_ENV = "BINLOGSYNC_TARGET_PASSWORD"
ENGINES = ("auto", "spark", "in-process")
LOCAL_SUBMIT_ARGS = "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--source", required=True, metavar="URL", help="mysql://user[:password]@host:port"
    )
    p.add_argument(
        "--target",
        required=True,
        action="append",
        metavar="URL",
        help="mysql://… or postgresql://user@host:port/database; repeat for several targets",
    )
    p.add_argument("--tables", required=True, help="schema.table[,schema.table…] on the source")
    p.add_argument("--out", metavar="DIR", help="write summary.json and rows.parquet here")
    p.add_argument(
        "--repair",
        nargs="?",
        const="hub",
        choices=["hub", "sql"],
        help="--repair: send source row images through the hub; --repair=sql: write a SQL file",
    )
    p.add_argument("--via", metavar="CONFIG", help="hub or client agent config (for --repair)")
    p.add_argument("--origin", metavar="NAME", help="the source's host name in the hub config")
    p.add_argument(
        "--target-host",
        action="append",
        default=[],
        metavar="NAME",
        help="each target's host name in the hub config, in --target order (for --repair)",
    )
    p.add_argument(
        "--rename",
        action="append",
        default=[],
        metavar="SRC=DST",
        help="the target's schema is named DST where the source's is SRC (as in a hub route)",
    )
    p.add_argument("--pin", default="auto", choices=PIN_MODES, help="how targets are pinned")
    p.add_argument(
        "--json", default="text", choices=JSON_MODES, help="JSON compared as text or value"
    )
    p.add_argument(
        "--hash",
        default="auto",
        choices=HASH_CHOICES,
        help="per-row hash: crc (two CRCs, MariaDB 10.8+), sha1, sha256 (portable: PostgreSQL "
        "targets); auto: sha256 with a PostgreSQL target, else crc where every server has it",
    )
    p.add_argument(
        "--since-last",
        action="store_true",
        help="compare only the keys the origin's binlog changed since each table's last equal "
        "run (kept in the target's binlogsync schema); a table without one is compared whole",
    )
    p.add_argument("--common-columns", action="store_true", help="compare only shared columns")
    p.add_argument("--chunk-rows", type=int, default=100_000, help="rows per checksum chunk")
    p.add_argument(
        "--max-task-rows",
        type=int,
        default=50_000,
        help="most rows one task holds; bigger differing chunks are split first",
    )
    p.add_argument(
        "--connections", type=int, help="sessions per database (default: Spark cores, ≤ 8)"
    )
    p.add_argument("--wait-timeout", type=float, default=300.0, help="seconds a target may lag")
    p.add_argument("--confirm", type=int, default=2, help="re-check rounds that must agree")
    p.add_argument("--max-rounds", type=int, default=6, help="re-check rounds at most")
    p.add_argument(
        "--max-repair-rows",
        type=int,
        default=100_000,
        help="more differing rows than this are not repaired (reseed the target instead)",
    )
    p.add_argument("--show", type=int, default=20, help="differing keys listed per table")
    p.add_argument(
        "--engine",
        default="auto",
        choices=ENGINES,
        help="where the stages run: spark, or in-process (threads, no JVM); auto: in-process "
        "unless --master names a cluster or spark-submit runs the job",
    )
    p.add_argument(
        "--in-process-rows",
        type=int,
        metavar="N",
        help="auto sends a local run of more than N source rows (the server's estimate) to "
        "Spark's local mode (default: none; in-process was faster at every size measured)",
    )
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark configuration"
    )


def _pairs(values: Sequence[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key or not val:
            raise ConfigError(f"{flag} {value!r} is not KEY=VALUE")
        out.append((key, val))
    return out


def options_from(args: argparse.Namespace, env: Mapping[str, str]) -> object:
    from .job import Options

    return Options(
        source=parse_url(args.source, env, SOURCE_PASSWORD_ENV),
        targets=tuple(parse_url(u, env, TARGET_PASSWORD_ENV, postgres=True) for u in args.target),
        tables=tuple(t.strip() for t in args.tables.split(",") if t.strip()),
        out=Path(args.out) if args.out else None,
        repair=args.repair,
        via=args.via,
        origin=args.origin,
        target_hosts=tuple(args.target_host),
        renames=dict(_pairs(args.rename, "--rename")),
        pin=args.pin,
        json=args.json,
        hash=args.hash,
        since_last=args.since_last,
        common_columns=args.common_columns,
        chunk_rows=args.chunk_rows,
        max_task_rows=args.max_task_rows,
        connections=args.connections,
        wait_timeout=args.wait_timeout,
        confirm=args.confirm,
        max_rounds=args.max_rounds,
        max_repair_rows=args.max_repair_rows,
        show=args.show,
    )


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line of one run (for callers that build it, such as the Airflow operator)."""
    parser = argparse.ArgumentParser(prog="binlogsync reconcile")
    add_arguments(parser)
    return parser.parse_args(list(argv))


def run_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """Run one reconciliation; print the readable summary; return the exit code."""
    from .job import run, spark_context

    env = os.environ if env is None else env
    started = time.monotonic()
    options = options_from(args, env)
    conf = _pairs(args.conf, "--conf")
    if choose_engine(args, options, env) == "in-process":
        from .inprocess import InProcess

        stages: Any = InProcess(args.connections or min(os.cpu_count() or 1, 8))
    else:
        # Executors run the interpreter named by PYSPARK_PYTHON, `python3` on PATH otherwise,
        # which may lack binlogsync; in local mode this interpreter is the right one.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if not args.master or args.master.startswith("local"):
            # The driver JVM only schedules tasks here: its quick compiler and a serial GC start
            # it ~1 s sooner and leave the CPU to the databases (measured on 2 cores).
            os.environ.setdefault("PYSPARK_SUBMIT_ARGS", LOCAL_SUBMIT_ARGS)
            # Local mode stays on loopback from the JVM's first moment (before SparkConf).
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        stages = spark_context(args.master, conf)
    try:
        report = run(options, stages, started)  # type: ignore[arg-type]
        report.release()
    finally:
        stages.stop()
    print(report.render(), flush=True)
    return report.exit_code


def choose_engine(args: argparse.Namespace, options: object, env: Mapping[str, str]) -> str:
    """spark or in-process: as asked; for auto, in-process when the run is local (no cluster
    master, not under spark-submit), unless --in-process-rows sends larger tables to Spark's
    local mode. On one machine the in-process engine was faster at every size measured
    (docs/reconcile.md, Benchmark): Spark's start costs 4–7 s, and its local workers do what
    the threads do, since the databases do the hashing."""
    if args.engine != "auto":
        return str(args.engine)
    if (args.master and not args.master.startswith("local")) or "PYSPARK_GATEWAY_PORT" in env:
        return "spark"
    if args.in_process_rows is None or getattr(options, "since_last", False):
        return "in-process"  # since-last: bounded by the changed keys, not by the table
    from .job import estimated_rows

    rows = estimated_rows(options)  # type: ignore[arg-type]
    return "in-process" if rows is None or rows <= args.in_process_rows else "spark"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of spark_jobs/reconcile_job.py."""
    parser = argparse.ArgumentParser(
        prog="reconcile_job.py", description="binlogsync reconciliation (PySpark job)"
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except BinlogsyncError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
