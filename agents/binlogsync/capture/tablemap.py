"""A cache of parsed Table_map events, hooked into python-mysql-replication's connection.

Every transaction repeats the Table_map event of each table it touches, and parsing it costs
more than decoding a one-row Rows event. `TableMapCache` recognises a Table_map packet whose
body (table id + column metadata, checksum excluded) is byte-identical to one already parsed,
installs the parsed table into the library's table map itself, and turns the packet into an
event type the library skips. Identical bytes give an identical parse, so this is safe across
DDL (new table id / new metadata = new bytes) and across rotation.

It also keeps each table's latest Table_map body (`current`: what follows the table id and
flags, i.e. names, column types, metadata and optional metadata), which the origin agent sends
to the hub so that the hub's binlog service can describe the table exactly as the origin did
(docs/binlog-service.md).

This leans on private parts of PyMySQL (`Connection._read_packet`, `_write_bytes`) and of
python-mysql-replication (`BinLogStreamReader.table_map`, its name-mangled `__use_checksum`):
pyproject.toml pins both to the minor versions verified here, and `check_library()` verifies
at start-up that they are still there, so an upgrade fails loudly instead of misreading.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pymysql
from pymysql.constants.COMMAND import COM_BINLOG_DUMP
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants.BINLOG import TABLE_MAP_EVENT, UNKNOWN_EVENT

from .. import mysql
from ..config import DatabaseSettings
from ..errors import PreflightError

_LIMIT = 4096  # parsed tables kept; the cache starts over when it is full
CHECKSUM_ATTRIBUTE = "_BinLogStreamReader__use_checksum"


def check_library() -> None:
    """Raise PreflightError when the private hooks this module needs are gone."""
    missing = []
    connection = pymysql.connections.Connection
    for name, params in (("_read_packet", ["self", "packet_type"]), ("_write_bytes", None)):
        method = getattr(connection, name, None)
        if method is None or (
            params is not None and list(inspect.signature(method).parameters) != params
        ):
            missing.append(f"pymysql Connection.{name}")
    # events.py reads packets from the buffered socket file as `_read_packet` does.
    read_packet = inspect.getsource(connection._read_packet)
    if not all(n in read_packet for n in ("self._next_seq_id", "MAX_PACKET_LEN")) or not all(
        hasattr(connection, n) for n in ("_rfile", "_force_close")
    ):
        missing.append("pymysql Connection._rfile / _next_seq_id / _force_close")
    init = inspect.getsource(BinLogStreamReader.__init__)
    for name in ("__use_checksum", "table_map", "__connected_stream", "log_pos"):
        if f"self.{name} =" not in init:
            missing.append(f"BinLogStreamReader.{name}")
    if "self._stream_connection._read_packet()" not in inspect.getsource(
        BinLogStreamReader.fetchone
    ):
        missing.append("BinLogStreamReader.fetchone reading _stream_connection._read_packet()")
    if missing:
        raise PreflightError(
            f"the installed PyMySQL or mysql-replication lacks what capture relies on: "
            f"{', '.join(missing)}",
            "install the versions pyproject.toml pins (pip install -e . in a fresh venv)",
        )


class _CachingConnection(pymysql.connections.Connection):  # type: ignore[misc]  # untyped library
    """The library's connection class, with a hook on binlog packets.

    The hook is armed only once this connection has sent COM_BINLOG_DUMP, so ordinary query
    replies (which the library's control connection also reads) are never touched.
    """

    binlog_hook: Callable[[MysqlPacket], MysqlPacket] | None = None
    _dumping = False
    _pushed: MysqlPacket | None = None

    def push(self, packet: MysqlPacket) -> None:
        """Make `packet` (already read and hooked) the next one `_read_packet` returns: how
        events.py hands a packet it does not read itself back to the library."""
        self._pushed = packet

    def _write_bytes(self, data: bytes) -> None:
        if len(data) > 4 and data[4] == COM_BINLOG_DUMP:
            self._dumping = True
        super()._write_bytes(data)

    def _read_packet(self, packet_type: type = MysqlPacket) -> Any:
        if self._pushed is not None:
            packet, self._pushed = self._pushed, None
            return packet
        packet = super()._read_packet(packet_type)
        if self._dumping and self.binlog_hook is not None:
            return self.binlog_hook(packet)
        return packet


class TableMapCache:
    """Parsed Table_map events by their bytes, for one binlog stream."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.hits = 0  # Table_map events served from the cache (for benchmarks)
        self._tables: dict[bytes, Any] = {}
        # (schema, table) -> the body of its latest Table_map event in this stream
        self.current: dict[tuple[str, str], bytes] = {}
        self._stream: Any = None
        self._post_header: Any = None

    def connection_factory(self, db: DatabaseSettings | None = None) -> Callable[..., Any]:
        """The `pymysql_wrapper` to give BinLogStreamReader. With `db`, both of the library's
        connections (the binlog stream and its control session) are opened as mysql.py opens
        every connection: TLS checked, its failures named (TlsError)."""

        def connect(**kwargs: Any) -> Any:
            if db is None:
                conn = _CachingConnection(**kwargs)
            else:
                if "db" in kwargs:  # the library's control session; PyMySQL calls it database
                    kwargs["database"] = kwargs.pop("db")
                conn = mysql.open_connection(db, _CachingConnection, **kwargs)
            conn.binlog_hook = self._on_packet
            return conn

        return connect

    def attach(self, stream: Any) -> None:
        self._stream = stream

    def format_changed(self, post_header_len: Any) -> None:
        """A Format_description event: a different layout makes the cached bytes meaningless."""
        if post_header_len != self._post_header:
            self._post_header = post_header_len
            self._tables.clear()

    def remember(self, event: Any) -> None:
        """A Table_map event the library parsed itself: keep the parse for identical bytes."""
        key = self._key(event.packet.packet.get_all_data())
        if key is None:
            return
        if len(self._tables) > _LIMIT:
            self._tables.clear()
        table = self._tables[key] = event.get_table()
        self._note(table, key)

    def _key(self, data: bytes) -> bytes | None:
        checksum = getattr(self._stream, CHECKSUM_ATTRIBUTE, None)
        if checksum is None:  # not connected yet, or a library without it: do not cache
            return None
        return bytes(data[20 : len(data) - 4] if checksum else data[20:])

    def serve(self, data: bytes) -> bool:
        """A Table_map packet (OK byte, header, body): True when a parse of the same bytes
        was installed into the library's table map, so the packet needs no parsing."""
        if not self.enabled or self._stream is None:
            return False
        key = self._key(data)
        table = self._tables.get(key) if key is not None else None
        if table is None or key is None:
            return False
        self._stream.table_map[table.table_id] = table
        self.hits += 1
        self._note(table, key)
        return True

    def _note(self, table: Any, key: bytes) -> None:
        name = (table.schema, table.table)
        body = key[8:]  # after the table id (6 bytes) and the flags (2)
        if self.current.get(name) != body:
            if len(self.current) > _LIMIT:
                self.current.clear()
            self.current[name] = body

    def _on_packet(self, packet: MysqlPacket) -> MysqlPacket:
        data = packet.get_all_data()
        # OK byte, then the 19-byte event header: timestamp(4) type(1) server(4) size(4) ...
        if len(data) < 26 or data[0] != 0 or data[5] != TABLE_MAP_EVENT or not self.serve(data):
            return packet
        # Same header (so log_pos bookkeeping is unchanged), an event type the library skips.
        return MysqlPacket(data[:5] + bytes((UNKNOWN_EVENT,)) + data[6:], "utf8")
