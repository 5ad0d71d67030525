"""Connecting: the server's greeting, the client's answer, mysql_native_password.

The service offers one account (`binlog_service.user`) and one way to prove it:
mysql_native_password, whose proof is SHA1(password) XOR SHA1(salt + SHA1(SHA1(password))).
A client that starts with another plugin (MySQL 8's caching_sha2_password, MariaDB's
client_ed25519) is asked to switch; a wrong user or password is refused with error 1045, as a
server says it.

TLS as MySQL servers do it: with a certificate configured (`ssl_cert`, `ssl_key`) the greeting
offers CLIENT_SSL; a client that wants TLS answers with a short SSL request, the socket is
wrapped (the handshake bounded by the connection's timeout) and the client's full answer comes
again inside TLS, so the password's proof never travels in the clear. Without a certificate a
TLS request is refused with the reason; with `require_secure_transport` a client without TLS is
refused (error 3159, as MariaDB says it).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import ssl
import struct
from dataclasses import dataclass

from .packets import (
    ER_ACCESS_DENIED,
    ER_HANDSHAKE,
    ER_SECURE_TRANSPORT_REQUIRED,
    SERVER_STATUS_AUTOCOMMIT,
    UTF8MB4_GENERAL_CI,
    Connection,
    PacketError,
)

NATIVE = b"mysql_native_password"
# capability flags
CLIENT_LONG_PASSWORD = 0x1  # also "CLIENT_MYSQL": MariaDB clients then expect no extensions
CLIENT_FOUND_ROWS = 0x2
CLIENT_LONG_FLAG = 0x4
CLIENT_CONNECT_WITH_DB = 0x8
CLIENT_PROTOCOL_41 = 0x200
CLIENT_SSL = 0x800
CLIENT_TRANSACTIONS = 0x2000
CLIENT_SECURE_CONNECTION = 0x8000
CLIENT_MULTI_STATEMENTS = 0x10000
CLIENT_MULTI_RESULTS = 0x20000
CLIENT_PLUGIN_AUTH = 0x80000
CLIENT_CONNECT_ATTRS = 0x100000
CLIENT_PLUGIN_AUTH_LENENC = 0x200000
SERVER_CAPABILITIES = (
    CLIENT_LONG_PASSWORD
    | CLIENT_FOUND_ROWS
    | CLIENT_LONG_FLAG
    | CLIENT_CONNECT_WITH_DB
    | CLIENT_PROTOCOL_41
    | CLIENT_TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | CLIENT_MULTI_RESULTS
    | CLIENT_PLUGIN_AUTH
    | CLIENT_CONNECT_ATTRS
    | CLIENT_PLUGIN_AUTH_LENENC
)
# MariaDB servers of major version 10 announce "5.5.5-" first, so that clients that only
# know versions 3-5 still accept them; MariaDB's own clients take it off.
HANDSHAKE_VERSION_PREFIX = "5.5.5-"


@dataclass(frozen=True, slots=True)
class Client:
    user: str
    database: str
    capabilities: int
    attributes: dict[str, str]
    tls: str | None = None  # the TLS version and cipher, None in the clear


def scramble_for(password: bytes, salt: bytes) -> bytes:
    """What a client sends for `password` (used by tests and by `verify`)."""
    if not password:
        return b""
    first = hashlib.sha1(password).digest()
    second = hashlib.sha1(first).digest()
    mixed = hashlib.sha1(salt + second).digest()
    return bytes(a ^ b for a, b in zip(first, mixed, strict=True))


def verify(stored: bytes, salt: bytes, answer: bytes) -> bool:
    """`stored` is SHA1(SHA1(password)) (b"" for an empty password)."""
    if not stored:
        return answer == b""
    if len(answer) != 20:
        return False
    mixed = hashlib.sha1(salt + stored).digest()
    first = bytes(a ^ b for a, b in zip(answer, mixed, strict=True))
    return hmac.compare_digest(hashlib.sha1(first).digest(), stored)


def stored_password(password: str) -> bytes:
    if not password:
        return b""
    return hashlib.sha1(hashlib.sha1(password.encode()).digest()).digest()


class Reader:
    """Fields of a client packet, each read checked against the packet's end."""

    def __init__(self, data: bytes) -> None:
        self.data, self.p = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.p + n > len(self.data):
            raise PacketError("a client packet ends too early")
        out = self.data[self.p : self.p + n]
        self.p += n
        return out

    def number(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def lenenc(self) -> int:
        first = self.number(1)
        if first < 251:
            return first
        size = {252: 2, 253: 3, 254: 8}.get(first)
        if size is None:
            raise PacketError(f"a bad length byte {first}")
        return self.number(size)

    def zstring(self) -> bytes:
        end = self.data.find(b"\0", self.p)
        if end < 0:
            raise PacketError("a string without its terminating NUL")
        out = self.data[self.p : end]
        self.p = end + 1
        return out

    def rest(self) -> bytes:
        out = self.data[self.p :]
        self.p = len(self.data)
        return out

    @property
    def left(self) -> int:
        return len(self.data) - self.p


def greet(conn: Connection, connection_id: int, version: str, tls: bool = False) -> bytes:
    """Send the greeting (offering TLS when `tls`); returns the salt."""
    salt = bytes(b % 94 + 33 for b in os.urandom(20))  # printable, no NUL (old clients)
    caps = SERVER_CAPABILITIES | (CLIENT_SSL if tls else 0)
    payload = (
        b"\x0a"
        + (HANDSHAKE_VERSION_PREFIX + version).encode()
        + b"\0"
        + struct.pack("<I", connection_id & 0xFFFFFFFF)
        + salt[:8]
        + b"\0"
        + struct.pack(
            "<HBHH", caps & 0xFFFF, UTF8MB4_GENERAL_CI, SERVER_STATUS_AUTOCOMMIT, caps >> 16
        )  # fmt: skip
        + bytes((len(salt) + 1,))
        + b"\0" * 10
        + salt[8:]
        + b"\0"
        + NATIVE
        + b"\0"
    )
    conn.seq = 0
    conn.send(payload)
    return salt


def authenticate(
    conn: Connection,
    salt: bytes,
    user: str,
    stored: bytes,
    address: str,
    tls: ssl.SSLContext | None = None,
    require_tls: bool = False,
) -> Client | None:
    """Read the client's answer and check it; None (after an error packet) when refused.
    `tls` (a server context) is what a client asking for TLS gets; `require_tls` refuses
    clients that do not ask."""
    r = Reader(conn.read())
    caps = r.number(4)
    if not caps & CLIENT_PROTOCOL_41:
        conn.error(ER_HANDSHAKE, "the binlog service speaks protocol 4.1 only")
        return None
    r.number(4)  # max packet size
    r.number(1)  # character set
    r.take(23)
    secured = None
    if r.left == 0 and caps & CLIENT_SSL:
        if tls is None:
            conn.error(
                ER_HANDSHAKE,
                "this binlog service has no certificate, so it does not speak TLS: connect "
                "without it (MASTER_SSL=0, --ssl=0, or skip-ssl), or give the service "
                "binlog_service.ssl_cert and ssl_key",
            )
            return None
        secured = conn.start_tls(tls)
        r = Reader(conn.read())
        caps = r.number(4)
        r.take(4 + 1 + 23)
    elif require_tls:
        conn.error(
            ER_SECURE_TRANSPORT_REQUIRED,
            "Connections using insecure transport are prohibited while "
            "binlog_service.require_secure_transport is on: connect with TLS (MASTER_SSL=1, "
            "--ssl, ssl_ca=the CA that signed the service's certificate)",
        )
        return None
    name = r.zstring().decode("utf-8", "replace")
    if caps & CLIENT_PLUGIN_AUTH_LENENC:
        answer = r.take(r.lenenc())
    elif caps & CLIENT_SECURE_CONNECTION:
        answer = r.take(r.number(1))
    else:
        answer = r.zstring()
    database = ""
    if caps & CLIENT_CONNECT_WITH_DB and r.left:
        database = r.zstring().decode("utf-8", "replace")
    plugin = NATIVE
    if caps & CLIENT_PLUGIN_AUTH and r.left:
        plugin = r.zstring()
    attributes: dict[str, str] = {}
    if caps & CLIENT_CONNECT_ATTRS and r.left:
        attrs = Reader(r.take(r.lenenc()))
        while attrs.left and len(attributes) < 64:
            key = attrs.take(attrs.lenenc()).decode("utf-8", "replace")
            attributes[key[:64]] = attrs.take(attrs.lenenc()).decode("utf-8", "replace")[:256]
    if plugin != NATIVE:
        # Ask for mysql_native_password with a new salt (a client that cannot, closes).
        salt = bytes(b % 94 + 33 for b in os.urandom(20))
        conn.send(b"\xfe" + NATIVE + b"\0" + salt + b"\0")
        answer = conn.read()
    if name != user or not verify(stored, salt, answer):
        conn.error(
            ER_ACCESS_DENIED,
            f"Access denied for user '{name[:64]}'@'{address}' (using password: "
            f"{'YES' if answer else 'NO'})",
        )
        return None
    return Client(name, database, caps, attributes, secured)
