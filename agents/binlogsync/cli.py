"""The `binlogsync` command: agents and operator tools (status, skip, seed, retention, …).
The dev harness's commands (demo, sandbox, bench, airflow) are `python -m binlogsync_dev`.

Exit codes: 0 done, 1 a check found differences or a run failed, 2 bad input (config, usage).
Every BinlogsyncError is printed as one line that says what is wrong and how to fix it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__
from .errors import BinlogsyncError, UsageError


def _logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def cmd_server(args: argparse.Namespace) -> int:
    from .config import load_hub
    from .hub.server import Hub
    from .runloop import settle_heap, stop_on_signals

    hub = Hub(load_hub(args.config))
    stop_on_signals(hub.stop)
    settle_heap()
    return hub.run()


def cmd_client(args: argparse.Namespace) -> int:
    from .client.agent import ClientAgent
    from .config import load_client
    from .runloop import settle_heap, stop_on_signals

    agent = ClientAgent(load_client(args.config))
    agent.preflight()
    stop_on_signals(agent.stop)
    settle_heap()
    return agent.run()


def cmd_keys(args: argparse.Namespace) -> int:
    from .transport.curve import make_keys, refuse_existing

    if not args.force:  # check every name first, so a refusal writes nothing at all
        for name in args.name:
            refuse_existing(args.dir, name)
    for name in args.name:
        public, secret = make_keys(args.dir, name, force=args.force)
        print(f"{name}: public {public}  secret {secret}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from .hubcommands import fetch_status as fetch
    from .statusview import render

    status = fetch(args.config, args.timeout, history=args.history)
    print(json.dumps(status, indent=2) if args.json else render(status))
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    """Every check the agent makes at start-up on its file (keys, key files, password files),
    without starting it: for deployment tools that validate a config before installing it."""
    from .config import AdminConfig, HubConfig, load_any

    config = load_any(args.config)
    kind = (
        "hub"
        if isinstance(config, HubConfig)
        else "admin"
        if isinstance(config, AdminConfig)
        else "client"
    )
    roles = ""
    if not isinstance(config, HubConfig | AdminConfig) and config.target is not None:
        from .apply.store import require

        require(config.target.kind)
    if not isinstance(config, HubConfig | AdminConfig):
        roles = " (" + ", ".join(r for r in ("origin", "target") if getattr(config, r)) + ")"
    print(f"ok: {args.config} is a valid {kind} config for {config.name}{roles}")
    return 0


def cmd_skip(args: argparse.Namespace) -> int:
    from .apply.store import open_store
    from .config import load_client

    config = load_client(args.config)
    if config.target is None:
        print(
            "error: this config has no [target]; skip runs on the target's agent config",
            file=sys.stderr,
        )
        return 2
    target = config.target
    with open_store(target, args.origin, None) as store:
        moved = store.skip(args.position, args.reason)
    where = {"mysql": f"{target.database}", "auditlog": f"{target.path}"}.get(
        target.kind, target.url
    )
    record = {
        "mysql": "binlogsync.skipped",
        "postgresql": "binlogsync.skipped",
        "redis": "the list binlogsync:skipped",
        "auditlog": "a skip line of the log",
    }[target.kind]
    print(
        f"checkpoint of {args.origin} on the {target.kind} target {where} moved to {moved}; "
        f"the skip is recorded in {record}"
    )
    return 0


def _position_arg(text: str) -> Any:
    """A GTID state or FILE:OFFSET, checked while the arguments are parsed (a mistake exits
    2)."""
    from .errors import ProtocolError
    from .position import Position

    try:
        return Position.parse(text)
    except ProtocolError as exc:
        raise argparse.ArgumentTypeError(f"{exc}") from None


def _position_or_current(text: str) -> Any:
    return text if text == "current" else _position_arg(text)


def cmd_capture_skip(args: argparse.Namespace) -> int:
    from .hubcommands import skip_capture

    to = None if args.to == "current" else args.to
    if not args.reason.strip():
        raise UsageError("--reason is empty", "say why capture moves on; it is recorded")
    before, after = skip_capture(args.config, args.origin, to, args.reason, args.timeout)
    print(
        f"capture of {args.origin} moved from {before or 'nothing stored'} to {after}; "
        "the binlog between them is not replicated (recorded in the hub's log, shown by "
        "`binlogsync status`)"
    )
    return 0


def cmd_outbox(args: argparse.Namespace) -> int:
    from .ops.outbox import Limits, raise_alerts, run
    from .reconcile.urls import parse_url

    limits = Limits(
        args.max_offline,
        args.max_age,
        args.max_bytes,
        args.max_transactions,
        args.detach_after_age,
        args.detach_after_bytes,
    )
    sources = {}
    for item in args.reseed_source or []:
        origin, sep, url = item.partition("=")
        if not sep or not origin:
            from .errors import UsageError

            raise UsageError(
                f"--reseed-source {item!r} is not ORIGIN=URL",
                "write it as --reseed-source shop-db=mysql://binlogsync@db1:3306",
            )
        sources[origin] = parse_url(url, os.environ, "BINLOGSYNC_SOURCE_PASSWORD")
    report = run(args.config, limits, args.timeout, sources)
    print(json.dumps(report.to_json(), indent=2) if args.json else report.render())
    raise_alerts(report)  # exit 1 with every alert in one line
    return 0


def cmd_timing(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .ops.timing import run

    _clean_up_on_sigterm()
    rows = [int(x) for x in args.rows.split(",")]
    result = run(Path(args.out), rows, args.runs, args.dir)
    data = result.to_json()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(
            f"paper timing: worst ours/native {data['worst_ours_over_native']:.2f}x, worst lag "
            f"{data['worst_lag_ms']:.1f} ms; {data['json']} and {data['png']}"
        )
    return 0


def cmd_reconcile_result(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .ops.reconcile_run import check, collect, keep

    outcome = collect(Path(args.out), args.show)
    if args.state:
        keep(outcome, Path(args.state))
    data = outcome.to_json()
    print(
        json.dumps(data, indent=2, default=str)
        if args.json
        else f"reconciliation {args.out}: {outcome.state}, {outcome.differing} row(s) differ"
    )
    check(outcome)  # exit 1 listing the rows when they differ unrepaired, 2 when it failed
    return 0


def cmd_detach(args: argparse.Namespace) -> int:
    from .hubcommands import detach

    detach(args.config, args.origin, args.target, args.reason)
    print(
        f"{args.target} is detached from {args.origin}: the hub keeps nothing for it; reseed "
        f"it with `binlogsync seed --origin {args.origin} --target {args.target}`"
    )
    return 0


def cmd_seed(args: argparse.Namespace) -> int:
    from .seed.cli import run_from_args

    return run_from_args(args)


def cmd_retention(args: argparse.Namespace) -> int:
    from .ops.commands import run_retention

    return run_retention(args)


def _clean_up_on_sigterm() -> None:
    """SIGTERM ends the command through its `finally` blocks, so the servers and agents it
    started stop with it (by default Python would die at once and leave them running)."""

    def stop(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def cmd_reconcile(args: argparse.Namespace) -> int:
    from .reconcile.options import run_from_args

    return run_from_args(args)


def cmd_reconcile_server(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .reconcile.options import serve

    return serve(Path(args.socket), args.master, args.conf, args.class_cache)


def cmd_spark_class_archive(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .reconcile.sparkapp import write_class_archive

    archive = write_class_archive(Path(args.class_cache).expanduser(), os.environ)
    print(f"the Spark driver's class archive: {archive} ({archive.stat().st_size:,} bytes)")
    return 0


def cmd_spark_package(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .reconcile.shipping import build

    print(build(Path(args.out)))
    return 0


LOG_LEVELS = ["debug", "info", "warning", "error"]


class _HelpFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" where a default means something. Unlike
    ArgumentDefaultsHelpFormatter it stays quiet for required options, flags and None."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            "%(default)" in text
            or "(default" in text
            or not action.option_strings
            or action.required
            or action.default in (None, False, [], argparse.SUPPRESS)
        ):
            return text
        return f"{text} (default: %(default)s)"


def _log_level(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--log-level",
        default=default,
        choices=LOG_LEVELS,
        help="how much the command logs on stderr (default: info)",
    )


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only` (a command), just that command's options where collecting
    them imports a package (seed, retention, reconcile), which starts every other command
    faster (0.25 s of imports on each `binlogsync` run otherwise)."""

    def wanted(name: str) -> bool:
        return only is None or only == name

    p = argparse.ArgumentParser(
        prog="binlogsync", description=__doc__.splitlines()[0], formatter_class=_HelpFormatter
    )
    p.add_argument("--version", action="version", version=f"binlogsync {__version__}")
    _log_level(p, "info")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help, description=help, formatter_class=_HelpFormatter)
        # Also accepted after the command. SUPPRESS keeps the value given before it (or the
        # default) when the option is not repeated here.
        _log_level(s, argparse.SUPPRESS)
        return s

    s = command("server", "run the hub (server agent)")
    s.add_argument("--config", required=True, help="the hub's TOML config (docs/config.md)")
    s.set_defaults(func=cmd_server)

    s = command("client", "run a client agent (origin and/or target)")
    s.add_argument("--config", required=True, help="the client's TOML config (docs/config.md)")
    s.set_defaults(func=cmd_client)

    s = command("keys", "make CURVE key pairs: NAME.key (public) and NAME.key_secret")
    s.add_argument("--dir", required=True, help="folder for the key files (made if missing)")
    s.add_argument("--name", action="append", required=True, help="host name; repeat for several")
    s.add_argument(
        "--force", action="store_true", help="replace existing key pairs (peers must be updated)"
    )
    s.set_defaults(func=cmd_keys)

    s = command("status", "hosts, backlogs, positions and errors, from the hub")
    s.add_argument("--config", required=True, help="the hub's, any client's or an [admin] config")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.add_argument(
        "--history",
        action="store_true",
        help="with --json: add the last hour of lag per target and origin (one sample / 10 s)",
    )
    s.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the hub")
    s.set_defaults(func=cmd_status)

    s = command("check-config", "check a hub, client or admin config file without starting it")
    s.add_argument("--config", required=True, help="the file to check")
    s.set_defaults(func=cmd_check_config)

    s = command("skip", "move a target past a transaction that cannot be applied")
    s.add_argument("--config", required=True, help="the target agent's config")
    s.add_argument(
        "--origin", required=True, help="host name of the origin the transaction is from"
    )
    s.add_argument(
        "--position",
        required=True,
        type=_position_arg,
        help="the failing transaction's GTID state as its error and `status` show it (e.g. "
        "0-1-100; MariaDB), or FILE:OFFSET for an origin without GTIDs",
    )
    s.add_argument("--reason", required=True, help="why; recorded in binlogsync.skipped")
    s.set_defaults(func=cmd_skip)

    s = command(
        "capture-skip",
        "move an origin's capture past what it cannot capture (statement-based DML, a purged "
        "binlog, …), on purpose and recorded; needs an admin key",
    )
    s.add_argument("--config", required=True, help="the hub's config or an [admin] config")
    s.add_argument("--origin", required=True, help="host name of the origin")
    s.add_argument(
        "--to",
        required=True,
        type=_position_or_current,
        help="where capture resumes: the end of the transaction `status` shows, as a GTID "
        "state (e.g. 0-1-100; MariaDB) or FILE:OFFSET (no GTIDs), or 'current' for the "
        "origin's position now (after a reseed)",
    )
    s.add_argument("--reason", required=True, help="why; recorded in the hub's log")
    s.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the origin's agent"
    )
    s.set_defaults(func=cmd_capture_skip)

    s = command(
        "outbox",
        "who is offline, what waits on the hub for whom (transactions, bytes, age), which "
        "targets are stuck; exits 1 naming every limit passed",
    )
    s.add_argument("--config", required=True, help="the hub's, any client's or an [admin] config")
    s.add_argument("--max-offline", type=float, default=600.0, help="seconds a host may be unheard")
    s.add_argument(
        "--max-age", type=float, default=3600.0, help="seconds the oldest waiting change may wait"
    )
    s.add_argument("--max-bytes", type=int, default=None, help="bytes a backlog may hold")
    s.add_argument(
        "--max-transactions", type=int, default=None, help="transactions a backlog may hold"
    )
    s.add_argument(
        "--detach-after-age",
        type=float,
        default=None,
        help="detach a target whose oldest waiting change is older (seconds): the hub stops "
        "holding its changes; it must be reseeded",
    )
    s.add_argument(
        "--detach-after-bytes",
        type=int,
        default=None,
        help="detach a target whose backlog is larger",
    )
    s.add_argument(
        "--reseed-source",
        action="append",
        metavar="ORIGIN=URL",
        help="reseed detached targets that are online again from this origin's database "
        "(mysql://user@host:port, password in $BINLOGSYNC_SOURCE_PASSWORD); repeatable",
    )
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the hub")
    s.set_defaults(func=cmd_outbox)

    s = command(
        "timing",
        "the paper's Table 1 on throwaway servers beside native replication, kept as JSON and "
        "a PNG plot per run",
    )
    s.add_argument("--out", required=True, help="folder for timing-<time>.json and .png")
    s.add_argument("--rows", default="100,200,400,600,1000", help="the paper's statement counts")
    s.add_argument("--runs", type=int, default=1, help="runs per cell; the median is kept")
    s.add_argument("--dir", default=None, help="folder for the throwaway servers")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_timing)

    s = command(
        "reconcile-result",
        "read a reconciliation's output folder: keep it as the last result, exit 1 listing "
        "the differing rows unless they were repaired",
    )
    s.add_argument("--out", required=True, help="the reconciliation's output folder (--out)")
    s.add_argument("--state", help="folder for last-reconcile.json (what the UI page shows)")
    s.add_argument("--show", type=int, default=50, help="differing rows to list")
    s.add_argument("--json", action="store_true", help="print the outcome as JSON")
    s.set_defaults(func=cmd_reconcile_result)

    s = command(
        "detach",
        "make the hub stop holding an origin's changes for a target (its log stays bounded); "
        "the target comes back with a whole reseed; needs an admin key",
    )
    s.add_argument("--config", required=True, help="the hub's config or an [admin] config")
    s.add_argument("--origin", required=True, help="host name of the origin")
    s.add_argument("--target", required=True, help="host name of the target")
    s.add_argument("--reason", required=True, help="why; shown in `status`")
    s.set_defaults(func=cmd_detach)

    s = command(
        "seed",
        "copy the origin's current rows to a target through the hub while writes go on, then "
        "hand over to the stream (a new target, a newly routed table, a reseed); resumable; "
        "needs an admin key",
    )
    if wanted("seed"):
        from .seed.cli import add_arguments as seed_arguments  # argparse only

        seed_arguments(s)
    s.set_defaults(func=cmd_seed)

    s = command(
        "retention",
        "purge an origin's binary logs below the oldest position anything still needs (the "
        "hub's head, the targets' checkpoints, native replicas), keeping a floor of files",
    )
    if wanted("retention"):
        from .ops.commands import add_retention_arguments  # argparse only

        add_retention_arguments(s)
    s.set_defaults(func=cmd_retention)

    s = command(
        "reconcile",
        "find every differing row between a source and targets: a Spark application "
        "(local[*] unless --master names a cluster); exit 0 equal, 1 different, 2 error",
    )
    if wanted("reconcile"):
        from .reconcile.options import add_arguments as reconcile_arguments  # argparse only

        reconcile_arguments(s)
    s.set_defaults(func=cmd_reconcile)

    s = command(
        "reconcile-server",
        "a warm Spark application that runs the reconciliations sent to it with "
        "`binlogsync reconcile --spark-server SOCKET` (no Spark start-up per run)",
    )
    s.add_argument("--socket", required=True, help="the Unix socket to listen at (mode 0600)")
    s.add_argument("--master", help="Spark master (default local[*])")
    s.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark configuration"
    )
    _class_cache_argument(s, "the driver JVM's class-data-sharing archive ('none' for none)")
    s.set_defaults(func=cmd_reconcile_server)

    s = command(
        "spark-package",
        "write the zip of binlogsync's code and PyMySQL for spark-submit --py-files (executors "
        "that do not have binlogsync installed)",
    )
    s.add_argument("--out", default=".", help="the zip's path, or a folder to write it in")
    s.set_defaults(func=cmd_spark_package)

    s = command(
        "spark-class-archive",
        "write the Spark driver's class-data-sharing archive now (an image's build, a host's "
        "set-up), so that no reconciliation's driver writes it as its JVM exits: a local Spark "
        "application that loads what a run's driver loads, then exits",
    )
    _class_cache_argument(s, "the folder reconcile's --class-cache names")
    s.set_defaults(func=cmd_spark_class_archive)

    return p


def _class_cache_argument(s: argparse.ArgumentParser, help: str) -> None:
    # reconcile.options.CLASS_CACHE, not imported: building the parser imports no Spark code
    s.add_argument(
        "--class-cache", default="~/.cache/binlogsync/spark-cds", metavar="DIR", help=help
    )


def _command(argv: Sequence[str]) -> str:
    """The command named in `argv` ("" when none: only the list of commands is needed)."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return ""


def _run(argv: Sequence[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser(_command(argv)).parse_args(argv)
    _logging(args.log_level)
    try:
        return int(args.func(args))
    except BinlogsyncError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _run(argv)
        sys.stdout.flush()  # a closed pipe must fail here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        # The reader left early (`binlogsync status … | head -1`). As the Python docs advise:
        # point stdout at devnull so the flush at exit cannot raise again, and exit 1 quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
