"""The binlog's events, the frequent ones read here and the rest by python-mysql-replication.

Under an OLTP load almost every event is one of: a MariaDB GTID event, a Table_map event
(served by tablemap.py's cache), a Rows event of a table already mapped, an XID event, or a
heartbeat. python-mysql-replication wraps each packet in two generic objects and decodes rows
column by column through a chain of method calls: about 200 µs of CPU per sysbench transaction
(docs/profiles/origin-oltp.svg). `EventSource` reads the packets itself once the library has
connected, handles those few kinds with `struct` and a per-table `RowsDecoder`
(rowdecode.py), and hands every other packet back to the library (`_CachingConnection.push`
then `fetchone()`), so the library keeps doing what it is good at: the connection, the dump
protocol, Rotate / Format_description / Table_map bookkeeping, Query events and the rare kinds.

A packet is handled exactly once, by one side or the other: a Rows event whose table has no
decoder (a column type rowdecode.py leaves to the library) or whose image is partial goes to
the library whole, and so does everything when the Format_description event announces
post-header lengths other than those rowdecode.py reads.

The library's own `log_pos` is kept current for the events read here, so that a reconnect it
makes on its own (it does, once, on a lost connection) resumes where the stream really is.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pymysql import err
from pymysql.constants import CR
from pymysql.protocol import MysqlPacket
from pymysqlreplication.constants import BINLOG

from ..model import ChangeKind, Row
from .rowdecode import RowsDecoder
from .tablemap import CHECKSUM_ATTRIBUTE, TableMapCache

_HEADER = struct.Struct("<IBIII")  # after the OK byte: timestamp, type, server id, size, log_pos
_GTID = struct.Struct("<QIB")  # MariaDB GTID event: sequence number, domain, flags
_TABLE_ID = struct.Struct("<IH")  # a Rows event's 6-byte table id, little-endian
_CONNECTED_ATTRIBUTE = "_BinLogStreamReader__connected_stream"
_CACHE_LIMIT = 4096

ROWS_KINDS: dict[int, ChangeKind] = {
    BINLOG.WRITE_ROWS_EVENT_V1: "insert",
    BINLOG.UPDATE_ROWS_EVENT_V1: "update",
    BINLOG.DELETE_ROWS_EVENT_V1: "delete",
    BINLOG.WRITE_ROWS_EVENT_V2: "insert",
    BINLOG.UPDATE_ROWS_EVENT_V2: "update",
    BINLOG.DELETE_ROWS_EVENT_V2: "delete",
}
# Post-header lengths rowdecode.py reads: table id (6) + flags (2), v2 also extra-data length.
_POST_HEADER = {**dict.fromkeys(range(0x17, 0x1A), 8), **dict.fromkeys(range(0x1E, 0x21), 10)}
# Kinds the library would skip anyway (not in BinlogReader's only_events), skipped here too.
_SKIPPED = {
    BINLOG.UNKNOWN_EVENT,  # a Table_map event tablemap.py's cache has served
    BINLOG.MARIADB_BINLOG_CHECKPOINT_EVENT,
    BINLOG.MARIADB_GTID_GTID_LIST_EVENT,
}


@dataclass(slots=True)
class RawEvent:
    """The common header of an event read here; `packet` is itself, as the library's
    events carry `packet.log_pos` and `packet.event_size` (reader.py reads both)."""

    timestamp: int
    log_pos: int  # where the next event starts
    event_size: int  # the whole event: header, body, checksum

    @property
    def packet(self) -> RawEvent:
        return self


@dataclass(slots=True)
class RawGtid(RawEvent):
    gtid: str
    flags: int


@dataclass(slots=True)
class RawXid(RawEvent):
    pass


@dataclass(slots=True)
class RawRows(RawEvent):
    """A Rows event; its rows are decoded only for the tables `wanted` names."""

    kind: ChangeKind  # insert | update | delete
    schema: str
    table: str
    columns: tuple[str, ...]
    before: tuple[Row, ...]
    after: tuple[Row, ...]


class EventSource:
    """`next()` returns the stream's next event: a `Raw…` event for the frequent kinds, the
    library's event object for the rest (None when the server ended the stream)."""

    def __init__(
        self,
        stream: Any,
        wanted: Callable[[str, str], bool],
        table_maps: TableMapCache,
        *,
        fast: bool = True,
        decode_only: frozenset[str] | None = None,
    ) -> None:
        self.stream = stream
        self.wanted = wanted
        self.table_maps = table_maps
        self.fast = fast
        self.decode_only = decode_only  # RowsDecoder.of's `only`
        self.fast_events = 0  # events read here (for tests and benchmarks)
        self.fast_rows_events = 0  # of which Rows events of routed tables, decoded here
        self._decoders: dict[int, tuple[Any, RowsDecoder | None]] = {}
        self._post_header: Any = None
        self._layout_ok = False

    def format_changed(self, post_header_len: Any) -> None:
        """A Format_description event: read Rows events here only in the layout we know."""
        self._post_header = post_header_len
        try:
            self._layout_ok = all(
                post_header_len[kind - 1] == length for kind, length in _POST_HEADER.items()
            )
        except (IndexError, TypeError):
            self._layout_ok = False

    def next(self) -> Any:
        stream = self.stream
        connection = getattr(stream, "_stream_connection", None)  # set once it connects
        if not (self.fast and connection is not None and getattr(stream, _CONNECTED_ATTRIBUTE)):
            return stream.fetchone()  # the library connects (and reads the first events)
        while True:
            data = _read_packet(connection)
            if data[0] != 0:  # EOF (or an error the library knows how to report)
                connection.push(MysqlPacket(data, connection.encoding))
                return stream.fetchone()
            timestamp, kind, server_id, size, log_pos = _HEADER.unpack_from(data, 1)
            event = self._read(data, kind, timestamp, server_id, size, log_pos)
            if event is None:
                connection.push(MysqlPacket(data, connection.encoding))
                return stream.fetchone()
            if log_pos:
                stream.log_pos = log_pos
            self.fast_events += 1
            if event is not True:
                return event

    def _read(
        self, data: bytes, kind: int, timestamp: int, server_id: int, size: int, log_pos: int
    ) -> RawEvent | bool | None:
        """The event, True for one to skip, None for one the library must read."""
        if kind in ROWS_KINDS:
            return self._rows(data, kind, timestamp, size, log_pos)
        if kind == BINLOG.MARIADB_GTID_EVENT:
            seq, domain, flags = _GTID.unpack_from(data, 20)
            return RawGtid(timestamp, log_pos, size, f"{domain}-{server_id}-{seq}", flags)
        if kind == BINLOG.XID_EVENT:
            return RawXid(timestamp, log_pos, size)
        if kind == BINLOG.HEARTBEAT_LOG_EVENT:  # returned: the reader looks at its stop flag
            return RawEvent(timestamp, log_pos, size)
        if kind in _SKIPPED or (kind == BINLOG.TABLE_MAP_EVENT and self.table_maps.serve(data)):
            return True
        return None

    def _rows(
        self, data: bytes, kind: int, timestamp: int, size: int, log_pos: int
    ) -> RawRows | None:
        if not self._layout_ok:
            return None
        low, high = _TABLE_ID.unpack_from(data, 20)
        table = self.stream.table_map.get(low | high << 32)
        if table is None:
            return None
        schema, name = table.schema, table.table
        if not self.wanted(schema, name):
            return RawRows(timestamp, log_pos, size, ROWS_KINDS[kind], schema, name, (), (), ())
        decoder = self._decoder(table)
        if decoder is None:
            return None
        end = len(data) - 4 if getattr(self.stream, CHECKSUM_ATTRIBUTE, None) else len(data)
        images = decoder.decode(kind, data, 20, end)
        if images is None:  # a partial image: the library's path halts with the reason
            return None
        self.fast_rows_events += 1
        return RawRows(
            timestamp, log_pos, size, ROWS_KINDS[kind], schema, name, decoder.columns, *images
        )

    def _decoder(self, table: Any) -> RowsDecoder | None:
        cached = self._decoders.get(id(table))
        if cached is not None and cached[0] is table:
            return cached[1]
        if len(self._decoders) > _CACHE_LIMIT:
            self._decoders.clear()
        decoder = RowsDecoder.of(table, self.decode_only)
        self._decoders[id(table)] = (table, decoder)  # keeps `table` alive: id() stays unique
        return decoder


_MAX_PACKET = 0xFFFFFF  # a payload this long continues in the next packet


def _read_packet(connection: Any) -> bytes:
    """The next packet's payload, read from PyMySQL's buffered socket file as its own
    `_read_packet` does (sequence check, continuation packets), without building a
    MysqlPacket: a sysbench transaction is ten packets."""
    rfile = connection._rfile
    parts: list[bytes] = []
    while True:
        header = rfile.read(4)
        if len(header) < 4:
            connection._force_close()
            raise err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server")
        length = header[0] | header[1] << 8 | header[2] << 16
        if header[3] != connection._next_seq_id:
            connection._force_close()
            raise err.OperationalError(
                CR.CR_SERVER_LOST,
                f"Packet sequence number wrong - got {header[3]} expected "
                f"{connection._next_seq_id}",
            )
        connection._next_seq_id = (header[3] + 1) % 256
        data = rfile.read(length)
        if len(data) < length:
            connection._force_close()
            raise err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server")
        if length < _MAX_PACKET and not parts:
            return data  # type: ignore[no-any-return]
        parts.append(data)
        if length < _MAX_PACKET:
            return b"".join(parts)
