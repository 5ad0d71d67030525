"""Consistency while writes continue: source reads pinned to a binlog position, target reads
only after the target has applied that position.

    source   START TRANSACTION WITH CONSISTENT SNAPSHOT, then the status variables
             binlog_snapshot_file / binlog_snapshot_position (MariaDB): the snapshot holds
             exactly the transactions committed before that binlog position
    target   wait until it has applied the origin's transactions up to that position, then
             read in a snapshot of its own

How a target says what it has applied (`Pin.mode`):

    checkpoint  a binlogsync target: its `binlogsync.checkpoint` row for the origin
                (pos_key >= the position's key). A checkpoint below the position also counts
                when the source's binlog holds no transaction between the two (only rotation
                and bookkeeping events, as after a binlog rotation): nothing is left to apply.
    gtid        a native MariaDB replica: MASTER_GTID_WAIT(BINLOG_GTID_POS(file, position))

On MariaDB the snapshot's position is a GTID position (BINLOG_GTID_POS of the snapshot's file
and offset), as the checkpoints are; on MySQL a binlog file position.
    none        no replication position (a static copy): read at once; only right when
                nothing writes, and the report says so

The target then holds at least the source's snapshot, possibly more (it keeps applying);
rows changed in between are what the re-check rounds in tasks.py sort out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pymysql

from ..engines.mariadb import checkpoint as checkpoints
from ..errors import PinError
from ..position import Position, parse_state
from .choices import PIN_MODES

# Binlog events that are no transaction: a target need not apply anything for them.
QUIET_EVENTS = frozenset(
    {"Format_desc", "Gtid_list", "Binlog_checkpoint", "Rotate", "Stop", "Start_encryption"}
)


@dataclass(frozen=True, slots=True)
class Pin:
    mode: str  # checkpoint | gtid | none
    origin: str | None = None

    def describe(self) -> str:
        if self.mode == "checkpoint":
            return f"checkpoint of origin {self.origin}"
        if self.mode == "gtid":
            return "native replica (GTID wait)"
        return "none (static comparison: nothing must write meanwhile)"


UNPINNED = Position("unpinned.000000", 0)  # what a snapshot reports when no target needs P


def snapshot(
    conn: Any, with_gtid: bool = False, required: bool = True, lower_bound: bool = False
) -> Position:
    """Open a consistent snapshot on the source; the binlog position it is pinned to (UNPINNED
    when the server has none and `required` is False, as for `--pin none` everywhere).

    On MariaDB the position is a GTID state, and one that names nothing the snapshot lacks.
    MariaDB's own answer can: when a group commit's write rotates the binlog, opening the new
    file sets the snapshot commit point (binlog_snapshot_file/position) to the file's start
    before that group is committed in InnoDB, so a snapshot opened in between lacks the group
    that BINLOG_GTID_POS says it holds (measured: 33 of 3,000 snapshots under 6 writers with a
    64 KiB max_binlog_size). A binlog checkpoint event does the same mid-file: the server's
    background thread writes one after a rotation and sets the commit point past its end, past
    a group that may not be committed yet (13 of 3,000 snapshots, same load, had a commit point
    at a checkpoint's end; a lower bound from one of them named a transaction its snapshot
    lacked once in CI). A commit point at the end of a group's last event was set by that
    group's commit, in commit order, and is exact. One at a file's start or at a checkpoint's
    end is taken again until a commit moves it or `_SETTLE` seconds have passed since it was
    first seen: the group before it commits right after, in the thread that wrote it.

    `lower_bound` (seeds, which open a snapshot per chunk): the GTID state read just before the
    snapshot opens, when every transaction in it is shown to be in the snapshot, instead of the
    state computed for the snapshot's binlog offset, which costs a binlog scan (BINLOG_GTID_POS
    reads the file up to the offset, on every call). A state read early is not enough by
    itself: a transaction enters @@gtid_binlog_pos when it is written to the binlog, before its
    InnoDB commit, so a snapshot opened in between lacks it, and a replay after the state
    skipped it for good (a deleted row came back). So the binlog's end is read after the state,
    and the state is used when the snapshot's commit point has reached that end (and is settled,
    as above); otherwise (a few tries, or no BINLOG MONITOR grant for SHOW MASTER STATUS) the
    exact state is computed."""
    mariadb = "mariadb" in str(getattr(conn, "server_version", "")).lower()
    if lower_bound and mariadb:
        found = _lower_bound_snapshot(conn)
        if found is not None:
            return found
    while True:
        with conn.cursor() as cur:
            file, offset = _open_snapshot(cur)
            if not file and not required:
                return UNPINNED
            if not file:
                cur.execute("ROLLBACK")
                raise _no_snapshot_position()
            gtid = None
            if with_gtid or mariadb:
                gtid = _state_at(cur, file, offset)
            if not mariadb or gtid is None:
                return Position(file, offset, gtid)
            if _settled(conn, cur, file, offset, gtid):
                return Position.of_state(gtid, file, offset)
            cur.execute("ROLLBACK")
        time.sleep(_SETTLE_POLL)  # no event to wait on: the commit point is polled


# Snapshots opened before the exact state is computed instead (each try is a few round trips;
# under 16 busy writers one in a hundred needed a second one).
_LOWER_BOUND_TRIES = 5
# How long a commit point at a binlog file's start is taken again before it is believed, and
# how often (module doc of `snapshot`). Paid once per rotation: settled points are remembered.
_SETTLE = 0.5
_SETTLE_POLL = 0.02
_settling: dict[tuple[str, str, str], float] = {}  # (server, file, state) → first seen
_starts: dict[tuple[str, str], str | None] = {}  # (server, file) → its start state, read once
_SETTLED_KEEP = 64


def _open_snapshot(cur: Any) -> tuple[str, int]:
    """START TRANSACTION WITH CONSISTENT SNAPSHOT; its binlog (file, offset), ("", 0) if none."""
    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
    status = {str(k).lower(): v for k, v in cur.fetchall()}
    file, offset = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    if not file or offset in (None, ""):
        return "", 0
    return str(file), int(offset)


def _lower_bound_snapshot(conn: Any) -> Position | None:
    """A snapshot and the GTID state read before it, when all of that state is in it; None
    (and no transaction open) when that cannot be shown."""
    tries = 0
    while tries < _LOWER_BOUND_TRIES:
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            before = str(cur.fetchone()[0] or "")
            try:
                cur.execute("SHOW MASTER STATUS")
                row = cur.fetchone()
            except pymysql.err.OperationalError:  # no BINLOG MONITOR grant: no end to test
                return None
            if row is None:
                return None
            logged_to = _binlog_order(str(row[0]), int(row[1]))
            file, offset = _open_snapshot(cur)
            reached = bool(file) and _binlog_order(file, offset) >= logged_to
            if reached and _settled(conn, cur, file, offset, before):
                return Position.of_state(before, file, offset)
            cur.execute("ROLLBACK")
        if reached:
            time.sleep(_SETTLE_POLL)  # a file's start, settling: no event to wait on
        else:
            tries += 1
    return None


def _state_at(cur: Any, file: str, offset: int) -> str | None:
    """The GTID state at a binlog offset (4: the file's start); None when the file is gone."""
    cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, int(offset)))
    value = cur.fetchone()[0]
    return None if value is None else str(value)


def _settled(conn: Any, cur: Any, file: str, offset: int, state: str) -> bool:
    """Whether a snapshot whose commit point is (`file`, `offset`), and which holds every
    transaction of `state` that was committed, holds all of them: yes when `state` has a
    transaction of `file` and the commit point is not a checkpoint's end (it is a group
    commit's), or when it has been the same point for `_SETTLE` seconds."""
    server = _server(conn)
    if (server, file) not in _starts:  # a file's start never changes: one query per file
        _starts[(server, file)] = _state_at(cur, file, 4)
        _forget_oldest(_starts)
    start = _starts[(server, file)]
    if start is None:
        return True  # the file is gone: the caller's state is computed, nothing to wait for
    if _beyond(state, start):
        if not _ends_at_checkpoint(conn, cur, file, offset):
            return True
    else:
        number = file.rpartition(".")[2]
        if not number.isdigit() or int(number) <= 1:
            return True  # the server's first file: no rotation, so nothing waits to commit
    now = time.monotonic()
    first = _settling.setdefault((server, file, state), now)
    _forget_oldest(_settling)
    return now - first >= _SETTLE


# A Binlog_checkpoint event: the common header, the name's length, the name, its checksum.
_EVENT_HEADER, _CHECKPOINT_NAME_LENGTH = 19, 4
_checksums: dict[str, int] = {}  # server → the bytes of an event's checksum (0 or 4)
_ACCESS_DENIED = 1227  # ER_SPECIFIC_ACCESS_DENIED_ERROR: SHOW BINLOG EVENTS needs BINLOG MONITOR


def _ends_at_checkpoint(conn: Any, cur: Any, file: str, offset: int) -> bool:
    """Whether the binlog event that ends at `offset` is a checkpoint (which names a file of
    the same length as `file`). SHOW BINLOG EVENTS reads that one event where the privilege
    allows it; without BINLOG MONITOR, BINLOG_GTID_POS says whether a checkpoint's length
    before `offset` is an event's start (it answers only at event boundaries, and nothing else
    ending where a commit point is has that length: a group ends with its 31-byte Xid)."""
    server = _server(conn)
    if server not in _checksums:
        cur.execute("SELECT @@binlog_checksum")
        _checksums[server] = 0 if str(cur.fetchone()[0]).upper() == "NONE" else 4
    start = offset - (_EVENT_HEADER + _CHECKPOINT_NAME_LENGTH + len(file) + _checksums[server])
    if start < 4:
        return False
    try:
        cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(start)} LIMIT 1", (file,))
        row = cur.fetchone()
    except pymysql.err.MySQLError as exc:
        if not exc.args or exc.args[0] != _ACCESS_DENIED:
            return False  # not an event's start ("wrong offset"): no checkpoint ends there
        return _state_at(cur, file, start) is not None
    return row is not None and row[2] == "Binlog_checkpoint" and int(row[4]) == offset


def _server(conn: Any) -> str:
    """The key the per-server memories (file starts, settling points, checksums) use."""
    return f"{getattr(conn, 'host', '')}:{getattr(conn, 'port', '')}"


def _forget_oldest(remembered: dict[Any, Any]) -> None:
    if len(remembered) > _SETTLED_KEEP:
        del remembered[next(iter(remembered))]


def _beyond(state: str, start: str) -> bool:
    """Whether `state` holds a transaction that `start` (an earlier state) does not."""
    earlier = parse_state(start)
    return any(seq > earlier.get(d, (0, -1))[1] for d, (_s, seq) in parse_state(state).items())


def _binlog_order(file: str, offset: int) -> tuple[int, int]:
    """Binlog positions of one server in order: the file's sequence number, then the offset."""
    number = file.rpartition(".")[2]
    return (int(number) if number.isdigit() else -1, offset)


def _no_snapshot_position() -> PinError:
    return PinError(
        "the source has no binlog snapshot position (binlog_snapshot_file is empty: "
        "log_bin is off, or the server is not MariaDB)",
        "enable the binary log on the source, or compare a quiet source with --pin none",
    )


def end(conn: Any) -> None:
    with conn.cursor() as cur:
        cur.execute("COMMIT")


def detect(conn: Any, requested: str, origin: str | None, label: str) -> Pin:
    """The pin for one target: `requested` unless it is auto, then what the target offers."""
    if requested not in PIN_MODES:
        raise PinError(f"--pin must be one of {', '.join(PIN_MODES)}, not {requested!r}")
    if requested == "none":
        return Pin("none")
    if requested in ("auto", "checkpoint"):
        origins = _checkpoint_origins(conn)
        if origins is not None and (origins or requested == "checkpoint"):
            return Pin("checkpoint", choose_origin(origins, origin, label))
        if requested == "checkpoint":
            raise PinError(
                f"{label} has no binlogsync.checkpoint table: it is not a binlogsync target",
                "use --pin gtid for a native replica or --pin none for a static copy",
            )
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW ALL SLAVES STATUS" if _is_mariadb(cur) else "SHOW SLAVE STATUS")
        replica = cur.fetchone()
    if replica is not None:
        io, sql = replica.get("Slave_IO_Running"), replica.get("Slave_SQL_Running")
        if io != "Yes" or sql != "Yes":
            raise PinError(
                f"{label} is a native replica that is not replicating (IO thread: {io}, SQL "
                f"thread: {sql}; {replica.get('Last_IO_Error') or replica.get('Last_SQL_Error') or 'no error shown'}), "
                "so it would never reach the source's snapshot",
                "fix replication (SHOW SLAVE STATUS, START SLAVE), or compare it as a static copy "
                "with --pin none",
            )
        return Pin("gtid")
    if requested == "gtid":
        raise PinError(f"{label} is not a native replica", "use --pin none for a static copy")
    return Pin("none")


def choose_origin(origins: list[str], origin: str | None, label: str) -> str:
    """The origin whose checkpoint pins a target: `origin`, or the only one it has."""
    if origin is None:
        if len(origins) != 1:
            raise PinError(
                f"{label} applies changes of {len(origins)} origins "
                f"({', '.join(origins) or 'none yet'}); which one is the source?",
                "name it with --origin NAME (the origin's host name in the hub config)",
            )
        origin = origins[0]
    if origin not in origins:
        raise PinError(
            f"{label} has no checkpoint for origin {origin!r} "
            f"(it has: {', '.join(origins) or 'none'})",
            "check --origin, and that the target's agent has applied something of it",
        )
    return origin


def _is_mariadb(cur: Any) -> bool:
    cur.execute("SELECT VERSION() AS v")
    row = cur.fetchone()
    return "mariadb" in str(row["v"] if isinstance(row, dict) else row[0]).lower()


def _checkpoint_origins(conn: Any) -> list[str] | None:
    with conn.cursor() as cur:
        found = checkpoints.read_all(cur)
    return None if found is None else sorted(found)


def applied(conn: Any, origin: str) -> Position | None:
    with conn.cursor() as cur:
        return checkpoints.read(cur, origin)


def nothing_between(source: Any, after: Position, upto: Position, max_events: int = 100) -> bool:
    """True when the source's binlog holds no transaction from `after` up to `upto`."""
    if after >= upto:
        return True
    try:
        with source.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [r[0] for r in cur.fetchall()]
            if after.file not in files or upto.file not in files:
                return False
            for name in files[files.index(after.file) : files.index(upto.file) + 1]:
                start = after.offset if name == after.file else 4
                cur.execute(
                    f"SHOW BINLOG EVENTS IN %s FROM {int(start)} LIMIT {max_events}", (name,)
                )
                events = cur.fetchall()
                for _log, pos, kind, *_rest in events:
                    if name == upto.file and int(pos) >= upto.offset:
                        return True
                    if kind not in QUIET_EVENTS:
                        return False
                if len(events) >= max_events:
                    return False
    except pymysql.err.MySQLError:
        return False  # cannot tell (privileges, purged file): keep waiting for the checkpoint
    return True


class Waiter:
    """Waits until one target has applied a source position (one per target connection)."""

    def __init__(
        self,
        pin: Pin,
        target: Any,
        label: str,
        timeout: float,
        source_factory: Any = None,
        read_applied: Callable[[Any, str], Position | None] | None = None,
    ) -> None:
        self.pin, self.target, self.label, self.timeout = pin, target, label, timeout
        self._applied = read_applied or applied  # the target's own checkpoint reader
        self._source_factory = source_factory  # opens a source session for nothing_between
        self._source: Any = None
        self._reached: Position | None = None  # a position known to be applied

    def close(self) -> None:
        if self._source is not None:
            from .connections import close

            close(self._source)
            self._source = None

    def wait(self, position: Position) -> None:
        if self.pin.mode == "none":
            return
        if self._reached is not None and self._reached >= position:
            return
        if self.pin.mode == "gtid":
            self._wait_gtid(position)
        else:
            self._wait_checkpoint(position)
        self._reached = position

    def _wait_gtid(self, position: Position) -> None:
        if not position.gtid:
            raise PinError("internal: a GTID pin needs the snapshot's GTID position")
        with self.target.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (position.gtid, self.timeout))
            if cur.fetchone()[0] != 0:
                raise PinError(
                    f"{self.label} has not replicated the source's GTID {position.gtid} within "
                    f"{self.timeout:.0f} s",
                    "check SHOW SLAVE STATUS on the replica (is it running?)",
                )

    def _wait_checkpoint(self, position: Position) -> None:
        assert self.pin.origin is not None
        deadline = time.monotonic() + self.timeout
        pause, last_check = 0.001, time.monotonic() - 0.18  # first look after ~20 ms
        while True:
            current = self._applied(self.target, self.pin.origin)
            if current is not None and current.key >= position.key:
                return
            now = time.monotonic()
            if (
                current is not None
                and not current.by_gtid  # GTID checkpoints move over empty transactions too
                and not position.by_gtid
                and now - last_check > 0.2
                and self._source_factory
            ):
                last_check = now
                if self._source is None:
                    self._source = self._source_factory()
                if nothing_between(self._source, current, position):
                    return
            if now > deadline:
                raise PinError(
                    f"{self.label} has applied origin {self.pin.origin} only up to "
                    f"{current or 'nothing'} after {self.timeout:.0f} s, but the source "
                    f"snapshot is at {position}",
                    "is the target's agent running and the hub reachable? `binlogsync status` "
                    "shows its backlog and last error (or raise --wait-timeout)",
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
