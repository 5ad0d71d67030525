"""`binlog_retention`: purge an origin's binary logs only below the oldest position that
anything still needs.

What needs the binlog of origin O, each as a position:

    hub head     the hub's durable head for O (`status`): O's agent resumes capture there after
                 a restart.
    target T     each routed target's applied checkpoint for O (unless `ignore_targets`): a hub
                 that has to be rebuilt from nothing re-reads O from the oldest target
                 checkpoint. So a target that stays offline holds binlogs back until it is
                 detached (`binlogsync detach`, or `outbox --detach-after-…`: it then comes
                 back by a reseed only) or `ignore_targets` is set.
    replica R    every native replica given: the GTID state it resumes from
                 (`Gtid_Slave_Pos`), read from its connection to O; its IO thread must run.

and two floors, so that a hub that must be rebuilt can still re-read: the newest `keep_files`
files, and every file younger than `keep_hours` (closed less than that long ago, on the
server's clock; binlogfiles.py says how a file's age is read).

A GTID position needs the last file whose start state (its Gtid_list event) the position
contains: every transaction before that file's start is in the position, and the file holds
the next one (this is how the server itself finds where to start a GTID dump). A file
position needs its own file. Each rule keeps one file and every file after it, so what is
kept is always the newest files from one file on, and `PURGE BINARY LOGS TO` that file purges
exactly the rest; the current file is never purged.

Nothing is purged when any position is unknown: the hub does not answer, O has no head on it
(its agent never connected), a routed target has no checkpoint, a replica cannot be asked or
does not replicate. `RetentionRefused` then names which one and what to do.

The result says, per file, `purged` (or `would purge` in a dry run) or `kept` with every
reason; the log says the same.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import mysql
from ..config import DatabaseSettings
from ..errors import BinlogsyncError, RetentionRefused, UsageError
from ..hubcommands import fetch_status
from ..position import Position, file_number, missing_from
from ..transport.admin import HubAccess
from .binlogfiles import BinlogFile, created_at, list_files, purge_to, replica_position

log = logging.getLogger(__name__)

DEFAULT_KEEP_FILES = 2
DEFAULT_KEEP_HOURS = 24.0


@dataclass(frozen=True)
class RetentionOptions:
    config: HubAccess  # what reaches the hub: a hub, [admin] or client config (or its path)
    origin: str  # the origin's host name, as the hub's routes name it
    source: DatabaseSettings  # the origin's MariaDB server, whose binlogs are purged
    replicas: tuple[DatabaseSettings, ...] = ()
    keep_files: int = DEFAULT_KEEP_FILES
    keep_hours: float = DEFAULT_KEEP_HOURS
    ignore_targets: bool = False
    dry_run: bool = False
    hub_timeout: float = 10.0

    def check(self) -> None:
        if self.keep_files < 1:
            raise UsageError(
                f"--keep-files {self.keep_files}: at least the current file is kept",
                "give 1 or more",
            )
        if self.keep_hours < 0:
            raise UsageError(f"--keep-hours {self.keep_hours} is negative", "give 0 or more")


@dataclass(frozen=True)
class Need:
    """A position that still needs the binlog, and the oldest file it needs (None: a file
    older than the oldest one left, already purged)."""

    who: str
    position: Position
    file: str | None

    def to_json(self) -> dict[str, Any]:
        return {"who": self.who, "position": self.position.to_json(), "file": self.file}


@dataclass(frozen=True)
class FileDecision:
    name: str
    size: int
    start: str | None  # the GTID state at its start
    closed_at: float | None  # when the next file was created (None: not read, or current)
    status: str  # "kept", "purged", "would purge"
    reasons: tuple[str, ...] = ()  # why it is kept

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.name,
            "size": self.size,
            "start": self.start,
            "closed_at": self.closed_at,
            "status": self.status,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class RetentionResult:
    origin: str
    server: str
    dry_run: bool
    now: float  # the server's clock when the plan was made
    keep_files: int
    keep_hours: float
    ignore_targets: bool
    needs: tuple[Need, ...]
    files: tuple[FileDecision, ...]
    purge_to: str | None  # the file PURGE BINARY LOGS TO named (None: nothing to purge)
    warnings: tuple[str, ...] = field(default=())

    @property
    def purged(self) -> list[str]:
        return [f.name for f in self.files if f.status == "purged"]

    @property
    def to_purge(self) -> list[str]:
        return [f.name for f in self.files if f.status in ("purged", "would purge")]

    def to_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "server": self.server,
            "dry_run": self.dry_run,
            "now": self.now,
            "keep_files": self.keep_files,
            "keep_hours": self.keep_hours,
            "ignore_targets": self.ignore_targets,
            "needs": [n.to_json() for n in self.needs],
            "purge_to": self.purge_to,
            "purged": self.purged,
            "files": [f.to_json() for f in self.files],
            "warnings": list(self.warnings),
        }


# -- the plan (no I/O) ------------------------------------------------------------------------
def needed_from(files: Sequence[BinlogFile], position: Position) -> int | None:
    """The index in `files` (oldest first) of the oldest file `position` still needs; None
    when it needs one older than the oldest file left (already purged). RetentionRefused when
    the position cannot be placed on these files at all."""
    if not position.by_gtid:
        wanted = file_number(position.file)
        numbers = [file_number(f.name) for f in files]
        if wanted < numbers[0]:
            return None
        if wanted in numbers:
            return numbers.index(wanted)
        raise RetentionRefused(
            f"position {position} names binlog file {position.file}, which the origin's "
            f"server does not have ({files[0].name} … {files[-1].name})",
            "is --source the server this position was read on?",
        )
    have = position.gtid or ""
    found = None
    for index, file in enumerate(files):
        if file.start is None:
            raise RetentionRefused(
                f"the origin's binlog files carry no GTID states, so GTID position {position} "
                "cannot be placed on them",
                "is --source the origin's MariaDB server?",
            )
        if not missing_from(have, file.start):
            found = index
    return found


def decide(
    files: Sequence[BinlogFile],
    needs: Sequence[Need],
    *,
    keep_files: int,
    keep_hours: float,
    now: float,
    closed: Mapping[str, float],
    dry_run: bool,
) -> tuple[FileDecision, ...]:
    """Every file kept (with every reason) or to purge. `closed` maps a file to when it was
    closed (the next file's creation); files are closed in order, so once one is younger
    than `keep_hours` all later ones are, whether their time was read or not."""
    last = len(files) - 1
    index = {f.name: i for i, f in enumerate(files)}
    need_at = [(n, index[n.file] if n.file is not None else 0) for n in needs]
    cutoff = now - keep_hours * 3600
    young_from = len(files)
    if keep_hours > 0:
        for i, f in enumerate(files[:last]):
            at = closed.get(f.name)
            if at is not None and at > cutoff:
                young_from = i
                break
    decisions = []
    for i, f in enumerate(files):
        reasons = []
        if i == last:
            reasons.append("the current file")
        for need, at in need_at:
            if i == at:
                where = _short(need.position)
                reasons.append(
                    f"{need.who} {where} is in it"
                    if need.file is not None
                    else f"{need.who} {where} needs it and older, purged files"
                )
            elif i > at:
                reasons.append(f"{need.who} needs it")
        if i > last - keep_files:
            reasons.append(f"one of the newest {keep_files}")
        if young_from <= i < last:
            reasons.append(f"younger than {keep_hours:g} h")
        status = "kept" if reasons else ("would purge" if dry_run else "purged")
        decisions.append(
            FileDecision(f.name, f.size, f.start, closed.get(f.name), status, tuple(reasons))
        )
    return tuple(decisions)


def _short(position: Position) -> str:
    """A GTID position as its state (where it was read is beside the point here)."""
    return (position.gtid or "(empty GTID state)") if position.by_gtid else str(position)


# -- the job -----------------------------------------------------------------------------
def binlog_retention(options: RetentionOptions) -> RetentionResult:
    """Read what needs the origin's binlog, plan, and purge below it (not in a dry run)."""
    options.check()
    source = options.source
    positions = _hub_positions(options)
    doing = f"planning binlog retention on {source.host}:{source.port}"
    conn = mysql.connect(source, doing, refused=RetentionRefused,
                         grants="grant it BINLOG MONITOR, BINLOG ADMIN (to purge) and "
                         "REPLICATION SLAVE (to read when a file was created)")  # fmt: skip
    try:
        with mysql.errors(source, doing, RetentionRefused), conn.cursor() as cur:
            try:
                now, needs, files, decisions = _plan(options, positions, cur)
            except RetentionRefused as exc:
                if "nothing was purged" not in exc.fix:
                    exc.fix = (exc.fix + "; " if exc.fix else "") + "nothing was purged"
                raise
            first_kept = next(d.name for d in decisions if d.status == "kept")
            purge = first_kept if first_kept != files[0].name else None
            warnings: list[str] = []
            if purge is not None and not options.dry_run:
                log.info("PURGE BINARY LOGS TO '%s' on %s", purge, source)
                warnings = purge_to(cur, purge)
                left = {f.name for f in list_files(cur)}
                decisions = tuple(_after_purge(d, left, warnings) for d in decisions)
    finally:
        mysql.close(conn)
    result = RetentionResult(
        options.origin,
        f"{source.host}:{source.port}",
        options.dry_run,
        now,
        options.keep_files,
        options.keep_hours,
        options.ignore_targets,
        tuple(needs),
        decisions,
        purge,
        tuple(warnings),
    )
    _log(result)
    return result


def _plan(
    options: RetentionOptions, positions: list[tuple[str, Position]], cur: Any
) -> tuple[float, list[Need], list[BinlogFile], tuple[FileDecision, ...]]:
    cur.execute("SELECT @@server_id")
    server_id = int(cur.fetchone()[0])
    for replica in options.replicas:
        positions.append(_replica_need(replica, server_id, options.source))
    files = list_files(cur)
    cur.execute("SELECT UNIX_TIMESTAMP()")
    now = float(cur.fetchone()[0])
    needs = []
    for who, position in positions:
        at = needed_from(files, position)
        needs.append(Need(who, position, files[at].name if at is not None else None))
    decisions = decide(
        files,
        needs,
        keep_files=options.keep_files,
        keep_hours=options.keep_hours,
        now=now,
        closed=_closing_times(options, files, now),
        dry_run=options.dry_run,
    )
    return now, needs, files, decisions


def _after_purge(d: FileDecision, left: set[str], warnings: list[str]) -> FileDecision:
    if d.status != "purged" or d.name not in left:
        return d
    why = "; ".join(warnings) or "no warning"
    return FileDecision(
        d.name, d.size, d.start, d.closed_at, "kept", (f"the server did not purge it ({why})",)
    )


def _hub_positions(options: RetentionOptions) -> list[tuple[str, Position]]:
    origin = options.origin
    try:
        status = fetch_status(options.config, options.hub_timeout)
    except BinlogsyncError as exc:
        raise RetentionRefused(
            f"the hub's durable head for origin {origin!r} is unknown: {exc.message}",
            (exc.fix + "; " if exc.fix else "") + "nothing was purged",
        ) from exc
    return hub_positions(status, origin, options.ignore_targets)


def hub_positions(
    status: dict[str, Any], origin: str, ignore_targets: bool
) -> list[tuple[str, Position]]:
    """What the hub's STATUS says needs `origin`'s binlog: its head, and (unless
    `ignore_targets`) every attached target's checkpoint; RetentionRefused when unknown."""
    hub = status.get("hub", "the hub")
    rows = [o for o in status.get("origins", []) if o.get("origin") == origin]
    if not rows:
        known = ", ".join(str(o.get("origin")) for o in status.get("origins", []))
        raise RetentionRefused(
            f"hub {hub} has no origin {origin!r} (it knows: {known or 'none'})",
            "--origin is the origin's host name as the hub's routes name it; nothing was purged",
        )
    if rows[0].get("head") is None:
        raise RetentionRefused(
            f"the hub's durable head for origin {origin!r} is unknown: hub {hub} has none (the "
            "origin's agent never connected to it)",
            f"start {origin}'s agent and let it connect once, then run retention again; "
            "nothing was purged",
        )
    positions = [("hub head", Position.from_json(rows[0]["head"]))]
    if ignore_targets:
        return positions
    for row in status.get("targets", []):
        if row.get("origin") != origin or row.get("detached"):
            continue  # a detached target comes back by a reseed only: it needs no binlog
        if row.get("applied") is None:
            raise RetentionRefused(
                f"the checkpoint of target {row.get('target')!r} for origin {origin!r} is "
                f"unknown to hub {hub} (it never reported one: not connected yet, or nothing "
                "applied)",
                "let the target connect (or seed it), detach it (`binlogsync detach`), or pass "
                "--ignore-targets (a hub rebuilt from nothing could then not re-read what it "
                "misses); nothing was purged",
            )
        positions.append((f"target {row['target']}", Position.from_json(row["applied"])))
    return positions


def _replica_need(
    replica: DatabaseSettings, server_id: int, source: DatabaseSettings
) -> tuple[str, Position]:
    try:
        return replica_position(replica, server_id, source)
    except RetentionRefused:
        raise
    except BinlogsyncError as exc:
        raise RetentionRefused(
            f"the position of replica {replica.host}:{replica.port} is unknown: {exc.message}",
            (exc.fix + "; " if exc.fix else "") + "nothing was purged",
        ) from exc


def _closing_times(
    options: RetentionOptions, files: Sequence[BinlogFile], now: float
) -> dict[str, float]:
    """When each file was closed (the next file's creation), oldest first, up to the first
    one younger than keep_hours (all later ones are younger too)."""
    closed: dict[str, float] = {}
    if options.keep_hours <= 0:
        return closed
    cutoff = now - options.keep_hours * 3600
    for older, newer in zip(files, files[1:], strict=False):
        closed[older.name] = created_at(options.source, newer.name)
        if closed[older.name] > cutoff:
            break
    return closed


def _log(result: RetentionResult) -> None:
    what = "dry run for" if result.dry_run else "retention of"
    log.info("%s origin %s on %s", what, result.origin, result.server)
    for need in result.needs:
        log.info("needed: %s at %s, from %s", need.who, need.position, need.file or "(purged)")
    for f in result.files:
        why = f": {'; '.join(f.reasons)}" if f.reasons else ""
        log.info("%s %s%s", f.name, f.status, why)
    for warning in result.warnings:
        log.warning("PURGE: %s", warning)


def describe_time(at: float | None) -> str:
    return "" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
