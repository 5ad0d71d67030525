"""The seed driver: tables one after another, chunks pipelined, resumable, rate-limited.

Order and safety (see the package doc for why replaying over row images is right):

- A table's first chunk empties the target's table. It goes alone: nothing else is sent until
  the target has confirmed it, so an old copy of it (sent again after a timeout) can only ever
  be applied before the table's later chunks, never after them (the hub's queue and the
  target's apply keep arrival order).
- The first chunk of a run over every routed table (no --tables) also resets the target's
  checkpoint to its snapshot; it too goes alone.
- Later chunks of a table are pipelined, at most `window` unconfirmed. When no confirmation
  comes for `timeout` seconds (the hub or the target restarted and lost them), the unconfirmed
  chunks are read again from the last confirmed key with a fresh snapshot and sent again;
  a chunk applied twice is harmless.
- The hub records each chunk once the target applied it. A seed that was killed asks the hub
  where each table stands and goes on from there: the tables of the interrupted run that are
  done are skipped, a table in progress resumes after its last recorded key (no emptying), the
  others start afresh. `--restart` starts a new run instead; a run whose tables are all done
  is never resumed (running seed again reseeds).
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql

from ..codec import pack, text_conversions, unpack
from ..config import DatabaseSettings
from ..errors import ProtocolError, StaleSnapshotError, UnreachableError, UsageError
from ..hubcommands import fetch_status
from ..model import Change, Transaction
from ..reconcile.connections import close, connect
from ..transport.admin import HubAccess
from ..transport.seedchunk import SeedChunk
from . import chunks, rowread, sender
from .limits import DEFAULT_CHUNK_BYTES, DEFAULT_CHUNK_ROWS, DEFAULT_WINDOW
from .progress import Progress
from .tables import SeedTable, plan, route_patterns


@dataclass(frozen=True)
class SeedOptions:
    config: HubAccess  # any config that reaches the hub (hub, client or admin), or its path
    origin: str
    target: str
    source: DatabaseSettings  # the origin's database
    tables: tuple[str, ...] | None = None  # --tables globs; None: every routed table
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    window: int = DEFAULT_WINDOW
    max_rows_per_second: float = 0.0  # 0: no limit
    restart: bool = False
    timeout: float = 30.0  # seconds without a confirmation before unconfirmed chunks go again
    give_up: float = 900.0  # seconds without any progress before the seed stops

    def __post_init__(self) -> None:
        if self.chunk_rows < 1 or self.window < 1 or self.chunk_bytes < 1024:
            raise UsageError(
                "--chunk-rows and --window must be at least 1, --chunk-bytes at least 1024"
            )
        if self.max_rows_per_second < 0:
            raise UsageError("--max-rows-per-second must be 0 (no limit) or more")


@dataclass
class TableReport:
    table: str
    rows: int = 0  # rows of the table applied on the target (all runs of this seed)
    resumed_at: int | None = None  # rows already applied when this invocation began
    skipped: bool = False  # done by an earlier invocation of the same run
    seconds: float = 0.0
    chunks: int = 0
    resent: int = 0  # chunks sent again after a timeout
    last_snapshot: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows": self.rows,
            "resumed_at": self.resumed_at,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
            "rows_per_second": round((self.rows - (self.resumed_at or 0)) / self.seconds, 1)
            if self.seconds > 0
            else None,
            "chunks": self.chunks,
            "resent": self.resent,
            "last_snapshot": self.last_snapshot,
        }


@dataclass
class SeedReport:
    origin: str
    target: str
    run: str
    resumed: bool
    tables: list[TableReport] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        rows = sum(t.rows - (t.resumed_at or 0) for t in self.tables if not t.skipped)
        return {
            "origin": self.origin,
            "target": self.target,
            "run": self.run,
            "resumed": self.resumed,
            "seconds": round(self.seconds, 3),
            "rows": rows,
            "rows_per_second": round(rows / self.seconds, 1) if self.seconds > 0 else None,
            "tables": [t.to_json() for t in self.tables],
        }


@dataclass
class _InFlight:
    id: str
    seed: SeedChunk
    sent: float


def seed(options: SeedOptions, progress: Progress | None = None) -> SeedReport:
    """Copy the tables to the target through the hub; the report says what was done."""
    progress = progress or Progress(quiet=True)
    rowread.check_library()
    status = fetch_status(options.config)
    routed = route_patterns(status.get("routes", []), options.origin, options.target)
    if not routed:
        raise UsageError(
            f"the hub has no route that sends origin {options.origin} to {options.target}",
            "check --origin and --target against the hub's [[route]] sections",
        )
    online = {h["name"] for h in status.get("hosts", []) if h.get("online")}
    if options.target not in online:
        raise UnreachableError(
            f"{options.target}'s agent is not connected to the hub, so no chunk could be applied",
            f"start {options.target}'s agent (`binlogsync status` shows who is online), then "
            "run the seed again",
        )
    records = {
        (r["schema_name"], r["table_name"]): r
        for r in status.get("seeds", [])
        if r["origin"] == options.origin and r["target"] == options.target
    }
    started = time.monotonic()
    conn = connect(options.source, "origin")
    try:
        with conn.cursor() as cur:
            tables = plan(cur, routed, options.tables)
    finally:
        close(conn)
    # Rows are read with the codec's converters: values go to msgpack without being parsed.
    conn = connect(options.source, "origin", conv=text_conversions())
    try:
        run, resume = _resume(options, tables, records)
        report = SeedReport(options.origin, options.target, run, bool(resume))
        if resume:
            done = sum(1 for r in resume.values() if r["done"])
            progress.note(
                f"resuming seed run {run}: {done} of {len(tables)} tables done before "
                f"(`--restart` starts over)"
            )
        reset = options.tables is None and not resume
        with sender.connect(options.config, options.origin, options.target) as link:
            driver = _Driver(options, conn, link, progress, run)
            for table in tables:
                record = resume.get((table.schema, table.table))
                report.tables.append(driver.table(table, record, reset))
                reset = False
    except pymysql.err.MySQLError as exc:
        raise UnreachableError(
            f"reading the origin's rows failed: {exc}",
            "check the origin's database and the account's SELECT grant, then run the same "
            "seed again (it goes on where it stopped)",
        ) from exc
    finally:
        close(conn)
    report.seconds = time.monotonic() - started
    return report


def _resume(
    options: SeedOptions,
    tables: Sequence[SeedTable],
    records: dict[tuple[str, str], dict[str, Any]],
) -> tuple[str, dict[tuple[str, str], dict[str, Any]]]:
    """(run id, records to resume from); no records: a new run."""
    mine = [records[(t.schema, t.table)] for t in tables if (t.schema, t.table) in records]
    open_ = [r for r in mine if not r["done"]]
    if options.restart or not open_:
        return uuid.uuid4().hex[:12], {}
    run = max(open_, key=lambda r: r["updated"])["run"]
    return run, {k: r for k, r in records.items() if r["run"] == run}


class _Driver:
    def __init__(
        self,
        options: SeedOptions,
        conn: Any,
        link: sender.Sender,
        progress: Progress,
        run: str,
    ) -> None:
        self.options, self.conn, self.link, self.progress, self.run = (
            options,
            conn,
            link,
            progress,
            run,
        )
        self.inflight: deque[_InFlight] = deque()
        self.fresh = self.reset = False
        self.key: chunks.Key | None = None
        self.rows = 0
        self.sent_rows = 0
        self.began = time.monotonic()
        self.last_progress = time.monotonic()

    def table(self, table: SeedTable, record: dict[str, Any] | None, reset: bool) -> TableReport:
        out = TableReport(table.name)
        if record is not None and record["done"]:
            out.rows, out.skipped = int(record["rows"]), True
            self.progress.note(f"{table.name}: done before ({out.rows:,} rows)")
            return out
        began = time.monotonic()
        # What the target has confirmed of this table: after a timeout it goes on from here.
        self.fresh, self.reset = record is None, reset
        self.key = None if record is None or record["last_key"] is None else _key(record)
        self.rows = 0 if record is None else int(record["rows"])
        started = time.time() if record is None else float(record["started"])
        out.resumed_at = None if record is None else self.rows
        self.progress.start(table.name, self.rows, max(table.estimate, self.rows))
        while True:
            try:
                self._copy(table, started, out)
                break
            except (_Timeout, StaleSnapshotError) as exc:
                out.resent += len(self.inflight)
                why = (
                    "the hub no longer holds the log from a chunk's snapshot"
                    if isinstance(exc, StaleSnapshotError)
                    else f"no confirmation for {self.options.timeout:.0f} s (did the hub or "
                    "the target restart?)"
                )
                if time.monotonic() - self.last_progress > self.options.give_up:
                    raise UnreachableError(
                        f"the seed of {table.name} made no progress for "
                        f"{self.options.give_up:.0f} s: {why}",
                        "see `binlogsync status` and the hub's log, then run the same seed again",
                    ) from exc
                self.progress.note(f"{table.name}: {why}; sending again after row {self.rows:,}")
                self.inflight.clear()
        out.rows = self.rows
        out.seconds = time.monotonic() - began
        self.progress.applied(out.rows)
        self.progress.finish()
        return out

    def _copy(self, table: SeedTable, started: float, out: TableReport) -> None:
        """Send the table's chunks from where the target stands; returns when all are
        confirmed, raises _Timeout when confirmations stop coming."""
        first, reset, after, sent_rows = self.fresh, self.reset, self.key, self.rows
        total = max(table.estimate, self.rows)
        index = [table.columns.index(c) for c in table.key]
        while True:
            self._pace()
            limit = self._limit()
            chunk = chunks.read(self.conn, table, after, limit)
            complete = len(chunk.rows) < limit
            # A chunk whose message would pass chunk_bytes goes in halves (an empty chunk
            # still goes: a table's first chunk empties the target's table).
            pieces = [chunk.rows]
            while pieces:
                rows = pieces.pop(0)
                body = pack(
                    Transaction(chunk.snapshot, time.time(), tuple(self._changes(table, rows, first)))
                    .to_wire()
                )  # fmt: skip
                if len(body) > self.options.chunk_bytes and len(rows) > 1:
                    half = len(rows) // 2
                    pieces[:0] = [rows[:half], rows[half:]]
                    continue
                sent_rows += len(rows)
                last = [rows[-1][i] for i in index] if rows else after
                seed = SeedChunk(
                    self.run,
                    table.schema,
                    table.table,
                    first,
                    reset,
                    None if last is None else pack(list(last)),
                    len(rows),
                    sent_rows,
                    max(total, sent_rows),
                    complete and not pieces,
                    started,
                )
                chunk_id = self.link.send(chunk.snapshot, body, seed)
                self.inflight.append(_InFlight(chunk_id, seed, time.monotonic()))
                self.sent_rows += len(rows)
                out.chunks += 1
                out.last_snapshot = str(chunk.snapshot)
                if first or reset:
                    self._drain(0)  # goes alone (see the module doc)
                    first = reset = False
                self._drain(self.options.window - 1)
            if chunk.last_key is not None:
                after = chunk.last_key
            if complete:
                break
        self._drain(0)

    # -- sending and confirming ------------------------------------------------------------
    def _limit(self) -> int:
        rate = self.options.max_rows_per_second
        if rate > 0:
            return max(1, min(self.options.chunk_rows, int(rate)))
        return self.options.chunk_rows

    def _pace(self) -> None:
        rate = self.options.max_rows_per_second
        if rate <= 0:
            return
        ahead = self.sent_rows / rate - (time.monotonic() - self.began)
        if ahead > 0:
            time.sleep(ahead)  # the rate limit itself: nothing to poll

    @staticmethod
    def _changes(table: SeedTable, rows: list[tuple[Any, ...]], first: bool) -> list[Change]:
        changes = []
        if first:
            changes.append(
                Change(
                    "ddl",
                    table.schema,
                    table.table,
                    statement=f"CREATE TABLE {table.name} /* binlogsync seed: the origin's "
                    "definition */",
                    definition=table.definition.to_wire(),
                )
            )
            changes.append(Change("truncate", table.schema, table.table))
        if rows:
            changes.append(
                Change("insert", table.schema, table.table, table.columns, (), tuple(rows))
            )
        return changes

    def _drain(self, keep: int) -> None:
        """Wait until at most `keep` chunks are unconfirmed; note what the target confirmed."""
        while len(self.inflight) > keep:
            oldest = self.inflight[0].sent
            left = oldest + self.options.timeout - time.monotonic()
            got = self.link.receive(left) if left > 0 else None
            if got is None:
                if time.monotonic() - oldest < self.options.timeout:
                    continue
                if time.monotonic() - self.last_progress > self.options.give_up:
                    raise UnreachableError(
                        f"no chunk of the seed was confirmed for {self.options.give_up:.0f} s "
                        f"(hub {self.link.endpoint})",
                        f"is {self.link.target}'s agent online? `binlogsync status` shows it; "
                        "then run the same seed again",
                    )
                raise _Timeout
            ids = [f.id for f in self.inflight]
            if got.id not in ids:
                continue  # a chunk given up on after a timeout, applied late: harmless
            for _ in range(ids.index(got.id) + 1):  # the target applies in arrival order
                seed = self.inflight.popleft().seed
            self.fresh = self.reset = False
            self.key = None if seed.last_key is None else tuple(unpack(seed.last_key))
            self.rows = seed.done_rows
            self.last_progress = time.monotonic()
            self.progress.applied(self.rows)


class _Timeout(Exception):
    """Unconfirmed chunks waited too long: send them again."""


def _key(record: dict[str, Any]) -> chunks.Key:
    try:
        value = unpack(bytes.fromhex(record["last_key"]))
    except (ValueError, ProtocolError) as exc:
        raise UsageError(
            f"the hub's record of {record['table']} has an unreadable key ({exc})",
            "run the seed with --restart",
        ) from exc
    if not isinstance(value, list):
        raise UsageError(f"the hub's record of {record['table']} has a malformed key", "--restart")
    return tuple(value)
