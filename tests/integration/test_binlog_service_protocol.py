"""The binlog service's protocol: the queries clients send, authentication, hostile packets,
positions by file and by GTID, and the errors of positions it does not hold.

The service runs in-process over a hub log written by the test (servicekit.HandLog), so no
MariaDB is needed; the clients are PyMySQL and python-mysql-replication.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
)
from pymysqlreplication.row_event import WriteRowsEvent

from binlogsync.binlogservice import server as service_server
from binlogsync.binlogservice.handshake import scramble_for
from binlogsync.binlogservice.index import Index
from binlogsync.model import Change
from binlogsync_dev.localsite import wait_until
from servicekit import (
    PASSWORD,
    SERVICE_ID,
    SIMPLE,
    USER,
    HandLog,
    connect,
    indexed,
    map_body,
    running,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def hand(tmp_path: Path) -> Iterator[HandLog]:
    log = HandLog(tmp_path)
    try:
        yield log
    finally:
        log.close()


def query(port: int, sql: str) -> list[tuple[object, ...]]:
    with connect(port) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def stream(port: int, **kwargs: object) -> list[object]:
    """Every event python-mysql-replication reads from the service, non-blocking."""
    reader = BinLogStreamReader(
        connection_settings={
            "host": "127.0.0.1",
            "port": port,
            "user": USER,
            "password": PASSWORD,
        },  # fmt: skip
        server_id=4242,
        blocking=False,
        **kwargs,
    )
    try:
        return list(reader)
    finally:
        reader.close()


def gtids(events: list[object]) -> list[str]:
    return [e.gtid for e in events if isinstance(e, MariadbGtidEvent)]  # type: ignore[attr-defined]


def test_the_queries_replication_clients_send_are_answered(hand: HandLog) -> None:
    hand.ddl("CREATE TABLE t (id INT PRIMARY KEY)")
    with running(hand) as service:
        indexed(service, 1)
        port = service.address[1]
        with connect(port) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@version, @@version_comment, @@server_id, @@server_uuid")
            version, comment, server_id, uuid = cur.fetchone()
            assert "MariaDB" in version and "binlogsync" in comment
            assert server_id == SERVICE_ID and len(uuid) == 36
            cur.execute("SELECT @@global.binlog_checksum")
            assert cur.fetchone() == ("CRC32",)
            cur.execute("SET @master_binlog_checksum= @@global.binlog_checksum")
            cur.execute("SELECT @master_binlog_checksum")
            assert cur.fetchone() == ("CRC32",)
            cur.execute("SET @master_heartbeat_period= 1799999979520")
            cur.execute("SET @mariadb_slave_capability=4")
            cur.execute("SET @slave_connect_state='1-900-1', @slave_gtid_strict_mode=1")
            cur.execute("SELECT @slave_connect_state")
            assert cur.fetchone() == ("1-900-1",)
            cur.execute("SELECT @@gtid_binlog_pos, @@GLOBAL.gtid_current_pos")
            assert cur.fetchone() == ("1-900-1", "1-900-1")
            cur.execute("SHOW VARIABLES LIKE 'binlog_format'")
            assert cur.fetchall() == (("binlog_format", "ROW"),)
            cur.execute("SHOW GLOBAL VARIABLES LIKE 'BINLOG_ROW_IMAGE'")
            assert cur.fetchall() == (("binlog_row_image", "FULL"),)
            cur.execute("SHOW VARIABLES WHERE Variable_name IN ('server_id', 'log_bin')")
            assert dict(cur.fetchall()) == {"server_id": str(SERVICE_ID), "log_bin": "ON"}
            cur.execute("SELECT UNIX_TIMESTAMP()")
            assert abs(int(cur.fetchone()[0]) - time.time()) < 5
            cur.execute("SHOW BINARY LOGS")
            logs = cur.fetchall()
            assert [name for name, _size in logs] == ["hub-bin.000001"]
            cur.execute("SHOW MASTER STATUS")
            assert cur.fetchone()[:2] == logs[-1]
            cur.execute("SELECT @@version_comment LIMIT 1")
            assert cur.fetchone() == (comment,)
            cur.execute("SET NAMES utf8mb4")
            cur.execute("SET autocommit=0")
            conn.ping()
            cur.execute("SHOW SLAVE HOSTS")
            assert cur.fetchall() == ()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM mysql.user",
        "DROP DATABASE app",
        "SET GLOBAL read_only = 0",
        "SELECT SLEEP(30)",
        "SELECT 1; DROP TABLE t",
        "SHOW DATABASES",
        "SELECT @@no_such_variable",
        "SET @x = (SELECT 1)",
        "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE t",
        "SELECT 'unbalanced",
        "\x00\xff garbage",
    ],
)
def test_anything_else_is_a_mysql_error_and_the_connection_goes_on(hand: HandLog, sql: str) -> None:
    with running(hand) as service:
        port = service.address[1]
        with connect(port) as conn, conn.cursor() as cur:
            started = time.monotonic()
            with pytest.raises(pymysql.err.MySQLError) as refused:
                cur.execute(sql)
            assert time.monotonic() - started < 2  # nothing ran (SLEEP least of all)
            assert refused.value.args[0] in (1064, 1193, 1235)
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)


def test_wrong_user_or_password_is_refused(hand: HandLog) -> None:
    with running(hand) as service:
        port = service.address[1]
        for user, password in ((USER, "wrong"), ("root", PASSWORD), (USER, "")):
            with pytest.raises(pymysql.err.OperationalError) as refused:
                pymysql.connect(host="127.0.0.1", port=port, user=user, password=password)
            assert refused.value.args[0] == 1045
            assert "Access denied" in refused.value.args[1]


def _packet(payload: bytes, seq: int) -> bytes:
    return struct.pack("<I", len(payload))[:3] + bytes((seq,)) + payload


def _read_packet(sock: socket.socket) -> bytes:
    """One packet's payload; b'' when the service closed the connection."""
    try:
        return _read(sock)
    except (ConnectionResetError, TimeoutError):
        return b""


def _read(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return b""
        head += chunk
    size = head[0] | head[1] << 8 | head[2] << 16
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def _logged_in(port: int) -> socket.socket:
    """A raw socket past authentication (mysql_native_password, by hand)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    greeting = _read_packet(sock)
    end = greeting.index(b"\0", 1)
    salt = greeting[end + 1 + 4 : end + 1 + 12] + greeting[end + 1 + 31 : end + 1 + 43]
    answer = scramble_for(PASSWORD.encode(), salt)
    caps = 0x200 | 0x8000 | 0x80000
    payload = (
        struct.pack("<IIB", caps, 1 << 24, 45) + b"\0" * 23 + USER.encode() + b"\0"
        + bytes((len(answer),)) + answer + b"mysql_native_password\0"
    )  # fmt: skip
    sock.sendall(_packet(payload, 1))
    assert _read_packet(sock)[0] == 0, "not logged in"
    return sock


def _answer(sock: socket.socket, payload: bytes) -> bytes:
    """Send one command; the first packet of the answer (b'' when the service closed)."""
    sock.sendall(_packet(payload, 0))
    return _read_packet(sock)


def test_malformed_and_hostile_packets_get_an_error_or_a_closed_connection(
    hand: HandLog,
) -> None:
    hand.ddl("CREATE TABLE t (id INT PRIMARY KEY)")
    rng = random.Random(23)
    with running(hand) as service:
        port = service.address[1]
        indexed(service, 1)
        # Before authentication: garbage, a huge length, a wrong sequence number.
        for bad in (os.urandom(64), b"\xff\xff\xff\x01" + b"x" * 100, _packet(b"\0" * 40, 7)):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            _read_packet(sock)
            sock.sendall(bad)
            reply = _read_packet(sock)
            assert reply[:1] == b"\xff", reply[:40]  # an error, then the close
            assert _read_packet(sock) == b""
            sock.close()
        # After it: unknown commands, MySQL's GTID dump, truncated commands.
        for payload, code in (
            (b"\x99", 1047),
            (b"\x1e" + b"\0" * 10, 1047),
            (b"\x15\x01", None),  # COM_REGISTER_SLAVE cut short
            (b"\x12\x04", None),  # COM_BINLOG_DUMP cut short
            (b"\x03" + b"\xff" * 2000, 1235),
        ):
            sock = _logged_in(port)
            reply = _answer(sock, payload)
            if code is None:
                assert reply == b"" or reply[0] == 0xFF
            else:
                assert reply[0] == 0xFF and struct.unpack_from("<H", reply, 1)[0] == code
            sock.close()
        # Random mutations of good commands: an error, an answer or a closed connection.
        good = [b"\x03SELECT @@version", b"\x0e", b"\x03SHOW BINARY LOGS",
                b"\x15" + struct.pack("<IB", 5, 2) + b"h1\0\0" + struct.pack("<HII", 1, 0, 0)]  # fmt: skip
        for _ in range(150):
            payload = bytearray(rng.choice(good))
            for _ in range(rng.randint(1, 4)):
                payload[rng.randrange(len(payload))] = rng.randrange(256)
            sock = _logged_in(port)
            _answer(sock, bytes(payload))
            sock.close()
        # A client announcing a packet larger than the limit is cut off, not waited for.
        sock = _logged_in(port)
        sock.sendall(b"\xff\xff\xff\x00")
        reply = _read_packet(sock)
        assert reply[:1] == b"\xff" and b"more than" in reply
        assert _read_packet(sock) == b""
        sock.close()
        # The service still serves a good client, and no session thread is left behind.
        assert query(port, "SELECT @@server_id") == [(SERVICE_ID,)]
        listener = service.listener
        assert listener is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sum(t.is_alive() for t in listener._threads) > 0:
            time.sleep(0.05)
        assert sum(t.is_alive() for t in listener._threads) == 0


def test_a_client_that_stops_talking_is_dropped(
    hand: HandLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_server, "HANDSHAKE_TIMEOUT", 0.5)
    with running(hand) as service:
        sock = socket.create_connection(("127.0.0.1", service.address[1]), timeout=5)
        _read_packet(sock)  # the greeting; then nothing
        started = time.monotonic()
        assert b"sent nothing in time" in _read_packet(sock)
        assert _read_packet(sock) == b""  # closed by the service
        assert time.monotonic() - started < 5
        sock.close()


def test_every_transaction_streams_once_by_file_position_and_by_gtid(hand: HandLog) -> None:
    body = map_body("app", "t", SIMPLE)
    hand.ddl("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(50), n BIGINT UNSIGNED)")
    for i in range(1, 40):
        hand.add(
            Change("insert", "app", "t", ("id", "name", "n"), after=((i, f"név {i}", 2**64 - i),)),
            maps=[("app", "t", body)],
        )
    with running(hand, file_bytes=4096) as service:
        indexed(service, 40)
        port = service.address[1]
        logs = query(port, "SHOW BINARY LOGS")
        assert len(logs) > 2  # rotated
        everything = stream(port, log_file=logs[0][0], log_pos=4, resume_stream=True)
        assert gtids(everything) == [f"1-900-{n}" for n in range(1, 41)]
        rows = [r["values"] for e in everything if isinstance(e, WriteRowsEvent) for r in e.rows]
        assert rows == [{"id": i, "name": f"név {i}", "n": 2**64 - i} for i in range(1, 40)]
        rotations = [e.next_binlog for e in everything if isinstance(e, RotateEvent)]
        assert [n for n, _ in logs] == sorted(set(rotations))
        # From a transaction boundary in a later file: exactly the rest.
        middle = [e for e in everything if isinstance(e, MariadbGtidEvent)][25]
        again = stream(
            port, log_file=_file_of(everything, middle), log_pos=_start_of(middle),
            resume_stream=True,
        )  # fmt: skip
        assert gtids(again) == [f"1-900-{n}" for n in range(26, 41)]
        # By GTID: after the one the subscriber has.
        by_gtid = stream(port, is_mariadb=True, auto_position="1-900-30")
        assert gtids(by_gtid) == [f"1-900-{n}" for n in range(31, 41)]
        assert gtids(stream(port, is_mariadb=True, auto_position="")) == gtids(everything)
        assert gtids(stream(port, is_mariadb=True, auto_position="1-900-40")) == []
    # After a restart of the service: the same files, sizes and events.
    with running(hand, file_bytes=4096) as service:
        port = service.address[1]
        assert query(port, "SHOW BINARY LOGS") == logs
        assert gtids(stream(port, is_mariadb=True, auto_position="1-900-30")) == [
            f"1-900-{n}" for n in range(31, 41)
        ]


def _start_of(event: object) -> int:
    """Where an event starts in its file (its header's log_pos is where it ends)."""
    return event.packet.log_pos - event.packet.event_size  # type: ignore[attr-defined,no-any-return]


def _file_of(events: list[object], target: object) -> str:
    current = ""
    for event in events:
        if isinstance(event, RotateEvent):
            current = event.next_binlog
        if event is target:
            return current
    raise AssertionError("not in the stream")


def _dump_error(port: int, **kwargs: object) -> str:
    with pytest.raises(pymysql.err.OperationalError) as refused:
        stream(port, **kwargs)
    assert refused.value.args[0] == 1236, refused.value.args
    return str(refused.value.args[1])


def test_positions_the_service_does_not_hold_get_error_1236_saying_what_to_do(
    hand: HandLog,
) -> None:
    for i in range(6):
        hand.ddl(f"CREATE TABLE t{i} (id INT PRIMARY KEY)", table=f"t{i}")
    with running(hand) as service:
        indexed(service, 6)
        port = service.address[1]
        message = _dump_error(port, log_file="hub-bin.000042", log_pos=4, resume_stream=True)
        assert "hub-bin.000042" in message and "SHOW BINARY LOGS" in message
        message = _dump_error(port, log_file="hub-bin.000001", log_pos=333, resume_stream=True)
        assert "does not correspond" in message or "not where an event starts" in message
        message = _dump_error(port, is_mariadb=True, auto_position="1-900-99")
        assert "1-900-99" in message and "not in the master's binlog" in message
        message = _dump_error(port, is_mariadb=True, auto_position="1-7-3")
        assert "1-7-3" in message and "copy" in message
        # The hub compacts (targets and retention done with it): the file goes, and the one
        # being written is closed first, so that there is a file to start from.
        floor = hand.log.read("o1", -1, 100)[3].position
        hand.log.compact("o1", floor)
        service.indexer.purge()
        assert query(port, "SHOW BINARY LOGS") == [("hub-bin.000002", 340)]
        message = _dump_error(port, log_file="hub-bin.000001", log_pos=4, resume_stream=True)
        assert "purged" in message and "retain_hours" in message
        message = _dump_error(port, is_mariadb=True, auto_position="1-900-1")
        assert "purged" in message and "1-900-1" in message
        # A subscriber that has everything still starts, in the new file.
        hand.ddl("CREATE TABLE t9 (id INT PRIMARY KEY)", table="t9")
        indexed(service, 7)
        assert gtids(stream(port, is_mariadb=True, auto_position="1-900-6")) == ["1-900-7"]


def test_a_transaction_without_its_table_map_stops_its_origin_with_the_reason(
    hand: HandLog,
) -> None:
    hand.ddl("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(50), n BIGINT UNSIGNED)")
    hand.add(Change("insert", "app", "t", ("id", "name", "n"), after=((1, "a", 1),)))
    with running(hand) as service:
        indexed(service, 1)
        for _ in range(50):
            stalled = service.status()["origins"][0]["stalled"]
            if stalled:
                break
            time.sleep(0.05)
        assert stalled and "Table_map" in stalled and "upgrade" in stalled
        assert gtids(stream(service.address[1], is_mariadb=True, auto_position="")) == ["1-900-1"]


def test_a_dump_of_a_live_service_gets_what_comes_and_heartbeats(hand: HandLog) -> None:
    hand.ddl("CREATE TABLE t (id INT PRIMARY KEY)")
    seen: list[object] = []
    with running(hand) as service:
        indexed(service, 1)
        reader = BinLogStreamReader(
            connection_settings={
                "host": "127.0.0.1",
                "port": service.address[1],
                "user": USER,
                "password": PASSWORD,
            },  # fmt: skip
            server_id=4243,
            blocking=True,
            is_mariadb=True,
            auto_position="",
            slave_heartbeat=0.2,
        )
        done = threading.Event()

        def read() -> None:
            for event in reader:
                seen.append(event)
                if sum(isinstance(e, QueryEvent) for e in seen) >= 3:
                    done.set()
                    return

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 10
            while not service.status()["subscribers"] and time.monotonic() < deadline:
                time.sleep(0.02)
            subscriber = service.status()["subscribers"][0]
            assert subscriber["server_id"] == 4243 and subscriber["mode"] == "gtid"
            wait_until(
                lambda: any(isinstance(e, HeartbeatLogEvent) for e in seen), 5, 0.02,
                "a heartbeat while idle",
            )  # fmt: skip
            hand.ddl("ALTER TABLE t ADD c INT")
            hand.ddl("ALTER TABLE t ADD d INT")
            assert done.wait(10), seen
            queries = [e.query for e in seen if isinstance(e, QueryEvent)]
            assert queries[-2:] == ["ALTER TABLE t ADD c INT", "ALTER TABLE t ADD d INT"]
            assert gtids(seen) == ["1-900-1", "1-900-2", "1-900-3"]  # once each
        finally:
            reader.close()
            thread.join(5)


def follow_until(
    service: Any, server_id: int, position: str, query: str, seen: list[object]
) -> tuple[BinLogStreamReader, threading.Thread, threading.Event]:
    """A blocking dump by GTID from `position` on a thread, appending to `seen` until the
    Query event `query` (the returned event is set then)."""
    reader = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": service.address[1], "user": USER,
                             "password": PASSWORD},
        server_id=server_id, blocking=True, is_mariadb=True, auto_position=position,
        slave_heartbeat=0.2,
    )  # fmt: skip
    done = threading.Event()

    def read() -> None:
        for event in reader:
            seen.append(event)
            if isinstance(event, QueryEvent) and event.query == query:
                done.set()
                return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return reader, thread, done


def test_a_transaction_indexed_between_a_dumps_look_and_its_wait_is_sent(
    hand: HandLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dump looks at the index, finds nothing, and waits for the indexer's next change. A
    transaction indexed between the look and the wait is that change: it must be sent, not
    left until some later transaction wakes the dump (in a full suite run a replica waited
    120 s for the tail of a burst this way). The test holds the dump between the two steps
    while the transaction is indexed."""
    hand.ddl("CREATE TABLE t (id INT PRIMARY KEY)")
    need, go = threading.Event(), threading.Event()
    armed = threading.Event()
    real = Index.txs

    def looked(self: Index, file: int, start: int, limit: int = 200) -> list[Any]:
        found = real(self, file, start, limit)
        if not found and armed.is_set():
            armed.clear()
            need.set()  # the test thread indexes a transaction now
            assert go.wait(10)
        return found

    monkeypatch.setattr(Index, "txs", looked)
    seen: list[object] = []
    with running(hand) as service:
        indexed(service, 1)
        reader, thread, done = follow_until(service, 4244, "", "ALTER TABLE t ADD d INT", seen)
        try:
            wait_until(lambda: any(isinstance(e, HeartbeatLogEvent) for e in seen), 10, 0.02,
                       "the dump idle, after the first transaction")  # fmt: skip
            armed.set()
            hand.ddl("ALTER TABLE t ADD c INT")  # wakes the dump; its next look finds nothing
            assert need.wait(10), "the dump did not look again"
            before = service.indexer.generation
            hand.ddl("ALTER TABLE t ADD d INT")
            wait_until(lambda: service.indexer.generation > before, 10, 0.01, "indexed")
            go.set()
            assert done.wait(5), "the transaction indexed meanwhile was not sent"
            assert gtids(seen) == ["1-900-1", "1-900-2", "1-900-3"]
        finally:
            go.set()
            reader.close()
            thread.join(5)


@pytest.mark.parametrize("has", ["", "1-900-1"], ids=["nothing served yet", "caught up"])
def test_a_transaction_indexed_while_a_gtid_dump_finds_its_start_is_sent(
    hand: HandLog, monkeypatch: pytest.MonkeyPatch, has: str
) -> None:
    """A subscriber by GTID with nothing to catch up starts where the log ends. A transaction
    indexed while the dump reads the GTID state and that end must be sent: in CI a replica
    that connected to a new service as the origin's CREATE DATABASE and CREATE TABLE were
    indexed never got them. The test holds the dump just after it reads the state while a
    transaction is indexed."""
    need, go = threading.Event(), threading.Event()
    real = Index.state

    def read(self: Index, server_id: int) -> Any:
        found = real(self, server_id)
        if sys._getframe(1).f_code.co_name == "_gtid_start" and not need.is_set():
            need.set()  # the test thread indexes a transaction now
            assert go.wait(10)
        return found

    monkeypatch.setattr(Index, "state", read)
    if has:
        hand.ddl("CREATE TABLE t (id INT PRIMARY KEY)")
    seen: list[object] = []
    with running(hand) as service:
        wait_until(lambda: service.indexer.index.files(), 10, 0.01, "the first file")
        if has:
            indexed(service, 1)
        reader, thread, done = follow_until(service, 4245, has, "ALTER TABLE t ADD c INT", seen)
        try:
            assert need.wait(10), "the dump did not read the GTID state"
            if not has:
                hand.ddl("CREATE TABLE t (id INT PRIMARY KEY)")
            hand.ddl("ALTER TABLE t ADD c INT")
            indexed(service, 2)
            go.set()
            assert done.wait(5), f"the transaction indexed meanwhile was not sent: {seen}"
            assert gtids(seen) == (["1-900-2"] if has else ["1-900-1", "1-900-2"])
        finally:
            go.set()
            reader.close()
            thread.join(5)


ZONGJI = Path.home() / ".cache" / "binlogsync-tests" / "zongji"


def _zongji() -> Path:
    """@vlasky/zongji, installed once with npm into a cache folder (`./dev test` installs
    Node.js and npm with apt-get; without them, or without the npm registry, the test fails
    saying so: a client that was never run proves nothing)."""
    module = ZONGJI / "node_modules" / "@vlasky" / "zongji"
    if not module.is_dir():
        if shutil.which("npm") is None or shutil.which("node") is None:
            pytest.fail(
                "Node.js and npm are not installed: apt-get install nodejs npm (./dev test does)"
            )
        ZONGJI.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(ZONGJI),
             "@vlasky/zongji@0.9"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if done.returncode != 0 or not module.is_dir():
            pytest.fail(f"npm could not install @vlasky/zongji: {done.stderr[-300:]}")
    return module


def test_nodes_zongji_reads_the_rows(hand: HandLog) -> None:
    module = _zongji()
    body = map_body("app", "t", SIMPLE)
    hand.ddl("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(50), n BIGINT UNSIGNED)")
    for i in range(1, 6):
        hand.add(
            Change("insert", "app", "t", ("id", "name", "n"), after=((i, f"név {i}", 2**64 - i),)),
            maps=[("app", "t", body)],
        )
    hand.add(
        Change("update", "app", "t", ("id", "name", "n"), before=((1, "név 1", 2**64 - 1),),
               after=((1, "one", 1),)),
        maps=[("app", "t", body)],
    )  # fmt: skip
    with running(hand) as service:
        indexed(service, 7)
        script = Path(__file__).with_name("zongji_read.js")
        done = subprocess.run(
            ["node", str(script), str(service.address[1]), USER, PASSWORD, "6"],
            capture_output=True, text=True, timeout=60, env={**os.environ, "ZONGJI": str(module)},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["row"]["id"] for r in rows[:5]] == [1, 2, 3, 4, 5]
    assert rows[1]["row"] == {"id": 2, "name": "név 2", "n": str(2**64 - 2)}
    assert rows[5]["event"] == "updaterows"
    assert rows[5]["row"]["after"] == {"id": 1, "name": "one", "n": 1}
