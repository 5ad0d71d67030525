"""Read an origin's binary log as a replica does and yield whole committed transactions.

This is the only module that imports `pymysqlreplication` (python-mysql-replication 1.0.17).
Everything it yields is our own `Transaction`/`Change`; values are normalised to the types the
codec carries (see codec.py). How events become transactions:

    MariaDB GTID event ........ starts a group (flag STANDALONE: the group is one DDL statement)
    Query BEGIN ............... starts a group (MySQL, or a server without GTIDs)
    Table_map + Rows events ... one Change per Rows event (all its rows), if the table is routed
    Query TRUNCATE / DDL ...... Change("truncate") / Change("ddl"), if the table is routed
    XID event / Query COMMIT .. ends the group: yield Transaction(position after this event)
    Query ROLLBACK ............ discards the group (rolled-back work never leaves the origin)

A group whose changes were all filtered out is still yielded, with changes=(), so that the
acknowledged position can advance. A group that wrote a row into `binlogsync.checkpoint` was
written by our own applier (two-way sync) and is yielded with changes=() too: loop prevention.

Library quirks corrected here (each verified against MariaDB 10.11, see
tests/integration/test_capture.py):

- `is_mariadb=True` ignores `log_file`/`log_pos` (its MariaDB dump command always asks for the
  first binlog at offset 4), so we use the plain COM_BINLOG_DUMP with file + offset, which
  MariaDB serves; it still sends MariaDB GTID events because the library announces
  `@mariadb_slave_capability=4`.
- Negative TIME(n) with a non-zero fraction: the library decodes the integer and fractional
  parts as two separate two's-complement numbers; `-838:59:58.999999` came out as
  `-838:59:58.000001`. Corrected in `_fix_negative_time`.
- YEAR `0000` came out as 1900 (it adds 1900 to the stored byte 0): corrected to 0.
- BINARY(n) came out without its trailing 0x00 padding (the binlog strips it, SELECT returns
  it): padded back to n bytes.
- An empty BINARY/VARBINARY/BLOB value came out as the str '' (the library decodes with the
  codec name 'binary', which raises LookupError and keeps bytes, except for b'' where Python
  skips the codec lookup): corrected to b''.
- An empty SET value came out as None: corrected to set() (NULL stays None).
- BIT came out as a string of '0'/'1': converted to int.
- FLOAT came out as the float32 widened to a double (1.1 -> 1.100000023841858): replaced by the
  shortest decimal that is the same float32 (1.1); the stored bits do not change.
- MySQL binary JSON comes out as dict/list with bytes keys and strings: turned into JSON text.
  (MariaDB's JSON is LONGTEXT and arrives as str already.)

Not corrected: zero dates (`0000-00-00`, DATETIME/DATE) come out as None, TIMESTAMP zero as
1970-01-01 00:00:00; XA transactions (XA PREPARE / XA COMMIT) are not assembled.

Speed: every transaction repeats the Table_map event of each table it touches, and parsing it
costs more than decoding a one-row Rows event. `_CachingConnection` recognises a Table_map
packet whose body (table id + column metadata, checksum excluded) is byte-identical to one
already parsed, installs the parsed table into the library's table map itself, and turns the
packet into an event type the library skips. Identical bytes give an identical parse, so this is
safe across DDL (new table id / new metadata = new bytes) and across rotation.
"""

from __future__ import annotations

import json
import logging
import re
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pymysql
from pymysql.constants.COMMAND import COM_BINLOG_DUMP
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.constants.BINLOG import TABLE_MAP_EVENT, UNKNOWN_EVENT
from pymysqlreplication.event import (
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

from ..config import DatabaseSettings
from ..errors import BinlogsyncError, PreflightError, UnreachableError
from ..model import Change, Row, Transaction
from ..position import Position
from ..tables import TableFilter

log = logging.getLogger(__name__)

CHECKPOINT_TABLE = ("binlogsync", "checkpoint")
_MARIADB_FL_STANDALONE = 0x01
_CLIENT_ERRORS = range(2000, 3000)  # CR_* codes: the connection, not the server, failed
_TABLE_CACHE_LIMIT = 4096


# -- errors --------------------------------------------------------------------------------


def translate_error(exc: BaseException, db: DatabaseSettings, doing: str) -> BinlogsyncError:
    """Turn a PyMySQL/socket exception into our error tree, naming the server and the fix."""
    where = f"{db.host}:{db.port}"
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    text = exc.args[1] if len(exc.args) > 1 else str(exc)
    if code == 1045:
        return PreflightError(
            f"{doing}: access denied for user {db.user!r} at {where}: {text}",
            "check the user and password of the origin database in the client config",
        )
    if code in (1227, 1044, 1142):
        return PreflightError(
            f"{doing}: user {db.user!r} at {where} lacks a privilege: {text}",
            f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR, SELECT "
            f"ON *.* TO {db.user!r}@'…'",
        )
    if code == 1236:
        return PreflightError(
            f"{doing}: the origin {where} cannot serve the binlog from the requested "
            f"position: {text}",
            "the position was purged or never existed: reseed the target from a fresh copy "
            "and restart capture from the current position",
        )
    if isinstance(exc, OSError) or code in (None, 0) or code in _CLIENT_ERRORS:
        return UnreachableError(
            f"{doing}: cannot reach MySQL/MariaDB at {where}: {text}",
            "check that the server is running, that host and port in the client config are "
            "right, and that no firewall blocks the port",
        )
    return PreflightError(f"{doing}: MySQL/MariaDB at {where} refused: [{code}] {text}")


def pymysql_args(db: DatabaseSettings) -> dict[str, Any]:
    """PyMySQL's keyword arguments for `db` (`password`, not the deprecated `passwd`)."""
    return {"host": db.host, "port": db.port, "user": db.user, "password": db.password}


def _connect(db: DatabaseSettings, doing: str) -> pymysql.connections.Connection:
    try:
        return pymysql.connect(
            **pymysql_args(db), connect_timeout=5, autocommit=True, charset="utf8mb4"
        )
    except (pymysql.err.MySQLError, OSError) as exc:
        raise translate_error(exc, db, doing) from exc


def current_position(db: DatabaseSettings) -> Position:
    """Where the origin's binlog ends now (SHOW MASTER STATUS), with its GTID when unambiguous.

    The GTID is given when @@gtid_binlog_pos holds exactly one GTID and it belongs to the
    server's own @@gtid_domain_id; the status is read twice around it so the two agree.
    """
    conn = _connect(db, "reading the origin's binlog position")
    try:
        with conn.cursor() as cur:
            for _attempt in range(5):
                cur.execute("SHOW MASTER STATUS")
                first = cur.fetchone()
                if first is None:
                    raise PreflightError(
                        f"binary logging is off on {db.host}:{db.port} (SHOW MASTER STATUS "
                        "is empty)",
                        "set log_bin=binlog (and binlog_format=ROW) in my.cnf and restart",
                    )
                cur.execute("SELECT @@gtid_binlog_pos, @@gtid_domain_id")
                gtid_pos, domain = cur.fetchone()
                cur.execute("SHOW MASTER STATUS")
                second = cur.fetchone()
                if second is not None and tuple(second[:2]) == tuple(first[:2]):
                    return Position(first[0], int(first[1]), _single_gtid(gtid_pos, domain))
            return Position(first[0], int(first[1]), None)
    except pymysql.err.MySQLError as exc:
        raise translate_error(exc, db, "reading the origin's binlog position") from exc
    finally:
        conn.close()


def _single_gtid(gtid_pos: object, domain: object) -> str | None:
    if not isinstance(gtid_pos, str) or not gtid_pos or "," in gtid_pos:
        return None
    parts = gtid_pos.strip().split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts) or int(parts[0]) != domain:
        return None
    return gtid_pos.strip()


def earliest_position(db: DatabaseSettings) -> Position:
    """The start of the oldest binlog file the origin still has (SHOW BINARY LOGS)."""
    conn = _connect(db, "listing the origin's binary logs")
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            row = cur.fetchone()
    except pymysql.err.MySQLError as exc:
        raise translate_error(exc, db, "listing the origin's binary logs") from exc
    finally:
        conn.close()
    if row is None:
        raise PreflightError(
            f"the origin {db.host}:{db.port} has no binary logs",
            "set log_bin=binlog (and binlog_format=ROW) in my.cnf and restart",
        )
    return Position(row[0], 4, None)


# -- value normalisation -------------------------------------------------------------------

_F32 = struct.Struct("<f")


def _fix_float(value: Any) -> Any:
    if not isinstance(value, float):
        return value
    try:
        bits = _F32.pack(value)
        # 6 digits first: shorter forms are found by %g's trailing-zero stripping already.
        for digits in range(6, 10):
            shorter = float(f"{value:.{digits}g}")
            if _F32.pack(shorter) == bits:
                return shorter
    except (OverflowError, struct.error):
        pass
    return value


def _fix_year(value: Any) -> Any:
    return 0 if value == 1900 else value  # YEAR's range is 1901-2155 plus 0000


def _fix_negative_time(value: Any) -> Any:
    # The library returns -(H + 1 - f) for a stored -(H + f), 0 < f < 1 (see module doc).
    if not isinstance(value, timedelta) or value >= timedelta(0):
        return value
    micros = -(value // timedelta(microseconds=1))
    seconds, fraction = divmod(micros, 1_000_000)
    if fraction == 0:
        return value
    return -timedelta(seconds=seconds, microseconds=1_000_000 - fraction)


def _fix_bit(value: Any) -> Any:
    return int(value, 2) if isinstance(value, str) else value


def _fix_empty_binary(value: Any) -> Any:
    return b"" if value == "" else value


def _padder(length: int) -> Callable[[Any], Any]:
    def pad(value: Any) -> Any:
        if value == "":
            value = b""
        if isinstance(value, bytes) and len(value) < length:
            return value.ljust(length, b"\x00")
        return value

    return pad


def _json_plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_json_plain(k): _json_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_plain(v) for v in value]
    return value


def _fix_json(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(_json_plain(value), ensure_ascii=False, default=str)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _column_fixer(column: Any) -> Callable[[Any], Any] | None:
    kind = column.type
    if kind == FIELD_TYPE.FLOAT:
        return _fix_float
    if kind == FIELD_TYPE.YEAR:
        return _fix_year
    if kind == FIELD_TYPE.TIME2 and getattr(column, "fsp", 0):
        return _fix_negative_time
    if kind == FIELD_TYPE.BIT:
        return _fix_bit
    if kind == FIELD_TYPE.JSON:
        return _fix_json
    if getattr(column, "character_set_name", None) == "binary":
        if kind == FIELD_TYPE.STRING:
            return _padder(column.max_length)
        if kind in (FIELD_TYPE.VARCHAR, FIELD_TYPE.BLOB):
            return _fix_empty_binary
    return None


@dataclass(frozen=True, slots=True)
class _TableShape:
    """How to turn the library's row dicts of one parsed table into our row tuples."""

    columns: tuple[str, ...]
    fixers: tuple[tuple[int, Callable[[Any], Any]], ...]
    sets: tuple[tuple[int, str], ...]

    @classmethod
    def of(cls, table: Any) -> _TableShape:
        fixers, sets = [], []
        for i, column in enumerate(table.columns):
            if not column.name:
                raise PreflightError(
                    f"the binlog has no column names for {table.schema}.{table.table}",
                    "set binlog_row_metadata=FULL on the origin (my.cnf) and restart; "
                    "events written before that cannot be captured",
                )
            fixer = _column_fixer(column)
            if fixer is not None:
                fixers.append((i, fixer))
            if column.type == FIELD_TYPE.SET:
                sets.append((i, column.name))
        return cls(tuple(c.name for c in table.columns), tuple(fixers), tuple(sets))

    def row(self, values: dict[str, Any], none_sources: dict[str, str]) -> Row:
        if not self.fixers and not self.sets:
            return tuple(values.values())
        out = list(values.values())
        for i, fixer in self.fixers:
            if out[i] is not None:
                out[i] = fixer(out[i])
        for i, name in self.sets:
            if out[i] is None and none_sources.get(name) == "empty set":
                out[i] = set()
        return tuple(out)


# -- DDL statements ------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<comment>/\*(?![!]|M!).*?\*/|--(?:[ \t][^\n]*)?(?:\n|$)|\#[^\n]*)
    | (?P<exec>/\*M?!\d*)                       # executable comment: keep its content
    | (?P<exec_end>\*/)
    | (?P<bq>`(?:[^`]|``)*`)
    | (?P<str>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
    | (?P<word>[0-9A-Za-z_$\u0080-\uffff\U00010000-\U0010ffff]+)
    | (?P<punct>.)
    """,
    re.S | re.X,
)


@dataclass(frozen=True, slots=True)
class _Tok:
    text: str
    ident: bool  # a name (bare word or backticked)
    quoted: bool = False

    @property
    def upper(self) -> str:
        return "" if self.quoted else self.text.upper()


def _tokens(sql: str, limit: int = 400) -> list[_Tok]:
    out: list[_Tok] = []
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup
        text = match.group()
        if kind in ("ws", "comment", "exec", "exec_end"):
            continue
        if kind == "bq":
            out.append(_Tok(text[1:-1].replace("``", "`"), True, True))
        elif kind == "word":
            out.append(_Tok(text, True))
        elif kind == "str":
            out.append(_Tok(text, False, True))
        else:
            out.append(_Tok(text, False))
        if len(out) >= limit:
            break
    return out


# Statements that are not schema changes of user tables: transaction control, accounts,
# maintenance. They never become changes.
_NOT_DDL_FIRST = {
    "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "XA", "GRANT", "REVOKE", "FLUSH",
    "ANALYZE", "OPTIMIZE", "REPAIR", "CHECK", "INSTALL", "UNINSTALL", "SET", "DO",
}  # fmt: skip
_ACCOUNT_OBJECTS = {"USER", "ROLE", "SERVER"}
_DML_FIRST = {"INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD", "CALL"}
_DDL_FIRST = {"CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE"}


@dataclass(frozen=True, slots=True)
class Statement:
    """What a Query event did, as far as capture cares."""

    kind: str  # "control", "ignore", "dml", "truncate", "ddl"
    tables: tuple[tuple[str, str], ...] = ()  # (schema, table) named by the statement
    schema: str | None = None  # for DDL whose tables are unknown: the schema it concerns


def _name_at(toks: list[_Tok], i: int, default_schema: str) -> tuple[tuple[str, str], int] | None:
    """Parse `name` or `db.name` at toks[i]; return ((schema, table), next index)."""
    if i >= len(toks) or not toks[i].ident:
        return None
    if i + 2 < len(toks) and toks[i + 1].text == "." and toks[i + 2].ident:
        return (toks[i].text, toks[i + 2].text), i + 3
    if not default_schema:
        return None
    return (default_schema, toks[i].text), i + 1


def _skip(toks: list[_Tok], i: int, *words: str) -> int:
    """Skip any of the optional keywords, in any order, at toks[i]."""
    while i < len(toks) and toks[i].upper in words:
        i += 1
    return i


def _skip_if_exists(toks: list[_Tok], i: int) -> int:
    if i < len(toks) and toks[i].upper == "IF":
        i = _skip(toks, i + 1, "NOT")
        if i < len(toks) and toks[i].upper == "EXISTS":
            i += 1
    return i


def parse_statement(sql: str, default_schema: str) -> Statement:
    """Classify a Query event's text and find the tables it names (careful, not complete)."""
    toks = _tokens(sql)
    if not toks:
        return Statement("ignore")
    first = toks[0].upper
    if first in ("BEGIN", "COMMIT", "ROLLBACK", "XA"):
        return Statement("control")
    if first in _NOT_DDL_FIRST:
        return Statement("ignore")
    if first in _DML_FIRST:
        return Statement("dml")
    if first not in _DDL_FIRST:
        return Statement("ddl", schema=default_schema)
    i = 1
    if first == "TRUNCATE":
        i = _skip(toks, i, "TABLE")
        name = _name_at(toks, i, default_schema)
        return Statement("truncate", (name[0],)) if name else Statement("ignore")
    if first == "RENAME":
        if i < len(toks) and toks[i].upper in _ACCOUNT_OBJECTS:
            return Statement("ignore")
        if i < len(toks) and toks[i].upper in ("TABLE", "TABLES"):
            return Statement("ddl", _name_list(toks, i + 1, default_schema, {"TO", ","}))
        return Statement("ddl", schema=default_schema)
    # CREATE / ALTER / DROP [modifiers] OBJECT ...
    i = _skip(
        toks, i, "OR", "REPLACE", "TEMPORARY", "ONLINE", "OFFLINE", "IGNORE", "UNIQUE",
        "FULLTEXT", "SPATIAL", "DEFINER", "SQL", "SECURITY", "ALGORITHM",
    )  # fmt: skip
    obj = toks[i].upper if i < len(toks) else ""
    if obj in _ACCOUNT_OBJECTS:
        return Statement("ignore")
    if obj in ("DATABASE", "SCHEMA"):
        i = _skip_if_exists(toks, i + 1)
        if i < len(toks) and toks[i].ident:
            return Statement("ddl", schema=toks[i].text)
        return Statement("ddl", schema=default_schema)
    if obj == "TABLE":
        i = _skip_if_exists(toks, i + 1)
        if first == "DROP":
            return Statement("ddl", _name_list(toks, i, default_schema, {","}))
        name = _name_at(toks, i, default_schema)
        if name is None:
            return Statement("ddl", schema=default_schema)
        tables = [name[0]]
        if first == "ALTER":  # ALTER TABLE a RENAME [TO|AS] b: b changes too
            j = name[1]
            while j < len(toks):
                if toks[j].upper == "RENAME" and j + 1 < len(toks):
                    k = _skip(toks, j + 1, "TO", "AS")
                    renamed = _name_at(toks, k, default_schema)
                    if renamed and toks[k].upper not in ("COLUMN", "INDEX", "KEY"):
                        tables.append(renamed[0])
                j += 1
        return Statement("ddl", tuple(dict.fromkeys(tables)))
    if obj == "INDEX":  # CREATE INDEX i ON t / DROP INDEX i ON t
        j = i + 1
        while j < len(toks) and toks[j].upper != "ON":
            j += 1
        name = _name_at(toks, j + 1, default_schema)
        if name:
            return Statement("ddl", (name[0],))
    return Statement("ddl", schema=default_schema)


def _name_list(
    toks: list[_Tok], i: int, default_schema: str, separators: set[str]
) -> tuple[tuple[str, str], ...]:
    names: list[tuple[str, str]] = []
    while True:
        name = _name_at(toks, i, default_schema)
        if name is None:
            break
        names.append(name[0])
        i = name[1]
        if i < len(toks) and (toks[i].text in separators or toks[i].upper in separators):
            i += 1
            continue
        break
    return tuple(dict.fromkeys(names))


# -- the table-map cache -------------------------------------------------------------------


class _CachingConnection(pymysql.connections.Connection):  # type: ignore[misc]
    """The library's connection class, with a hook on binlog packets (see module doc).

    The hook is armed only once this connection has sent COM_BINLOG_DUMP, so ordinary query
    replies (which the library's control connection also reads) are never touched.
    """

    binlog_hook: Callable[[MysqlPacket], MysqlPacket] | None = None
    _dumping = False

    def _write_bytes(self, data: bytes) -> None:
        if len(data) > 4 and data[4] == COM_BINLOG_DUMP:
            self._dumping = True
        super()._write_bytes(data)

    def _read_packet(self, packet_type: type = MysqlPacket) -> Any:
        packet = super()._read_packet(packet_type)
        if self._dumping and self.binlog_hook is not None:
            return self.binlog_hook(packet)
        return packet


# -- the reader ----------------------------------------------------------------------------

_ROW_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)


@dataclass
class _Group:
    """The events of one transaction seen so far."""

    gtid: str | None = None
    needs_commit: bool = True  # False: a standalone DDL group ends at its Query event
    changes: list[Change] = field(default_factory=list)
    own: bool = False  # wrote binlogsync.checkpoint: applied by us, never sent back


class BinlogReader:
    """Stream committed transactions from `start` on, forever, until `stop()`.

    `transactions()` blocks; `stop()` may be called from another thread and makes it return
    within about `heartbeat` seconds (the server sends a heartbeat when it has nothing else).
    `close()` releases the connections; call it from the thread that iterated, or after.
    A reader reads once: after `stop()`/`close()`, make a new one at the acknowledged position.
    """

    cache_table_maps = True  # False re-parses every Table_map event (for benchmarks)

    def __init__(
        self,
        db: DatabaseSettings,
        server_id: int,
        start: Position,
        tables: TableFilter,
        *,
        heartbeat: float = 1.0,
    ) -> None:
        self.db = db
        self.server_id = server_id
        self.start = start
        self.tables = tables
        self.heartbeat = heartbeat
        self._stopping = threading.Event()
        self._stream: Any = None
        self._file = start.file
        self._table_maps: dict[bytes, Any] = {}
        self._shapes: dict[int, tuple[Any, _TableShape]] = {}
        self._routed: dict[tuple[str, str], bool] = {}
        self._post_header: Any = None
        self.table_map_hits = 0  # Table_map events served from the cache (for benchmarks)

    # -- public ----------------------------------------------------------------------------
    def stop(self) -> None:
        self._stopping.set()

    def close(self) -> None:
        self._stopping.set()
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - closing a broken connection must not raise
                log.debug("closing the binlog stream failed", exc_info=True)

    def transactions(self) -> Iterator[Transaction]:
        stream = self._open()
        group: _Group | None = None
        doing = f"reading the binlog from {self.start}"
        try:
            while not self._stopping.is_set():
                try:
                    event = stream.fetchone()
                except (pymysql.err.MySQLError, OSError) as exc:
                    if self._stopping.is_set():
                        return
                    raise translate_error(exc, self.db, doing) from exc
                if event is None:  # the server ended the stream (not blocking / shut down)
                    raise UnreachableError(
                        f"the origin {self.db.host}:{self.db.port} closed the binlog stream",
                        "the server may be shutting down; capture resumes when it is back",
                    )
                if isinstance(event, PartialUpdateRowsEvent):  # before its base class
                    raise PreflightError(
                        "the origin writes partial JSON updates (MySQL), which capture cannot "
                        "apply",
                        "set binlog_row_value_options='' on the origin",
                    )
                if isinstance(event, _ROW_EVENTS):
                    if group is None:
                        group = _Group()
                    self._on_rows(event, group)
                elif isinstance(event, XidEvent):
                    if group is not None:
                        yield self._finish(group, event)
                    group = None
                elif isinstance(event, QueryEvent):
                    group, done = self._on_query(event, group)
                    if done is not None:
                        yield done
                elif isinstance(event, MariadbGtidEvent):
                    self._abandon(group, "a new GTID event")
                    standalone = bool(event.flags & _MARIADB_FL_STANDALONE)
                    group = _Group(event.gtid, needs_commit=not standalone)
                elif isinstance(event, GtidEvent):  # MySQL: BEGIN follows unless it is DDL
                    self._abandon(group, "a new GTID event")
                    group = _Group(event.gtid, needs_commit=False)
                elif isinstance(event, TableMapEvent):
                    self._remember_table_map(event)
                elif isinstance(event, RotateEvent):
                    self._file = event.next_binlog
                elif isinstance(event, FormatDescriptionEvent):
                    if event.post_header_len != self._post_header:
                        self._post_header = event.post_header_len
                        self._table_maps.clear()
                # HeartbeatLogEvent: only there to let the loop look at the stop flag.
        finally:
            self.close()

    # -- events ----------------------------------------------------------------------------
    def _on_rows(self, event: Any, group: _Group) -> None:
        schema, table = event.schema, event.table
        if (schema, table) == CHECKPOINT_TABLE:
            group.own = True
            return
        if group.own:
            return
        routed = self._routed.get((schema, table))
        if routed is None:
            if len(self._routed) > _TABLE_CACHE_LIMIT:
                self._routed.clear()
            routed = self._routed[(schema, table)] = self.tables.matches(schema, table)
        if not routed:
            return
        shape = self._shape(event)
        if isinstance(event, UpdateRowsEvent):
            rows = event.rows
            before = tuple(shape.row(r["before_values"], r["before_none_sources"]) for r in rows)
            after = tuple(shape.row(r["after_values"], r["after_none_sources"]) for r in rows)
            group.changes.append(Change("update", schema, table, shape.columns, before, after))
        else:
            image = tuple(shape.row(r["values"], r["none_sources"]) for r in event.rows)
            if isinstance(event, WriteRowsEvent):
                group.changes.append(Change("insert", schema, table, shape.columns, (), image))
            else:
                group.changes.append(Change("delete", schema, table, shape.columns, image))

    def _on_query(
        self, event: Any, group: _Group | None
    ) -> tuple[_Group | None, Transaction | None]:
        schema = event.schema.decode("utf-8", "replace") if event.schema else ""
        sql = event.query
        statement = parse_statement(sql, schema)
        if statement.kind == "control":
            word = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            rest = sql.strip().upper()
            if word == "BEGIN" or rest.startswith("XA START") or rest.startswith("XA BEGIN"):
                if group is None:
                    group = _Group()
                group.needs_commit = True
                return group, None
            if word == "COMMIT" or rest.startswith("XA COMMIT"):
                return None, (self._finish(group, event) if group is not None else None)
            if word == "ROLLBACK" and not rest.startswith("ROLLBACK TO"):
                return None, None  # rolled-back work never leaves the origin
            return group, None  # ROLLBACK TO SAVEPOINT, XA END/PREPARE
        if group is None:
            group = _Group(needs_commit=False)
        if statement.kind == "dml":
            log.error(
                "statement-based DML in the binlog at %s:%s cannot be captured: %.200s",
                self._file,
                event.packet.log_pos,
                sql,
            )
        elif statement.kind in ("truncate", "ddl") and not group.own:
            group.changes.extend(self._ddl_changes(statement, sql))
        if group.needs_commit:
            return group, None
        return None, self._finish(group, event)

    def _ddl_changes(self, statement: Statement, sql: str) -> list[Change]:
        if statement.kind == "truncate":
            return [
                Change("truncate", s, t) for s, t in statement.tables if self.tables.matches(s, t)
            ]
        if statement.tables:
            return [
                Change("ddl", s, t, statement=sql)
                for s, t in statement.tables
                if self.tables.matches(s, t)
            ]
        if statement.schema and self.tables.covers_schema(statement.schema):
            return [Change("ddl", statement.schema, "", statement=sql)]
        return []

    def _finish(self, group: _Group, event: Any) -> Transaction:
        changes = () if group.own else tuple(group.changes)
        position = Position(self._file, event.packet.log_pos, group.gtid)
        return Transaction(position, float(event.timestamp), changes)

    def _abandon(self, group: _Group | None, why: str) -> None:
        if group is not None and (group.changes or group.own):
            log.warning(
                "binlog %s: a transaction without COMMIT was cut short by %s; dropped",
                self._file,
                why,
            )

    # -- tables ----------------------------------------------------------------------------
    def _shape(self, event: Any) -> _TableShape:
        table = event.table_map[event.table_id]
        cached = self._shapes.get(id(table))
        if cached is not None and cached[0] is table:
            return cached[1]
        if len(self._shapes) > _TABLE_CACHE_LIMIT:
            self._shapes.clear()
        shape = _TableShape.of(table)
        self._shapes[id(table)] = (table, shape)  # keeps `table` alive, so id() stays unique
        return shape

    def _table_map_key(self, data: bytes) -> bytes | None:
        checksum = getattr(self._stream, "_BinLogStreamReader__use_checksum", None)
        if checksum is None:  # a library version without this attribute: do not cache
            return None
        return bytes(data[20 : len(data) - 4] if checksum else data[20:])

    def _remember_table_map(self, event: Any) -> None:
        key = self._table_map_key(event.packet.packet.get_all_data())
        if key is None:
            return
        if len(self._table_maps) > _TABLE_CACHE_LIMIT:
            self._table_maps.clear()
        self._table_maps[key] = event.get_table()

    def _on_packet(self, packet: MysqlPacket) -> MysqlPacket:
        data = packet.get_all_data()
        # OK byte, then the 19-byte event header: timestamp(4) type(1) server(4) size(4) ...
        if len(data) < 26 or data[0] != 0 or data[5] != TABLE_MAP_EVENT:
            return packet
        key = self._table_map_key(data)
        table = self._table_maps.get(key) if key is not None else None
        if table is None or self._stream is None or not self.cache_table_maps:
            return packet
        self._stream.table_map[table.table_id] = table
        self.table_map_hits += 1
        # Same header (so log_pos bookkeeping is unchanged), an event type the library skips.
        return MysqlPacket(data[:5] + bytes((UNKNOWN_EVENT,)) + data[6:], "utf8")

    def _open(self) -> Any:
        if self._stream is not None:
            return self._stream
        hook = self._on_packet

        def connect(**kwargs: Any) -> Any:
            conn = _CachingConnection(**kwargs)
            conn.binlog_hook = hook
            return conn

        settings = {
            **pymysql_args(self.db),
            "connect_timeout": 5,
            # A quiet stream still gets a heartbeat every `heartbeat` s; this is the bound
            # after which a silent connection counts as lost (the library reconnects once).
            "read_timeout": max(10, int(self.heartbeat * 10)),
        }
        self._stream = BinLogStreamReader(
            connection_settings=settings,
            server_id=self.server_id,
            log_file=self.start.file,
            log_pos=max(4, self.start.offset),
            resume_stream=True,
            blocking=True,
            is_mariadb=False,  # see module doc: True would ignore log_file/log_pos
            slave_heartbeat=self.heartbeat,
            only_events=[
                MariadbGtidEvent,
                GtidEvent,
                QueryEvent,
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
            pymysql_wrapper=connect,
            enable_logging=False,
        )
        self._file = self.start.file
        return self._stream
