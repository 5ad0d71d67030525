"""The service's virtual binlog files: where every served transaction is, durably.

The events themselves are made from the hub's log whenever they are sent (no second copy on
disk); what is kept is their place. A file is

    4       Format_description
            Gtid_list (the last GTID of every domain before this file)
            Binlog_checkpoint (the file itself)
    header_end
            transactions, in the order the indexer took them from the hub's log
    ...     Rotate (to the next file), once the file passed the size limit: then `size`

and this module keeps, in `binlog-service.sqlite3` beside the hub's log:

    meta      format, the service's server_id and file base name (changing either would make
              GTIDs and names already served mean something else: refused at start-up)
    origins   origin -> its GTID domain, the last log key indexed, the last sequence number
    files     number -> header_end, the GTID state it starts with, creation time, size once
              closed, the table filter and encoding version its transactions were made with,
              and `upto`: each origin's last log key indexed before the file was made
              (retention: everything up to there is at least as old as the file)
    txs       (file, start) -> end, origin, log key, domain, seq, commit time, indexed time

A position a subscriber holds (file, offset) or a GTID (domain-server-seq) therefore means the
same transaction after any restart of the hub, as long as this file and the hub's log live.
Files whose transactions the hub's log no longer holds all of are purged: `purged_below`.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from . import events as ev

FORMAT = "1"
ENCODING = 1  # the rendering of transactions (render.py); a new one starts a new file
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS origins (
    origin TEXT PRIMARY KEY,
    domain INTEGER NOT NULL UNIQUE,
    last_key INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    stalled TEXT
);
CREATE TABLE IF NOT EXISTS files (
    number INTEGER PRIMARY KEY,
    header_end INTEGER NOT NULL,
    state TEXT NOT NULL,
    created REAL NOT NULL,
    size INTEGER,
    filter TEXT NOT NULL,
    encoding INTEGER NOT NULL,
    upto TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS txs (
    file INTEGER NOT NULL,
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    origin TEXT NOT NULL,
    pos_key INTEGER NOT NULL,
    domain INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL,
    indexed_at REAL NOT NULL,
    PRIMARY KEY (file, start)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS txs_gtid ON txs (domain, seq);
CREATE INDEX IF NOT EXISTS txs_origin ON txs (origin, pos_key);
"""
FILE_NAME = "binlog-service.sqlite3"

GtidState = dict[int, tuple[int, int]]  # domain -> (server id, seq)


@dataclass(frozen=True, slots=True)
class FileInfo:
    number: int
    name: str
    header_end: int
    state: tuple[tuple[int, int, int], ...]  # (domain, server, seq) before the file
    created: float
    size: int | None  # None while it is the file being written
    filter: tuple[str, ...]
    encoding: int
    upto: dict[str, int] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class Tx:
    file: int
    start: int
    end: int
    origin: str
    key: int
    domain: int
    seq: int
    ts: float
    indexed_at: float


@dataclass(frozen=True, slots=True)
class OriginInfo:
    origin: str
    domain: int
    last_key: int
    last_seq: int
    stalled: str | None


def file_name(base: str, number: int) -> str:
    return f"{base}.{number:06d}"


def header(info: FileInfo, server_id: int) -> list[bytes]:
    """The events a file starts with (from offset 4), as they are in the file."""
    fde_end = 4 + len(ev.format_description(server_id, 0))
    fde = ev.format_description(server_id, fde_end)
    glist = ev.gtid_list(info.state, server_id=server_id, log_pos=0)
    glist = ev.gtid_list(info.state, server_id=server_id, log_pos=fde_end + len(glist))
    pos = fde_end + len(glist)
    cp = ev.binlog_checkpoint(info.name, server_id=server_id, log_pos=0)
    cp = ev.binlog_checkpoint(info.name, server_id=server_id, log_pos=pos + len(cp))
    return [fde, glist, cp]


def header_size(name: str, state: tuple[tuple[int, int, int], ...], server_id: int) -> int:
    return 4 + sum(
        len(e)
        for e in (
            ev.format_description(server_id, 0),
            ev.gtid_list(state, server_id=server_id, log_pos=0),
            ev.binlog_checkpoint(name, server_id=server_id, log_pos=0),
        )
    )


def rotate_size(next_name: str) -> int:
    return ev.size_of(8 + len(next_name.encode()))


class Index:
    """One connection to the index. The indexer writes (index.py's writer methods are used by
    indexer.py only); every session reads on its own."""

    def __init__(self, directory: Path, base: str = "hub-bin", writer: bool = False) -> None:
        self.path = directory / FILE_NAME
        self.base = base
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA busy_timeout=5000")
        if writer:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(_SCHEMA)
        else:
            self.db.execute("PRAGMA query_only=ON")

    def close(self) -> None:
        self.db.close()

    # -- meta ------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def claim(self, server_id: int) -> str:
        """Check (or record, the first time) what this index was made with; the service's
        uuid. Raises ConfigError when the config now says otherwise."""
        known = {k: v for k, v in self.db.execute("SELECT key, value FROM meta")}
        if known.get("format", FORMAT) != FORMAT:
            raise ConfigError(
                f"the binlog service index {self.path} has format {known['format']}, this "
                f"binlogsync writes {FORMAT}",
                "run the version that wrote it, or move the file aside (subscribers then "
                "start again from the first file)",
            )
        for key, value in (("server_id", str(server_id)), ("base", self.base)):
            if key in known and known[key] != value:
                raise ConfigError(
                    f"binlog_service: {key} is {value} in the config, but {known[key]} in "
                    f"{self.path}, whose files and GTIDs subscribers hold",
                    f"set it back to {known[key]}, or move {self.path} aside to start new "
                    "files (every subscriber must then start again)",
                )
        if "uuid" not in known:
            with self.db:
                self.db.execute("BEGIN")
                for key, value in (
                    ("format", FORMAT),
                    ("server_id", str(server_id)),
                    ("base", self.base),
                    ("uuid", str(uuid.uuid4())),
                    ("purged_below", "1"),
                ):
                    self.db.execute("INSERT OR REPLACE INTO meta VALUES (?,?)", (key, value))
            return str(self.meta("uuid"))
        return str(known["uuid"])

    def purged_below(self) -> int:
        value = self.meta("purged_below")
        return int(value) if value is not None else 1

    # -- reading ---------------------------------------------------------------------------
    def _file(self, row: Any) -> FileInfo:
        number, header_end, state, created, size, patterns, encoding, upto = row
        return FileInfo(
            int(number),
            file_name(self.base, int(number)),
            int(header_end),
            tuple((int(d), int(s), int(q)) for d, s, q in json.loads(state)),
            float(created),
            None if size is None else int(size),
            tuple(json.loads(patterns)),
            int(encoding),
            {str(o): int(k) for o, k in json.loads(upto).items()},
        )

    def files(self) -> list[FileInfo]:
        """The files a subscriber may read, oldest first."""
        rows = self.db.execute(
            "SELECT number, header_end, state, created, size, filter, encoding, upto FROM files "
            "WHERE number>=? ORDER BY number",
            (self.purged_below(),),
        ).fetchall()
        return [self._file(r) for r in rows if int(r[6]) == ENCODING]

    def file(self, number: int) -> FileInfo | None:
        row = self.db.execute(
            "SELECT number, header_end, state, created, size, filter, encoding, upto FROM files "
            "WHERE number=?",
            (number,),
        ).fetchone()
        if row is None or number < self.purged_below() or int(row[6]) != ENCODING:
            return None
        return self._file(row)

    def last_file(self) -> FileInfo | None:
        row = self.db.execute(
            "SELECT number, header_end, state, created, size, filter, encoding, upto FROM files "
            "ORDER BY number DESC LIMIT 1"
        ).fetchone()
        return None if row is None else self._file(row)

    def end_of(self, info: FileInfo) -> int:
        """Where the file's transactions end (before its Rotate, if closed): the last one's
        end, found by the primary key (a file holds a million transactions)."""
        row = self.db.execute(
            "SELECT end FROM txs WHERE file=? ORDER BY start DESC LIMIT 1", (info.number,)
        ).fetchone()
        return int(row[0]) if row is not None else info.header_end

    def txs(self, file: int, start: int, limit: int = 200) -> list[Tx]:
        """The file's transactions that start at or after `start`, in order."""
        rows = self.db.execute(
            "SELECT file, start, end, origin, pos_key, domain, seq, ts, indexed_at FROM txs "
            "WHERE file=? AND start>=? ORDER BY start LIMIT ?",
            (file, start, limit),
        ).fetchall()
        return [Tx(*r) for r in rows]

    def containing(self, file: int, pos: int) -> Tx | None:
        """The transaction that `pos` falls strictly inside, if any."""
        row = self.db.execute(
            "SELECT file, start, end, origin, pos_key, domain, seq, ts, indexed_at FROM txs "
            "WHERE file=? AND start<? ORDER BY start DESC LIMIT 1",
            (file, pos),
        ).fetchone()
        return Tx(*row) if row is not None and row[2] > pos else None

    def by_gtid(self, domain: int, seq: int) -> Tx | None:
        row = self.db.execute(
            "SELECT file, start, end, origin, pos_key, domain, seq, ts, indexed_at FROM txs "
            "WHERE domain=? AND seq>=? ORDER BY seq LIMIT 1",
            (domain, seq),
        ).fetchone()
        return None if row is None else Tx(*row)

    def first_seq(self, domain: int) -> int | None:
        """The lowest sequence number of `domain` the index still holds."""
        row = self.db.execute("SELECT MIN(seq) FROM txs WHERE domain=?", (domain,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def origins(self) -> dict[str, OriginInfo]:
        return {
            r[0]: OriginInfo(*r)
            for r in self.db.execute(
                "SELECT origin, domain, last_key, last_seq, stalled FROM origins"
            )
        }

    def state(self, server_id: int) -> GtidState:
        """The last GTID of every domain served (its GTID state, @@gtid_binlog_pos)."""
        return {
            int(d): (server_id, int(s))
            for d, s in self.db.execute("SELECT domain, last_seq FROM origins WHERE last_seq>0")
        }

    def oldest_pending(self, file: int, start: int) -> Tx | None:
        """The first transaction at or after (file, start), for a subscriber's lag."""
        columns = "file, start, end, origin, pos_key, domain, seq, ts, indexed_at"
        row = (
            self.db.execute(
                f"SELECT {columns} FROM txs WHERE file=? AND start>=? ORDER BY start LIMIT 1",
                (file, start),
            ).fetchone()
            or self.db.execute(
                f"SELECT {columns} FROM txs WHERE file>? ORDER BY file, start LIMIT 1", (file,)
            ).fetchone()
        )
        return None if row is None else Tx(*row)

    def now(self) -> float:
        return time.time()
