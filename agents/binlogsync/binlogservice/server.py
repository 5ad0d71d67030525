"""The listener and one thread per connection: handshake, then commands until the client goes.

    COM_QUIT            close
    COM_INIT_DB, COM_PING, COM_SET_OPTION   OK
    COM_QUERY           queries.py (a closed set; anything else is an error)
    COM_REGISTER_SLAVE  remembered for SHOW SLAVE HOSTS and `status`
    COM_BINLOG_DUMP     dump.py: the stream, until the subscriber goes (or its end, non-blocking)
    COM_BINLOG_DUMP_GTID (MySQL's GTIDs) and anything else: an error

Every failure stays in its connection: a malformed packet gets an error and the connection is
closed, an exception in a session is logged and closes that session only. Connections are
bounded (`MAX_CONNECTIONS`), reads time out, and a dump whose subscriber stops reading is
dropped after `WRITE_TIMEOUT`.
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from typing import Protocol

from .dump import Request
from .handshake import Reader, authenticate, greet
from .packets import (
    ER_HANDSHAKE,
    ER_TOO_MANY_CONNECTIONS,
    ER_UNKNOWN_COM,
    ER_UNKNOWN_ERROR,
    Connection,
    PacketError,
    error_packet,
)
from .queries import Facts, SessionVars, answer

log = logging.getLogger("binlogsync.binlogservice")

COM_QUIT, COM_INIT_DB, COM_QUERY, COM_PING = 0x01, 0x02, 0x03, 0x0E
COM_BINLOG_DUMP, COM_REGISTER_SLAVE, COM_SET_OPTION, COM_BINLOG_DUMP_GTID = 0x12, 0x15, 0x1B, 0x1E
MAX_CONNECTIONS = 200
HANDSHAKE_TIMEOUT = 10.0
IDLE_TIMEOUT = 8 * 3600.0
WRITE_TIMEOUT = 120.0


class Listener:
    """Accepts connections on `bind` and runs `session` for each on its own thread, over a
    `Connection` the listener owns: whatever its socket becomes (TLS wraps it), the listener
    says goodbye on it and closes it."""

    def __init__(self, host: str, port: int, session: Callable[[Connection, str, int], None]):
        self.session = session
        self.sock = socket.create_server((host, port), reuse_port=False, backlog=64)
        self.sock.settimeout(0.5)
        self.address = self.sock.getsockname()
        self.stopping = threading.Event()
        self._ids = itertools.count(1)
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, name="binlog-service", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self.thread.join(timeout)
        try:
            self.sock.close()
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.stopping.is_set():
                    return
                log.exception("binlog service: accept failed")
                time.sleep(0.1)
                continue
            address = f"{peer[0]}:{peer[1]}"
            with self._lock:
                self._threads = {t for t in self._threads if t.is_alive()}
                full = len(self._threads) >= MAX_CONNECTIONS
            if full:
                _refuse(client, "Too many connections to the binlog service")
                continue
            thread = threading.Thread(
                target=self._run, args=(client, address, next(self._ids)), daemon=True,
                name=f"binlog-service-{address}",
            )  # fmt: skip
            with self._lock:
                self._threads.add(thread)
            thread.start()

    def _run(self, client: socket.socket, address: str, number: int) -> None:
        conn = Connection(client, HANDSHAKE_TIMEOUT)
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.session(conn, address, number)
        except PacketError as exc:
            log.debug("binlog service: %s: %s", address, exc)
            _goodbye(conn.sock, ER_HANDSHAKE, f"the binlog service closes this connection: {exc}")
        except Exception:  # noqa: BLE001 - one session's failure never reaches the others
            log.exception("binlog service: the session of %s failed", address)
            _goodbye(conn.sock, ER_UNKNOWN_ERROR, "the binlog service failed on this connection")
        finally:
            for sock in {conn.sock, client}:  # the TLS socket, if any, and the plain one
                try:
                    sock.close()
                except OSError:
                    pass


def _goodbye(client: socket.socket, error: tuple[int, str], message: str) -> None:
    """An error packet, then a close that lets it arrive (what the client sent meanwhile is
    read and dropped first: closing with unread data would reset the connection)."""
    try:
        client.settimeout(0.5)
        payload = error_packet(error, message)
        client.sendall(struct.pack("<I", len(payload))[:3] + b"\x00" + payload)
        client.shutdown(socket.SHUT_WR)
        for _ in range(64):
            if not client.recv(65536):
                break
    except OSError:
        pass


def _refuse(client: socket.socket, message: str) -> None:
    try:
        client.settimeout(1.0)
        payload = error_packet(ER_TOO_MANY_CONNECTIONS, message)
        client.sendall(struct.pack("<I", len(payload))[:3] + b"\x00" + payload)
    except OSError:
        pass
    finally:
        client.close()


class Session:
    """One client connection of the service."""

    def __init__(
        self,
        conn: Connection,
        address: str,
        number: int,
        service: ServiceFace,
    ) -> None:
        self.conn, self.address, self.number, self.service = conn, address, number, service
        self.vars = SessionVars("", address, number)
        self.registered: tuple[int, str, int] | None = None  # server id, host, port

    def run(self) -> None:
        service = self.service
        salt = greet(self.conn, self.number, service.version, service.tls is not None)
        client = authenticate(
            self.conn,
            salt,
            service.user,
            service.password,
            self.address.rsplit(":", 1)[0],
            service.tls,
            service.require_tls,
        )
        if client is None:
            return
        self.vars.user, self.vars.database = client.user, client.database
        self.conn.ok()
        self.conn.sock.settimeout(IDLE_TIMEOUT)
        while not service.stopping.is_set():
            payload = self.conn.command()
            command = payload[0]
            if command == COM_QUIT:
                return
            if command in (COM_INIT_DB, COM_PING, COM_SET_OPTION):
                if command == COM_INIT_DB:
                    self.vars.database = payload[1:65].decode("utf-8", "replace")
                if command == COM_SET_OPTION:
                    self.conn.eof()
                else:
                    self.conn.ok()
            elif command == COM_QUERY:
                text = payload[1:].decode("utf-8", "replace")
                answer(self.conn, text, self.vars, service)
            elif command == COM_REGISTER_SLAVE:
                self._register(payload[1:])
            elif command == COM_BINLOG_DUMP:
                self._dump(payload[1:])
                return
            elif command == COM_BINLOG_DUMP_GTID:
                self.conn.error(
                    ER_UNKNOWN_COM,
                    "the binlogsync binlog service speaks MariaDB GTIDs (@slave_connect_state), "
                    "not MySQL's COM_BINLOG_DUMP_GTID: connect with file and position, or as a "
                    "MariaDB replica",
                )
            else:
                self.conn.error(ER_UNKNOWN_COM, f"Unknown command {command}")

    def _register(self, data: bytes) -> None:
        r = Reader(data)
        server_id = r.number(4)
        host = r.take(r.number(1)).decode("utf-8", "replace")[:255]
        r.take(r.number(1))  # user
        r.take(r.number(1))  # password
        port = r.number(2)
        self.registered = (server_id, host, port)
        self.service.registered(self.number, server_id, host, port)
        self.conn.ok()

    def _dump(self, data: bytes) -> None:
        r = Reader(data)
        position, flags, server_id = r.number(4), r.number(2), r.number(4)
        name = r.rest().rstrip(b"\0").decode("utf-8", "replace")[:255]
        request = Request(name, position, flags, server_id)
        self.conn.sock.settimeout(WRITE_TIMEOUT)
        self.service.dump(self.conn, request, self.vars.user_vars, self.address, self.number)


class ServiceFace(Facts, Protocol):
    """What a session needs of the service (service.py is it)."""

    version: str
    user: str
    password: bytes  # SHA1(SHA1(password)), b"" for none
    tls: ssl.SSLContext | None  # what a client asking for TLS gets; None: no TLS
    require_tls: bool  # refuse clients without TLS
    stopping: threading.Event

    def registered(self, number: int, server_id: int, host: str, port: int) -> None: ...

    def dump(
        self,
        conn: Connection,
        request: Request,
        user_vars: dict[str, object],
        address: str,
        number: int,
    ) -> None: ...
