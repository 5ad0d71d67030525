"""Binlog readers nobody here wrote, subscribed to the hub's binlog service.

- `mariadb-binlog --read-from-remote-server` reads every file SHOW BINARY LOGS lists; its
  decoded output, replayed into an empty server with the `mariadb` client, makes that server
  equal to the origin (CHECKSUM TABLE).
- python-mysql-replication's BinLogStreamReader reads every column type of the fidelity test
  and the types kit from the service exactly as it reads them from the origin's own binlog.
- Retention: the hub keeps what its targets applied for `retain_hours`, then compacts it; the
  files that held it are purged, and asking for them gets error 1236 saying what to do.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

import typeskit
from binlogsync.hubcommands import fetch_status
from binlogsync.position import Position
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Sandbox, Server
from servicekit import PASSWORD, USER, connect, service_site, wait_service

pytestmark = pytest.mark.e2e

sys.path.insert(0, str(Path(__file__).parent))
from test_fidelity import ALL_TYPES, ROWS  # noqa: E402


@pytest.fixture(scope="module")
def empty(sandbox: Sandbox) -> Iterator[Server]:
    yield sandbox.start("svc_replay", 44)


def checksum(server: Server, db: str, table: str) -> Any:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{db}`.`{table}`")
        return cur.fetchone()[1]


def write_every_type(origin: Server, db: str) -> None:
    """The schema, then every type, through the pipe (the service sees it all)."""
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"USE `{db}`")
        cur.execute(f"CREATE TABLE t ({typeskit.COLUMNS})")
        cur.execute(ALL_TYPES)
        cur.execute("SET time_zone = '+05:30'")
        for i in range(60):
            cur.execute(typeskit.INSERT, typeskit.row(i))
        cur.execute("UPDATE t SET vc = CONCAT(vc, '!'), st = 'a,c' WHERE id % 3 = 0")
        cur.execute("DELETE FROM t WHERE id % 7 = 0")
        marks = ",".join(["%s"] * len(ROWS[0]))
        cur.executemany(f"INSERT INTO all_types VALUES ({marks})", ROWS)
        cur.execute("UPDATE all_types SET vc = NULL, tx = '', d = 1.5, st = 'y' WHERE id = 2")
        cur.execute("UPDATE all_types SET id = 20 WHERE id = 1")
        cur.execute("ALTER TABLE t ADD COLUMN extra INT DEFAULT 3")
        cur.execute("INSERT INTO t (id, k, extra) VALUES (1000, 'z', 9)")
        cur.execute("TRUNCATE TABLE all_types")
        cur.executemany(f"INSERT INTO all_types VALUES ({marks})", ROWS)


def wait_served(s: LocalSite, origin: Server, timeout: float = 60) -> None:
    """Until the service has indexed every transaction the origin wrote so far."""
    config = str(s.agents["hub"].config)
    want = origin.scalar("SELECT @@gtid_binlog_pos")

    def indexed() -> bool:
        status = fetch_status(config)
        head = status["origins"][0]["head"]
        if not head or head["gtid"] != want:
            return False
        served = status["binlog_service"]["origins"]
        return bool(served) and served[0]["indexed_key"] >= Position.from_json(head).key

    wait_until(indexed, timeout, 0.05, f"the service holding the origin's writes ({want})")


def test_mariadb_binlog_reads_every_file_and_its_output_replays_to_equality(
    tmp_path: Path, origin: Server, empty: Server, dbname: str
) -> None:
    s, port = service_site(tmp_path, origin, [], dbname, service={"file_bytes": 16384})
    with s:
        s.start()
        s.wait_online()
        wait_service(port)
        write_every_type(origin, dbname)
        wait_served(s, origin)
        with connect(port) as conn, conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [name for name, _size in cur.fetchall()]
        assert len(files) >= 3, files
        read = subprocess.run(
            ["mariadb-binlog", "--read-from-remote-server", "--host=127.0.0.1",
             f"--port={port}", f"--user={USER}", f"--password={PASSWORD}", *files],
            capture_output=True, timeout=120,
        )  # fmt: skip
        assert read.returncode == 0, read.stderr.decode()[-2000:]
        text = read.stdout.decode("utf-8", "replace")
        for name in files:  # every file was read, each from its start
            assert f"Binlog checkpoint {name}" in text
        assert text.count("BINLOG '") > 60
        replay = subprocess.run(
            ["mariadb", "--no-defaults", "--host=127.0.0.1", f"--port={empty.port}",
             "--user=root", "--binary-mode"],
            input=read.stdout, capture_output=True, timeout=120,
        )  # fmt: skip
        assert replay.returncode == 0, replay.stderr.decode()[-2000:]
        for table in ("t", "all_types"):
            assert checksum(empty, dbname, table) == checksum(origin, dbname, table), table


def _rows(port: int, user: str, password: str, db: str, server_id: int, **where: Any) -> list[Any]:
    reader = BinLogStreamReader(
        connection_settings={
            "host": "127.0.0.1",
            "port": port,
            "user": user,
            "password": password,
        },  # fmt: skip
        server_id=server_id,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=[db],
        **where,
    )
    try:
        return [
            (type(e).__name__, e.table, row) for e in reader if e.schema == db for row in e.rows
        ]
    finally:
        reader.close()


def test_python_mysql_replication_reads_every_column_type_exactly(
    tmp_path: Path, origin: Server, dbname: str
) -> None:
    s, port = service_site(tmp_path, origin, [], dbname)
    with s:
        s.start()
        s.wait_online()
        wait_service(port)
        start = origin.scalar("SELECT @@gtid_binlog_pos")
        write_every_type(origin, dbname)
        wait_served(s, origin)
        ours = _rows(port, USER, PASSWORD, dbname, 5301, is_mariadb=True, auto_position="")
        theirs = _rows(origin.port, "root", "", dbname, 5302, is_mariadb=True,
                       auto_position=start)  # fmt: skip
        assert len(ours) == len(theirs) > 60
        for mine, direct in zip(ours, theirs, strict=True):
            assert mine == direct


def test_retention_keeps_the_log_for_subscribers_then_purges_with_a_clear_error(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(f"CREATE TABLE `{dbname}`.t (id INT PRIMARY KEY)")
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(f"CREATE TABLE `{dbname}`.t (id INT PRIMARY KEY)")
    retain = 4.0  # seconds
    s, port = service_site(
        tmp_path,
        origin,
        [target],
        dbname,
        service={"retain_hours": retain / 3600, "file_bytes": 4096},
    )  # fmt: skip (the site's hub compacts every 2 s)
    with s:
        s.start()
        s.wait_online()
        wait_service(port)
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            for i in range(60):
                cur.execute("INSERT INTO t VALUES (%s)", (i,))
        config = str(s.agents["hub"].config)
        wait_until(
            lambda: fetch_status(config)["targets"][0]["backlog"] == 0
            and target.scalar(f"SELECT COUNT(*) FROM `{dbname}`.t") == 60,
            60, 0.05, "the target applied everything",
        )  # fmt: skip
        # The target needs nothing more, but the hub keeps the log for the subscribers …
        stored = fetch_status(config)["origins"][0]["stored"]
        assert stored >= 60
        with connect(port) as conn, conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            first = cur.fetchall()[0][0]
        assert first == "hub-bin.000001"
        assert len(_rows(port, USER, PASSWORD, dbname, 5303, log_file=first, log_pos=4,
                         resume_stream=True)) == 60  # fmt: skip
        # … for retain_hours, then compacts it: the files that held it are purged.
        wait_until(lambda: fetch_status(config)["origins"][0]["stored"] == 0, 60, 0.2, "compaction")
        wait_until(lambda: first not in [r[0] for r in _binary_logs(port)], 30, 0.2, "the purge")
        with pytest.raises(pymysql.err.OperationalError) as refused:
            _rows(port, USER, PASSWORD, dbname, 5304, log_file=first, log_pos=4,
                  resume_stream=True)  # fmt: skip
        assert refused.value.args[0] == 1236
        assert "purged" in refused.value.args[1] and "retain_hours" in refused.value.args[1]


def _binary_logs(port: int) -> list[tuple[str, int]]:
    with connect(port) as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return list(cur.fetchall())
