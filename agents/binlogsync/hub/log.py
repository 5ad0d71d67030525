"""The hub's durable store: one log of transactions per origin, and one cursor per target.

SQLite in WAL mode with `synchronous=FULL`: when `append` returns, the transactions survive a
crash of the hub or of the machine, so the hub may acknowledge them. The log is keyed by
(origin, position key): a re-sent transaction at or below the origin's head is dropped, which
is what makes re-reading the binlog after a client restart harmless.

Tables
    meta           the log's identity: `epoch`, a random id made with the log; a hub whose data
                   directory was lost makes a new one, and targets' checkpoints name the epoch
                   that delivered them
    origins        origin → head position (the last durable transaction), floor (the log holds
                   everything after it: the registration point, raised by compaction), counters
    log            (origin, pos_key) → running count `seq`, commit time, payload (msgpack bytes);
                   a transaction stored in parts has an empty payload, `parts` = how many, and
                   `begin_key` naming them
    parts          (origin, begin_key, number) → payload: the parts of large transactions, and
                   the parts of the one still arriving (begin_key at or above the head)
    cursors        (target, origin) → last position the target has applied (as it reported)
    capture_skips  every explicit `capture-skip`: what range of the binlog was not captured, why
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..frozen import maker
from ..position import Position, gtid_position

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS origins (
    origin TEXT PRIMARY KEY,
    head_key INTEGER NOT NULL,
    head TEXT NOT NULL,
    registered_at REAL NOT NULL,
    appended INTEGER NOT NULL DEFAULT 0,
    head_ts REAL,
    floor_key INTEGER NOT NULL DEFAULT -1,
    floor TEXT
);
CREATE TABLE IF NOT EXISTS log (
    origin TEXT NOT NULL,
    pos_key INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    position TEXT NOT NULL,
    ts REAL NOT NULL,
    payload BLOB NOT NULL,
    parts INTEGER NOT NULL DEFAULT 0,
    begin_key INTEGER,
    tables TEXT,
    PRIMARY KEY (origin, pos_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS parts (
    origin TEXT NOT NULL,
    begin_key INTEGER NOT NULL,
    number INTEGER NOT NULL,
    payload BLOB NOT NULL,
    tables TEXT,
    PRIMARY KEY (origin, begin_key, number)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cursors (
    target TEXT NOT NULL,
    origin TEXT NOT NULL,
    pos_key INTEGER NOT NULL,
    position TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (target, origin)
);
CREATE TABLE IF NOT EXISTS capture_skips (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    origin TEXT NOT NULL,
    skipped_from TEXT,
    skipped_to TEXT NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL
);
"""
# The layout above; a log of another layout is refused, never misread. Format 3 may hold GTID
# positions (position.py), which a binlogsync of format 2 would read as file positions: a log
# of format 2 (file positions only, read the same) is marked 3 when opened, so the older
# version refuses it from then on instead of misreading it.
_FORMAT = "3"
_UPGRADES = {"2": "file positions only: read the same, marked 3 when opened"}
_UNKNOWN: Any = object()
PAGE_SIZE = 16384  # for new logs
# The parts stored last, kept in memory for delivery (`part`), which otherwise reads each one
# back from SQLite right after writing it (17 % of the hub's time in a 1M-row UPDATE).
RECENT_PART_BYTES = 32 << 20


Tables = tuple[tuple[str, str], ...]


@functools.lru_cache(maxsize=4096)
def tables_text(tables: Tables | None) -> str | None:
    """As stored; cached, since a workload touches the same few table sets over and over."""
    return None if tables is None else json.dumps(tables)


@functools.lru_cache(maxsize=4096)  # the same few texts, read back with every entry
def tables_of(text: str | None) -> Tables | None:
    return None if text is None else tuple((s, t) for s, t in json.loads(text))


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    timestamp: float
    payload: bytes
    parts: int = 0  # > 0: stored in parts under `begin_key`
    begin_key: int | None = None
    tables: Tables | None = None  # the (schema, table)s its changes touch, when known


# Entry(...) through its slots (frozen.py): `read` makes one per stored transaction, 1,000 at
# a time for a lagging target.
make_entry = maker(Entry)


@dataclass(frozen=True, slots=True)
class StagedPart:
    """A part of a large transaction as it arrives (`end` is set on the last one)."""

    begin_key: int
    number: int
    payload: bytes
    end: Position | None
    timestamp: float
    tables: Tables | None = None


@dataclass(frozen=True, slots=True)
class OriginHead:
    origin: str
    head: Position
    head_ts: float | None
    appended: int
    floor: Position | None  # the log holds everything of the origin after it


@dataclass(slots=True)
class _Plan:
    """One origin's append, worked out before the commit that writes it (HubLog._plan)."""

    origin: str
    current: OriginHead | None
    staged: Any  # (begin_key, number) of the parts arriving, None, or _UNKNOWN (not read)
    rows: list[tuple[object, ...]] = field(default_factory=list)  # log rows
    parts: list[tuple[object, ...]] = field(default_factory=list)  # parts rows
    wipe: int | None = None  # the parts from this begin_key on are dropped first
    last: Entry | StagedPart | None = None
    last_position: Position | None = None
    appended: int = 0


# What `_text` writes for a GTID position whose file name needs no JSON escape.
_GTID_TEXT = re.compile(
    r'\{"file": "([^"\\]*)", "offset": ([0-9]{1,13}), "gtid": "([^"\\]*)", "scheme": "gtid"\}'
)


def _pos(text: str) -> Position:
    """`Position.from_json(json.loads(text))`: the same checks, without the JSON parser for
    the text `_text` writes of a GTID position (a backlog's delivery reads one per entry)."""
    stored = _GTID_TEXT.fullmatch(text)
    if stored is not None:
        file, offset, gtid = stored.groups()
        position = gtid_position(file, int(offset), gtid)
        if position is not None:
            return position
    return Position.from_json(json.loads(text))


def _text(position: Position) -> str:
    """`json.dumps(position.to_json())`, exactly, at a fraction of its cost (once per stored
    transaction): the file name's text is cached, the rest is formatted directly."""
    gtid = position.gtid
    if position.scheme != "file":
        return (
            f'{{"file": {_json_text(position.file)}, "offset": {position.offset}, "gtid": '
            f'{_json_string(gtid or "")}, "scheme": "gtid"}}'
        )
    return (
        f'{{"file": {_json_text(position.file)}, "offset": {position.offset}, "gtid": '
        f"{'null' if gtid is None else _json_string(gtid)}}}"
    )


_json_string = json.encoder.encode_basestring_ascii  # what json.dumps uses for a str
_json_text = functools.lru_cache(maxsize=256)(_json_string)  # a handful of binlog files


class HubLog:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "hub.sqlite3"
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # A new log gets pages of 16 KiB: a body of a few KiB then fits its row in the log's
        # B-tree instead of an overflow page of its own, which made every append write and
        # checksum twice the pages. A log made with 4 KiB pages keeps them (the page size of an
        # existing file cannot change in WAL mode); it is read the same, only slower to append.
        self.db.execute(f"PRAGMA page_size={PAGE_SIZE}")
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self._check_format()
        self.db.executescript(_SCHEMA)
        self.epoch = self._epoch()
        # Per origin: (begin_key, last number) of the large transaction arriving now, or None.
        self._staging: dict[str, tuple[int, int] | None] = {}
        # Per origin, a number that changes whenever its stored parts may differ from what was
        # sent of them before their end was known: a transaction's first part (started anew,
        # possibly cut otherwise), a restart, a capture-skip (delivery.py's open parts).
        self._stages: dict[str, int] = {}
        # (origin, begin_key, number) → (payload, tables) of parts as committed: filled only
        # after a commit, emptied for an origin whenever its stored parts change otherwise.
        self._recent: OrderedDict[tuple[str, int, int], tuple[bytes, Tables | None]] = OrderedDict()
        self._recent_bytes = 0
        self.heads: dict[str, OriginHead] = {
            origin: OriginHead(origin, _pos(head), ts, appended, _pos(floor) if floor else None)
            for origin, head, ts, appended, floor in self.db.execute(
                "SELECT origin, head, head_ts, appended, floor FROM origins"
            )
        }

    def _check_format(self) -> None:
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master")}
        if "log" in tables and "meta" not in tables:
            raise ConfigError(
                f"the hub log {self.path} was written by binlogsync 0.1 (no epoch, no parts); "
                "this version cannot read it safely",
                "stop every agent, let the targets catch up with the old version, then move "
                "the old data_dir aside: the new hub starts a new log and restarts capture "
                "from the targets' checkpoints",
            )
        if "meta" in tables:
            row = self.db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
            if row is not None and row[0] in _UPGRADES:
                with self.db:
                    self.db.execute("UPDATE meta SET value=? WHERE key='format'", (_FORMAT,))
            elif row is not None and row[0] != _FORMAT:
                raise ConfigError(
                    f"the hub log {self.path} has format {row[0]}, this hub writes {_FORMAT}",
                    "run the binlogsync version that wrote it, or move the data_dir aside",
                )

    def _epoch(self) -> str:
        row = self.db.execute("SELECT value FROM meta WHERE key='epoch'").fetchone()
        if row is not None:
            return str(row[0])
        epoch = uuid.uuid4().hex[:16]
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("INSERT INTO meta (key, value) VALUES ('epoch', ?)", (epoch,))
            self.db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('format', ?)", (_FORMAT,)
            )
        return epoch

    def close(self) -> None:
        self.db.close()

    # -- origins ---------------------------------------------------------------------------
    def register(self, origin: str, start: Position) -> Position:
        """The first time an origin is seen, remember where its capture starts (durably)."""
        if origin not in self.heads:
            self.db.execute(
                "INSERT INTO origins (origin, head_key, head, registered_at, floor_key, floor) "
                "VALUES (?,?,?,?,?,?)",
                (origin, start.key, _text(start), time.time(), start.key, _text(start)),
            )
            self.heads[origin] = OriginHead(origin, start, None, 0, start)
        return self.heads[origin].head

    def restart(self, origin: str, start: Position) -> int:
        """Forget everything of `origin` and let its log start again after `start`.

        For a target that needs what this log never held (its checkpoint is below the floor):
        capture re-reads the binlog from there; what targets already have they skip. Returns
        how many stored transactions were dropped.
        """
        with self.db:
            self.db.execute("BEGIN")
            dropped = self.db.execute("DELETE FROM log WHERE origin=?", (origin,)).rowcount
            self.db.execute("DELETE FROM parts WHERE origin=?", (origin,))
            self.db.execute("DELETE FROM origins WHERE origin=?", (origin,))
        self.heads.pop(origin, None)
        self._staging.pop(origin, None)
        self._new_stage(origin)
        self.register(origin, start)
        return int(dropped)

    def head(self, origin: str) -> Position | None:
        known = self.heads.get(origin)
        return known.head if known else None

    def floor(self, origin: str) -> Position | None:
        """The position after which this log holds everything of `origin` (None: never seen)."""
        known = self.heads.get(origin)
        return known.floor if known else None

    @staticmethod
    def fresh(entries: Iterable[Entry], head_key: int) -> list[Entry]:
        """The entries above `head_key`, in order (what `append` would store after it)."""
        fresh = []
        for entry in entries:
            key = entry.position.key
            if key > head_key:
                head_key = key
                fresh.append(entry)
        return fresh

    def append(
        self, origin: str, items: Iterable[Entry | StagedPart]
    ) -> tuple[Position | None, int]:
        """Store what is new in one durable commit: whole transactions above the head, and
        parts of the large transaction arriving now (complete once its last part is stored).

        Returns the new head and how many transactions were new. Transactions without changes
        advance the head without taking room in the log (`payload` empty). Raises ValueError
        when a part does not continue the parts stored so far (the caller makes the origin
        send its transaction again).
        """
        result = self.append_many({origin: items})[origin]
        if isinstance(result, ValueError):
            raise result
        return result

    def append_many(
        self, batches: dict[str, Iterable[Entry | StagedPart]]
    ) -> dict[str, tuple[Position | None, int] | ValueError]:
        """`append` for several origins in one durable commit (a commit costs the hub an
        fsync whatever it holds: a hub with many origins pays it once per turn, not once per
        origin). An origin whose parts do not continue what is stored gets its ValueError
        and nothing of it is written; the others are stored."""
        results: dict[str, tuple[Position | None, int] | ValueError] = {}
        plans: list[_Plan] = []
        for origin, items in batches.items():
            try:
                plan = self._plan(origin, items)
            except ValueError as exc:
                results[origin] = exc
                continue
            if plan.parts or plan.last_position is not None:
                plans.append(plan)
            else:
                current = plan.current
                results[origin] = (current.head if current else None), 0
        if not plans:
            return results
        for plan in plans:
            self._staging.pop(plan.origin, None)  # known again once the commit below is done
        now = time.time()
        with self.db:
            self.db.execute("BEGIN")
            for plan in plans:
                self._write(plan, now)
        for plan in plans:
            results[plan.origin] = self._applied(plan)
        return results

    def _plan(self, origin: str, items: Iterable[Entry | StagedPart]) -> _Plan:
        """What appending `items` writes (nothing is written yet); ValueError when a part does
        not continue what is stored."""
        current = self.heads.get(origin)
        plan = _Plan(origin, current, self._staging.get(origin, _UNKNOWN))
        head_key = current.head.key if current else -1
        appended = current.appended if current else 0
        rows, parts, staged = plan.rows, plan.parts, plan.staged
        for item in items:
            if isinstance(item, Entry):
                if item.position.key <= head_key:
                    continue  # a duplicate: the client re-read its binlog after a restart
                head_key = item.position.key
                plan.last, plan.last_position = item, item.position
                if item.payload:
                    appended += 1
                    rows.append(
                        (origin, item.position.key, appended, _text(item.position),
                         item.timestamp, item.payload, 0, None, tables_text(item.tables))
                    )  # fmt: skip
                continue
            if item.begin_key < head_key:
                continue  # a part of a transaction stored whole already
            if staged is _UNKNOWN:
                staged = self._staged(origin, head_key)
            if item.number == 1:
                plan.wipe, staged = item.begin_key, (item.begin_key, 0)
            if staged is None or staged != (item.begin_key, item.number - 1):
                raise ValueError(
                    f"part {item.number} of the transaction at key {item.begin_key} does not "
                    f"follow what is stored ({staged})"
                )
            staged = (item.begin_key, item.number)
            parts.append(
                (origin, item.begin_key, item.number, item.payload, tables_text(item.tables))
            )
            if item.end is not None:
                if item.end.key <= head_key:
                    raise ValueError(f"the last part ends at {item.end}, not above the head")
                head_key = item.end.key
                appended += 1
                rows.append(
                    (origin, item.end.key, appended, _text(item.end), item.timestamp, b"",
                     item.number, item.begin_key, None)
                )  # fmt: skip
                plan.last, plan.last_position, staged = item, item.end, None
        plan.staged, plan.appended = staged, appended
        return plan

    def _write(self, plan: _Plan, now: float) -> None:
        """The statements of one origin's append, inside the caller's transaction."""
        origin = plan.origin
        if plan.wipe is not None:  # the origin started this transaction over: drop old parts
            self.db.execute(
                "DELETE FROM parts WHERE origin=? AND begin_key>=?", (origin, plan.wipe)
            )
        if plan.parts:
            self.db.executemany("INSERT OR REPLACE INTO parts VALUES (?,?,?,?,?)", plan.parts)
        if plan.rows:
            self.db.executemany(
                "INSERT OR IGNORE INTO log (origin, pos_key, seq, position, ts, payload, parts, "
                "begin_key, tables) VALUES (?,?,?,?,?,?,?,?,?)",
                plan.rows,
            )
        if plan.last_position is not None:
            assert plan.last is not None
            self.db.execute(
                "INSERT INTO origins (origin, head_key, head, registered_at, appended, "
                "head_ts) VALUES (?,?,?,?,?,?) ON CONFLICT(origin) DO UPDATE SET "
                "head_key=excluded.head_key, head=excluded.head, "
                "appended=excluded.appended, head_ts=excluded.head_ts",
                (origin, plan.last_position.key, _text(plan.last_position), now,
                 plan.appended, plan.last.timestamp),
            )  # fmt: skip

    def _applied(self, plan: _Plan) -> tuple[Position | None, int]:
        """After the commit: the heads and staging as the plan wrote them."""
        current = plan.current
        if plan.staged is not _UNKNOWN:
            self._staging[plan.origin] = plan.staged
        if plan.wipe is not None:
            self._new_stage(plan.origin)
        for origin, begin_key, number, payload, tables in plan.parts:
            self._remember(origin, begin_key, number, payload, tables)  # type: ignore[arg-type]
        if plan.last_position is None:
            return (current.head if current else None), 0
        assert plan.last is not None
        floor = current.floor if current else None
        self.heads[plan.origin] = OriginHead(
            plan.origin, plan.last_position, plan.last.timestamp, plan.appended, floor
        )
        return plan.last_position, plan.appended - (current.appended if current else 0)

    def _new_stage(self, origin: str) -> None:
        self._stages[origin] = self._stages.get(origin, 0) + 1
        self._forget(origin)

    def _remember(
        self, origin: str, begin_key: int, number: int, payload: bytes, tables: str | None
    ) -> None:
        key = (origin, begin_key, number)
        old = self._recent.pop(key, None)
        if old is not None:
            self._recent_bytes -= len(old[0])
        self._recent[key] = (payload, tables_of(tables))
        self._recent_bytes += len(payload)
        while self._recent_bytes > RECENT_PART_BYTES:
            _, (dropped, _) = self._recent.popitem(last=False)
            self._recent_bytes -= len(dropped)

    def _forget(self, origin: str, begin_key: int | None = None) -> None:
        """Drop the kept parts of `origin` (of its transaction at `begin_key` only)."""
        for key in [k for k in self._recent if k[0] == origin and begin_key in (None, k[1])]:
            self._recent_bytes -= len(self._recent.pop(key)[0])

    def stage(self, origin: str) -> int:
        """`arriving`'s stage, also once the transaction is stored whole."""
        return self._stages.get(origin, 0)

    def arriving(self, origin: str) -> tuple[int, int, int] | None:
        """The transaction whose parts are arriving, if any: (begin_key, how many parts are
        stored, stage). The stage changes whenever the parts stored may no longer be the ones
        read before (its first part came again, a restart, a capture-skip)."""
        staged = self._staging.get(origin, _UNKNOWN)
        if staged is _UNKNOWN:
            current = self.heads.get(origin)
            staged = self._staged(origin, current.head.key if current else -1)
            self._staging[origin] = staged
        if staged is None or staged[1] == 0:
            return None
        return staged[0], staged[1], self.stage(origin)

    def _staged(self, origin: str, head_key: int) -> tuple[int, int] | None:
        """(begin_key, highest number) of the transaction whose parts are arriving, if any,
        as stored (read once after start-up; then `_staging` keeps it)."""
        row = self.db.execute(
            "SELECT begin_key, MAX(number) FROM parts WHERE origin=? AND begin_key>=? "
            "GROUP BY begin_key ORDER BY begin_key DESC LIMIT 1",
            (origin, head_key),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def move_head(self, origin: str, to: Position, reason: str) -> Position | None:
        """Move `origin`'s head to `to` on purpose (`capture-skip`), with a record; returns the
        head it had. The binlog between them is not captured: targets skip it."""
        before = self.head(origin)
        self._staging.pop(origin, None)
        self._new_stage(origin)
        now = time.time()
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT INTO capture_skips (origin, skipped_from, skipped_to, reason, at) "
                "VALUES (?,?,?,?,?)",
                (origin, _text(before) if before else None, _text(to), reason, now),
            )
            self.db.execute("DELETE FROM parts WHERE origin=? AND begin_key>=?",
                            (origin, before.key if before else -1))  # fmt: skip
            self.db.execute(
                "INSERT INTO origins (origin, head_key, head, registered_at, floor_key, floor) "
                "VALUES (?,?,?,?,?,?) ON CONFLICT(origin) DO UPDATE SET "
                "head_key=excluded.head_key, head=excluded.head",
                (origin, to.key, _text(to), now, to.key, _text(to)),
            )
        known = self.heads.get(origin)
        self.heads[origin] = OriginHead(
            origin, to, now, known.appended if known else 0, known.floor if known else to
        )
        return before

    def capture_skips(self, origin: str) -> list[dict[str, object]]:
        return [
            {
                "from": json.loads(f) if f else None,
                "to": json.loads(t),
                "reason": reason,
                "at": at,
            }
            for f, t, reason, at in self.db.execute(
                "SELECT skipped_from, skipped_to, reason, at FROM capture_skips WHERE origin=? "
                "ORDER BY id",
                (origin,),
            )
        ]

    # -- reading -----------------------------------------------------------------------------
    def read(self, origin: str, after_key: int, limit: int) -> list[Entry]:
        rows = self.db.execute(
            "SELECT position, ts, payload, parts, begin_key, tables FROM log WHERE origin=? "
            "AND pos_key>? ORDER BY pos_key LIMIT ?",
            (origin, after_key, limit),
        ).fetchall()
        return [
            make_entry(_pos(p), ts, payload, n, b, tables_of(t)) for p, ts, payload, n, b, t in rows
        ]

    def part(self, origin: str, begin_key: int, number: int) -> tuple[bytes, Tables | None]:
        """A stored part's payload and the tables its changes touch."""
        kept = self._recent.get((origin, begin_key, number))
        if kept is not None:
            return kept
        row = self.db.execute(
            "SELECT payload, tables FROM parts WHERE origin=? AND begin_key=? AND number=?",
            (origin, begin_key, number),
        ).fetchone()
        if row is None:
            raise LookupError(f"part {number} of {origin}'s transaction at {begin_key} is gone")
        return bytes(row[0]), tables_of(row[1])

    def backlog(self, origin: str, after_key: int) -> tuple[int, float | None]:
        """How many stored transactions lie after `after_key`, and the oldest one's time.

        One index lookup, not a count: the first pending entry's running number says how many
        came after it, so a backlog of millions costs the same as one of ten.
        """
        row = self.db.execute(
            "SELECT seq, ts FROM log WHERE origin=? AND pos_key>? ORDER BY pos_key LIMIT 1",
            (origin, after_key),
        ).fetchone()
        known = self.heads.get(origin)
        if row is None or known is None:
            return 0, None
        return known.appended - row[0] + 1, row[1]

    def backlog_bytes(self, origin: str, after_key: int) -> int:
        """The stored bytes (bodies and parts) of the transactions after `after_key`: a scan
        of the backlog, so only asked for on demand (STATUS with `detail`)."""
        whole = self.db.execute(
            "SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM log WHERE origin=? AND pos_key>?",
            (origin, after_key),
        ).fetchone()[0]
        parts = self.db.execute(
            "SELECT COALESCE(SUM(LENGTH(p.payload)), 0) FROM parts p JOIN log l "
            "ON l.origin = p.origin AND l.begin_key = p.begin_key "
            "WHERE l.origin=? AND l.pos_key>? AND l.parts>0",
            (origin, after_key),
        ).fetchone()[0]
        return int(whole) + int(parts)

    def log_rows(self, origin: str) -> int:
        return int(
            self.db.execute("SELECT COUNT(*) FROM log WHERE origin=?", (origin,)).fetchone()[0]
        )

    # -- cursors ---------------------------------------------------------------------------
    def cursors(self) -> dict[tuple[str, str], Position | None]:
        return {
            (target, origin): (_pos(position) if position else None)
            for target, origin, position in self.db.execute(
                "SELECT target, origin, position FROM cursors"
            )
        }

    def save_cursors(self, cursors: dict[tuple[str, str], Position]) -> None:
        if not cursors:
            return
        now = time.time()
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany(
                "INSERT INTO cursors (target, origin, pos_key, position, updated_at) "
                "VALUES (?,?,?,?,?) ON CONFLICT(target, origin) DO UPDATE SET "
                "pos_key=excluded.pos_key, position=excluded.position, "
                "updated_at=excluded.updated_at",
                [(t, o, p.key, _text(p), now) for (t, o), p in cursors.items()],
            )

    def compact(
        self, origin: str, below: Position, rows: int = 2000, parts: int = 8
    ) -> tuple[int, bool]:
        """Drop entries every target of `origin` has applied (at or below `below`), oldest
        first, at most `rows` log rows and `parts` stored parts (about `part_bytes` each) in
        one commit, so that the hub's loop never stalls on a big delete; the floor rises with
        them. Returns (how many transactions were dropped, whether all up to `below` are)."""
        found = self.db.execute(
            "SELECT pos_key, position, begin_key, parts FROM log WHERE origin=? AND pos_key<=? "
            "ORDER BY pos_key LIMIT ?",
            (origin, below.key, rows + 1),
        ).fetchall()
        gone: list[tuple[int, str]] = []  # log rows whose parts are all deleted
        partly: str | None = None  # a transaction some of whose parts are deleted already
        done = len(found) <= rows
        with self.db:
            self.db.execute("BEGIN")
            for pos_key, position, begin_key, count in found[:rows]:
                if count:
                    if parts <= 0:
                        done = False
                        break
                    self._forget(origin, begin_key)
                    deleted = self.db.execute(
                        "DELETE FROM parts WHERE origin=? AND begin_key=? AND number IN ("
                        "SELECT number FROM parts WHERE origin=? AND begin_key=? "
                        "ORDER BY number LIMIT ?)",
                        (origin, begin_key, origin, begin_key, parts),
                    ).rowcount
                    parts -= deleted
                    left = self.db.execute(
                        "SELECT 1 FROM parts WHERE origin=? AND begin_key=? LIMIT 1",
                        (origin, begin_key),
                    ).fetchone()
                    if left is not None:
                        done = False
                        # Its log row stays until the last part goes, but the log no longer
                        # holds it whole: the floor covers it now, so a target that reports
                        # an older checkpoint later is restarted or blocked, never sent half.
                        partly = position
                        break
                gone.append((pos_key, position))
            if done:
                floor: Position | None = below
            elif partly is not None:
                floor = _pos(partly)
            else:
                floor = _pos(gone[-1][1]) if gone else None
            if gone:
                self.db.execute(
                    "DELETE FROM log WHERE origin=? AND pos_key<=?", (origin, gone[-1][0])
                )
            if floor is not None:
                self.db.execute(
                    "UPDATE origins SET floor_key=?, floor=? WHERE origin=? AND floor_key<?",
                    (floor.key, _text(floor), origin, floor.key),
                )
        known = self.heads.get(origin)
        if (
            floor is not None
            and known is not None
            and (known.floor is None or floor.key > known.floor.key)
        ):
            self.heads[origin] = OriginHead(
                origin, known.head, known.head_ts, known.appended, floor
            )
        return len(gone), done
