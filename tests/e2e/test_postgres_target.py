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

from binlogsync_dev.localsite import wait_until
from binlogsync_dev.pg_sandbox import PgServer
from binlogsync_dev.sandbox import Server
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


ZERO_TABLE = (
    "CREATE TABLE z (id INT PRIMARY KEY, d DATE, dtm DATETIME(6), ts TIMESTAMP(3) NULL, "
    "note VARCHAR(20))"
)


def _zero_rows(first: int) -> list[tuple[Any, ...]]:
    return [
        (first, "0000-00-00", "0000-00-00 00:00:00", "0000-00-00 00:00:00", "zero"),
        (first + 1, "2024-00-10", "2024-05-00 10:11:12.5", None, "partial"),
        (first + 2, "2004-04-31", "2004-02-30 00:00:00", "0000-00-00 00:00:00", "invalid"),
        (first + 3, "2024-02-29", "2024-02-29 23:59:59.999999", "2024-02-29 12:00:00.25", "real"),
    ]


def test_zero_dates_seeded_and_streamed_are_mapped_as_zero_dates_says(
    tmp_path: Path, origin: Server, dbname: str, pg: PgServer
) -> None:
    """`zero_dates = "epoch"`: the seed's and the stream's zero, partial and invalid dates
    become 1970-01-01 (midnight UTC for a timestamptz); real dates beside them stay exact."""
    create([origin], dbname, ZERO_TABLE)
    insert = "INSERT INTO z VALUES (%s, %s, %s, %s, %s)"
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+00:00'")
        cur.executemany(insert, _zero_rows(1))
    with pg_site(tmp_path, origin, pg, dbname, 'zero_dates = "epoch"') as s:
        s.start()
        s.wait_online()
        seed(s, "pgt")
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+00:00'")
            cur.executemany(insert, _zero_rows(11))
            cur.execute("UPDATE z SET ts = '0000-00-00', note = 'updated' WHERE id = 14")
        wait_pg_caught_up(s, pg)
    with pg.connect() as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        rows = conn.execute(
            f'SELECT id, d::text, dtm::text, ts::text FROM "{dbname}"."z" ORDER BY id'
        ).fetchall()
    epoch = ("1970-01-01", "1970-01-01 00:00:00", "1970-01-01 00:00:00+00")
    expected = []
    for first in (1, 11):
        expected += [
            (first, *epoch),
            (first + 1, epoch[0], epoch[1], None),
            (first + 2, *epoch),
            (first + 3, "2024-02-29", "2024-02-29 23:59:59.999999", "2024-02-29 12:00:00.25+00"),
        ]
    expected[-1] = (14, "2024-02-29", "2024-02-29 23:59:59.999999", epoch[2])
    assert rows == expected


def test_a_zero_date_stops_a_postgresql_target_naming_the_column_and_the_choices(
    tmp_path: Path, origin: Server, dbname: str, pg: PgServer
) -> None:
    """The default (`zero_dates = "error"`): nothing is written in its place."""
    create([origin], dbname)
    with pg_site(tmp_path, origin, pg, dbname) as s:
        s.start()
        s.wait_online()
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute(ZERO_TABLE)  # its definition travels: create_tables makes the table
            cur.execute("INSERT INTO z VALUES (1, '2024-02-29', NULL, NULL, 'fine')")
        wait_pg_caught_up(s, pg)
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("INSERT INTO z VALUES (2, '2024-00-10', NULL, NULL, 'partial')")
        wait_until(
            lambda: f"{dbname}.z.d: the origin's value '2024-00-10' is no date" in s.logs(),
            60,
            0.1,
            "the target's error in its log",
        )
        assert 'zero_dates = "null" or "epoch"' in s.logs()
    with pg.connect() as conn:
        rows = conn.execute(f'SELECT id FROM "{dbname}"."z" ORDER BY id').fetchall()
    assert rows == [(1,)]
