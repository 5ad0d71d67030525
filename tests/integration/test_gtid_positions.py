"""GTID positions against real MariaDB servers: capture resumes by GTID on another server
holding the same transactions, failover candidates are checked (not assumed), positions an
older version stored in binlog-file form are converted on the server that wrote them or
refused, and old checkpoint tables are read in the scheme they were written in."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest

from binlogsync.capture.failover import choose, problem
from binlogsync.capture.positions import current_position, gtid_at
from binlogsync.capture.preflight import check_origin
from binlogsync.capture.reader import BinlogReader
from binlogsync.config import DatabaseSettings
from binlogsync.engines.mariadb import checkpoint as checkpoints
from binlogsync.errors import BinlogsyncError, PreflightError, UnreachableError
from binlogsync.model import Transaction
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync_dev.sandbox import Sandbox, Server

pytestmark = pytest.mark.integration
_ids = itertools.count(7100)
FLAGS = ("--gtid-strict-mode=ON", "--log-slave-updates=ON")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server, Sandbox]]:
    """A primary and its native GTID replica (read-only), for this module."""
    box = Sandbox(tmp_path_factory.mktemp("gtidpair"), max_binlog_size="16K")
    try:
        primary = box.start("primary", 31, *FLAGS)
        replica = box.start("replica", 32, *FLAGS, "--read-only=ON")
        replica.sql("RESET MASTER")
        box.replicate(primary, replica)
        primary.sql("CREATE DATABASE g")
        primary.sql("CREATE TABLE g.t (id INT PRIMARY KEY, v INT)")
        yield primary, replica, box
    finally:
        box.stop_all()


def _db(server: Server) -> DatabaseSettings:
    return DatabaseSettings(server.host, server.port, server.user, server.password)


def _gtid(server: Server) -> str:
    return str(server.sql("SELECT @@gtid_binlog_pos")[0][0])


def _insert(server: Server, ids: range) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        for i in ids:
            cur.execute("INSERT INTO g.t VALUES (%s, %s)", (i, i))


def _caught_up(primary: Server, replica: Server) -> None:
    [(done,)] = replica.sql("SELECT MASTER_GTID_WAIT(%s, 30)", args=(_gtid(primary),))
    assert done == 0


def _read(server: Server, start: Position, until: str) -> list[Transaction]:
    """Transactions after `start` until the one whose state is `until`."""
    reader = BinlogReader(_db(server), next(_ids), start, TableFilter(("g.*",)), heartbeat=0.2)
    got: list[Transaction] = []
    timer = threading.Timer(20, reader.stop)
    timer.start()
    try:
        for item in reader.transactions():
            assert isinstance(item, Transaction)
            got.append(item)
            if item.position.gtid == until:
                break
    finally:
        timer.cancel()
        reader.close()
    return got


def test_capture_resumes_by_gtid_on_a_replica_with_the_same_transactions(
    pair: tuple[Server, Server, Sandbox],
) -> None:
    primary, replica, _box = pair
    _insert(primary, range(1, 6))
    middle = current_position(_db(primary))
    _insert(primary, range(6, 11))
    _caught_up(primary, replica)
    end = _gtid(primary)
    on_primary = _read(primary, middle, end)
    on_replica = _read(replica, middle, end)
    # The same transactions with the same positions (states), from different binlogs.
    assert [t.position for t in on_primary] == [t.position for t in on_replica]
    assert [t.position.gtid for t in on_replica] == [
        f"0-31-{middle.state[0][1] + i}" for i in range(1, 6)
    ]
    assert [c.after for t in on_replica for c in t.changes] == [((i, i),) for i in range(6, 11)]
    assert all(t.position.by_gtid for t in on_replica)
    assert on_primary[-1].position.file  # where it ended on each server, for people
    check_origin(_db(replica), next(_ids), TableFilter(("g.*",)), on_primary[0].position)


def test_failover_candidates_are_checked_not_assumed(
    pair: tuple[Server, Server, Sandbox],
) -> None:
    primary, replica, _box = pair
    _insert(primary, range(100, 103))
    _caught_up(primary, replica)
    acked = Position.of_state(_gtid(primary))
    assert problem(_db(primary), acked) is None
    why = problem(_db(replica), acked)
    assert why is not None and "read_only is ON" in why
    replica.sql("SET GLOBAL read_only = 0")
    try:
        why = problem(_db(replica), acked)
        assert why is not None and f"running replica of 127.0.0.1:{primary.port}" in why
    finally:
        replica.sql("SET GLOBAL read_only = 1")
    # The hub holds a transaction the replica never got (asynchronous replication's loss).
    ahead = Position.of_state(f"0-31-{acked.state[0][1] + 1}")
    assert ahead.gtid is not None
    why = problem(_db(primary), ahead)
    assert why is not None and f"lacks GTID(s) {ahead.gtid}" in why
    gone = DatabaseSettings("127.0.0.1", 1)
    assert (problem(gone, acked) or "").startswith("unreachable")
    assert choose([_db(primary), gone], gone, acked) == _db(primary)
    with pytest.raises(UnreachableError, match="no origin server can be captured") as failed:
        choose([gone, _db(replica)], gone, acked)
    assert f"127.0.0.1:{replica.port}: read_only is ON" in str(failed.value)
    # A file position never moves between servers.
    assert "binlog file position" in (problem(_db(primary), Position("binlog.000001", 4)) or "")


def test_a_state_the_server_does_not_hold_is_refused_before_and_by_the_server(
    pair: tuple[Server, Server, Sandbox],
) -> None:
    primary, _replica, _box = pair
    have = Position.of_state(_gtid(primary))
    seq = have.state[0][1]
    tables = TableFilter(("g.*",))
    with pytest.raises(PreflightError, match=f"lacks 0-31-{seq + 5}"):
        check_origin(_db(primary), next(_ids), tables, Position.of_state(f"0-31-{seq + 5}"))
    with pytest.raises(PreflightError, match="lacks 0-77-"):
        check_origin(_db(primary), next(_ids), tables, Position.of_state(f"0-77-{seq}"))
    # A lower GTID of another server: @@gtid_binlog_state shows server 77 never wrote here …
    diverged = Position.of_state(f"0-77-{seq - 1}")
    with pytest.raises(PreflightError, match=f"lacks 0-77-{seq - 1}"):
        check_origin(_db(primary), next(_ids), tables, diverged)
    assert f"lacks GTID(s) 0-77-{seq - 1}" in (problem(_db(primary), diverged) or "")
    # … and the server refuses it too (strict mode), when capture connects by GTID.
    reader = BinlogReader(_db(primary), next(_ids), diverged, tables, heartbeat=0.2)
    try:
        with pytest.raises(BinlogsyncError, match="0-77-"):
            next(reader.transactions())
    finally:
        reader.close()


def test_a_file_position_of_an_older_version_is_converted_on_its_own_server_only(
    pair: tuple[Server, Server, Sandbox], origin: Server
) -> None:
    primary, replica, _box = pair
    _insert(primary, range(200, 203))
    _caught_up(primary, replica)
    [(file, offset, *_rest)] = primary.sql("SHOW MASTER STATUS")
    state = _gtid(primary)
    stored = Position(file, int(offset), state)  # as binlogsync 0.2 stored it
    converted = gtid_at(_db(primary), stored)
    assert converted is not None and converted.by_gtid and converted.gtid == state
    assert (converted.file, converted.offset) == (file, int(offset))
    # On a replica that wrote the same binlog (log_slave_updates) the check passes only if
    # that offset ends the same GTID there: then the conversion is right there too.
    on_replica = None
    try:
        on_replica = gtid_at(_db(replica), stored)
    except PreflightError as exc:
        assert "not the server that wrote it" in str(exc) or "no binlog event" in str(exc)
    assert on_replica is None or on_replica.gtid == state
    # Another server's binlog: another transaction there, or none.
    origin.sql("FLUSH BINARY LOGS")  # so that `file` surely exists there
    with pytest.raises(PreflightError, match="not the server that wrote it|has no binlog event"):
        gtid_at(_db(origin), stored)
    with pytest.raises(PreflightError, match="has no binlog event at"):
        gtid_at(_db(primary), Position("binlog.999999", 4, state))
    wrong = Position(file, int(offset), f"0-31-{Position.of_state(state).state[0][1] - 1}")
    with pytest.raises(PreflightError, match="is not the end of GTID"):
        gtid_at(_db(primary), wrong)


def test_checkpoint_rows_of_an_older_version_read_as_file_positions(
    pair: tuple[Server, Server, Sandbox],
) -> None:
    """A checkpoint table without `scheme` (before GTID positions): its rows are file
    positions; ensure_schema adds the column and keeps them; GTID rows then say so."""
    primary, _replica, _box = pair
    primary.sql("CREATE DATABASE binlogsync")
    try:
        primary.sql(
            "CREATE TABLE binlogsync.checkpoint (origin VARCHAR(64) NOT NULL PRIMARY KEY, "
            "pos_key BIGINT UNSIGNED NOT NULL, file VARCHAR(255), `offset` BIGINT UNSIGNED, "
            "gtid VARCHAR(255), epoch VARCHAR(64), applied_transactions BIGINT UNSIGNED NOT "
            "NULL DEFAULT 0, applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))"
        )
        old = Position("binlog.000007", 1234, "0-1-99")
        primary.sql(
            "INSERT INTO binlogsync.checkpoint (origin, pos_key, file, `offset`, gtid, epoch) "
            "VALUES ('o', %s, 'binlog.000007', 1234, '0-1-99', 'e1')",
            args=(old.key,),
        )
        with primary.connect() as conn, conn.cursor() as cur:
            found = checkpoints.read_all(cur)
            assert found is not None
            assert not found["o"].position.by_gtid and found["o"].position == old
            checkpoints.ensure_schema(conn)
            assert checkpoints.read(cur, "o") == old and not checkpoints.read(cur, "o").by_gtid
            new = Position.of_state("0-1-100", "binlog.000007", 1500)
            checkpoints.write(cur, "o", new, 1, expected=old)
            again = checkpoints.read(cur, "o")
            assert again is not None and again.by_gtid and again.gtid == "0-1-100"
            assert again.key > old.key
    finally:
        primary.sql("DROP DATABASE binlogsync")
