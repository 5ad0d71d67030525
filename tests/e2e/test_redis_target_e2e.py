"""A Redis target end to end: seeded (which brings each table's definition, so rows get their
keys), then streamed under writes while its agent is killed with kill -9 several times;
afterwards every key equals the origin's row, and no key of a deleted or moved row is left."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest

from binlogsync.apply.redisstore import checkpoints
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.redis_sandbox import RedisServer
from binlogsync_dev.sandbox import Server
from binlogsync_dev.verify import origin_gtid
from sitekit import create, seed
from typeskit import COLUMNS, INSERT, ZERO_TEXTS, zero_row
from typeskit import row as _row

pytestmark = pytest.mark.e2e


def _write(origin: Server, db: str, count: int) -> None:
    with origin.connect(db) as conn, conn.cursor() as cur:
        for i in range(1000, 1000 + count):
            conn.begin()
            cur.execute("INSERT INTO t VALUES (%s, %s, %s)", (i, f"row {i}", f"{i}.25"))
            if i % 4 == 0:
                cur.execute("UPDATE t SET note = 'changed' WHERE id = %s", (i - 1,))
            if i % 9 == 0:
                cur.execute("DELETE FROM t WHERE id = %s", (i - 3,))
            if i % 25 == 0:  # the key changes: the row moves
                cur.execute("UPDATE t SET id = id + 100000 WHERE id = %s", (i - 2,))
            conn.commit()


def test_seeded_then_streamed_through_kill_9_every_key_equal(
    tmp_path: Path, origin: Server, dbname: str
) -> None:
    create([origin], dbname, "CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(40), "
                             "amount DECIMAL(12,2))")  # fmt: skip
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, 'seeded', 1.5)", [(i,) for i in range(300)])
    with tempfile.TemporaryDirectory(prefix="bls-redis-") as root:
        redis_server = RedisServer(Path(root)).start()
        cache = Server("cache", 0, 0, "", 0)
        section = f'[target]\nkind = "redis"\nurl = "{redis_server.url}"'
        try:
            with LocalSite(tmp_path / "site", origin, [cache], tables=(f"{dbname}.*",),
                           target_sections={"cache": section}) as s:  # fmt: skip
                s.start()
                s.wait_online()
                seed(s, "cache")
                writer = threading.Thread(target=_write, args=(origin, dbname, 400))
                writer.start()
                for _ in range(3):
                    s.kill("cache")
                    s.start("cache")
                writer.join()
                gtid = origin_gtid(origin)
                wait_until(
                    lambda: checkpoints(redis_server.url).get("origin", {}).get("gtid") == gtid,
                    60, 0.05, f"the Redis target reaching {gtid}",
                )  # fmt: skip
            with origin.connect(dbname) as conn, conn.cursor() as cur:
                cur.execute("SELECT id, note, amount FROM t")
                rows = {f"{dbname}:t:{i}".encode(): (n, a) for i, n, a in cur.fetchall()}
            client = redis_server.client()
            keys = set(client.scan_iter(match=f"{dbname}:t:*"))
            assert keys == set(rows)  # nothing deleted or moved is left
            for key, (note, amount) in rows.items():
                assert client.hgetall(key) == {
                    b"id": key.rsplit(b":", 1)[1], b"note": note.encode(),
                    b"amount": str(amount).encode(),
                }  # fmt: skip
            client.close()
        finally:
            redis_server.stop()


def test_every_type_is_stored_the_same_seeded_or_streamed(
    tmp_path: Path, origin: Server, dbname: str
) -> None:
    """A row copied by the seed and the same values arriving from the binlog give the same
    hash: BIT, SET and the rest travel with the same types both ways, zero dates too (as the
    server's text)."""
    create([origin], dbname, f"CREATE TABLE t ({COLUMNS})")
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.executemany(INSERT, [_row(i) for i in range(1, 9)])
        cur.execute("SET SESSION sql_mode = ''")
        cur.executemany(INSERT, [zero_row(i) for i in range(9, 11)])
    with tempfile.TemporaryDirectory(prefix="bls-redis-") as root:
        redis_server = RedisServer(Path(root)).start()
        cache = Server("cache", 0, 0, "", 0)
        section = f'[target]\nkind = "redis"\nurl = "{redis_server.url}"'
        try:
            with LocalSite(tmp_path / "site", origin, [cache], tables=(f"{dbname}.*",),
                           target_sections={"cache": section}) as s:  # fmt: skip
                s.start()
                s.wait_online()
                seed(s, "cache")
                with origin.connect(dbname) as conn, conn.cursor() as cur:
                    cur.execute("SET SESSION sql_mode = ''")
                    for i in range(1, 11):  # the same values under another key, streamed
                        values = _row(i) if i < 9 else zero_row(i)
                        cur.execute(INSERT, (1000 + i, *values[1:]))
                gtid = origin_gtid(origin)
                wait_until(
                    lambda: checkpoints(redis_server.url).get("origin", {}).get("gtid") == gtid,
                    60, 0.05, f"the Redis target reaching {gtid}",
                )  # fmt: skip
            client = redis_server.client()
            for i in range(1, 11):
                k = f"k{i % 7}"
                seeded_row = client.hgetall(f"{dbname}:t:{i}:{k}")
                streamed = client.hgetall(f"{dbname}:t:{1000 + i}:{k}")
                assert seeded_row.pop(b"id") == str(i).encode()
                assert streamed.pop(b"id") == str(1000 + i).encode()
                assert seeded_row == streamed
                assert seeded_row[b"b"] == str(i % 1024).encode()  # BIT as its integer
                if i >= 9:  # the server's text, not NULL (an absent field) or 1970-01-01
                    dates = tuple(seeded_row[c].decode() for c in (b"dd", b"dtm", b"ts"))
                    assert dates == ZERO_TEXTS
            client.close()
        finally:
            redis_server.stop()


def test_a_target_stuck_on_a_missing_definition_takes_the_seed_that_brings_it(
    tmp_path: Path, origin: Server, dbname: str
) -> None:
    """Rows streamed before the Redis target was seeded stop its apply (no definition, so no
    key): the message says to seed it, and the seed must get through. The worker used to
    retry the failing transaction forever while the seed's chunk waited behind it in its
    queue, so the seed never finished (seen in the compose site: the seed hung)."""
    create([origin], dbname, "CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(40))")
    with tempfile.TemporaryDirectory(prefix="bls-redis-") as root:
        redis_server = RedisServer(Path(root)).start()
        cache = Server("cache", 0, 0, "", 0)
        section = f'[target]\nkind = "redis"\nurl = "{redis_server.url}"'
        try:
            with LocalSite(tmp_path / "site", origin, [cache], tables=(f"{dbname}.*",),
                           target_sections={"cache": section}) as s:  # fmt: skip
                s.start()
                s.wait_online()
                with origin.connect(dbname) as conn, conn.cursor() as cur:
                    for i in range(20):
                        cur.execute("INSERT INTO t VALUES (%s, 'before the seed')", (i,))
                        conn.commit()
                wait_until(
                    lambda: "knows no definition" in s.logs(), 60, 0.2,
                    "the Redis target's apply stopped for the missing definition",
                )  # fmt: skip
                seed(s, "cache")  # used to time out: the chunk never left the worker's queue
                with origin.connect(dbname) as conn, conn.cursor() as cur:
                    cur.execute("INSERT INTO t VALUES (100, 'after the seed')")
                    conn.commit()
                gtid = origin_gtid(origin)
                wait_until(
                    lambda: checkpoints(redis_server.url).get("origin", {}).get("gtid") == gtid,
                    60, 0.05, f"the Redis target reaching {gtid}",
                )  # fmt: skip
            client = redis_server.client()
            keys = {k.decode() for k in client.scan_iter(match=f"{dbname}:t:*")}
            assert keys == {f"{dbname}:t:{i}" for i in [*range(20), 100]}
            assert client.hget(f"{dbname}:t:100", "note") == b"after the seed"
            client.close()
        finally:
            redis_server.stop()
