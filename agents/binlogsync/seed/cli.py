"""`binlogsync seed`: its arguments, and the run from them (the command's thin face)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from ..errors import UsageError
from .limits import DEFAULT_CHUNK_BYTES, DEFAULT_CHUNK_ROWS, DEFAULT_PARALLEL, DEFAULT_WINDOW

if TYPE_CHECKING:
    from ..config import DatabaseSettings

SOURCE_PASSWORD_ENV = "BINLOGSYNC_SOURCE_PASSWORD"


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--config",
        required=True,
        help="a config that reaches the hub with an admin key: the hub's, an [admin] one, or "
        "the origin agent's (whose [origin] database is then read)",
    )
    s.add_argument("--origin", required=True, help="host name of the origin (as the hub knows it)")
    s.add_argument("--target", required=True, help="host name of the target to seed")
    s.add_argument(
        "--tables",
        nargs="+",
        metavar="GLOB",
        help="only these SCHEMA.TABLE globs (adds tables to a running pipeline); default: every "
        "table the hub's routes send to the target, and the target's checkpoint restarts at "
        "the seed",
    )
    s.add_argument(
        "--source",
        help="the origin's database as mysql://user@host:port (password in "
        f"${SOURCE_PASSWORD_ENV}); default: the [origin] database of --config",
    )
    s.add_argument("--chunk-rows", type=int, default=DEFAULT_CHUNK_ROWS, help="rows per chunk")
    s.add_argument(
        "--chunk-bytes",
        type=int,
        default=DEFAULT_CHUNK_BYTES,
        help="a chunk larger than this is sent in pieces",
    )
    s.add_argument(
        "--window", type=int, default=DEFAULT_WINDOW, help="chunks in flight, unconfirmed"
    )
    s.add_argument(
        "--parallel",
        type=int,
        default=DEFAULT_PARALLEL,
        help="chunk readers at once (processes, each with its own connection to the origin, "
        "reading key ranges of a table at once; worth it when reading the origin, not the "
        "target's apply, sets the pace); 1: read in the seed's own process (default)",
    )
    s.add_argument(
        "--max-rows-per-second",
        type=float,
        default=0.0,
        help="rate limit on the rows read from the origin (0: none)",
    )
    s.add_argument(
        "--restart",
        action="store_true",
        help="start a new seed run instead of resuming an interrupted one",
    )
    s.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds without a confirmation before unconfirmed chunks are sent again",
    )
    s.add_argument(
        "--give-up",
        type=float,
        default=900.0,
        help="seconds without any confirmed chunk before the seed stops (run it again later)",
    )
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.add_argument("--quiet", action="store_true", help="no progress bar")


def source_of(config_path: str, url: str | None) -> DatabaseSettings:
    from ..config import ClientConfig, load_any
    from ..reconcile.urls import parse_url

    if url:
        return parse_url(url, os.environ, SOURCE_PASSWORD_ENV)
    config = load_any(config_path)
    if isinstance(config, ClientConfig) and config.origin is not None:
        return config.origin.database
    raise UsageError(
        f"{config_path} has no [origin] database to read the rows from",
        "give the origin's database with --source mysql://user@host:port (the password in "
        f"${SOURCE_PASSWORD_ENV}), or pass the origin agent's config",
    )


def run_from_args(args: argparse.Namespace) -> int:
    from .progress import Progress, duration
    from .run import SeedOptions, seed

    options = SeedOptions(
        config=args.config,
        origin=args.origin,
        target=args.target,
        source=source_of(args.config, args.source),
        tables=tuple(args.tables) if args.tables else None,
        chunk_rows=args.chunk_rows,
        chunk_bytes=args.chunk_bytes,
        window=args.window,
        parallel=args.parallel,
        max_rows_per_second=args.max_rows_per_second,
        restart=args.restart,
        timeout=args.timeout,
        give_up=args.give_up,
    )
    report = seed(options, Progress(quiet=args.quiet or args.json))
    data = report.to_json()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(
        f"seeded {args.target} from {args.origin}: {len(data['tables'])} table(s), "
        f"{data['rows']:,} rows in {duration(data['seconds'])} "
        f"({data['rows_per_second'] or 0:,.0f} rows/s)"
        + (f", resuming run {data['run']}" if data["resumed"] else "")
        + "; the target now replays the changes made since each chunk's snapshot "
        "(`binlogsync status` shows its backlog)",
        file=sys.stdout,
    )
    return 0
