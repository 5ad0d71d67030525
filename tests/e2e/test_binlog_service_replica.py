"""Native MariaDB replicas subscribe to the hub's binlog service instead of to the origin.

One replica follows by GTID (MASTER_USE_GTID=slave_pos), one by file and position; both
start empty and get the schema through the service too (CREATE DATABASE, CREATE TABLE). A
writer changes the origin the whole time, an ALTER TABLE comes in the middle, the hub is
killed with -9 and started again; at the end both replicas equal the origin by CHECKSUM TABLE
and SHOW SLAVE STATUS is clean. Two origins merge into one replica, each in its own GTID
domain. A transaction of 300,000 rows goes through in parts with the hub's memory bounded.
A replica follows over TLS (MASTER_SSL=1, verifying the service's certificate) where the
service requires it, and one in the clear is refused with the reason in SHOW SLAVE STATUS.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlogsync.hubcommands import fetch_status
from binlogsync.statusview import render
from binlogsync_dev.certs import Authority
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Sandbox, Server
from binlogsync_dev.writer import Writer
from servicekit import (
    add_origin,
    connect,
    follow,
    route,
    service_site,
    slave_status,
    stop_replica,
    wait_service,
)

pytestmark = pytest.mark.e2e

TABLE = (
    "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, qty INT NOT NULL, "
    "price DECIMAL(12,2), at DATETIME(6), note TEXT) CHARSET utf8mb4"
)


@pytest.fixture(scope="module")
def replicas(sandbox: Sandbox) -> Iterator[tuple[Server, Server]]:
    gtid, file = sandbox.start("svc_gtid", 41), sandbox.start("svc_file", 42)
    try:
        yield gtid, file
    finally:
        for replica in (gtid, file):
            stop_replica(replica)


def checksum(server: Server, db: str, table: str) -> Any:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{db}`.`{table}`")
        row = cur.fetchone()
        return None if row is None else row[1]


def wait_replica(replica: Server, s: LocalSite, predicate: Any, timeout: float, what: str) -> None:
    """wait_until, failing with the replica's SHOW SLAVE STATUS and the agents' logs."""
    try:
        wait_until(predicate, timeout, 0.05, what)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{slave_status(replica)}\n{s.logs()}") from None


def wait_same(origin: Server, replica: Server, db: str, table: str, s: LocalSite) -> None:
    want = checksum(origin, db, table)

    def same() -> bool:
        try:
            return checksum(replica, db, table) == want
        except Exception:  # noqa: BLE001 - the table may not be there yet
            return False

    wait_replica(replica, s, same, 120, f"{replica.name} equal to {origin.name} on {db}.{table}")


def assert_clean(replica: Server) -> dict[str, Any]:
    """Both threads running, no error, and caught up: Seconds_Behind_Master may read 1 for a
    moment after the last event on a busy machine, so that part is polled."""
    try:
        wait_until(lambda: slave_status(replica)["Seconds_Behind_Master"] == 0, 30, 0.1,
                   f"{replica.name} caught up")  # fmt: skip
    except TimeoutError:
        pass  # the asserts below say what is wrong
    status = slave_status(replica)
    assert status["Slave_IO_Running"] == "Yes", status
    assert status["Slave_SQL_Running"] == "Yes", status
    assert status["Last_Errno"] == 0 and status["Last_IO_Errno"] == 0, status
    assert status["Last_SQL_Errno"] == 0, status
    assert status["Seconds_Behind_Master"] == 0, status
    return status


def _items_turn(cur: Any, rng: random.Random, n: int) -> None:
    """1-5 inserts, updates and deletes on `items`."""
    for _ in range(rng.randint(1, 5)):
        key = rng.randint(1, 400)
        choice = rng.random()
        if choice < 0.5:
            cur.execute(
                "INSERT INTO items (id, name, qty, price, at, note) VALUES (%s, %s, %s, %s, "
                "NOW(6), %s) ON DUPLICATE KEY UPDATE qty = qty + 1",
                (key, f"item ✓ {key}", key % 7, f"{key}.{key % 100:02d}", "n" * (key % 50)),
            )
        elif choice < 0.85:
            cur.execute("UPDATE items SET qty = qty + 1, at = NOW(6) WHERE id = %s", (key,))
        else:
            cur.execute("DELETE FROM items WHERE id = %s", (key,))


def items_writer(origin: Server, db: str, seed: int) -> Writer:
    """Transactions of 1-5 statements on the origin's `items` until stopped."""
    return Writer(origin, db, _items_turn, seed, transaction=True)


def test_native_replicas_follow_a_live_origin_through_alter_table_and_kill_9_of_the_hub(
    tmp_path: Path, origin: Server, replicas: tuple[Server, Server], dbname: str
) -> None:
    by_gtid, by_file = replicas
    s, port = service_site(tmp_path, origin, [], dbname, service={"file_bytes": 65536})
    with s:
        s.start()
        s.wait_online()
        wait_service(port)
        follow(by_gtid, port, gtid=True)
        follow(by_file, port, gtid=False, file="hub-bin.000001", pos=4)
        with origin.connect() as conn, conn.cursor() as cur:  # the schema comes through too
            cur.execute(f"CREATE DATABASE `{dbname}`")
            cur.execute(f"USE `{dbname}`")
            cur.execute(TABLE)
        with items_writer(origin, dbname, 1) as writer:
            wait_until(lambda: writer.done > 300, 60, 0.05, "300 transactions written")
            with origin.connect(dbname) as conn, conn.cursor() as cur:
                cur.execute("ALTER TABLE items ADD COLUMN color VARCHAR(10) DEFAULT 'red'")
            wait_until(lambda: writer.done > 600, 60, 0.05, "300 more")
            s.kill("hub")  # kill -9, mid-stream
            wait_until(lambda: writer.done > 800, 60, 0.05, "writes while the hub is down")
            s.start("hub")
            wait_until(lambda: writer.done > 1100, 60, 0.05, "writes after the restart")
        for replica in (by_gtid, by_file):
            wait_same(origin, replica, dbname, "items", s)
        statuses = {r.name: assert_clean(r) for r in (by_gtid, by_file)}
        assert statuses[by_file.name]["Using_Gtid"] == "No"
        assert statuses[by_file.name]["Master_Log_File"] > "hub-bin.000001"  # it rotated
        with connect(port) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            (served,) = cur.fetchone()
        assert by_gtid.scalar("SELECT @@gtid_slave_pos") == served
        columns = "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_NAME = 'items' "
        assert by_gtid.scalar(columns + f"AND TABLE_SCHEMA = '{dbname}'") == 7  # the ALTER
        status = fetch_status(str(s.agents["hub"].config))
        subscribers = status["binlog_service"]["subscribers"]
        assert sorted(sub["server_id"] for sub in subscribers) == [41, 42], subscribers
        assert all(sub["lag_seconds"] < 5 for sub in subscribers), subscribers
        assert status["binlog_service"]["origins"][0]["stalled"] is None
        # Both replicas lost the service with the hub and came back where they were: the file
        # replica at its own position (not at a file's start), the other by its GTID state.
        hub_log = s.agents["hub"].log.read_text()
        again = re.findall(r"\(server_id 42\) subscribes from (hub-bin\.\d+):(\d+)", hub_log)
        assert len(again) >= 2 and int(again[-1][1]) > 4, again
        gtids = re.findall(r"\(server_id 41\) subscribes from GTID (\S*)", hub_log)
        assert len(gtids) >= 2 and gtids[-1].startswith("1-900-"), gtids
        shown = render(status)  # what `binlogsync status` prints
        assert "SUBSCRIBER" in shown and "binlog service on 127.0.0.1" in shown
        assert all(f" {sid} " in shown for sid in (41, 42))


def test_two_origins_merge_into_one_native_replica_each_in_its_own_domain(
    tmp_path: Path, sandbox: Sandbox, origin: Server, replicas: tuple[Server, Server], dbname: str
) -> None:
    by_gtid = replicas[0]
    second = sandbox.start("svc_origin2", 43)
    other = dbname + "_b"
    s, port = service_site(
        tmp_path, origin, [], dbname,
        service={"domains": {"origin": 11, "origin2": 12}},
        more_routes=route("origin2", [f"{other}.*"]),
    )  # fmt: skip
    with s:
        s.start("hub")
        add_origin(s, "origin2", second, [f"{other}.*"])
        s.start()
        s.wait_online()
        wait_service(port)
        follow(by_gtid, port, gtid=True)
        for server, db in ((origin, dbname), (second, other)):
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{db}`")
                cur.execute(f"USE `{db}`")
                cur.execute(TABLE)
        with items_writer(origin, dbname, 2) as one, items_writer(second, other, 3) as two:
            wait_until(lambda: one.done > 300 and two.done > 300, 60, 0.05, "writes on both")
        wait_same(origin, by_gtid, dbname, "items", s)
        wait_same(second, by_gtid, other, "items", s)
        assert_clean(by_gtid)
        domains = sorted(int(g.split("-")[0]) for g in
                         by_gtid.scalar("SELECT @@gtid_slave_pos").split(","))  # fmt: skip
        assert domains == [11, 12]


def test_a_native_replica_follows_over_tls_and_one_in_the_clear_is_refused(
    tmp_path: Path, origin: Server, replicas: tuple[Server, Server], dbname: str
) -> None:
    by_gtid, by_file = replicas
    ca = Authority(tmp_path / "certs")
    cert = ca.server()
    tls = {"ssl_cert": str(cert.cert), "ssl_key": str(cert.key), "require_secure_transport": True}
    s, port = service_site(tmp_path, origin, [], dbname, service=tls)
    with s:
        s.start()
        s.wait_online()
        wait_service(port)
        follow(by_gtid, port, gtid=True, ssl_ca=ca.ca)
        follow(by_file, port, gtid=False, file="hub-bin.000001", pos=4)  # no TLS
        with origin.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{dbname}`")
            cur.execute(f"USE `{dbname}`")
            cur.execute(TABLE)
        with items_writer(origin, dbname, 4) as writer:
            wait_until(lambda: writer.done > 200, 60, 0.05, "200 transactions written")
        wait_same(origin, by_gtid, dbname, "items", s)
        status = assert_clean(by_gtid)
        assert (
            status["Master_SSL_Allowed"] == "Yes"
            and status["Master_SSL_Verify_Server_Cert"] == "Yes"
        )
        subscribers = fetch_status(str(s.agents["hub"].config))["binlog_service"]["subscribers"]
        assert [(x["server_id"], x["tls"]) for x in subscribers] in (
            [(41, "TLSv1.3")], [(41, "TLSv1.2")],
        ), subscribers  # fmt: skip
        assert "TLSv1." in render(fetch_status(str(s.agents["hub"].config)))  # the status table
        wait_until(
            lambda: "insecure transport" in slave_status(by_file)["Last_IO_Error"], 60, 0.2,
            "the replica in the clear refused",
        )  # fmt: skip
        assert by_file.scalar(f"SELECT COUNT(*) FROM information_schema.SCHEMATA "
                               f"WHERE SCHEMA_NAME = '{dbname}'") == 0  # fmt: skip


def test_a_transaction_of_300000_rows_streams_from_its_parts_with_the_hub_bounded(
    tmp_path: Path, origin: Server, replicas: tuple[Server, Server], dbname: str
) -> None:
    by_gtid = replicas[0]
    s, port = service_site(
        tmp_path, origin, [], dbname, origin_extra="part_rows = 5000"
    )  # fmt: skip
    with s:
        s.start()
        s.wait_online()
        wait_service(port)
        follow(by_gtid, port, gtid=True)
        with origin.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{dbname}`")
            cur.execute(f"CREATE TABLE `{dbname}`.big (id INT PRIMARY KEY, pad VARCHAR(100))")
        wait_replica(
            by_gtid, s,
            lambda: by_gtid.scalar(f"SELECT COUNT(*) FROM information_schema.TABLES WHERE "
                                   f"TABLE_SCHEMA = '{dbname}'") == 1,
            60, "the table on the replica",
        )  # fmt: skip
        s.reset_peak_rss("hub")
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO big SELECT seq, REPEAT('x', 90) FROM seq.seq_1_to_300000")
        wait_same(origin, by_gtid, dbname, "big", s)
        assert_clean(by_gtid)
        peak = s.peak_rss_mb("hub")
        print(f"\nhub peak RSS while serving 300,000 rows in one transaction: {peak:.0f} MiB")
        assert peak < 200, peak
        assert by_gtid.scalar(f"SELECT COUNT(*) FROM `{dbname}`.big") == 300_000
        # one transaction: CREATE DATABASE, CREATE TABLE, the INSERT
        assert by_gtid.scalar("SELECT @@gtid_slave_pos") == "1-900-3"
