"""The command-line faces of the lifecycle jobs: `binlogsync retention` (arguments, the run,
the table it prints). The jobs themselves take options dataclasses and know nothing of
argparse."""

from __future__ import annotations

import argparse
import json
import os

from ..reconcile.urls import parse_url
from .retention import (
    DEFAULT_KEEP_FILES,
    DEFAULT_KEEP_HOURS,
    RetentionOptions,
    RetentionResult,
    binlog_retention,
    describe_time,
)

SOURCE_PASSWORD_ENV = "BINLOGSYNC_SOURCE_PASSWORD"
REPLICA_PASSWORD_ENV = "BINLOGSYNC_REPLICA_PASSWORD"


def add_retention_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--config",
        required=True,
        help="a config that reaches the hub: the hub's, an [admin] one, or any client's",
    )
    s.add_argument("--origin", required=True, help="host name of the origin (as the hub knows it)")
    s.add_argument(
        "--source",
        required=True,
        help="the origin's MariaDB server as mysql://user@host:port (password in "
        f"${SOURCE_PASSWORD_ENV}); needs BINLOG MONITOR, BINLOG ADMIN, REPLICATION SLAVE",
    )
    s.add_argument(
        "--replica",
        action="append",
        default=[],
        metavar="URL",
        help="a native replica of the origin, mysql://user@host:port (password in "
        f"${REPLICA_PASSWORD_ENV}); repeat for several; its position is kept",
    )
    s.add_argument(
        "--keep-files",
        type=int,
        default=DEFAULT_KEEP_FILES,
        help="always keep this many newest files",
    )
    s.add_argument(
        "--keep-hours",
        type=float,
        default=DEFAULT_KEEP_HOURS,
        help="always keep files closed less than this many hours ago (0: no such floor)",
    )
    s.add_argument(
        "--ignore-targets",
        action="store_true",
        help="do not keep what the targets' checkpoints need (an offline target then holds "
        "nothing back, but a hub rebuilt from nothing could not re-read it)",
    )
    s.add_argument("--dry-run", action="store_true", help="show the plan, purge nothing")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the hub")


def run_retention(args: argparse.Namespace) -> int:
    options = RetentionOptions(
        config=args.config,
        origin=args.origin,
        source=parse_url(args.source, os.environ, SOURCE_PASSWORD_ENV),
        replicas=tuple(parse_url(u, os.environ, REPLICA_PASSWORD_ENV) for u in args.replica),
        keep_files=args.keep_files,
        keep_hours=args.keep_hours,
        ignore_targets=args.ignore_targets,
        dry_run=args.dry_run,
        hub_timeout=args.timeout,
    )
    result = binlog_retention(options)
    print(json.dumps(result.to_json(), indent=2) if args.json else render(result))
    return 0


def render(result: RetentionResult) -> str:
    """The result as a table for people."""
    count = len(result.to_purge)
    if result.purge_to is None:
        head = "nothing to purge"
    elif result.dry_run:
        head = f"dry run: would purge {count} file(s) (PURGE BINARY LOGS TO '{result.purge_to}')"
    else:
        head = f"purged {len(result.purged)} file(s) (PURGE BINARY LOGS TO '{result.purge_to}')"
    lines = [f"origin {result.origin} on {result.server}: {head}", "", "needed:"]
    width = max((len(n.who) for n in result.needs), default=0)
    for need in result.needs:
        lines.append(
            f"  {need.who:<{width}}  {need.position}  from {need.file or '(already purged)'}"
        )
    rows = [("file", "size", "closed (UTC)", "status", "why kept")]
    for f in result.files:
        rows.append(
            (f.name, f"{f.size:,}", describe_time(f.closed_at), f.status, "; ".join(f.reasons))
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines.append("")
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + r[4])
    lines.extend(f"warning: {w}" for w in result.warnings)
    return "\n".join(line.rstrip() for line in lines)
