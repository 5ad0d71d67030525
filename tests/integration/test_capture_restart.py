"""Capture restarted while its previous run still reads: the origin role against a real MariaDB;
and two readers with one server_id, which a user's copied config makes.

The agent restarts capture whenever it says HELLO again (the hub asks, or the connection to it
dropped), and never blocks its loop for the old run. Both runs read the binlog with the same
server_id, so the server keeps only one of them, and python-mysql-replication reconnects a
dropped stream by itself: the old run threw the new one out again, and the new one halted on
MySQL error 4052 (an e2e test of the hub's restart saw that halt in status).
"""

from __future__ import annotations

import itertools
import logging
import threading

import pytest

from binlogsync.capture.positions import current_position
from binlogsync.capture.reader import BinlogReader
from binlogsync.client.origin import OriginRole
from binlogsync.config import DatabaseSettings, OriginConfig
from binlogsync.errors import BinlogsyncError
from binlogsync.metrics import ClientMetrics
from binlogsync.tables import TableFilter
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Server

pytestmark = pytest.mark.integration

_server_ids = itertools.count(7400)


def test_a_restart_while_the_old_run_reads_neither_halts_nor_fights_over_the_server_id(
    origin: Server, dbname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    origin.sql(f"CREATE DATABASE `{dbname}`")
    origin.sql("CREATE TABLE t (id INT PRIMARY KEY)", db=dbname)
    db = DatabaseSettings(origin.host, origin.port, origin.user, origin.password)
    config = OriginConfig(db, next(_server_ids), TableFilter((f"{dbname}.*",)))
    role = OriginRole("origin", config, ClientMetrics(), lambda: None, 16 * 1024 * 1024)
    halts: list[dict[str, object]] = []

    def watch() -> None:  # what HELLO and status would show, sampled all along
        while not done.is_set():
            header = role.halt_header()
            if header is not None:
                halts.append(header)
            done.wait(0.005)

    done = threading.Event()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        for n in range(4):
            role.start(current_position(db))
            # The run is connecting, or connected and waiting on a quiet binlog, when the
            # next restart comes.
            done.wait(0.2 * n)
            if n % 2:
                origin.sql(f"INSERT INTO t VALUES ({n})", db=dbname)
                wait_until(lambda: role.outbox, 15, 0.01, f"round {n}'s row captured")
            role.outbox.clear()
        origin.sql("INSERT INTO t VALUES (100)", db=dbname)
        wait_until(lambda: role.outbox, 15, 0.01, "the last run's row captured")
        assert all(item.generation == role.generation for item in role.outbox)
        # Long enough for a stream thrown out by the other run to show (it took 10-50 ms).
        done.wait(1.0)
    finally:
        done.set()
        watcher.join(5)
        role.close()
    assert halts == [], halts
    shown = [r.getMessage() for r in caplog.records if r.name != "binlogsync.tls"]
    assert not [m for m in shown if "4052" in m or "Re-request" in m], shown


def test_two_readers_with_one_server_id_are_told_to_give_each_its_own(
    origin: Server, dbname: str
) -> None:
    """Two origin agents with the same [origin] server_id (a copied config): the server keeps
    one stream per id, so they take turns throwing each other out. The one thrown out says
    why and what to change, instead of the server's bare error number."""
    origin.sql(f"CREATE DATABASE `{dbname}`")
    db = DatabaseSettings(origin.host, origin.port, origin.user, origin.password)
    server_id = next(_server_ids)
    readers = [
        BinlogReader(db, server_id, current_position(db), TableFilter((f"{dbname}.*",)))
        for _ in range(2)
    ]
    errors: list[BinlogsyncError] = []

    def read(reader: BinlogReader) -> None:
        try:
            for _item in reader.transactions():
                pass
        except BinlogsyncError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(r,), daemon=True) for r in readers]
    try:
        for thread in threads:
            thread.start()
        wait_until(lambda: errors, 30, 0.05, "a reader thrown out by the other")
    finally:
        for reader in readers:
            reader.stop()
        for thread in threads:
            thread.join(15)
    error = errors[0]
    assert f"the same server_id {server_id}" in error.message, error.message
    assert "its own server_id" in (error.fix or ""), error.fix
