"""A PostgreSQL target end to end: the table created from the origin's definition by a seed
(create_tables), every MySQL/MariaDB column type carried and mapped (docs/targets.md), then
streamed under inserts, updates, key-changing updates, deletes, multi-statement and rolled
back transactions while the target's agent is killed with kill -9 several times; afterwards
the PostgreSQL table equals the origin's row by row, value by value."""

from __future__ import annotations

import datetime as dt
import json
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from binlogsync.apply.postgres import checkpoints
from binlogsync.devsite.localsite import LocalSite, wait_until
from binlogsync.devsite.pg_sandbox import PgServer
from binlogsync.devsite.sandbox import Server
from binlogsync.devsite.verify import origin_gtid
from sitekit import create

pytestmark = pytest.mark.e2e

COLUMNS = (
    "id BIGINT UNSIGNED NOT NULL, k CHAR(3) NOT NULL, ti TINYINT, si SMALLINT UNSIGNED, "
    "mi MEDIUMINT, i INT UNSIGNED, bi BIGINT, ub BIGINT UNSIGNED, d DECIMAL(65,30), "
    "f FLOAT, db DOUBLE, b BIT(10), y YEAR, dd DATE, dtm DATETIME(6), ts TIMESTAMP(6) NULL, "
    "tm TIME(6), c CHAR(10), vc VARCHAR(100), tx TEXT, bn BINARY(4), vb VARBINARY(20), "
    "bl BLOB, e ENUM('x','y','z'), st SET('a','b','c'), j JSON, PRIMARY KEY (id, k)"
)
NAMES = [c.split()[0] for c in COLUMNS.split("PRIMARY")[0].split(", ") if c.strip()]
INSERT = f"INSERT INTO t ({', '.join(NAMES)}) VALUES ({', '.join(['%s'] * len(NAMES))})"


def _row(i: int) -> tuple[Any, ...]:
    return (
        i, "k" + str(i % 7), -128 + i % 200, 65535 - i % 65535, -8388608 + i, 4294967295 - i,
        -(2**63) + i, 2**64 - 1 - i, Decimal(f"{i}.{'9' * 30}"), 1.1 * i, 2.5e300 / (i + 1),
        i % 1024, 1901 + i % 200, dt.date(1000 + i % 9000, 1, 1),
        dt.datetime(2026, 11, 24, 12, 0, 0, i % 1000000), dt.datetime(2030, 1, 1, 0, 0, i % 60),
        dt.timedelta(hours=-838 + i % 1600, microseconds=i), f"c{i}", f"héllo 𝄞 {i}", "t" * (i % 50),
        bytes([i % 256, 0, 1, 2]), bytes(range(i % 20)), b"\x00\xff" * (i % 10),
        "xyz"[i % 3], ["", "a", "b,c", "a,b,c"][i % 4], json.dumps({"n": i, "s": "ü"}),
    )  # fmt: skip


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    server = PgServer().start()
    try:
        yield server
    finally:
        server.remove()


def _writes(origin: Server, db: str, start: int, count: int) -> None:
    with origin.connect(db) as conn, conn.cursor() as cur:
        for i in range(start, start + count):
            conn.begin()
            cur.execute(INSERT, _row(i))
            if i % 3 == 0:
                cur.execute("UPDATE t SET vc = CONCAT(vc, '!'), d = d + 1 WHERE id = %s", (i - 1,))
            if i % 10 == 0:  # the key changes: the row moves
                cur.execute("UPDATE t SET id = id + 1000000 WHERE id = %s", (i - 5,))
            if i % 7 == 0:
                cur.execute("DELETE FROM t WHERE id = %s", (i - 2,))
            conn.commit()
            if i % 40 == 0:
                conn.begin()
                cur.execute(INSERT, _row(5_000_000 + i))
                conn.rollback()


def _origin_rows(origin: Server, db: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    with origin.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT {', '.join(NAMES)} FROM t")
        return {(r[0], r[1]): r for r in cur.fetchall()}


def _same(name: str, mine: Any, theirs: Any) -> bool:
    if mine is None or theirs is None:
        return mine is None and theirs is None
    if name == "f":  # FLOAT → real: the same float32
        return bool(struct.pack("f", mine) == struct.pack("f", theirs))
    if name == "b":  # BIT reads as bytes from MariaDB, goes to bigint
        return int.from_bytes(mine, "big") == theirs
    if name == "ts":
        return bool(mine == theirs.replace(tzinfo=None))
    if name == "st":
        return bool((",".join(sorted(mine)) if isinstance(mine, set) else mine) == theirs)
    if name == "j":  # MariaDB's JSON is a LONGTEXT alias: text on PostgreSQL (jsonb for MySQL's)
        return bool(json.loads(mine) == (json.loads(theirs) if isinstance(theirs, str) else theirs))
    if name in ("ub", "id"):
        return int(mine) == int(theirs)
    return bool(mine == theirs)


def test_every_type_seeded_streamed_through_kill_9_equal_row_by_row(
    tmp_path: Path, origin: Server, dbname: str, pg: PgServer
) -> None:
    create([origin], dbname, f"CREATE TABLE t ({COLUMNS})")
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.executemany(INSERT, [_row(i) for i in range(1, 201)])
    pgt = Server("pgt", 0, 0, "", 0)
    section = f'[target]\nkind = "postgresql"\nurl = "{pg.url}"\ncreate_tables = true'
    with LocalSite(tmp_path / "site", origin, [pgt], tables=(f"{dbname}.*",),
                   target_sections={"pgt": section}) as s:  # fmt: skip
        s.start()
        s.wait_online()
        seeded = subprocess.run(
            [sys.executable, "-m", "binlogsync.cli", "seed", "--config",
             str(s.agents["hub"].config), "--origin", "origin", "--target", "pgt",
             "--source", origin.url, "--quiet"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert seeded.returncode == 0, seeded.stderr + s.logs()
        writer = threading.Thread(target=_writes, args=(origin, dbname, 201, 400))
        writer.start()
        for _ in range(3):
            s.kill("pgt")
            s.start("pgt")
        writer.join()
        gtid = origin_gtid(origin)
        try:
            wait_until(
                lambda: checkpoints(pg.url).get("origin", {}).get("gtid") == gtid, 90, 0.05,
                f"the PostgreSQL target reaching {gtid}",
            )  # fmt: skip
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{s.logs()}") from None
    mine = _origin_rows(origin, dbname)
    with pg.connect() as conn:
        theirs = {
            (int(r[0]), r[1]): r
            for r in conn.execute(f'SELECT {", ".join(NAMES)} FROM "{dbname}"."t"').fetchall()
        }
    assert set(theirs) == {(int(k[0]), k[1]) for k in mine}
    for key, row in mine.items():
        other = theirs[(int(key[0]), key[1])]
        for name, a, b in zip(NAMES, row, other, strict=True):
            assert _same(name, a, b), (key, name, a, b)
