"""The indexer: follows the hub's log and gives each new transaction its place in the files.

One thread. Each step takes what the hub stored since the last step, origin by origin (the
order it takes them in becomes the files' order, fixed from then on), renders each served
transaction once to learn its size (keeping the bytes in the cache for subscribers that
follow live), gives it the next GTID of its origin's domain and the next offset of the file
being written, closes the file with a Rotate when it passed `file_bytes`, and commits all of
it in one durable transaction (synchronous=FULL) before any subscriber may see it.

A transaction the service cannot render (no Table_map for its table: captured by an older
origin agent) stops its origin here with the reason, shown in `status`: the files never skip
a transaction silently. Transactions with no change for the service's table filter take no
GTID and no room.

Every few seconds it also works out which files are purged (the hub compacted a transaction
of theirs) and what the hub may compact: at most what was indexed `retain_hours` ago.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..hub.tablemaps import MapReader
from ..position import Position
from ..tables import TableFilter
from .index import ENCODING, FileInfo, Index, file_name, header_size, rotate_size
from .render import NothingServed, Placement, Renderer, Shapes
from .source import LogSource, Stored
from .tablemap import MapError

log = logging.getLogger("binlogsync.binlogservice")

STEP_ROWS = 500  # transactions read per origin per step
CACHE_BYTES = 64 * 1024 * 1024
CACHE_TX_BYTES = 1024 * 1024  # a larger transaction is rendered again when sent
PURGE_INTERVAL = 5.0
_STALL_RETRY = 10.0


class EventCache:
    """Rendered transactions by (file, start), bounded by bytes, shared by all sessions."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[int, int], tuple[bytes, ...]] = OrderedDict()
        self._bytes = 0
        self.hits = self.misses = 0

    def get(self, file: int, start: int) -> tuple[bytes, ...] | None:
        with self._lock:
            found = self._items.get((file, start))
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
            return found

    def put(self, file: int, start: int, chunk: tuple[bytes, ...]) -> None:
        size = sum(map(len, chunk))
        if size > CACHE_TX_BYTES:
            return
        with self._lock:
            if (file, start) in self._items:
                return
            self._items[(file, start)] = chunk
            self._bytes += size
            while self._bytes > self.limit and self._items:
                _key, old = self._items.popitem(last=False)
                self._bytes -= sum(map(len, old))


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    server_id: int
    origins: tuple[str, ...]
    tables: TableFilter
    domains: dict[str, int]
    file_bytes: int
    retain_seconds: float
    base: str = "hub-bin"


class Indexer:
    def __init__(
        self,
        settings: Settings,
        cache: EventCache,
        shapes: Shapes,
        maps_version: Callable[[], int] | None = None,
    ) -> None:
        self.settings = settings
        self.cache, self.shapes = cache, shapes
        self.index = Index(settings.data_dir, settings.base, writer=True)
        self.uuid = self.index.claim(settings.server_id)
        self.source = LogSource(settings.data_dir / "hub.sqlite3")
        self.maps = MapReader(self.source.db, maps_version)
        self.renderer = Renderer(settings.server_id, settings.tables, self.maps.at, shapes)
        self.changed = threading.Condition()
        self.generation = 0  # steps that added something (sessions wait for it to move)
        self.bounds: dict[str, Position | None] = {}  # what the hub may compact, per origin
        self._next_purge = 0.0
        self._stalled_at: dict[str, float] = {}
        self._check_domains()

    def close(self) -> None:
        self.index.close()
        self.source.close()

    def _check_domains(self) -> None:
        known = self.index.origins()
        for origin, domain in self.settings.domains.items():
            info = known.get(origin)
            if info is not None and info.domain != domain:
                raise ConfigError(
                    f"binlog_service.domains gives {origin} the GTID domain {domain}, but its "
                    f"transactions were served in domain {info.domain} ({self.index.path})",
                    f"set it back to {info.domain}: subscribers hold GTIDs of that domain",
                )
            clash = [o for o, i in known.items() if i.domain == domain and o != origin]
            if clash:
                raise ConfigError(
                    f"binlog_service.domains gives {origin} the GTID domain {domain}, which "
                    f"{clash[0]}'s transactions were served in",
                    "give every origin a domain of its own",
                )
        if len(set(self.settings.domains.values())) != len(self.settings.domains):
            raise ConfigError("binlog_service.domains gives two origins the same domain")

    # -- one step ---------------------------------------------------------------------------
    def step(self) -> int:
        """Index what is new; returns how many transactions got a place."""
        s = self.settings
        now = time.time()
        origins = self.index.origins()
        seqs = {i.domain: i.last_seq for i in origins.values()}  # the GTID state, as it grows
        keys = {o: i.last_key for o, i in origins.items()}  # what is indexed, as it grows
        last = self.index.last_file()
        new_files: list[FileInfo] = []
        closes: list[tuple[int, int]] = []
        end = self.index.end_of(last) if last is not None else 0
        if (
            last is None
            or tuple(s.tables.patterns) != last.filter
            or last.encoding != ENCODING
            # Retention goes by files: one is closed after a quarter of retain_hours, so that
            # a quiet service's log is compacted all the same.
            or (end > last.header_end and now - last.created > s.retain_seconds / 4)
        ):
            if last is not None and last.size is None:
                closes.append((last.number, self._close_size(last.number, end)))
            current = self._new_file(1 if last is None else last.number + 1, seqs, keys, now)
            new_files.append(current)
            end = current.header_end
        else:
            current = last
        rows: list[tuple[object, ...]] = []
        fresh: list[tuple[int, int, tuple[bytes, ...]]] = []
        updates: dict[str, tuple[int, int, int, str | None]] = {}
        for origin in s.origins:
            info = origins.get(origin)
            if info is None:
                domain = self._domain(origin, {i.domain for i in origins.values()} | {
                    u[0] for u in updates.values()
                })  # fmt: skip
                floor = self.source.floor(origin)
                if floor is None:
                    continue  # the hub has not registered it yet
                last_key, last_seq, before = floor, 0, None
            else:
                domain, last_key, last_seq, before = (
                    info.domain, info.last_key, info.last_seq, info.stalled,
                )  # fmt: skip
                if before and now < self._stalled_at.get(origin, 0.0) + _STALL_RETRY:
                    continue
            stalled: str | None = None
            for stored in self.source.after(origin, last_key, STEP_ROWS):
                if not self._wanted(origin, stored):
                    last_key = keys[origin] = stored.key
                    continue
                try:
                    size, chunk = self._measure(
                        origin, stored, Placement(domain, last_seq + 1, end)
                    )
                except MapError as exc:
                    stalled = f"{exc.message} — {exc.fix}" if exc.fix else exc.message
                    break
                except LookupError as exc:  # a part compacted while read
                    stalled = str(exc)
                    break
                last_key = keys[origin] = stored.key
                if size == 0:  # every change filtered out
                    continue
                last_seq = seqs[domain] = last_seq + 1
                rows.append((current.number, end, end + size, origin, stored.key, domain,
                             last_seq, stored.timestamp, now))  # fmt: skip
                if chunk is not None:
                    fresh.append((current.number, end, chunk))
                end += size
                if end >= s.file_bytes:
                    closes.append((current.number, self._close_size(current.number, end)))
                    current = self._new_file(current.number + 1, seqs, keys, now)
                    new_files.append(current)
                    end = current.header_end
            if stalled:
                self._stalled_at[origin] = now
                if stalled != before:
                    log.error("binlog service: %s's transactions stop here: %s", origin, stalled)
            elif before:
                log.info("binlog service: %s's transactions are served again", origin)
            if info is None or stalled != before or last_key != info.last_key:
                updates[origin] = (domain, last_key, last_seq, stalled)
        if not (updates or new_files or closes):
            self._maybe_purge(now)
            return 0
        with self.index.db:
            db = self.index.db
            db.execute("BEGIN")
            db.executemany("INSERT INTO files VALUES (?,?,?,?,?,?,?,?)", map(_file_row, new_files))
            for number, size in closes:  # after: a file may be made and closed in one step
                db.execute("UPDATE files SET size=? WHERE number=?", (size, number))
            db.executemany("INSERT INTO txs VALUES (?,?,?,?,?,?,?,?,?)", rows)
            for origin, (domain, last_key, last_seq, stalled) in updates.items():
                db.execute(
                    "INSERT INTO origins VALUES (?,?,?,?,?) ON CONFLICT(origin) DO UPDATE SET "
                    "last_key=excluded.last_key, last_seq=excluded.last_seq, "
                    "stalled=excluded.stalled",
                    (origin, domain, last_key, last_seq, stalled),
                )
        for number, start, chunk in fresh:
            self.cache.put(number, start, chunk)
        if rows or closes or new_files:
            with self.changed:
                self.generation += 1
                self.changed.notify_all()
        self._maybe_purge(now)
        return len(rows)

    def _wanted(self, origin: str, stored: Stored) -> bool:
        tables = stored.tables
        if stored.parts:
            found = self.source.part_tables(origin, stored.begin_key or 0)
            tables = None if any(t is None for t in found) else tuple(
                n for t in found if t for n in t
            )  # fmt: skip
        return self.renderer.wanted_tables(tables) is not False

    def _measure(
        self, origin: str, stored: Stored, place: Placement
    ) -> tuple[int, tuple[bytes, ...] | None]:
        """The rendered size of a transaction (0: nothing served) and its events while they
        stay small enough to cache."""
        size = 0
        kept: list[bytes] | None = []
        try:
            for events in self.render(origin, stored, place):
                size += sum(map(len, events))
                if kept is not None:
                    kept.extend(events)
                    if size > CACHE_TX_BYTES:
                        kept = None
        except NothingServed:
            return 0, None
        return size, (tuple(kept) if kept is not None else None)

    def render(self, origin: str, stored: Stored, place: Placement) -> Iterator[list[bytes]]:
        return self.renderer.render(
            origin, stored.key, stored.timestamp, self.source.bodies(origin, stored), place
        )

    # -- files ------------------------------------------------------------------------------
    def _new_file(
        self, number: int, seqs: dict[int, int], keys: dict[str, int], now: float
    ) -> FileInfo:
        s = self.settings
        name = file_name(s.base, number)
        state = tuple(sorted((d, s.server_id, q) for d, q in seqs.items() if q > 0))
        return FileInfo(
            number, name, header_size(name, state, s.server_id), state, now, None,
            tuple(s.tables.patterns), ENCODING, dict(keys),
        )  # fmt: skip

    def _close_size(self, number: int, end: int) -> int:
        return end + rotate_size(file_name(self.settings.base, number + 1))

    def _domain(self, origin: str, taken: set[int]) -> int:
        configured = self.settings.domains.get(origin)
        if configured is not None:
            return configured
        taken = taken | set(self.settings.domains.values())
        domain = 1
        while domain in taken:
            domain += 1
        return domain

    # -- purge and retention ------------------------------------------------------------------
    def _maybe_purge(self, now: float) -> None:
        if now < self._next_purge:
            return
        self._next_purge = now + PURGE_INTERVAL
        self.purge()
        self.retention(now)

    def purge(self) -> int:
        """Mark purged the oldest files some transaction of which the hub no longer holds;
        returns the first file still whole. The file being written is closed first when it
        goes too (there is always a file to start from)."""
        floors = {o: self.source.floor(o) for o in self.index.origins()}
        below = self.index.purged_below()
        files = self.index.files()
        for info in files:
            gone = False
            for origin, lowest in self.index.db.execute(
                "SELECT origin, MIN(pos_key) FROM txs WHERE file=? GROUP BY origin",
                (info.number,),
            ).fetchall():
                floor = floors.get(origin)
                if floor is not None and lowest <= floor:
                    gone = True
            if not gone:
                break
            below = info.number + 1
        if below == self.index.purged_below():
            return below
        now = time.time()
        with self.index.db:
            db = self.index.db
            db.execute("BEGIN")
            last = files[-1] if files else None
            if last is not None and below > last.number:
                known = self.index.origins()
                seqs = {i.domain: i.last_seq for i in known.values()}
                keys = {o: i.last_key for o, i in known.items()}
                db.execute(
                    "UPDATE files SET size=? WHERE number=? AND size IS NULL",
                    (self._close_size(last.number, self.index.end_of(last)), last.number),
                )
                db.execute(
                    "INSERT INTO files VALUES (?,?,?,?,?,?,?,?)",
                    _file_row(self._new_file(last.number + 1, seqs, keys, now)),
                )
            db.execute("UPDATE meta SET value=? WHERE key='purged_below'", (str(below),))
            db.execute("DELETE FROM txs WHERE file<?", (below,))
        with self.changed:
            self.generation += 1
            self.changed.notify_all()
        log.info(
            "binlog service: files before %s are purged (the hub compacted what they held)",
            file_name(self.settings.base, below),
        )
        return below

    def retention(self, now: float) -> None:
        """What the hub may compact of each origin: what the newest file made `retain_hours`
        ago or earlier had indexed before it was made (`upto`): all of that is at least that
        old, served or filtered out. Never what is not indexed yet. Bounds only rise."""
        cutoff = now - self.settings.retain_seconds
        aged = [f for f in self.index.files() if f.created <= cutoff]
        if not aged:
            return
        upto = aged[-1].upto
        bounds = dict(self.bounds)
        for origin in self.settings.origins:
            key = upto.get(origin)
            known = bounds.get(origin)
            if key is None or key < 0 or (known is not None and known.key >= key):
                continue
            stored = self.source.at(origin, key)
            if stored is not None:
                bounds[origin] = stored.position
            else:  # filtered out, or compacted already: the floor names it
                floor = self.source.floor(origin)
                if floor is not None and floor >= key:
                    continue
                bounds[origin] = self._position_of(origin, key)
        self.bounds = bounds

    def _position_of(self, origin: str, key: int) -> Position | None:
        """The position of the newest stored transaction of `origin` at or below `key`."""
        row = self.source.db.execute(
            "SELECT position FROM log WHERE origin=? AND pos_key<=? ORDER BY pos_key DESC LIMIT 1",
            (origin, key),
        ).fetchone()
        return None if row is None else Position.from_json(json.loads(row[0]))


def _file_row(info: FileInfo) -> tuple[object, ...]:
    return (info.number, info.header_end, json.dumps([list(i) for i in info.state]),
            info.created, None, json.dumps(list(info.filter)), info.encoding,
            json.dumps(info.upto))  # fmt: skip
