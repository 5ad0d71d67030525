"""A sysbench-like mixed load (oltp_write_only's update, update, delete, re-insert on random rows
of 4 tables, from several clients) plus unique values swapped between rows, applied with
net-change apply while the target agent is killed with SIGKILL: the target ends equal to the
origin, row for row."""

from __future__ import annotations

import random
import string
import threading
import time
from pathlib import Path

import pymysql
import pytest

from binlogsync_dev.sandbox import Server
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.e2e

TABLES = 4
ROWS = 300
SBTEST = (
    "CREATE TABLE sbtest{} (id INT NOT NULL PRIMARY KEY, k INT NOT NULL DEFAULT 0, "
    "c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', KEY k_1 (k))"
)
UNIQUE = "CREATE TABLE u (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, UNIQUE KEY (name))"


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.ascii_letters, k=n))


def _oltp(origin: Server, db: str, seed: int, stop: threading.Event, done: list[int]) -> None:
    """sysbench oltp_write_only's transaction, until stopped; deadlocks are retried later."""
    rng = random.Random(seed)
    with origin.connect(db) as conn, conn.cursor() as cur:
        while not stop.is_set():
            try:
                cur.execute("BEGIN")
                t, i = rng.randint(1, TABLES), rng.randint(1, ROWS)
                cur.execute(f"UPDATE sbtest{t} SET k = k + 1 WHERE id = %s", (i,))
                t, i = rng.randint(1, TABLES), rng.randint(1, ROWS)
                cur.execute(f"UPDATE sbtest{t} SET c = %s WHERE id = %s", (_text(rng, 30), i))
                t, i = rng.randint(1, TABLES), rng.randint(1, ROWS)
                cur.execute(f"DELETE FROM sbtest{t} WHERE id = %s", (i,))
                cur.execute(
                    f"INSERT INTO sbtest{t} (id, k, c, pad) VALUES (%s, %s, %s, %s)",
                    (i, rng.randint(1, ROWS), _text(rng, 30), _text(rng, 10)),
                )
                cur.execute("COMMIT")
                done[0] += 1
            except pymysql.err.OperationalError:  # deadlock or lock wait: as sysbench does
                cur.execute("ROLLBACK")


def _swaps(origin: Server, db: str, stop: threading.Event, done: list[int]) -> None:
    """Rows 1..4 of u pass their unique names around through a free one, one per transaction."""
    rng = random.Random(5)
    with origin.connect(db) as conn, conn.cursor() as cur:
        while not stop.is_set():
            a, b = rng.sample(range(1, 5), 2)
            cur.execute("SELECT id, name FROM u WHERE id IN (%s, %s)", (a, b))
            names = dict(cur.fetchall())
            for sql, args in (
                ("UPDATE u SET name = %s WHERE id = %s", (f"tmp{a}", a)),
                ("UPDATE u SET name = %s WHERE id = %s", (names[a], b)),
                ("UPDATE u SET name = %s WHERE id = %s", (names[b], a)),
            ):
                cur.execute(sql, args)
                conn.commit()
            done[0] += 1


def test_sysbench_like_load_with_kill_9_of_the_target_agent_ends_equal(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, *(SBTEST.format(t) for t in range(1, TABLES + 1)), UNIQUE)
    rng = random.Random(3)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            for t in range(1, TABLES + 1):
                cur.executemany(
                    f"INSERT INTO sbtest{t} (id, k, c, pad) VALUES (%s, %s, %s, %s)",
                    [(i, i, _text(rng, 30), _text(rng, 10)) for i in range(1, ROWS + 1)],
                )
            cur.executemany(
                "INSERT INTO u (id, name) VALUES (%s, %s)", [(i, f"name{i}") for i in range(1, 5)]
            )
            conn.commit()
        stop = threading.Event()
        counts = [[0] for _ in range(4)]
        threads = [
            threading.Thread(target=_oltp, args=(origin, dbname, n, stop, counts[n]))
            for n in range(3)
        ]
        threads.append(threading.Thread(target=_swaps, args=(origin, dbname, stop, counts[3])))
        for thread in threads:
            thread.start()
        try:
            for _ in range(3):
                time.sleep(rng.uniform(0.3, 0.9))  # a random moment to crash, not a wait
                s.kill("target")
                time.sleep(rng.uniform(0.2, 0.6))  # the backlog grows into large groups
                s.start("target")
            time.sleep(0.5)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert sum(c[0] for c in counts[:3]) > 100 and counts[3][0] > 10
        wait_equal(s, dbname, [f"sbtest{t}" for t in range(1, TABLES + 1)] + ["u"])
        with target.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_insert', 'Com_update', "
                "'Com_delete')"
            )
            print(  # for people reading -s output; the load's timing decides the group sizes
                f"{sum(c[0] for c in counts[:3])} oltp and {counts[3][0]} swap transactions; "
                f"target statements since start-up: {sum(int(v) for _, v in cur.fetchall())}"
            )
