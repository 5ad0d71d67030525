"""Read an origin's binary log as a replica does and yield whole committed transactions.

This is the only module that drives `pymysqlreplication` (python-mysql-replication 1.0.x);
values.py, tablemap.py and ddl.py help it. Everything it yields is our own `Transaction`, or
`Part`s of one too large to travel whole. How events become transactions:

    MariaDB GTID event ........ starts a group (flag STANDALONE: the group is one DDL statement)
    Query BEGIN ............... starts a group (MySQL, or a server without GTIDs)
    Table_map + Rows events ... one Change per Rows event (all its rows), if the table is routed
    Query TRUNCATE / DDL ...... Change("truncate") / Change("ddl"), if the table is routed
    Query DML, Execute_load ... statement-based DML: halts the group if it may touch a routed
                                table (see below), else logged and ignored
    XID event / Query COMMIT .. ends the group: yield Transaction(position after this event)
    Query ROLLBACK ............ discards the group (rolled-back work never leaves the origin)

A group whose changes were all filtered out is still yielded, with changes=(), so that the
acknowledged position can advance. A group that wrote a row into `binlogsync.checkpoint` (or
`binlogsync.lane`: a seed chunk applied beside others) was written by our own applier
(two-way sync; the applier writes that row first) and is yielded with changes=() too: loop
prevention.

A group that grows past `part_rows` rows or `part_bytes` of row events is yielded as it is
read, as numbered `Part`s sharing the group's begin position; the last part carries the end.
Memory stays bounded whatever the transaction's size.

Capture never skips what it cannot capture faithfully. Statement-based DML that may touch a
routed table (binlog_format changed at run time; LOAD DATA comes as an Execute_load_query
event, whose text this module reads itself), a partial row image (binlog_row_image
MINIMAL or NOBLOB), a partial JSON update (MySQL) or a table without column names in the
binlog (binlog_row_metadata) stop it with `CaptureHalted`, raised once the offending group has
been read to its end, so the error can say where that transaction ends.

Positions (position.py). From a GTID position (MariaDB) the reader connects by GTID
(`is_mariadb=True, auto_position=<state>`: `@slave_connect_state`, strict mode, which also
makes the server refuse a state it does not hold) and keeps the GTID state as it reads: each
committed group sets its domain's GTID, and the transaction's position is the whole state
after it (the file and offset where it ended ride along). A sequence number that does not
rise within its domain halts capture (only a server without `gtid_strict_mode` writes one).
The state is also handed to the library as its `auto_position` after every transaction, so
a reconnect the library makes on its own resumes after the last whole transaction. From a
file position (MySQL) it uses the plain COM_BINLOG_DUMP with file + offset; MariaDB would
serve that too and still send its GTID events, as the library announces
`@mariadb_slave_capability=4`. XA transactions (XA PREPARE / XA COMMIT) are not assembled.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    ExecuteLoadQueryEvent,
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from .. import mysql
from ..config import DatabaseSettings
from ..ddl import (
    Statement,
    dml_tables,
    names_in,
    parse_statement,
    renamed_columns,
    table_renames,
)
from ..errors import CaptureHalted, PreflightError, UnreachableError
from ..model import Change, ChangeKind, Part, Row, Transaction, make_change, make_transaction
from ..position import GtidState, Position, make_position, state_text
from ..tabledef import describe
from ..tables import TableFilter
from .events import EventSource, RawGtid, RawRows, RawXid
from .rowdecode import RowsDecoder
from .tablemap import CHECKSUM_ATTRIBUTE, TableMapCache
from .values import LOST, TableShape

log = logging.getLogger(__name__)

# Our applier's markers: every target transaction it writes begins with a row of one of these
# (the checkpoint; a seed chunk applied in a lane, its lane's row: engines/mariadb/checkpoint.py).
OWN_MARKERS = frozenset({("binlogsync", "checkpoint"), ("binlogsync", "lane")})
PART_ROWS = 10_000
PART_BYTES = 8 * 1024 * 1024
_MARIADB_FL_STANDALONE = 0x01
_CACHE_LIMIT = 4096
_ROW_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
_ROW_FORMAT_FIX = "SET GLOBAL binlog_format=ROW on the origin (and in my.cnf)"
_LOAD_QUERY_POST_HEADER = 26  # a Query event's 13 bytes, then file id, offsets, dup handling


@dataclass
class _Group:
    """The events of one transaction seen so far."""

    begin: Position  # where the transaction starts: the id of its parts
    gtid: str | None = None
    needs_commit: bool = True  # False: a standalone DDL group ends at its Query event
    changes: list[Change] = field(default_factory=list)
    own: bool = False  # wrote binlogsync.checkpoint or .lane: applied by us, never sent back
    rows: int = 0  # rows and event bytes in `changes`, for cutting parts
    size: int = 0
    parts: int = 0  # parts already yielded
    halt: CaptureHalted | None = None  # read to the end, then raised


# "A slave with the same server_uuid/server_id as this slave has connected to the master"
_ER_SLAVE_SAME_ID = 4052
_SAME_ID = "same server_uuid/server_id"  # MySQL says it with error 1236


class BinlogReader:
    """Stream committed transactions from `start` on, forever, until `stop()`.

    `transactions()` blocks; `stop()` may be called from another thread and makes it return
    within about `heartbeat` seconds (the server sends a heartbeat when it has nothing else).
    `close()` releases the connections; call it from the thread that iterated, or after.
    A reader reads once: after `stop()`/`close()`, make a new one at the acknowledged position.
    """

    def __init__(
        self,
        db: DatabaseSettings,
        server_id: int,
        start: Position,
        tables: TableFilter,
        *,
        heartbeat: float = 1.0,
        part_rows: int = PART_ROWS,
        part_bytes: int = PART_BYTES,
        cache_table_maps: bool = True,
        fast_events: bool = True,
        describe_tables: bool = True,
        decode_only: frozenset[str] | None = None,
    ) -> None:
        self.db = db
        self.server_id = server_id
        self.start = start
        self.tables = tables
        self.heartbeat = heartbeat
        self.part_rows, self.part_bytes = part_rows, part_bytes
        self.table_maps = TableMapCache(cache_table_maps)
        self.fast_events = fast_events  # False: the library reads every event (benchmarks)
        self.source: EventSource | None = None
        self.describe_tables = describe_tables  # a definition with each DDL change
        # Only these columns' values are decoded where events.py reads the rows (the rest
        # are None): for readers of keys (reconcile's changed.py), never for capture.
        self.decode_only = decode_only
        self._describer: Any = None  # the connection that reads definitions, opened on need
        self._stopping = threading.Event()
        self._stream: Any = None
        self._file = start.file
        self._last_end = start  # the end of the last group read whole
        self.by_gtid = start.by_gtid
        self._state: GtidState = dict(start.state)  # after the last group (GTID positions)
        self._state_text = start.gtid or ""
        self._shapes: dict[int, tuple[Any, TableShape]] = {}
        self._routed: dict[tuple[str, str], bool] = {}
        # Table_map bodies of the tables whose changes this reader yielded, as last handed
        # out by `take_maps` (the hub's binlog service describes tables with them).
        self._announced: dict[tuple[str, str], bytes] = {}
        self._new_maps: list[tuple[str, str, bytes]] = []

    @property
    def table_map_hits(self) -> int:
        return self.table_maps.hits

    def take_maps(self) -> list[tuple[str, str, bytes]]:
        """(schema, table, Table_map body) of the tables whose map is new to this reader or
        changed (DDL) since the last call: call it after each item `transactions()` yields,
        and the maps belong with that item (they are in force from it on)."""
        maps, self._new_maps = self._new_maps, []
        return maps

    # -- public ----------------------------------------------------------------------------
    def stop(self) -> None:
        """From another thread: end `transactions()` soon. Shutting the stream's socket wakes
        a read that waits for the server (a quiet binlog sends only heartbeats)."""
        self._stopping.set()
        connection = getattr(self._stream, "_stream_connection", None)
        sock = getattr(connection, "_sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stopping.set()
        describer, self._describer = self._describer, None
        mysql.close(describer)
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - closing a broken connection must not raise
                log.debug("closing the binlog stream failed", exc_info=True)

    def transactions(self) -> Iterator[Transaction | Part]:
        source = self.source = EventSource(
            self._open(),
            self._is_routed,
            self.table_maps,
            fast=self.fast_events,
            decode_only=self.decode_only,
        )
        group: _Group | None = None
        doing = f"reading the binlog from {self.start}"
        try:
            while not self._stopping.is_set():
                try:
                    event = source.next()
                except (pymysql.err.MySQLError, OSError) as exc:
                    if self._stopping.is_set():
                        return
                    if mysql.code_of(exc) == _ER_SLAVE_SAME_ID or _SAME_ID in mysql.text_of(exc):
                        raise self._same_server_id(doing) from exc
                    raise mysql.translate(exc, self.db, doing, PreflightError) from exc
                # The frequent kinds first: events.py reads them itself (see its doc).
                if isinstance(event, RawRows):
                    group = group or self._new_group(event)
                    part = self._on_raw_rows(event, group)
                    if part is not None:
                        yield part
                elif isinstance(event, RawXid):
                    if group is not None:
                        yield self._finish(group, event)
                    group = None
                elif isinstance(event, RawGtid):
                    self._abandon(group, "a new GTID event")
                    standalone = bool(event.flags & _MARIADB_FL_STANDALONE)
                    group = self._new_group(event, event.gtid, needs_commit=not standalone)
                elif event is None:  # the server ended the stream (not blocking / shut down)
                    raise UnreachableError(
                        f"the origin {self.db.host}:{self.db.port} closed the binlog stream",
                        "the server may be shutting down; capture resumes when it is back",
                    )
                elif isinstance(event, PartialUpdateRowsEvent):  # before its base class
                    group = group or self._new_group(event)
                    self._halt(
                        group,
                        event,
                        "the origin writes partial JSON updates (MySQL), which capture cannot "
                        "apply",
                        "set binlog_row_value_options='' on the origin",
                    )
                elif isinstance(event, _ROW_EVENTS):
                    group = group or self._new_group(event)
                    part = self._on_rows(event, group)
                    if part is not None:
                        yield part
                elif isinstance(event, XidEvent):
                    if group is not None:
                        yield self._finish(group, event)
                    group = None
                elif isinstance(event, ExecuteLoadQueryEvent):  # statement-based LOAD DATA
                    group = group or self._new_group(event)
                    self._on_load_data(event, group)
                elif isinstance(event, QueryEvent):
                    group, done = self._on_query(event, group)
                    if done is not None:
                        yield done
                elif isinstance(event, MariadbGtidEvent):
                    self._abandon(group, "a new GTID event")
                    standalone = bool(event.flags & _MARIADB_FL_STANDALONE)
                    group = self._new_group(event, event.gtid, needs_commit=not standalone)
                elif isinstance(event, GtidEvent):  # MySQL: BEGIN follows unless it is DDL
                    self._abandon(group, "a new GTID event")
                    group = self._new_group(event, event.gtid, needs_commit=False)
                elif isinstance(event, TableMapEvent):
                    self.table_maps.remember(event)
                elif isinstance(event, RotateEvent):
                    self._file = event.next_binlog
                elif isinstance(event, FormatDescriptionEvent):
                    self.table_maps.format_changed(event.post_header_len)
                    source.format_changed(event.post_header_len)
                # HeartbeatLogEvent: only there to let the loop look at the stop flag.
        finally:
            self.close()

    def _same_server_id(self, doing: str) -> PreflightError:
        """The server dropped this stream for another reader that registered with our
        server_id: the server keeps one stream per id, so two such readers take turns."""
        return PreflightError(
            f"{doing}: {mysql.server(self.db)} dropped this binlog stream for another reader "
            f"with the same server_id {self.server_id} (MySQL error {_ER_SLAVE_SAME_ID}): "
            "another origin agent with this [origin] server_id, or a replica with it",
            "give every reader of this origin its own server_id ([origin] server_id of each "
            "origin agent, @@server_id of each replica), then restart the agent",
        )

    # -- groups ----------------------------------------------------------------------------
    def _new_group(self, event: Any, gtid: str | None = None, needs_commit: bool = True) -> _Group:
        if self.by_gtid:  # the state before it: below its end, above what came before
            begin = make_position(self._file, max(4, _start_of(event)), self._state_text, "gtid")
        else:
            begin = make_position(self._file, max(4, _start_of(event)), gtid, "file")
        return _Group(begin, gtid, needs_commit)

    def _end(self, group: _Group, event: Any) -> Position:
        """Where `group` ends: in the GTID scheme the state after it (kept here)."""
        if not self.by_gtid:
            return Position(self._file, event.packet.log_pos, group.gtid)
        if group.gtid is None:
            raise CaptureHalted(
                f"capture stopped at {self._where(event)}: a transaction without a GTID event "
                "on a MariaDB origin",
                "report this; capture cannot tell where it stands",
                position=self._last_end,
                at=self._where(event),
            )
        domain_text, server_text, seq_text = group.gtid.split("-")
        domain, seq = int(domain_text), int(seq_text)
        known = self._state.get(domain)
        if known is not None and seq <= known[1]:
            raise CaptureHalted(
                f"capture stopped at {self._where(event)}: GTID {group.gtid} does not follow "
                f"{domain}-{known[0]}-{known[1]} in its domain (the binlog's sequence numbers "
                "went back: gtid_strict_mode is off, or an alternative history was written)",
                "SET GLOBAL gtid_strict_mode=ON (and in my.cnf) on the origin; then move capture "
                "past it on purpose with `binlogsync capture-skip` and repair the targets",
                position=self._last_end,
                at=self._where(event),
            )
        self._state[domain] = (int(server_text), seq)
        text = group.gtid if len(self._state) == 1 else state_text(self._state)
        self._state_text = text
        stream = self._stream
        if stream is not None:
            stream.auto_position = text  # a reconnect of the library's own resumes here
        return make_position(self._file, event.packet.log_pos, text, "gtid")

    def _where(self, event: Any) -> str:
        return f"{self._file}:{_start_of(event)}"

    def _halt(self, group: _Group, event: Any, message: str, fix: str) -> None:
        """Remember the first reason this group cannot be captured; it is raised at its end."""
        if group.halt is None:
            gtid = f" (GTID {group.gtid})" if group.gtid else ""
            group.halt = CaptureHalted(
                f"capture stopped at {self._where(event)}{gtid}: {message}",
                fix,
                position=self._last_end,
                at=self._where(event),
            )
        group.changes.clear()

    def _finish(self, group: _Group, event: Any) -> Transaction | Part:
        position = self._end(group, event)
        if group.halt is not None:
            halt = group.halt
            halt.end = position
            to = position.gtid if position.by_gtid else f"{position.file}:{position.offset}"
            halt.fix = (
                f"{halt.fix}; then move capture past it on purpose with `binlogsync "
                f"capture-skip --origin NAME --to {to} --reason "
                "…` (that transaction is not replicated: reseed or repair the targets), or "
                "`--to current` after a reseed"
            )
            raise halt
        self._last_end = position
        changes = () if group.own else tuple(group.changes)
        if group.parts:
            if group.own:
                log.error(
                    "binlog %s: a transaction applied by binlogsync was recognised only after "
                    "%d part(s) had been sent; the targets may get it back",
                    position,
                    group.parts,
                )
            return Part(
                group.begin, group.parts + 1, True, changes, position, float(event.timestamp)
            )
        return make_transaction(position, float(event.timestamp), changes)

    def _cut(self, group: _Group) -> Part | None:
        if group.own or (group.rows < self.part_rows and group.size < self.part_bytes):
            return None
        group.parts += 1
        part = Part(group.begin, group.parts, False, tuple(group.changes))
        group.changes, group.rows, group.size = [], 0, 0
        return part

    def _abandon(self, group: _Group | None, why: str) -> None:
        if group is not None and (group.changes or group.own or group.parts):
            log.warning(
                "binlog %s: a transaction without COMMIT was cut short by %s; dropped",
                self._file,
                why,
            )

    # -- events ----------------------------------------------------------------------------
    def _on_rows(self, event: Any, group: _Group) -> Part | None:
        """A Rows event the library read (events.py leaves it those it cannot decode)."""
        if not self._takes_rows(event, group):
            return None
        schema, table = event.schema, event.table
        if _partial_image(event):
            self._halt(
                group,
                event,
                f"the row image of {schema}.{table} is partial (binlog_row_image is not FULL)",
                "SET GLOBAL binlog_row_image=FULL on the origin (and in my.cnf)",
            )
            return None
        try:
            shape = self._shape(event)
        except PreflightError as exc:
            self._halt(group, event, exc.message, exc.fix)
            return None
        failed: ValueError | None = None
        try:
            before, after = _library_images(event, shape)
            lost = _lost_column(shape, before + after)
        except ValueError as exc:  # the library raises on a DATE past its month's end
            before, after, lost, failed = (), (), "", exc
        if lost is not None:
            images = self._decode_again(event)
            if images is None:
                if failed is not None:
                    raise failed
                self._halt(
                    group,
                    event,
                    f"{schema}.{table}.{lost} holds a date that is no calendar date (zero, "
                    "partial or invalid), in a table whose rows python-mysql-replication reads "
                    "(a column type binlogsync's decoder leaves to it: a pre-5.6 temporal type, "
                    "the old DECIMAL, MySQL's binary JSON), and it cannot keep such a date",
                    f"rebuild {schema}.{table} in the current formats on the origin (ALTER "
                    "TABLE … FORCE converts pre-5.6 temporal columns), or make the value a real "
                    "date or NULL",
                )
                return None
            before, after = images
        kind: ChangeKind = "update" if isinstance(event, UpdateRowsEvent) else (
            "insert" if isinstance(event, WriteRowsEvent) else "delete"
        )  # fmt: skip
        change = Change(kind, schema, table, shape.columns, before, after)
        return self._append(group, change, event.packet.event_size)

    def _decode_again(self, event: Any) -> tuple[tuple[Row, ...], tuple[Row, ...]] | None:
        """The images of a Rows event the library read, decoded from its bytes by rowdecode.py
        (which keeps the dates the library loses); None when that decoder cannot read it."""
        decoder = RowsDecoder.of(event.table_map[event.table_id])
        if decoder is None:
            return None
        data = event.packet.packet.get_all_data()
        end = len(data) - 4 if getattr(self._stream, CHECKSUM_ATTRIBUTE, None) else len(data)
        return decoder.decode(data[5], data, 20, end)

    def _on_raw_rows(self, event: RawRows, group: _Group) -> Part | None:
        """A Rows event events.py read and decoded (if its table is routed)."""
        if not self._takes_rows(event, group):
            return None
        change = make_change(
            event.kind,
            event.schema,
            event.table,
            event.columns,
            event.before,
            event.after,
            "",
            None,
        )
        return self._append(group, change, event.event_size)

    def _takes_rows(self, event: Any, group: _Group) -> bool:
        """Whether a Rows event's rows belong in the group; notes our own marker's write."""
        schema, table = event.schema, event.table
        if (schema, table) in OWN_MARKERS:
            group.own = True
            group.changes.clear()
            return False
        return not group.own and group.halt is None and self._is_routed(schema, table)

    def _append(self, group: _Group, change: Change, size: int) -> Part | None:
        name = (change.schema, change.table)
        body = self.table_maps.current.get(name)
        if body is not None and self._announced.get(name) != body:
            if len(self._announced) > _CACHE_LIMIT:
                self._announced.clear()
            self._announced[name] = body
            self._new_maps.append((*name, body))
        group.changes.append(change)
        group.rows += change.row_count
        group.size += size
        return self._cut(group)

    def _on_query(
        self, event: Any, group: _Group | None
    ) -> tuple[_Group | None, Transaction | Part | None]:
        schema = event.schema.decode("utf-8", "replace") if event.schema else ""
        sql = event.query
        statement = parse_statement(sql, schema)
        if statement.kind == "control":
            word = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            rest = sql.strip().upper()
            if word == "BEGIN" or rest.startswith("XA START") or rest.startswith("XA BEGIN"):
                if group is None:
                    group = self._new_group(event)
                group.needs_commit = True
                return group, None
            if word == "COMMIT" or rest.startswith("XA COMMIT"):
                return None, (self._finish(group, event) if group is not None else None)
            if word == "ROLLBACK" and not rest.startswith("ROLLBACK TO"):
                return None, None  # rolled-back work never leaves the origin
            return group, None  # ROLLBACK TO SAVEPOINT, XA END/PREPARE
        if group is None:
            group = self._new_group(event, needs_commit=False)
        if statement.kind == "dml":
            self._on_statement_dml(event, group, schema, sql)
        elif statement.kind in ("truncate", "ddl") and not group.own and group.halt is None:
            # When the DDL ended, to the second (its timestamp is when it began), plus one for
            # the truncation of both: a definition changed later than that is a later DDL's.
            ended = event.timestamp + getattr(event, "execution_time", 0) + 1
            group.changes.extend(self._ddl_changes(statement, sql, schema, ended))
        if group.needs_commit:
            return group, None
        return None, self._finish(group, event)

    def _on_statement_dml(self, event: Any, group: _Group, schema: str, sql: str) -> None:
        if group.own:
            return
        touched = sorted(n for n in names_in(sql, schema) if self.tables.matches(*n))
        if touched:
            # Named: the tables where the statement puts them, not every word that a route
            # like `db.*` would match (keywords, values) — unless none is found there.
            named = [n for n in dml_tables(sql, schema) if self.tables.matches(*n)] or touched
            self._halt(
                group,
                event,
                "statement-based DML that may change routed table(s) "
                f"{', '.join(f'{s}.{t}' for s, t in named[:5])}: {sql[:200]!r}; its "
                "rows are not in the binlog (binlog_format is not ROW)",
                _ROW_FORMAT_FIX,
            )
        else:
            log.warning(
                "statement-based DML at %s touches no routed table; ignored: %.200s",
                self._where(event),
                sql,
            )

    def _on_load_data(self, event: Any, group: _Group) -> None:
        statement = _load_data_statement(event)
        if statement is not None:
            self._on_statement_dml(event, group, *statement)
        elif not group.own:
            self._halt(
                group,
                event,
                "statement-based LOAD DATA whose table could not be read from the binlog; "
                "its rows are not in the binlog (binlog_format is not ROW)",
                _ROW_FORMAT_FIX,
            )

    def _ddl_changes(
        self, statement: Statement, sql: str, default_schema: str, when: float
    ) -> list[Change]:
        if statement.kind == "truncate":
            return [
                Change("truncate", s, t) for s, t in statement.tables if self.tables.matches(s, t)
            ]
        if statement.tables:
            renames = table_renames(sql, default_schema)
            return [
                Change(
                    "ddl",
                    s,
                    t,
                    statement=sql,
                    definition=self._definition(s, t, sql, renames.get((s, t)), when),
                )  # fmt: skip
                for s, t in statement.tables
                if self.tables.matches(s, t)
            ]
        if statement.schema and self.tables.covers_schema(statement.schema):
            return [Change("ddl", statement.schema, "", statement=sql)]
        return []

    def _definition(
        self,
        schema: str,
        table: str,
        sql: str,
        renamed_from: tuple[str, str] | None,
        when: float,
    ) -> dict[str, Any] | None:
        """The table's definition as the origin has it now, for targets that follow schema
        changes (None: the table is gone). Read when capture reaches the DDL; when the table
        has been changed again since (capture is behind: CREATE_TIME, which every ALTER moves,
        is later than the DDL's end, `when`), it is not this DDL's result, and it says so
        (`unsupported`), so a target stops instead of taking a later shape early. A second DDL
        within about a second of the first is not seen this way."""
        if not self.describe_tables:
            return None
        if self._describer is None:
            self._describer = mysql.connect(self.db, "describing a table after its DDL")
        with self._describer.cursor() as cur:
            found = describe(cur, schema, table)
        if found is None:
            return None
        renamed = renamed_columns(sql)
        if renamed or renamed_from:
            found = replace(found, renamed_from=renamed, table_renamed_from=renamed_from)
        if found.changed_at is not None and found.changed_at > when:
            found = replace(
                found,
                unsupported=(
                    f"{schema}.{table} was changed again on the origin after this DDL (capture "
                    "was behind), so its definition now is not this DDL's result"
                ),
            )
        return found.to_wire()

    # -- tables ----------------------------------------------------------------------------
    def _is_routed(self, schema: str, table: str) -> bool:
        routed = self._routed.get((schema, table))
        if routed is None:
            if len(self._routed) > _CACHE_LIMIT:
                self._routed.clear()
            routed = self._routed[(schema, table)] = self.tables.matches(schema, table)
        return routed

    def _shape(self, event: Any) -> TableShape:
        table = event.table_map[event.table_id]
        cached = self._shapes.get(id(table))
        if cached is not None and cached[0] is table:
            return cached[1]
        if len(self._shapes) > _CACHE_LIMIT:
            self._shapes.clear()
        shape = TableShape.of(table)
        self._shapes[id(table)] = (table, shape)  # keeps `table` alive, so id() stays unique
        return shape

    def _open(self) -> Any:
        if self._stream is not None:
            return self._stream
        settings = {
            **self.db.connect_args(),
            "connect_timeout": 5,
            # A quiet stream still gets a heartbeat every `heartbeat` s; this is the bound
            # after which a silent connection counts as lost (the library reconnects once).
            "read_timeout": max(10, int(self.heartbeat * 10)),
        }
        if self.by_gtid:  # see the module doc
            where: dict[str, Any] = {"is_mariadb": True, "auto_position": self.start.gtid or ""}
        else:
            where = {
                "log_file": self.start.file,
                "log_pos": max(4, self.start.offset),
                "is_mariadb": False,  # True would ignore log_file/log_pos
            }
        self._stream = BinLogStreamReader(
            connection_settings=settings,
            server_id=self.server_id,
            **where,
            resume_stream=True,
            blocking=True,
            slave_heartbeat=self.heartbeat,
            only_events=[
                MariadbGtidEvent,
                GtidEvent,
                QueryEvent,
                ExecuteLoadQueryEvent,
                XidEvent,
                RotateEvent,
                FormatDescriptionEvent,
                TableMapEvent,
                WriteRowsEvent,
                UpdateRowsEvent,
                DeleteRowsEvent,
                PartialUpdateRowsEvent,
                HeartbeatLogEvent,
            ],
            pymysql_wrapper=self.table_maps.connection_factory(self.db),
            enable_logging=False,
        )
        self.table_maps.attach(self._stream)
        self._file = self.start.file
        return self._stream


def _library_images(event: Any, shape: TableShape) -> tuple[tuple[Row, ...], tuple[Row, ...]]:
    """(before, after) images of a Rows event as the library decoded it, through `shape`."""
    if isinstance(event, UpdateRowsEvent):
        rows = event.rows
        before = tuple(shape.row(r["before_values"], r["before_none_sources"]) for r in rows)
        after = tuple(shape.row(r["after_values"], r["after_none_sources"]) for r in rows)
        return before, after
    image = tuple(shape.row(r["values"], r["none_sources"]) for r in event.rows)
    return ((), image) if isinstance(event, WriteRowsEvent) else (image, ())


def _lost_column(shape: TableShape, rows: tuple[Row, ...]) -> str | None:
    """The first column whose date the library lost in `rows` (values.py's LOST), or None."""
    for i, name in shape.dates:
        if any(row[i] is LOST for row in rows):
            return name
    return None


def _load_data_statement(event: Any) -> tuple[str, str] | None:
    """The default schema and text of an Execute_load_query event, or None if unreadable.

    The library reads only its post-header; the rest is laid out as in a Query event: status
    variables, the schema and a NUL, then the statement up to the end of the event. A longer
    post-header is skipped by the library's own (private) `_advance_to_payload`; should that
    be gone or the text not look like LOAD, None makes the caller halt rather than guess.
    """
    try:
        header = event._advance_to_payload(_LOAD_QUERY_POST_HEADER)
        event.packet.advance(event.status_vars_length)
        schema = event.packet.read(event.schema_length).decode("utf-8", "replace")
        event.packet.advance(1)
        length = event.event_size - header - event.status_vars_length - event.schema_length - 1
        sql = event.packet.read(length).decode("utf-8", "replace") if length > 0 else ""
    except Exception:  # noqa: BLE001 - unreadable: the caller halts instead of guessing
        log.debug("cannot read an Execute_load_query event", exc_info=True)
        return None
    if "LOAD" not in sql.upper():  # LOAD DATA or LOAD XML
        return None
    return schema, sql


def _start_of(event: Any) -> int:
    """Where an event starts in its binlog file. The header's log_pos is where it ends, and
    the packet's event_size is the whole event's; the event's own `event_size` leaves out the
    19-byte header and the checksum, so it must not be used for offsets."""
    return int(event.packet.log_pos - event.packet.event_size)


def _partial_image(event: Any) -> bool:
    """True when a Rows event does not carry every column (binlog_row_image MINIMAL/NOBLOB)."""
    width = event.number_of_columns
    for name in ("columns_present_bitmap", "columns_present_bitmap2"):
        bitmap = getattr(event, name, None)
        if bitmap is not None and int.from_bytes(bitmap, "little").bit_count() < width:
            return True
    return False
