"""A PostgreSQL target end to end: the table created from the origin's definition by a seed
(create_tables), every MySQL/MariaDB column type carried and mapped (docs/targets.md), then
streamed under inserts, updates, key-changing updates, deletes, multi-statement and rolled
back transactions while the target's agent is killed with kill -9 several times; afterwards
the PostgreSQL table equals the origin's row by row, value by value."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from binlogsync.devsite.pg_sandbox import PgServer
from binlogsync.devsite.sandbox import Server
from sitekit import create, pg_site, seed, wait_pg_caught_up
from typeskit import COLUMNS, INSERT, NAMES
from typeskit import row as _row

pytestmark = pytest.mark.e2e


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
    with pg_site(tmp_path, origin, pg, dbname) as s:
        s.start()
        s.wait_online()
        seed(s, "pgt")
        writer = threading.Thread(target=_writes, args=(origin, dbname, 201, 400))
        writer.start()
        for _ in range(3):
            s.kill("pgt")
            s.start("pgt")
        writer.join()
        wait_pg_caught_up(s, pg)
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
