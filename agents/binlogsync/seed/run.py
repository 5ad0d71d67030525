"""The seed driver: tables one after another, chunks pipelined, resumable, rate-limited.

Order and safety (see the package doc for why replaying over row images is right):

- A table's first chunk empties the target's table. It goes alone: nothing else is sent until
  the target has confirmed it, so an old copy of it (sent again after a timeout) can only ever
  be applied before the table's later chunks, never after them (the hub's queue and the
  target's apply keep arrival order).
- The first chunk of a run over every routed table (no --tables) also resets the target's
  checkpoint to its snapshot; it too goes alone.
- Later chunks of a table are pipelined, at most `window` unconfirmed. When no confirmation
  comes for `timeout` seconds (the hub or the target restarted and lost them), or one comes
  for a chunk while an earlier one is unconfirmed (the hub queues and applies a seed's chunks
  in the order they came, so the earlier one was lost: a hub killed with chunks queued in
  memory), the unconfirmed chunks are read again from the last confirmed key with a fresh
  snapshot and sent again; a chunk applied twice is harmless. Each chunk names the key it
  starts after, so the hub's record never moves past a lost chunk (hub/seeds.py).
- With `--parallel N` (N > 1), N reader processes read chunks at once (readers.py): the key
  ranges of a table are found first on the primary key's index (`chunks.bound`), the readers
  read them, and the chunks are still sent in key order, so all of the above holds unchanged.
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

from ..codec import pack, unpack
from ..config import DatabaseSettings
from ..errors import ProtocolError, StaleSnapshotError, UnreachableError, UsageError
from ..hubcommands import fetch_status
from ..reconcile.connections import close, connect
from ..transport.admin import HubAccess
from ..transport.seedchunk import SeedChunk
from . import chunks, readers, rowread, sender
from .limits import DEFAULT_CHUNK_BYTES, DEFAULT_CHUNK_ROWS, DEFAULT_PARALLEL, DEFAULT_WINDOW
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
    parallel: int = DEFAULT_PARALLEL  # chunk readers (processes) at once
    max_rows_per_second: float = 0.0  # 0: no limit
    restart: bool = False
    timeout: float = 30.0  # seconds without a confirmation before unconfirmed chunks go again
    give_up: float = 900.0  # seconds without any progress before the seed stops

    def __post_init__(self) -> None:
        if (
            self.chunk_rows < 1
            or self.window < 1
            or self.chunk_bytes < 1024
            or not 1 <= self.parallel <= 64
        ):
            raise UsageError(
                "--chunk-rows and --window must be at least 1, --chunk-bytes at least 1024, "
                "--parallel from 1 to 64"
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
    parallel: int = 1  # chunk readers

    def to_json(self) -> dict[str, Any]:
        rows = sum(t.rows - (t.resumed_at or 0) for t in self.tables if not t.skipped)
        return {
            "origin": self.origin,
            "target": self.target,
            "run": self.run,
            "resumed": self.resumed,
            "parallel": self.parallel,
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
    # Keys (chunks.bound) are read with PyMySQL's converters, to go back as parameters; rows
    # are read by the readers with the codec's: values go to msgpack without being parsed.
    conn = connect(options.source, "origin")
    reading: readers.Readers | None = None
    try:
        run, resume = _resume(options, tables, records)
        report = SeedReport(
            options.origin, options.target, run, bool(resume), parallel=options.parallel
        )
        if resume:
            done = sum(1 for r in resume.values() if r["done"])
            progress.note(
                f"resuming seed run {run}: {done} of {len(tables)} tables done before "
                f"(`--restart` starts over)"
            )
        reset = options.tables is None and not resume
        reading = readers.open_readers(options.source, options.parallel)
        with sender.connect(options.config, options.origin, options.target) as link:
            driver = _Driver(options, conn, reading, link, progress, run)
            report.tables = driver.tables(tables, resume, reset)
    except pymysql.err.MySQLError as exc:
        raise UnreachableError(
            f"reading the origin's rows failed: {exc}",
            "check the origin's database and the account's SELECT grant, then run the same "
            "seed again (it goes on where it stopped)",
        ) from exc
    finally:
        if reading is not None:
            reading.close()
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


class _Planner:
    """The order in which chunks are read: table by table, and in a table key range by key
    range (with parallel readers: `chunks.bound` finds where each range of `limit` rows ends,
    so several can be read at once) or, with one reader, the next `limit` rows after the last
    chunk read (it waits for that chunk, `waiting`)."""

    def __init__(
        self,
        conn: Any,
        todo: list[tuple[SeedTable, dict[str, Any] | None]],
        ranges: bool,
        chunk_bytes: int,
    ) -> None:
        self.conn, self.todo, self.ranges, self.chunk_bytes = conn, todo, ranges, chunk_bytes
        self.number = 0
        self.index = -1
        self.after: chunks.Key | None = None
        self.first = False
        self.tail = False  # the table's last task (the rest after a key) is out
        self.waiting = False  # for that task's result, before planning anything else
        self._start(0)

    def _start(self, index: int) -> None:
        """Plan table `index` from where its record says."""
        self.index, self.tail, self.waiting = index, False, False
        if index < len(self.todo):
            record = self.todo[index][1]
            self.after = None if record is None or record["last_key"] is None else _key(record)
            self.first = record is None

    def restart(self, index: int, after: chunks.Key | None, first: bool) -> None:
        """Plan table `index` again from `after` (what was planned is dropped by the caller)."""
        self.index, self.after, self.first = index, after, first
        self.tail = self.waiting = False

    def next_task(self, limit: int) -> readers.Task | None:
        """The next chunk to read; None: none until a result is in, or none left."""
        while self.index < len(self.todo):
            if self.waiting:
                return None
            if self.tail:
                self._start(self.index + 1)
                continue
            table = self.todo[self.index][0]
            upto = None
            if self.ranges and not table.floats:  # a FLOAT key does not read back exactly
                upto = chunks.bound(self.conn, table, self.after, limit)
            self.number += 1
            task = readers.Task(
                self.number, table, self.after, upto, limit, self.first, self.chunk_bytes
            )
            self.first = False
            if upto is not None:
                self.after = upto
            else:
                self.tail = True
                self.waiting = not self.ranges or bool(table.floats)
            return task
        return None

    def result(self, index: int, got: readers.Read) -> bool:
        """The result of a table's last task so far came in; False when the table goes on
        and the planner had moved past it (the caller drops what was planned and restarts)."""
        if got.ends_table or got.task.upto is not None:
            if self.waiting and self.index == index and got.ends_table:
                self._start(index + 1)
            return True
        # The rest after a key was `limit` rows or more: the table goes on after them.
        if self.index == index and self.waiting:
            self.after, self.tail, self.waiting = got.next_after, False, False
            return True
        return False


class _Driver:
    def __init__(
        self,
        options: SeedOptions,
        conn: Any,
        readers_: readers.Readers,
        link: sender.Sender,
        progress: Progress,
        run: str,
    ) -> None:
        self.options, self.conn, self.readers, self.link, self.progress, self.run = (
            options,
            conn,
            readers_,
            link,
            progress,
            run,
        )
        self.inflight: deque[_InFlight] = deque()
        self.fresh = self.reset = False
        self.key: chunks.Key | None = None
        self.key_bytes: bytes | None = None  # self.key packed as the hub records it
        self.rows = 0
        self.sent_rows = 0
        self.planned_rows = 0
        self.began = time.monotonic()
        self.last_progress = time.monotonic()
        self.planner: _Planner | None = None
        # Tasks read ahead: with N readers, N at work and N waiting their turn to be sent.
        self.ahead = 1 if options.parallel <= 1 else 2 * options.parallel

    def tables(
        self,
        tables: Sequence[SeedTable],
        resume: dict[tuple[str, str], dict[str, Any]],
        reset: bool,
    ) -> list[TableReport]:
        reports: list[TableReport] = []
        todo: list[tuple[SeedTable, dict[str, Any] | None, TableReport]] = []
        for table in tables:
            record = resume.get((table.schema, table.table))
            out = TableReport(table.name)
            reports.append(out)
            if record is not None and record["done"]:
                out.rows, out.skipped = int(record["rows"]), True
                self.progress.note(f"{table.name}: done before ({out.rows:,} rows)")
                continue
            todo.append((table, record, out))
        self.planner = _Planner(
            self.conn,
            [(t, r) for t, r, _ in todo],
            self.options.parallel > 1,
            self.options.chunk_bytes,
        )
        for index, (table, record, out) in enumerate(todo):
            self.table(index, table, record, out, reset and index == 0)
        return reports

    def table(
        self,
        index: int,
        table: SeedTable,
        record: dict[str, Any] | None,
        out: TableReport,
        reset: bool,
    ) -> None:
        began = time.monotonic()
        # What the target has confirmed of this table: after a timeout it goes on from here.
        self.fresh, self.reset = record is None, reset
        self.key = None if record is None or record["last_key"] is None else _key(record)
        self.key_bytes = (
            None if record is None or self.key is None else bytes.fromhex(record["last_key"])
        )
        self.rows = 0 if record is None else int(record["rows"])
        started = time.time() if record is None else float(record["started"])
        out.resumed_at = None if record is None else self.rows
        self.progress.start(table.name, self.rows, max(table.estimate, self.rows))
        again = False
        while True:
            try:
                self._copy(index, table, started, out, again)
                break
            except (_Timeout, StaleSnapshotError) as exc:
                out.resent += len(self.inflight)
                if isinstance(exc, StaleSnapshotError):
                    why = "the hub no longer holds the log from a chunk's snapshot"
                elif isinstance(exc, _Lost):
                    why = "a chunk was lost (did the hub restart?)"
                else:
                    why = (
                        f"no confirmation for {self.options.timeout:.0f} s (did the hub or "
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
                again = True
        out.rows = self.rows
        out.seconds = time.monotonic() - began
        self.progress.applied(out.rows)
        self.progress.finish()

    def _copy(
        self, index: int, table: SeedTable, started: float, out: TableReport, again: bool
    ) -> None:
        """Send the table's chunks from where the target stands; returns when all are
        confirmed, raises _Timeout when confirmations stop coming."""
        assert self.planner is not None
        if again:  # read again from what the target confirmed, with fresh snapshots
            self.readers.drop()
            self.planner.restart(index, self.key, self.fresh)
        first, reset, sent_rows = self.fresh, self.reset, self.rows
        # The first chunk goes on from what the target confirmed: it may move the hub's
        # record back (rewind); every later one continues the chunk before it.
        after, rewind = self.key_bytes, True
        total = max(table.estimate, self.rows)
        while True:
            self._plan()
            got = self.readers.take()
            assert got.task.table.name == table.name, "chunks are sent table by table"
            for number, piece in enumerate(got.pieces, 1):
                sent_rows += piece.rows
                seed = SeedChunk(
                    self.run,
                    table.schema,
                    table.table,
                    first,
                    reset,
                    None if piece.last_key is None else pack(list(piece.last_key)),
                    piece.rows,
                    sent_rows,
                    max(total, sent_rows),
                    got.ends_table and number == len(got.pieces),
                    started,
                    after,
                    True,
                    rewind and not first,
                )
                after, rewind = seed.last_key, False
                chunk_id = self.link.send(got.snapshot, piece.body, seed)
                self.inflight.append(_InFlight(chunk_id, seed, time.monotonic()))
                self.sent_rows += piece.rows
                out.chunks += 1
                out.last_snapshot = str(got.snapshot)
                if first or reset:
                    self._drain(0)  # goes alone (see the module doc)
                    first = reset = False
                self._drain(self.options.window - 1)
            if not self.planner.result(index, got):
                # The table grew past the end its key ranges were planned to: read on.
                self.readers.drop()
                self.planner.restart(index, got.next_after, False)
            if got.ends_table:
                break
        self._drain(0)

    # -- reading ---------------------------------------------------------------------------
    def _plan(self) -> None:
        """Give the readers tasks until `ahead` are out (paced by the rate limit)."""
        assert self.planner is not None
        while self.readers.outstanding < self.ahead:
            limit = self._limit()
            self._pace()
            task = self.planner.next_task(limit)
            if task is None:
                return
            self.readers.submit(task)
            self.planned_rows += limit

    # -- sending and confirming ------------------------------------------------------------
    def _limit(self) -> int:
        rate = self.options.max_rows_per_second
        if rate > 0:
            return max(1, min(self.options.chunk_rows, int(rate)))
        return self.options.chunk_rows

    def _pace(self) -> None:
        """The rate limit: a chunk is read only when the rows read so far are within it."""
        rate = self.options.max_rows_per_second
        if rate <= 0:
            return
        ahead = self.planned_rows / rate - (time.monotonic() - self.began)
        if ahead > 0:
            time.sleep(ahead)  # the rate limit itself: nothing to poll

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
            if ids.index(got.id) > 0:
                # The hub applies a seed's chunks in the order they came: the ones before
                # this one were lost (it was restarted with them queued). Send them again.
                raise _Lost
            seed = self.inflight.popleft().seed
            self.fresh = self.reset = False
            self.key = None if seed.last_key is None else tuple(unpack(seed.last_key))
            self.key_bytes = seed.last_key
            self.rows = seed.done_rows
            self.last_progress = time.monotonic()
            self.progress.applied(self.rows)


class _Timeout(Exception):
    """Unconfirmed chunks waited too long: send them again."""


class _Lost(_Timeout):
    """A chunk was confirmed while an earlier one was not: send from the earlier one again."""


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
