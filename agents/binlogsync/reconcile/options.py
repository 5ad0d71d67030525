"""The command line of `binlogsync reconcile` and of `spark_jobs/reconcile_job.py` (the same
options for both), and the run of one reconciliation from it: always a Spark application
(sparkapp.py). Importing this module is cheap: PySpark is imported only when a run starts.

Exit codes keep diff(1)'s meaning: 0 equal, 1 the copies differ, 2 the run could not compare
(a table or database could not be read, bad options, no Java or PySpark, a crash).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BinlogsyncError, ConfigError
from .choices import HASH_CHOICES, JSON_MODES, PIN_MODES

if TYPE_CHECKING:
    from .settings import Options
    from .sparkapp import SparkSettings, SparkStart

SOURCE_PASSWORD_ENV = "BINLOGSYNC_SOURCE_PASSWORD"
TARGET_PASSWORD_ENV = "BINLOGSYNC_TARGET_PASSWORD"
JOB_FLAG = "--job"  # spark_jobs/reconcile_job.py: several jobs in one application
CLASS_CACHE = Path("~/.cache/binlogsync/spark-cds")  # sparkapp.ClassCache; "none": no archive
log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--source",
        required=True,
        metavar="URL",
        help="mysql://user@host:port; the password from ?password_file=PATH, ?password_env=VAR "
        f"(default ${SOURCE_PASSWORD_ENV}) or the URL",
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
        "--master",
        help="Spark master: local[*] by default (spark-submit's under spark-submit), or "
        "spark://host:7077, yarn, k8s://…; on a cluster binlogsync's code is shipped to the "
        "executors (their Python needs no binlogsync)",
    )
    p.add_argument(
        "--spark-server",
        metavar="SOCKET",
        help="run in the warm Spark application of `binlogsync reconcile-server` at this Unix "
        "socket instead of starting one (no start-up to pay; reconcile/server.py)",
    )
    p.add_argument(
        "--class-cache",
        default=str(CLASS_CACHE),
        metavar="DIR",
        help="where the driver JVM's class-data-sharing archive is kept (made by the first "
        "run, it halves Spark's start-up); 'none' for no archive",
    )
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


def argv_of(args: argparse.Namespace) -> list[str]:
    """The command line that parses back into `args` (without --spark-server, --master,
    --conf and --class-cache: the server's application has its own)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    out: list[str] = []
    skip = {"spark_server", "master", "conf", "class_cache"}
    for action in parser._actions:
        if action.dest in skip or not action.option_strings:
            continue
        value = getattr(args, action.dest, None)
        if value is None or value == action.default:
            continue
        flag = action.option_strings[0]
        if isinstance(action, argparse._StoreTrueAction):
            out.append(flag)
        elif isinstance(value, list):
            out.extend(f"{flag}={v}" for v in value)
        else:
            out.append(f"{flag}={value}")
    return out


def _class_cache(text: str, env: Mapping[str, str]) -> Path | None:
    if text.strip().lower() in ("", "none", "off"):
        return None
    if text.startswith("~"):
        home = env.get("HOME") or str(Path.home())
        return Path(home) / text[2:] if text.startswith("~/") else Path(text).expanduser()
    return Path(text)


def options_from(args: argparse.Namespace, env: Mapping[str, str]) -> Options:
    from .settings import Options
    from .urls import parse_url

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


def run_from_args(args: argparse.Namespace, env: MutableMapping[str, str] | None = None) -> int:
    """Run one reconciliation; print the readable summary; return the exit code: 0, 1, or 2
    for anything that kept it from comparing, an unexpected failure included (never 1)."""
    environ: MutableMapping[str, str] = os.environ if env is None else env
    return _guarded(lambda: _run(args, environ))


def run_jobs(argvs: Sequence[Sequence[str]], env: MutableMapping[str, str] | None = None) -> int:
    """Several reconciliations one after the other in one Spark application (the reconcile
    DAG's jobs of one DAG run: one driver and one set of executors for all of them, not one
    per job). Each reports as it would alone, into its own --out; one that cannot compare does
    not stop the next. The exit code is the worst: 2 when any could not compare, else 1 when
    any copies differ, else 0. Spark's own settings (--master, --conf, --class-cache) are the
    first job's; `argvs` holds one at least (main's --job is required)."""
    from .sparkapp import SparkStart

    environ: MutableMapping[str, str] = os.environ if env is None else env
    try:
        spark = SparkStart(_spark_settings(_parse_job(argvs[0], 1), environ), environ)
    except Exception as exc:  # noqa: BLE001 - exit 2 with the reason, never 1
        return _failed(exc)
    codes = []
    try:
        for number, argv in enumerate(argvs, 1):
            codes.append(_guarded(functools.partial(_job, argv, number, environ, spark)))
    finally:
        spark.stop(wait=False)  # the job exits next
    return 2 if 2 in codes else max(codes)


def _job(
    argv: Sequence[str], number: int, environ: MutableMapping[str, str], spark: SparkStart
) -> int:
    started = time.monotonic()
    return _compare(options_from(_parse_job(argv, number), environ), spark, started)


def _parse_job(argv: Sequence[str], number: int) -> argparse.Namespace:
    try:
        return parse(argv)
    except SystemExit as exc:  # argparse has printed what is wrong
        raise ConfigError(
            f"job {number}: its options do not parse ({' '.join(argv)[:300]})",
            "give each --job the options of `binlogsync reconcile`, as a JSON list",
        ) from exc


def _guarded(run: Callable[[], int]) -> int:
    """`run()`; what keeps a run from comparing is printed and exits 2 (never 1)."""
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - an unexpected failure must not exit 1 ("differ")
        return _failed(exc)


def _failed(exc: Exception) -> int:
    if isinstance(exc, BinlogsyncError):
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    log.debug("reconcile failed", exc_info=exc)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    print(
        f"error: the reconciliation failed: {type(exc).__name__}: {first} "
        "(run with --log-level debug for the traceback)",
        file=sys.stderr,
        flush=True,
    )
    return 2


def _run(args: argparse.Namespace, environ: MutableMapping[str, str]) -> int:
    if args.spark_server:  # a client: it imports neither Spark nor the job
        from .server import submit

        options_from(args, environ)  # bad options fail here, before the server is asked
        return submit(args.spark_server, argv_of(args), environ, args.wait_timeout + 3600)

    from .sparkapp import SparkStart

    started = time.monotonic()
    options = options_from(args, environ)
    # Spark starts now; the plan runs meanwhile.
    spark = SparkStart(_spark_settings(args, environ), environ)
    try:
        return _compare(options, spark, started)
    finally:
        spark.stop(wait=False)  # the command exits next


def _spark_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> SparkSettings:
    from .sparkapp import SparkSettings

    return SparkSettings(
        args.master, tuple(_pairs(args.conf, "--conf")), _class_cache(args.class_cache, environ)
    )


def _compare(options: Options, spark: SparkStart, started: float) -> int:
    from .job import run

    report = run(options, spark, started)
    report.release()
    print(report.render(), flush=True)
    return report.exit_code


def serve(
    socket: Path,
    master: str | None,
    conf: Sequence[str],
    class_cache: str,
    environ: MutableMapping[str, str] | None = None,
) -> int:
    """`binlogsync reconcile-server`: start the Spark application, then serve runs until
    SIGTERM or Ctrl-C (server.py)."""
    from ..runloop import stop_on_signals
    from .server import ReconcileServer
    from .sparkapp import SparkSettings, SparkStart

    environ = os.environ if environ is None else environ
    settings = SparkSettings(
        master, tuple(_pairs(conf, "--conf")), _class_cache(class_cache, environ)
    )
    server = ReconcileServer(
        socket,
        SparkStart(settings, environ),
        environ,
        lambda argv, env: options_from(parse(argv), env),
    )
    server.bind()  # a socket in use fails before Spark starts
    stop_on_signals(server.stop)
    try:
        return server.run()
    finally:
        server.spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of spark_jobs/reconcile_job.py: one run from the options of `binlogsync
    reconcile`, or, given `--job ARGV_JSON` (repeated; each a JSON list of those options),
    every job in one Spark application (run_jobs)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [JOB_FLAG]:
        parser = argparse.ArgumentParser(
            prog="reconcile_job.py", description="binlogsync reconciliation jobs (PySpark job)"
        )
        parser.add_argument(
            JOB_FLAG,
            action="append",
            type=_job_argv,
            required=True,
            metavar="ARGV_JSON",
            help="one run's options as a JSON list of strings; repeat for each job",
        )
        return run_jobs(parser.parse_args(args).job)
    parser = argparse.ArgumentParser(
        prog="reconcile_job.py", description="binlogsync reconciliation (PySpark job)"
    )
    add_arguments(parser)
    return run_from_args(parser.parse_args(args))


def _job_argv(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc})") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise argparse.ArgumentTypeError("not a JSON list of strings (one run's options)")
    return value
