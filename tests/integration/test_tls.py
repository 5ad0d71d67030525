"""TLS to every kind of database, against real servers made here with certificates made here
(binlogsync_dev/certs.py): MariaDB with --require-secure-transport, PostgreSQL with only hostssl lines,
Redis on a --tls-port only; and the same clients against servers without TLS. Each case is a
row of the matrix in docs/tls.md: the engine, the mode, and what must happen (TLS in use,
cleartext with a log line, or a TlsError naming the setting and the file)."""

from __future__ import annotations

import logging
import shutil
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binlogsync import mysql, tls
from binlogsync.apply import postgres as pg_apply
from binlogsync.apply import redisstore
from binlogsync.config import DatabaseSettings, PostgresSettings
from binlogsync.errors import DatabaseError, TlsError, UnreachableError
from binlogsync.reconcile import postgres as pg_reconcile
from binlogsync_dev.certs import Authority, Pair
from binlogsync_dev.pg_sandbox import PgServer
from binlogsync_dev.redis_sandbox import RedisServer
from binlogsync_dev.sandbox import Sandbox, Server, kill_session, tls_options

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Certs:
    ca: Path  # signed the servers' and the client's certificates
    wrong_ca: Path  # signed nothing here
    server: Pair  # names 127.0.0.1 only: "localhost" fails verify_identity, passes verify_ca
    client: Pair  # common name "certuser"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    folder = tmp_path_factory.mktemp("certs")
    authority = Authority(folder, "good")
    wrong = Authority(folder, "wrong")
    server = authority.server(hosts=("127.0.0.1",))
    return Certs(authority.ca, wrong.ca, server, authority.client(user="certuser"))


@pytest.fixture(scope="module")
def tls_mariadb(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Server]:
    """A MariaDB server that refuses cleartext, with a user that must show a certificate."""
    box = Sandbox(tmp_path_factory.mktemp("tls-sandbox"))
    try:
        server = box.start("tlsdb", 71, *tls_options(certs.ca, certs.server.cert, certs.server.key))
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE USER 'certuser'@'127.0.0.1' REQUIRE X509")
            cur.execute("GRANT SELECT ON *.* TO 'certuser'@'127.0.0.1'")
        yield server
    finally:
        box.stop_all()


def _db(
    server: Server, host: str = "127.0.0.1", user: str = "root", **values: Any
) -> DatabaseSettings:
    settings = tls.from_values({k: str(v) for k, v in values.items()}, "origin.{}")
    return DatabaseSettings(host, server.port, user, "", tls=settings)


def _cipher(db: DatabaseSettings) -> str:
    conn = mysql.connect(db, "testing TLS")
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            return str(cur.fetchone()[1])
    finally:
        conn.close()


def _tls_error(call: Any, *names: str) -> TlsError:
    with pytest.raises(TlsError) as caught:
        call()
    text = str(caught.value)
    for name in names:
        assert name in text, text
    return caught.value


# -- MariaDB that requires secure transport -----------------------------------------------------
@pytest.mark.parametrize(
    "values",
    [
        {},  # no settings: preferred
        {"ssl_mode": "preferred"},
        {"ssl_mode": "required"},
        {"ssl_mode": "verify_ca", "ssl_ca": "CA"},
        {"ssl_ca": "CA"},  # no mode: verify_ca
        {"ssl_mode": "verify_identity", "ssl_ca": "CA"},
    ],
    ids=["default", "preferred", "required", "verify_ca", "ca_alone", "verify_identity"],
)
def test_mariadb_tls_modes_that_connect(
    tls_mariadb: Server, certs: Certs, values: dict[str, str]
) -> None:
    values = {k: str(certs.ca) if v == "CA" else v for k, v in values.items()}
    assert _cipher(_db(tls_mariadb, **values))  # a cipher: the session runs over TLS


def test_preferred_connections_share_one_context_and_still_encrypt(tls_mariadb: Server) -> None:
    # PyMySQL makes a context per connection in `preferred`, loading the system's CAs (35-70
    # ms of CPU each): mysql.py makes it once, without the CAs it never uses. The sessions
    # must still run over TLS.
    conns = [mysql.connect(_db(tls_mariadb), "testing TLS") for _ in range(2)]
    try:
        assert conns[0].ctx is conns[1].ctx
        assert conns[0].ctx.verify_mode == ssl.CERT_NONE  # preferred checks no certificate
        assert conns[0].ctx.cert_store_stats()["x509_ca"] == 0
        for conn in conns:
            with conn.cursor() as cur:
                cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
                assert cur.fetchone()[1]
    finally:
        for conn in conns:
            conn.close()


def test_a_tls_session_the_server_ended_is_seen_from_its_socket(tls_mariadb: Server) -> None:
    # The apply engine checks its connection with mysql.still_open, not a ping; over TLS the
    # socket is an SSLSocket, and the server's end of the session must show the same.
    conn, admin = (mysql.connect(_db(tls_mariadb), "testing TLS") for _ in range(2))
    try:
        assert isinstance(conn._sock, ssl.SSLSocket)
        with conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            session = cur.fetchone()[0]
        assert mysql.still_open(conn)
        kill_session(admin, session)
        assert not mysql.still_open(conn)
    finally:
        mysql.close(conn)
        admin.close()


def test_mariadb_verify_ca_accepts_another_name_verify_identity_refuses_it(
    tls_mariadb: Server, certs: Certs
) -> None:
    assert _cipher(_db(tls_mariadb, "localhost", ssl_mode="verify_ca", ssl_ca=certs.ca))
    db = _db(tls_mariadb, "localhost", ssl_mode="verify_identity", ssl_ca=certs.ca)
    _tls_error(lambda: _cipher(db), "does not name localhost", "origin.ssl_mode = verify_identity",
               str(certs.ca))  # fmt: skip


@pytest.mark.parametrize("mode", ["verify_ca", "verify_identity", "required"])
def test_mariadb_wrong_ca_is_a_tls_error_naming_setting_and_file(
    tls_mariadb: Server, certs: Certs, mode: str
) -> None:
    db = _db(tls_mariadb, ssl_mode=mode, ssl_ca=certs.wrong_ca)
    error = _tls_error(lambda: _cipher(db), "origin.ssl_ca", str(certs.wrong_ca))
    assert error.exit_code == 2 and not error.retryable


def test_mariadb_verify_without_ca_uses_the_systems_cas(tls_mariadb: Server) -> None:
    db = _db(tls_mariadb, ssl_mode="verify_identity")
    _tls_error(lambda: _cipher(db), "not signed by a CA this system trusts", "origin.ssl_ca")


def test_mariadb_disabled_is_refused_and_the_message_names_ssl_mode(tls_mariadb: Server) -> None:
    db = _db(tls_mariadb, ssl_mode="disabled")
    with pytest.raises(DatabaseError) as caught:
        _cipher(db)
    assert "require_secure_transport" in str(caught.value)
    assert "origin.ssl_mode" in str(caught.value)


def test_mariadb_client_certificate(tls_mariadb: Server, certs: Certs) -> None:
    with_cert = _db(tls_mariadb, user="certuser", ssl_mode="verify_identity", ssl_ca=certs.ca,
                    ssl_cert=certs.client.cert, ssl_key=certs.client.key)  # fmt: skip
    assert _cipher(with_cert)
    without = _db(tls_mariadb, user="certuser", ssl_mode="verify_identity", ssl_ca=certs.ca)
    with pytest.raises(DatabaseError, match="access denied"):
        _cipher(without)


def test_binlog_stream_over_tls(tls_mariadb: Server, certs: Certs) -> None:
    """python-mysql-replication's two sessions (control and binlog dump) go through
    mysql.open_connection, so they get TLS and its checks."""
    from binlogsync.capture.positions import current_position
    from binlogsync.capture.reader import BinlogReader
    from binlogsync.tables import TableFilter

    db = _db(tls_mariadb, ssl_mode="verify_identity", ssl_ca=certs.ca)
    start = current_position(db)
    with tls_mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS tls_stream")
        cur.execute("CREATE TABLE tls_stream.t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO tls_stream.t VALUES (1, 'secret')")
    reader = BinlogReader(db, 9071, start, TableFilter(("tls_stream.*",)))
    try:
        for item in reader.transactions():
            rows = [c for c in getattr(item, "changes", ()) if c.kind == "insert"]
            if rows:
                assert "secret" in rows[0].after[0]
                stream = reader._stream  # the library's connections, as it made them
                assert tls.mysql_encrypted(stream._stream_connection)
                assert tls.mysql_encrypted(stream._ctl_connection)
                break
        else:
            raise AssertionError("the insert was not read")
    finally:
        reader.close()

    wrong = _db(tls_mariadb, ssl_mode="verify_ca", ssl_ca=certs.wrong_ca)
    reader = BinlogReader(wrong, 9072, start, TableFilter(("tls_stream.*",)))
    try:
        _tls_error(lambda: next(iter(reader.transactions())), "origin.ssl_ca", str(certs.wrong_ca))
    finally:
        reader.close()


# -- MariaDB without TLS -----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["required", "verify_ca", "verify_identity"])
def test_mariadb_without_tls_is_refused_where_tls_is_required(
    origin: Server, certs: Certs, mode: str
) -> None:
    values = {"ssl_mode": mode} | ({"ssl_ca": certs.ca} if mode != "required" else {})
    db = _db(origin, **values)
    _tls_error(lambda: _cipher(db), "does not offer TLS", f"origin.ssl_mode = {mode}")


def test_mariadb_without_tls_preferred_falls_back_and_says_so(
    origin: Server, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    tls._warned.clear()
    with caplog.at_level(logging.WARNING, "binlogsync.tls"):
        assert _cipher(_db(origin, ssl_mode="preferred")) == ""
        # with files, PyMySQL refuses the first attempt (a context means required): again
        # in cleartext, and said once per server
        assert _cipher(_db(origin, ssl_mode="preferred", ssl_ca=certs.ca)) == ""
    lines = [r.getMessage() for r in caplog.records if "offers no TLS" in r.getMessage()]
    assert len(lines) == 1 and "cleartext" in lines[0] and "origin.ssl_mode" in lines[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, "binlogsync.tls"):
        assert _cipher(_db(origin, ssl_mode="disabled")) == ""
    assert not caplog.records  # disabled is what was asked for: nothing to say


# -- PostgreSQL with ssl = on and only hostssl lines -------------------------------------------
@pytest.fixture(scope="module")
def tls_pg(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[PgServer]:
    # its own folder under /tmp: pytest's is closed to the `nobody` PostgreSQL runs as
    server = PgServer(tls=certs.server, ca=certs.ca).start()
    # One role that must also show a client certificate naming it.
    with server.connect() as conn:
        conn.execute("CREATE ROLE certuser LOGIN")
    hba = server.data / "pg_hba.conf"
    hba.write_text(
        "hostssl all certuser 127.0.0.1/32 trust clientcert=verify-full\n" + hba.read_text()
    )
    with server.connect() as conn:
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield server
    finally:
        server.remove()


def _pg_url(server: PgServer, host: str = "127.0.0.1", user: str = "postgres", **query: Any) -> str:
    options = "&".join(f"{k}={v}" for k, v in query.items())
    return f"postgresql://{user}@{host}:{server.port}/postgres" + (f"?{options}" if options else "")


def _pg_tls(query: dict[str, Any]) -> tls.TlsSettings:
    return tls.from_values({k: str(v) for k, v in query.items()}, "{} in target.url", libpq=True)


def _pg_ssl_in_use(server: PgServer, host: str = "127.0.0.1", user: str = "postgres",
                   **query: Any) -> bool:  # fmt: skip
    url = _pg_url(server, host, user, **query)
    with pg_apply.connect(url, "", _pg_tls(query), connect_timeout=5) as conn:
        return bool(conn.pgconn.ssl_in_use)


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"sslmode": "prefer"},
        {"sslmode": "require"},
        {"sslmode": "verify-ca", "sslrootcert": "CA"},
        {"sslmode": "verify-full", "sslrootcert": "CA"},
    ],
    ids=["default", "prefer", "require", "verify-ca", "verify-full"],
)
def test_postgres_tls_modes_that_connect(
    tls_pg: PgServer, certs: Certs, query: dict[str, str]
) -> None:
    query = {k: str(certs.ca) if v == "CA" else v for k, v in query.items()}
    assert _pg_ssl_in_use(tls_pg, **query)


def test_postgres_wrong_ca_and_wrong_name(tls_pg: PgServer, certs: Certs) -> None:
    _tls_error(
        lambda: _pg_ssl_in_use(tls_pg, sslmode="verify-full", sslrootcert=certs.wrong_ca),
        "sslrootcert in target.url", str(certs.wrong_ca),
    )  # fmt: skip
    assert _pg_ssl_in_use(tls_pg, "localhost", sslmode="verify-ca", sslrootcert=certs.ca)
    _tls_error(
        lambda: _pg_ssl_in_use(tls_pg, "localhost", sslmode="verify-full", sslrootcert=certs.ca),
        "does not name localhost", "sslmode in target.url = verify-full",
    )  # fmt: skip


def test_postgres_disable_against_hostssl_only_names_sslmode(tls_pg: PgServer) -> None:
    _tls_error(lambda: _pg_ssl_in_use(tls_pg, sslmode="disable"), "accepts only TLS",
               "sslmode in target.url = disable")  # fmt: skip


def test_postgres_client_certificate(tls_pg: PgServer, certs: Certs, tmp_path: Path) -> None:
    key = tmp_path / "client.key"  # libpq wants the key readable by its owner only
    shutil.copyfile(certs.client.key, key)
    key.chmod(0o600)
    assert _pg_ssl_in_use(tls_pg, user="certuser", sslmode="verify-full",
                          sslrootcert=certs.ca, sslcert=certs.client.cert, sslkey=key)  # fmt: skip
    _tls_error(
        lambda: _pg_ssl_in_use(tls_pg, user="certuser", sslmode="verify-full",
                               sslrootcert=certs.ca),
        "requires a valid client certificate", "sslcert in target.url is not set",
    )  # fmt: skip


def test_postgres_reconcile_sessions_and_checkpoints_over_tls(
    tls_pg: PgServer, certs: Certs
) -> None:
    settings = _pg_tls({"sslmode": "verify-full", "sslrootcert": certs.ca})
    db = PostgresSettings("127.0.0.1", tls_pg.port, "postgres", "", "postgres", tls=settings)
    conn = pg_reconcile.connect(db, "target")
    try:
        assert conn.pgconn.ssl_in_use
    finally:
        conn.close()
    url = _pg_url(tls_pg, sslmode="verify-full", sslrootcert=certs.ca)
    assert pg_apply.checkpoints(url, "", settings) == {}
    wrong = _pg_tls({"sslmode": "verify-full", "sslrootcert": certs.wrong_ca})
    _tls_error(lambda: pg_reconcile.connect(replace_tls(db, wrong), "target"), str(certs.wrong_ca))


def replace_tls(db: PostgresSettings, settings: tls.TlsSettings) -> PostgresSettings:
    from dataclasses import replace

    return replace(db, tls=settings)


@pytest.mark.parametrize("mode", ["require", "verify-full"])
def test_postgres_without_tls_is_refused_where_tls_is_required(
    pg: PgServer, certs: Certs, mode: str
) -> None:
    query = {"sslmode": mode} | ({"sslrootcert": certs.ca} if mode != "require" else {})
    _tls_error(lambda: _pg_ssl_in_use(pg, **query), "does not offer TLS",
               f"sslmode in target.url = {mode}")  # fmt: skip


def test_postgres_without_tls_prefer_falls_back_and_says_so(
    pg: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    tls._warned.clear()
    with caplog.at_level(logging.WARNING, "binlogsync.tls"):
        assert not _pg_ssl_in_use(pg, sslmode="prefer")
    assert any("offers no TLS" in r.getMessage() for r in caplog.records)


# -- Redis on a TLS port ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("tls-redis"), tls=certs.server, ca=certs.ca)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mtls_redis(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[RedisServer]:
    """Redis that demands a client certificate signed by the CA."""
    server = RedisServer(tmp_path_factory.mktemp("mtls-redis"), tls=certs.server, ca=certs.ca,
                         client_certs=certs.client)  # fmt: skip
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _redis(url: str, **values: Any) -> dict[str, dict[str, object]]:
    clean, settings = tls.for_redis(url, {k: str(v) for k, v in values.items()}, "target.{}")
    return redisstore.checkpoints(clean, "", settings)


@pytest.mark.parametrize(
    "values",
    [
        {"ssl_ca": "CA"},  # rediss:// with a CA: verify_identity
        {"ssl_mode": "verify_ca", "ssl_ca": "CA"},
        {"ssl_mode": "required"},
    ],
    ids=["default-verify_identity", "verify_ca", "required"],
)
def test_redis_tls_modes_that_connect(
    tls_redis: RedisServer, certs: Certs, values: dict[str, str]
) -> None:
    values = {k: str(certs.ca) if v == "CA" else v for k, v in values.items()}
    assert _redis(tls_redis.url, **values) == {}


def test_redis_options_in_the_url(tls_redis: RedisServer, certs: Certs) -> None:
    assert _redis(f"{tls_redis.url}?ssl_mode=verify_identity&ssl_ca={certs.ca}") == {}


def test_redis_wrong_ca_wrong_name_and_no_ca(tls_redis: RedisServer, certs: Certs) -> None:
    _tls_error(lambda: _redis(tls_redis.url, ssl_ca=certs.wrong_ca), "target.ssl_ca",
               str(certs.wrong_ca))  # fmt: skip
    localhost = tls_redis.url.replace("127.0.0.1", "localhost")
    assert _redis(localhost, ssl_mode="verify_ca", ssl_ca=certs.ca) == {}
    _tls_error(lambda: _redis(localhost, ssl_ca=certs.ca), "does not name localhost",
               "target.ssl_mode = verify_identity")  # fmt: skip
    _tls_error(lambda: _redis(tls_redis.url), "not signed by a CA this system trusts")


def test_redis_client_certificate(mtls_redis: RedisServer, certs: Certs) -> None:
    assert _redis(mtls_redis.url, ssl_ca=certs.ca, ssl_cert=certs.client.cert,
                  ssl_key=certs.client.key) == {}  # fmt: skip
    _tls_error(lambda: _redis(mtls_redis.url, ssl_ca=certs.ca), "target.ssl_cert")


def test_redis_tls_url_against_a_cleartext_server(tmp_path: Path, certs: Certs) -> None:
    """A cleartext Redis never answers the TLS hello: the client times out, and the message
    asks whether the server speaks TLS on that port."""
    plain = RedisServer(tmp_path / "plain").start()
    try:
        url = plain.url.replace("redis://", "rediss://")
        clean, settings = tls.for_redis(url, {"ssl_ca": str(certs.ca)}, "target.{}")
        with pytest.raises(UnreachableError, match="speak TLS on that port"):
            redisstore.checkpoints(clean, "", settings, timeout=1)
    finally:
        plain.stop()


def test_sandbox_servers_refuse_cleartext(tls_mariadb: Server, tls_pg: PgServer) -> None:
    """The servers really require TLS: a cleartext client is turned away."""
    with pytest.raises(pymysql.err.OperationalError):
        pymysql.connect(host="127.0.0.1", port=tls_mariadb.port, user="root", ssl_disabled=True)
    import psycopg

    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(_pg_url(tls_pg, sslmode="disable"), connect_timeout=5)
