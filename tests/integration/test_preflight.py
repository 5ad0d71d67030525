"""Preflight against real MariaDB servers, some started misconfigured on purpose."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from binlogsync.capture.preflight import check_origin
from binlogsync.capture.reader import BinlogReader
from binlogsync.config import DatabaseSettings
from binlogsync.errors import PreflightError, UnreachableError
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync_dev.sandbox import Sandbox, Server, free_port

pytestmark = pytest.mark.integration

READER_ID = 9100


def settings(server: Server, user: str | None = None, password: str = "") -> DatabaseSettings:
    return DatabaseSettings(server.host, server.port, user or server.user, password)


def execute(server: Server, *statements: str) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


@pytest.fixture
def routed(origin: Server, dbname: str) -> Iterator[TableFilter]:
    """`dbname` with one table that has a primary key; the filter routes all of `dbname`."""
    execute(
        origin, f"CREATE DATABASE `{dbname}`", f"CREATE TABLE `{dbname}`.ok (id INT PRIMARY KEY)"
    )
    yield TableFilter((f"{dbname}.*",))
    execute(origin, f"DROP DATABASE `{dbname}`")


def test_a_well_configured_origin_passes(origin: Server, routed: TableFilter) -> None:
    assert check_origin(settings(origin), READER_ID, routed, None) == []


def test_a_current_resume_position_passes(origin: Server, routed: TableFilter) -> None:
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, offset = cur.fetchone()[:2]
    assert check_origin(settings(origin), READER_ID, routed, Position(file, offset)) == []


@pytest.mark.parametrize(
    ("flag", "setting", "value"),
    [
        ("--skip-log-bin", "log_bin", "OFF"),
        ("--binlog-format=STATEMENT", "binlog_format", "STATEMENT"),
        ("--binlog-format=MIXED", "binlog_format", "MIXED"),
        ("--binlog-row-image=MINIMAL", "binlog_row_image", "MINIMAL"),
        ("--binlog-row-metadata=MINIMAL", "binlog_row_metadata", "MINIMAL"),
    ],
)
def test_a_misconfigured_server_is_refused_with_the_fix(
    sandbox: Sandbox, flag: str, setting: str, value: str
) -> None:
    name = "preflight" + flag.replace("=", "-").lower()
    server = sandbox.start(name, 40, flag)
    try:
        with pytest.raises(PreflightError) as info:
            check_origin(settings(server), READER_ID, TableFilter(), None)
    finally:
        sandbox.stop(name)
    message = str(info.value)
    assert f"{setting} is {value}" in message
    assert "my.cnf" in message and "restart" in message
    if setting != "log_bin":
        assert f"set {setting}=" in message
    assert not info.value.retryable


def test_the_reader_needs_a_server_id_of_its_own(origin: Server, routed: TableFilter) -> None:
    with pytest.raises(PreflightError, match="server_id .* is 1, the same") as info:
        check_origin(settings(origin), origin.server_id, routed, None)
    assert "origin.server_id" in info.value.fix


@pytest.fixture
def weak_user(origin: Server, dbname: str) -> Iterator[str]:
    user = f"weak_{dbname}"
    execute(origin, f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw'")
    yield user
    execute(origin, f"DROP USER '{user}'@'127.0.0.1'")


def test_missing_replication_privileges_are_named(
    origin: Server, routed: TableFilter, weak_user: str
) -> None:
    execute(origin, f"GRANT SELECT ON *.* TO '{weak_user}'@'127.0.0.1'")
    db = settings(origin, weak_user, "pw")
    with pytest.raises(PreflightError, match="REPLICATION SLAVE and BINLOG MONITOR") as info:
        check_origin(db, READER_ID, routed, None)
    assert "GRANT REPLICATION SLAVE, BINLOG MONITOR" in info.value.fix

    execute(origin, f"GRANT REPLICATION SLAVE ON *.* TO '{weak_user}'@'127.0.0.1'")
    with pytest.raises(PreflightError, match="lacks BINLOG MONITOR") as info:
        check_origin(db, READER_ID, routed, None)

    execute(origin, f"GRANT BINLOG MONITOR ON *.* TO '{weak_user}'@'127.0.0.1'")
    assert check_origin(db, READER_ID, routed, None) == []


def test_replication_client_counts_as_binlog_monitor(
    origin: Server, routed: TableFilter, weak_user: str
) -> None:
    # MariaDB >= 10.5 shows REPLICATION CLIENT as BINLOG MONITOR in SHOW GRANTS.
    execute(
        origin,
        f"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{weak_user}'@'127.0.0.1'",
    )
    assert check_origin(settings(origin, weak_user, "pw"), READER_ID, routed, None) == []


def test_wrong_password_is_a_preflight_error(origin: Server, weak_user: str) -> None:
    with pytest.raises(PreflightError, match="access denied"):
        check_origin(settings(origin, weak_user, "not-pw"), READER_ID, TableFilter(), None)


def test_every_routed_table_without_primary_key_is_listed(origin: Server, dbname: str) -> None:
    execute(
        origin,
        f"CREATE DATABASE `{dbname}`",
        f"CREATE TABLE `{dbname}`.ok (id INT PRIMARY KEY)",
        f"CREATE TABLE `{dbname}`.log1 (msg TEXT)",
        f"CREATE TABLE `{dbname}`.log2 (id INT UNIQUE NOT NULL, msg TEXT)",
        f"CREATE VIEW `{dbname}`.v AS SELECT msg FROM `{dbname}`.log1",
    )
    try:
        with pytest.raises(PreflightError) as info:
            check_origin(settings(origin), READER_ID, TableFilter((f"{dbname}.*",)), None)
        message = str(info.value)
        assert f"{dbname}.log1, {dbname}.log2" in message
        assert f"{dbname}.ok" not in message and f"{dbname}.v" not in message
        assert "add a primary key" in info.value.fix and "origin.tables" in info.value.fix
        # Excluding them from the filter is the other fix.
        only_ok = TableFilter((f"{dbname}.ok",))
        assert check_origin(settings(origin), READER_ID, only_ok, None) == []
    finally:
        execute(origin, f"DROP DATABASE `{dbname}`")


def test_warnings_for_no_routed_tables_and_non_transactional_engines(
    origin: Server, dbname: str
) -> None:
    nothing = TableFilter((f"{dbname}_absent.*",))
    (warning,) = check_origin(settings(origin), READER_ID, nothing, None)
    assert "no existing table" in warning
    execute(
        origin,
        f"CREATE DATABASE `{dbname}`",
        f"CREATE TABLE `{dbname}`.m (id INT PRIMARY KEY) ENGINE=MyISAM",
    )
    try:
        (warning,) = check_origin(settings(origin), READER_ID, TableFilter((f"{dbname}.*",)), None)
        assert f"{dbname}.m (MyISAM)" in warning and "non-transactional" in warning
    finally:
        execute(origin, f"DROP DATABASE `{dbname}`")


def test_a_purged_resume_position_says_reseed(sandbox: Sandbox) -> None:
    server = sandbox.start("preflight-purged", 41)
    try:
        execute(server, "FLUSH BINARY LOGS", "FLUSH BINARY LOGS", "FLUSH BINARY LOGS")
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            names = [row[0] for row in cur.fetchall()]
            # MariaDB keeps a file until its binlog checkpoint has passed: purge until it went.
            deadline = time.monotonic() + 30
            while True:
                cur.execute(f"PURGE BINARY LOGS TO '{names[2]}'")
                cur.execute("SHOW BINARY LOGS")
                if cur.fetchone()[0] == names[2]:
                    break
                assert time.monotonic() < deadline, "PURGE BINARY LOGS did not purge"
                time.sleep(0.05)
        db = settings(server)
        purged = Position(names[0], 4)
        with pytest.raises(PreflightError, match="was purged") as info:
            check_origin(db, READER_ID, TableFilter(), purged)
        assert "reseeded" in info.value.fix
        assert names[2] in str(info.value)  # says which files the server still has
        # The reader says the same when it is started there anyway.
        reader = BinlogReader(db, READER_ID, purged, TableFilter())
        with pytest.raises(PreflightError, match="reseed"):
            next(reader.transactions())
        with pytest.raises(PreflightError, match="does not exist"):
            check_origin(db, READER_ID, TableFilter(), Position("binlog.000999", 4))
        with pytest.raises(PreflightError, match="beyond the end"):
            check_origin(db, READER_ID, TableFilter(), Position(names[-1], 10**9))
        assert check_origin(db, READER_ID, TableFilter(), Position(names[2], 4)) != []
    finally:
        sandbox.stop("preflight-purged")


def test_an_unreachable_server() -> None:
    db = DatabaseSettings("127.0.0.1", free_port())
    with pytest.raises(UnreachableError, match=f"127.0.0.1:{db.port}") as info:
        check_origin(db, READER_ID, TableFilter(), None)
    assert info.value.retryable
