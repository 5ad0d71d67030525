"""Binlog events as bytes, in MariaDB 10.11's layout (binlog version 4, CRC32 checksums).

Every event is a 19-byte header (timestamp, type, server id, event size, log_pos = where the
next event starts in its file, flags), a body, and a CRC32 of both. The service's virtual
files always hold the checksum (their positions count it, as a MariaDB binlog with
binlog_checksum=CRC32 does); a subscriber that did not announce it can take checksums gets
every event without its last four bytes (`strip_checksum`) and a Format_description that says
so, with the same log_pos values.

The layouts were read from a binlog MariaDB 10.11 wrote (tests/integration/
test_binlog_service_events.py compares ours with its events byte for byte where they
describe the same thing).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server id, event size, log_pos, flags
HEADER_SIZE = 19
CHECKSUM_SIZE = 4
BINLOG_MAGIC = b"\xfebin"

# event types
QUERY = 2
ROTATE = 4
FORMAT_DESCRIPTION = 15
XID = 16
TABLE_MAP = 19
WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1 = 23, 24, 25
HEARTBEAT = 27
BINLOG_CHECKPOINT = 161
GTID = 162
GTID_LIST = 163

# header flags
LOG_EVENT_SUPPRESS_USE_F = 0x0008
LOG_EVENT_ARTIFICIAL_F = 0x0020
# Rows and Table_map flags
STMT_END_F = 0x0001
TM_BIT_LEN_EXACT_F = 0x0001
# MariaDB GTID event flags
FL_STANDALONE = 0x01
FL_TRANSACTIONAL = 0x04
FL_ALLOW_PARALLEL = 0x08
FL_DDL = 0x20
GTID_DML_FLAGS = FL_TRANSACTIONAL | FL_ALLOW_PARALLEL
GTID_DDL_FLAGS = FL_STANDALONE | FL_ALLOW_PARALLEL | FL_DDL

SERVER_VERSION = "10.11.0-MariaDB-binlogsync-log"  # in the Format_description event
# What follows the version and creation time in MariaDB 10.11's Format_description event:
# the common header length (19) and the post-header length of each event type 1…171.
_FDE_TAIL = bytes.fromhex(
    "13380d000800120004040404120000e400041a08000000080808020000000a0a0a0000000000000a0a0a"
    + "00" * 119
    + "041304000d0808080a0a0a"
)
CHECKSUM_CRC32, CHECKSUM_OFF = 1, 0

# Query event status variables of a DDL statement, as MariaDB 10.11 writes them with its
# default settings (copied from its binlog): flags2, sql_mode (STRICT_TRANS_TABLES, ERROR_FOR_DIVISION_BY_ZERO,
# NO_AUTO_CREATE_USER, NO_ENGINE_SUBSTITUTION), catalog "std", and the character sets of
# client, connection and server, all utf8mb4_general_ci (45): the text is sent as UTF-8.
_DDL_STATUS = bytes.fromhex("00000000010100002054000000000603737464042d002d002d00")
_QUERY_POST = struct.Struct("<IIBHH")  # thread id, exec time, db length, error code, status len
_GTID_BODY = struct.Struct("<QIB6x")  # sequence number, domain, flags (then 6 bytes unused)
_GTID_LIST_ITEM = struct.Struct("<IIQ")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
TABLE_ID_LIMIT = 1 << 48


def finish(
    kind: int, body: bytes, *, timestamp: int, server_id: int, log_pos: int, flags: int = 0
) -> bytes:
    """A whole event: header, body, CRC32."""
    head = HEADER.pack(
        timestamp, kind, server_id, HEADER_SIZE + len(body) + CHECKSUM_SIZE, log_pos, flags
    )
    crc = zlib.crc32(body, zlib.crc32(head))
    return head + body + _U32.pack(crc)


def size_of(body_size: int) -> int:
    return HEADER_SIZE + body_size + CHECKSUM_SIZE


def strip_checksum(event: bytes) -> bytes:
    """The event as sent to a subscriber that takes no checksums: without its last 4 bytes,
    and an event size that says so (log_pos stays the file's)."""
    size = len(event) - CHECKSUM_SIZE
    return event[:9] + _U32.pack(size) + event[13:size]


def set_log_pos(event: bytes, log_pos: int, clear_created: bool = False) -> bytes:
    """The event with another log_pos (and a new checksum): the Format_description sent when a
    dump starts inside a file carries 0, so that the replica does not count it."""
    body = bytearray(event[: len(event) - CHECKSUM_SIZE])
    body[13:17] = _U32.pack(log_pos)
    if clear_created:  # the creation time: 0 keeps a replica's temporary tables
        body[HEADER_SIZE + 52 : HEADER_SIZE + 56] = b"\0\0\0\0"
    return bytes(body) + _U32.pack(zlib.crc32(body))


# -- the events of a file's start and end ------------------------------------------------


def format_description(server_id: int, log_pos: int, timestamp: int = 0) -> bytes:
    version = SERVER_VERSION.encode().ljust(50, b"\0")
    body = struct.pack("<H", 4) + version + _U32.pack(0) + _FDE_TAIL + bytes((CHECKSUM_CRC32,))
    return finish(FORMAT_DESCRIPTION, body, timestamp=timestamp, server_id=server_id,
                  log_pos=log_pos)  # fmt: skip


def format_description_without_checksum(event: bytes) -> bytes:
    """A Format_description as a subscriber without checksums must see it: algorithm OFF."""
    stripped = bytearray(strip_checksum(event))
    stripped[-1] = CHECKSUM_OFF
    return bytes(stripped)


def gtid_list(
    state: Iterable[tuple[int, int, int]], *, server_id: int, log_pos: int, flags: int = 0
) -> bytes:
    """A Gtid_list event: the last GTID of every domain (domain, server, seq) before here."""
    items = sorted(state)
    body = _U32.pack(len(items)) + b"".join(_GTID_LIST_ITEM.pack(*i) for i in items)
    return finish(GTID_LIST, body, timestamp=0, server_id=server_id, log_pos=log_pos,
                  flags=flags)  # fmt: skip


def binlog_checkpoint(file: str, *, server_id: int, log_pos: int) -> bytes:
    name = file.encode()
    return finish(BINLOG_CHECKPOINT, _U32.pack(len(name)) + name, timestamp=0,
                  server_id=server_id, log_pos=log_pos)  # fmt: skip


def rotate(
    next_file: str, *, server_id: int, log_pos: int, position: int = 4, artificial: bool = False
) -> bytes:
    """A Rotate event: the file's last one (`artificial` False), or the one a dump starts with,
    which names the file and position it starts at (timestamp and log_pos 0)."""
    return finish(
        ROTATE,
        _U64.pack(position) + next_file.encode(),
        timestamp=0,
        server_id=server_id,
        log_pos=0 if artificial else log_pos,
        flags=LOG_EVENT_ARTIFICIAL_F if artificial else 0,
    )


def heartbeat(file: str, *, server_id: int, log_pos: int) -> bytes:
    return finish(HEARTBEAT, file.encode(), timestamp=0, server_id=server_id, log_pos=log_pos)


# -- the events of a transaction ----------------------------------------------------------


def gtid(
    domain: int, seq: int, ddl: bool, *, timestamp: int, server_id: int, log_pos: int
) -> bytes:
    body = _GTID_BODY.pack(seq, domain, GTID_DDL_FLAGS if ddl else GTID_DML_FLAGS)
    return finish(GTID, body, timestamp=timestamp, server_id=server_id, log_pos=log_pos,
                  flags=LOG_EVENT_SUPPRESS_USE_F)  # fmt: skip


GTID_EVENT_SIZE = size_of(_GTID_BODY.size)


def begin_instead_of_gtid(*, timestamp: int, server_id: int, log_pos: int) -> bytes:
    """The Query "BEGIN" a subscriber that does not take MariaDB GTIDs gets in place of a
    GTID event: of the same size, so positions stay the file's (what MariaDB does)."""
    body = _QUERY_POST.pack(0, 0, 0, 0, 0) + b"\0BEGIN"
    assert len(body) == _GTID_BODY.size
    return finish(QUERY, body, timestamp=timestamp, server_id=server_id, log_pos=log_pos)


def query(
    statement: bytes, schema: bytes, *, timestamp: int, server_id: int, log_pos: int
) -> bytes:
    """A DDL statement as a Query event, run in `schema` (the origin's default schema)."""
    body = (
        _QUERY_POST.pack(0, 0, len(schema), 0, len(_DDL_STATUS))
        + _DDL_STATUS
        + schema
        + b"\0"
        + statement
    )
    return finish(QUERY, body, timestamp=timestamp, server_id=server_id, log_pos=log_pos,
                  flags=0 if schema else LOG_EVENT_SUPPRESS_USE_F)  # fmt: skip


def query_size(statement: bytes, schema: bytes) -> int:
    return size_of(_QUERY_POST.size + len(_DDL_STATUS) + len(schema) + 1 + len(statement))


def xid(number: int, *, timestamp: int, server_id: int, log_pos: int) -> bytes:
    return finish(XID, _U64.pack(number), timestamp=timestamp, server_id=server_id,
                  log_pos=log_pos)  # fmt: skip


XID_EVENT_SIZE = size_of(8)


def table_map(table_id: int, body: bytes, *, timestamp: int, server_id: int, log_pos: int) -> bytes:
    """A Table_map event: our table id, then the origin's body (names, types, metadata,
    optional metadata) as capture sent it."""
    post = table_id.to_bytes(6, "little") + struct.pack("<H", TM_BIT_LEN_EXACT_F)
    return finish(TABLE_MAP, post + body, timestamp=timestamp, server_id=server_id,
                  log_pos=log_pos)  # fmt: skip


def rows_header(kind: int, table_id: int, width: int, last: bool) -> bytes:
    """What a Rows event (version 1) body starts with: table id, flags, the column count and
    the bitmap(s) of present columns (every column: a full row image)."""
    bitmap = ((1 << width) - 1).to_bytes((width + 7) // 8, "little")
    post = table_id.to_bytes(6, "little") + struct.pack("<H", STMT_END_F if last else 0)
    return post + lenenc(width) + (bitmap * 2 if kind == UPDATE_ROWS_V1 else bitmap)


def lenenc(value: int) -> bytes:
    """MySQL's length-encoded integer."""
    if value < 251:
        return bytes((value,))
    if value < 1 << 16:
        return b"\xfc" + value.to_bytes(2, "little")
    if value < 1 << 24:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + value.to_bytes(8, "little")
