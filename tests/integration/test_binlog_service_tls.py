"""TLS on the binlog service: a subscriber that asks for TLS gets it (the password's proof and
every event inside it), `require_secure_transport` refuses subscribers in the clear, a
service without a certificate refuses TLS requests saying why, and bad TLS settings are
configuration errors that name the key.

The service runs in-process over a hand-written hub log (servicekit.HandLog); the clients are
PyMySQL and python-mysql-replication with `ssl` settings, the certificates a throwaway CA's.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

from binlogsync.config import load_hub
from binlogsync.errors import ConfigError
from binlogsync.model import Change
from binlogsync_dev.certs import Authority
from servicekit import PASSWORD, SIMPLE, USER, HandLog, connect, indexed, map_body, running

pytestmark = pytest.mark.integration


@pytest.fixture
def hand(tmp_path: Path) -> Iterator[HandLog]:
    log = HandLog(tmp_path / "hub")
    try:
        yield log
    finally:
        log.close()


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return Authority(tmp_path / "certs")


def _rows(hand: HandLog, count: int) -> None:
    body = map_body("app", "t", SIMPLE)
    hand.ddl("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(50), n BIGINT UNSIGNED)")
    for i in range(1, count + 1):
        hand.add(
            Change("insert", "app", "t", ("id", "name", "n"), after=((i, f"r{i}", i),)),
            maps=[("app", "t", body)],
        )


def test_a_subscriber_asking_for_tls_reads_every_event_inside_it(
    hand: HandLog, ca: Authority
) -> None:
    server = ca.server()
    _rows(hand, 5)
    with running(hand, ssl_cert=server.cert, ssl_key=server.key) as service:
        indexed(service, 6)
        port = service.address[1]
        with connect(port, ssl_ca=str(ca.ca), ssl_verify_cert=True) as conn:
            assert isinstance(conn._sock, ssl.SSLSocket)  # type: ignore[attr-defined]
            assert conn._sock.version() in ("TLSv1.2", "TLSv1.3")  # type: ignore[attr-defined]
            with conn.cursor() as cur:
                cur.execute("SELECT @@server_id")
                assert cur.fetchone() is not None
        reader = BinLogStreamReader(
            connection_settings={
                "host": "127.0.0.1", "port": port, "user": USER, "password": PASSWORD,
                "ssl_ca": str(ca.ca), "ssl_verify_cert": True,
            },
            server_id=4243, blocking=False, is_mariadb=True, auto_position="",
        )  # fmt: skip
        try:
            events = list(reader)
        finally:
            reader.close()
        rows = [r["values"]["id"] for e in events if isinstance(e, WriteRowsEvent) for r in e.rows]
        assert rows == [1, 2, 3, 4, 5]
        # A client that does not ask still connects in the clear (not required here).
        with connect(port, ssl_disabled=True) as conn:
            assert not isinstance(conn._sock, ssl.SSLSocket)  # type: ignore[attr-defined]


def test_a_client_that_does_not_trust_the_certificate_is_not_let_in(
    hand: HandLog, ca: Authority, tmp_path: Path
) -> None:
    server = ca.server()
    other = Authority(tmp_path / "other", "other")
    with running(hand, ssl_cert=server.cert, ssl_key=server.key) as service:
        port = service.address[1]
        with pytest.raises(pymysql.err.OperationalError):
            connect(port, ssl_ca=str(other.ca), ssl_verify_cert=True)
        # The service goes on serving the next client.
        with connect(port, ssl_ca=str(ca.ca), ssl_verify_cert=True) as conn:
            conn.ping()


def test_require_secure_transport_refuses_a_client_in_the_clear(
    hand: HandLog, ca: Authority
) -> None:
    server = ca.server()
    with running(
        hand, ssl_cert=server.cert, ssl_key=server.key, require_secure_transport=True
    ) as service:
        port = service.address[1]
        with pytest.raises(pymysql.err.OperationalError) as refused:
            connect(port, ssl_disabled=True)
        assert refused.value.args[0] == 3159
        assert "insecure transport" in refused.value.args[1]
        assert "MASTER_SSL=1" in refused.value.args[1]
        with connect(port, ssl_ca=str(ca.ca)) as conn:
            conn.ping()


def test_without_a_certificate_tls_is_not_offered_and_a_tls_request_is_refused(
    hand: HandLog, ca: Authority
) -> None:
    with running(hand) as service:
        port = service.address[1]
        with pytest.raises(pymysql.err.OperationalError) as refused:
            connect(port, ssl_ca=str(ca.ca))  # the client sees no TLS offered
        assert refused.value.args[0] == 2026
        # A client that asks all the same (an SSL request after a greeting without TLS) is
        # told why and how to enable it.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            _read_packet(raw)  # the greeting
            ssl_request = struct.pack("<IIB23x", 0x800 | 0x200 | 0x8000 | 0x80000, 1 << 24, 45)
            raw.sendall(struct.pack("<I", len(ssl_request))[:3] + b"\x01" + ssl_request)
            answer = _read_packet(raw)
        assert answer[0] == 0xFF and b"binlog_service.ssl_cert" in answer
        with connect(port) as conn:
            conn.ping()


def _read_packet(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    size = int.from_bytes(head[:3], "little")
    body = b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    return body


def _hub_toml(tmp_path: Path, service: str) -> Path:
    (tmp_path / "pw").write_text("secret\n")
    path = tmp_path / "hub.toml"
    path.write_text(
        '[hub]\nname = "hub"\nbind = "tcp://127.0.0.1:5555"\n'
        f'data_dir = "{tmp_path / "data"}"\n'
        '[[route]]\norigin = "o1"\ntargets = ["t1"]\n'
        '[binlog_service]\nbind = "127.0.0.1:3307"\nuser = "repl"\npassword_file = "pw"\n'
        "server_id = 900\n" + service
    )
    return path


@pytest.mark.parametrize(
    ("service", "names"),
    [
        ('ssl_cert = "cert.pem"\n', "ssl_cert and ssl_key go together"),
        ('ssl_cert = "nope.pem"\nssl_key = "nope.key"\n', "binlog_service.ssl_cert"),
        ("require_secure_transport = true\n", "needs a certificate"),
    ],
)
def test_bad_tls_settings_are_configuration_errors(
    tmp_path: Path, service: str, names: str
) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate")
    with pytest.raises(ConfigError) as bad:
        load_hub(_hub_toml(tmp_path, service))
    assert names in str(bad.value)


def test_a_certificate_that_does_not_load_stops_the_service_at_start(
    hand: HandLog, tmp_path: Path
) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate")
    (tmp_path / "key.pem").write_text("not a key")
    with pytest.raises(ConfigError) as bad:
        with running(hand, ssl_cert=tmp_path / "cert.pem", ssl_key=tmp_path / "key.pem"):
            pass
    assert "cannot load the certificate" in str(bad.value)
