"""The MySQL client/server protocol's packets, as the service's side of a connection.

A packet is a 3-byte length, a 1-byte sequence number and the payload; a payload of
0xffffff bytes or more continues in the next packet. Each command from the client starts a
sequence at 0; the answers continue it. Reads are bounded (`MAX_PACKET`, a timeout): a client
that sends more, sends garbage or stops half-way gets an error or a closed connection, never
a thread of ours waiting for ever.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Iterable, Sequence

from .events import lenenc

_HEAD = struct.Struct("<I").pack
MAX_PACKET = 1 << 20  # what a client may send us: queries and commands are small
_SPLIT = 0xFFFFFF

# server status flags
SERVER_STATUS_AUTOCOMMIT = 0x0002
# column types for result sets
TYPE_LONGLONG = 0x08
TYPE_VAR_STRING = 0xFD
UTF8MB4_GENERAL_CI = 45
BINARY_COLLATION = 63

# errors (code, SQL state)
ER_ACCESS_DENIED = (1045, "28000")
ER_UNKNOWN_COM = (1047, "08S01")
ER_NOT_SUPPORTED = (1235, "42000")
ER_MASTER_FATAL_READING_BINLOG = (1236, "HY000")
ER_UNKNOWN_ERROR = (1105, "HY000")
ER_HANDSHAKE = (1043, "08S01")
ER_TOO_MANY_CONNECTIONS = (1040, "08004")
ER_PARSE = (1064, "42000")
ER_NET_PACKET_TOO_LARGE = (1153, "08S01")
ER_SECURE_TRANSPORT_REQUIRED = (3159, "08004")


class PacketError(Exception):
    """The peer broke the protocol (or went away): the connection is closed."""


class Connection:
    """Packets over one socket. Not thread-safe: one thread per connection."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.sock.settimeout(timeout)
        self.seq = 0
        self._out: list[bytes] = []
        self._out_bytes = 0

    def start_tls(self, context: ssl.SSLContext) -> str:
        """Wrap the socket in TLS as the server side (after the client's SSL request); returns
        the version and cipher. A failed handshake is a PacketError (the connection closes)."""
        try:
            wrapped = context.wrap_socket(self.sock, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            raise PacketError(f"the TLS handshake failed: {exc}") from exc
        self.sock = wrapped
        cipher = wrapped.cipher()
        return f"{wrapped.version()} {cipher[0] if cipher else ''}".strip()

    # -- reading -----------------------------------------------------------------------------
    def _exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            try:
                chunk = self.sock.recv(min(n, 65536))
            except TimeoutError as exc:
                raise PacketError("the client sent nothing in time") from exc
            except OSError as exc:
                raise PacketError(f"the connection failed: {exc}") from exc
            if not chunk:
                raise PacketError("the client closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def read(self, limit: int = MAX_PACKET) -> bytes:
        """One payload (continuations joined). Raises PacketError."""
        parts = []
        size = 0
        while True:
            head = self._exactly(4)
            length = head[0] | head[1] << 8 | head[2] << 16
            if head[3] != self.seq:
                raise PacketError(f"packet sequence {head[3]}, expected {self.seq}")
            self.seq = (self.seq + 1) & 0xFF
            size += length
            if size > limit:
                raise PacketError(f"a packet of more than {limit} bytes")
            parts.append(self._exactly(length))
            if length < _SPLIT:
                return b"".join(parts)

    def command(self) -> bytes:
        """The next command: a new sequence starts."""
        self.seq = 0
        payload = self.read()
        if not payload:
            raise PacketError("an empty command packet")
        return payload

    # -- writing -----------------------------------------------------------------------------
    def queue(self, payload: bytes) -> None:
        """Add a packet to what `flush` sends (split as the protocol wants)."""
        view = memoryview(payload)
        while True:
            chunk = view[:_SPLIT]
            self._out.append(struct.pack("<I", len(chunk))[:3] + bytes((self.seq,)))
            self._out.append(bytes(chunk))
            self._out_bytes += len(chunk) + 4
            self.seq = (self.seq + 1) & 0xFF
            view = view[_SPLIT:]
            if len(chunk) < _SPLIT:
                return

    def queue_event(self, event: bytes) -> None:
        """A binlog event as a dump sends it: an OK byte, then the event."""
        size = len(event) + 1
        if size >= _SPLIT:
            self.queue(b"\x00" + event)
            return
        self._out.append(_HEAD(size | self.seq << 24) + b"\x00")
        self._out.append(event)
        self._out_bytes += size + 4
        self.seq = (self.seq + 1) & 0xFF

    def queue_events(self, events: Sequence[bytes]) -> int:
        """`queue_event` of each; the bytes of the events."""
        out, seq, total = self._out, self.seq, 0
        append = out.append
        for event in events:
            size = len(event) + 1
            if size >= _SPLIT:
                self.seq = seq
                self.queue(b"\x00" + event)
                seq = self.seq
            else:
                append(_HEAD(size | seq << 24) + b"\x00")
                append(event)
                self._out_bytes += size + 4
                seq = (seq + 1) & 0xFF
            total += size - 1
        self.seq = seq
        return total

    @property
    def queued(self) -> int:
        return self._out_bytes

    def flush(self) -> None:
        if not self._out:
            return
        data, self._out, self._out_bytes = b"".join(self._out), [], 0
        try:
            self.sock.sendall(data)
        except TimeoutError as exc:
            raise PacketError("the client did not read in time") from exc
        except OSError as exc:
            raise PacketError(f"the connection failed: {exc}") from exc

    def send(self, payload: bytes) -> None:
        self.queue(payload)
        self.flush()

    def ok(self, status: int = SERVER_STATUS_AUTOCOMMIT, info: bytes = b"") -> None:
        self.send(b"\x00\x00\x00" + struct.pack("<HH", status, 0) + info)

    def eof(self, status: int = SERVER_STATUS_AUTOCOMMIT) -> None:
        self.send(eof_packet(status))

    def error(self, error: tuple[int, str], message: str) -> None:
        self.send(error_packet(error, message))

    def result(self, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        """A text result set (with EOF packets: the service does not take DEPRECATE_EOF)."""
        rows = list(rows)
        self.queue(lenenc(len(columns)))
        for i, name in enumerate(columns):
            numeric = bool(rows) and all(
                isinstance(r[i], int) and not isinstance(r[i], bool) for r in rows
            )
            self.queue(_column(name, numeric))
        self.queue(eof_packet())
        for row in rows:
            self.queue(b"".join(_cell(v) for v in row))
        self.queue(eof_packet())
        self.flush()


def eof_packet(status: int = SERVER_STATUS_AUTOCOMMIT) -> bytes:
    return b"\xfe" + struct.pack("<HH", 0, status)


def error_packet(error: tuple[int, str], message: str) -> bytes:
    code, state = error
    text = message.encode("utf-8", "replace")[:4000]
    return b"\xff" + struct.pack("<H", code) + b"#" + state.encode() + text


def counted(data: bytes) -> bytes:
    return lenenc(len(data)) + data


def _column(name: str, numeric: bool) -> bytes:
    raw = name.encode()
    return (
        counted(b"def")
        + counted(b"")
        + counted(b"")
        + counted(b"")
        + counted(raw)
        + counted(raw)
        + b"\x0c"
        + struct.pack(
            "<HIBHB",
            BINARY_COLLATION if numeric else UTF8MB4_GENERAL_CI,
            21 if numeric else 1024,
            TYPE_LONGLONG if numeric else TYPE_VAR_STRING,
            0x0001 if numeric else 0,  # NOT NULL for numbers: pymysql converts by type
            0,
        )
        + b"\x00\x00"
    )


def _cell(value: object) -> bytes:
    if value is None:
        return b"\xfb"
    return counted(str(value).encode())
