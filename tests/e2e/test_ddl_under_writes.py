"""Schema changes follow the origin with writes running and agents as processes (issue 8,
part 3): a target with apply_schema_changes = "all" gets a new column, a widened VARCHAR, a new
index, a new routed table, a renamed column and a dropped column from the origin's DDL while two
clients keep writing, survives kill -9 of its agent in the middle, and ends equal."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pymysql
import pytest

from binlogsync.tabledef import describe
from binlogsync_dev.sandbox import Server
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.e2e

T = "CREATE TABLE t (id INT PRIMARY KEY, k INT NOT NULL DEFAULT 0, a VARCHAR(10), b INT)"


def _writer(origin: Server, db: str, seed: int, stop: threading.Event, done: list[int]) -> None:
    """Updates and inserts on the columns every version of t has (id, k)."""
    rng = random.Random(seed)
    with origin.connect(db) as conn, conn.cursor() as cur:
        while not stop.is_set():
            try:
                i = rng.randint(1, 400)
                cur.execute(
                    "INSERT INTO t (id, k) VALUES (%s, 1) ON DUPLICATE KEY UPDATE k = k + 1", (i,)
                )
                conn.commit()
                done[0] += 1
            except pymysql.err.OperationalError:  # a lock wait behind the DDL: try again
                conn.rollback()


def _shape(server: Server, db: str, table: str) -> object:
    with server.connect() as conn, conn.cursor() as cur:
        found = describe(cur, db, table)
    assert found is not None, f"{server.name} has no {db}.{table}"
    return found.columns, found.primary_key, found.indexes


def test_ddl_under_writes_and_a_crash_ends_equal(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, T)
    steps = [
        ["ALTER TABLE t ADD COLUMN c DATETIME(3) NULL", "UPDATE t SET c = NOW(3) WHERE id < 50"],
        ["ALTER TABLE t MODIFY a VARCHAR(300)", f"UPDATE t SET a = '{'w' * 250}' WHERE id < 20"],
        ["ALTER TABLE t ADD INDEX kb (b)", "UPDATE t SET b = id"],
        [
            "CREATE TABLE n (id BIGINT UNSIGNED PRIMARY KEY, v DECIMAL(10,2) NOT NULL DEFAULT 0)",
            "INSERT INTO n VALUES (1, 2.5), (2, 3.75)",
        ],
        ["ALTER TABLE t RENAME COLUMN a TO a2", "UPDATE t SET a2 = 'renamed' WHERE id = 7"],
        ["ALTER TABLE t DROP COLUMN b", "INSERT INTO n VALUES (3, 9.99)"],
    ]
    rng = random.Random(11)
    with site(tmp_path, origin, [target], dbname, target_extra='apply_schema_changes = "all"') as s:
        s.start()
        s.wait_online()
        stop = threading.Event()
        counts = [[0], [0]]
        writers = [
            threading.Thread(target=_writer, args=(origin, dbname, n, stop, counts[n]))
            for n in range(2)
        ]
        for writer in writers:
            writer.start()
        try:
            for number, statements in enumerate(steps):
                time.sleep(rng.uniform(0.1, 0.3))  # writes between the DDLs, not a wait
                with origin.connect(dbname) as conn, conn.cursor() as cur:
                    for statement in statements:
                        cur.execute(statement)
                    conn.commit()
                if number == 2:
                    s.kill("target")  # kill -9 in the middle of the changes
                    s.start("target")
            time.sleep(0.3)
        finally:
            stop.set()
            for writer in writers:
                writer.join()
        assert counts[0][0] + counts[1][0] > 50
        wait_equal(s, dbname, ["t", "n"])
        for table in ("t", "n"):
            assert _shape(target, dbname, table) == _shape(origin, dbname, table)
