"""`reconcile` with a PostgreSQL target: a MariaDB origin replicated into PostgreSQL by the
pipeline (every column type, seeded then streamed) compares equal, pinned to the PostgreSQL
target's checkpoint; then a difference in every type is named with its column, a missing and
an extra row too, `--since-last` keeps its state in PostgreSQL, and `--repair` through the hub
makes the copy equal again. Tables and options PostgreSQL cannot compare exactly are refused
with the reason."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import pytest

from binlogsync.config import PostgresSettings
from binlogsync.errors import ConfigError
from binlogsync.reconcile.job import run
from binlogsync.reconcile.report import Report
from binlogsync.reconcile.settings import Options
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.pg_sandbox import PgServer
from binlogsync_dev.sandbox import Server
from reconcile_kit import (
    db,
    execute,
    found,
    spark_fixture,  # noqa: F401 - the session's SparkSession, as fixture `spark`
)
from sitekit import create, pg_site, seed, wait_pg_caught_up
from typeskit import COLUMNS, INSERT
from typeskit import row as typed_row

pytestmark = pytest.mark.integration


def pg_settings(pg: PgServer) -> PostgresSettings:
    return PostgresSettings("127.0.0.1", pg.port, pg.user, "", "postgres")


def _reconcile(
    engine: Any, origin: Server, pg: PgServer, tables: list[str], **kwargs: Any
) -> Report:
    kwargs.setdefault("pin", "auto")
    kwargs.setdefault("origin", "origin")
    kwargs.setdefault("chunk_rows", 100)
    kwargs.setdefault("max_task_rows", 60)
    kwargs.setdefault("connections", 2)
    kwargs.setdefault("wait_timeout", 60.0)
    options = Options(db(origin), (pg_settings(pg),), tuple(tables), **kwargs)
    return run(options, engine)


def _pg(pg: PgServer, *statements: str, args: Any = None) -> None:
    with pg.connect() as conn:
        for statement in statements:
            conn.execute(statement, args)


def _next_float32(value: float) -> float:
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    return float(struct.unpack("<f", struct.pack("<I", bits + 1))[0])


# One change on the PostgreSQL copy per column, each in a row of its own (id, column, SQL).
DAMAGE = [
    (101, "ti", "ti = ti + 1"),
    (102, "si", "si = si - 1"),
    (103, "mi", "mi = mi + 1"),
    (104, "i", "i = i - 1"),
    (105, "bi", "bi = bi + 1"),
    (106, "ub", "ub = ub - 1"),
    (107, "d", "d = d + 0.000000000000000000000000000001"),  # the 30th decimal
    (108, "f", "f = %s::real"),  # the next float32
    (109, "db", "db = %s::float8"),  # the next double
    (110, "b", "b = b # 1"),
    (111, "y", "y = y + 1"),
    (112, "dd", "dd = dd + 1"),
    (113, "dtm", "dtm = dtm + interval '1 microsecond'"),
    (114, "ts", "ts = ts + interval '1 microsecond'"),
    (115, "tm", "tm = tm + interval '1 microsecond'"),
    (116, "c", "c = c || 'x'"),
    (117, "vc", "vc = replace(vc, '𝄞', '𝄟')"),  # one 4-byte character for another
    (150, "tx", "tx = NULL"),  # '' (row 150 has an empty tx) becomes NULL
    (119, "bn", "bn = set_byte(bn, 3, 9)"),
    (120, "vb", "vb = vb || '\\x00'::bytea"),
    (121, "bl", "bl = set_byte(bl, 0, 1)"),
    (122, "e", "e = 'x'"),  # 122 % 3 = 2: it was 'z'
    (123, "st", "st = 'a,b'"),  # it was 'b,c'
    (124, "j", "j = replace(j, ': ', ':')"),  # the same document, other text
]


def _damage(pg: PgServer, dbname: str) -> None:
    with pg.connect() as conn:
        for id_, column, change in DAMAGE:
            args: tuple[Any, ...] = ()
            if column in ("f", "db"):
                (value,) = conn.execute(
                    f'SELECT {column}::float8 FROM "{dbname}".t WHERE id = %s', (id_,)
                ).fetchone()
                args = (_next_float32(value) if column == "f" else math.nextafter(value, math.inf),)
            done = conn.execute(f'UPDATE "{dbname}".t SET {change} WHERE id = %s', (*args, id_))
            assert done.rowcount == 1, (id_, column)
        conn.execute(f'DELETE FROM "{dbname}".t WHERE id = 140')  # missing
        conn.execute(  # extra: a copy of row 141 under a key the origin does not have
            f'INSERT INTO "{dbname}".t SELECT 9999, k, ti, si, mi, i, bi, ub, d, f, db, b, y, dd, '
            f'dtm, ts, tm, c, vc, tx, bn, vb, bl, e, st, j FROM "{dbname}".t WHERE id = 141'
        )


def _key(id_: int) -> tuple[int, str]:
    return (id_, f"k{id_ % 7}")


def test_a_postgresql_copy_compares_exactly_and_every_type_difference_is_named(
    spark: Any, tmp_path: Path, origin: Server, dbname: str, pg: PgServer
) -> None:
    create([origin], dbname, f"CREATE TABLE t ({COLUMNS})")
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.executemany(INSERT, [typed_row(i) for i in range(1, 201)])
        cur.execute("UPDATE t SET y = 0, tm = '-00:00:00.5', db = -0e0, f = 1e-40 WHERE id = 7")
        cur.execute("UPDATE t SET tm = '838:59:59', d = NULL, j = NULL WHERE id = 8")
    table = f"{dbname}.t"
    with pg_site(tmp_path, origin, pg, dbname) as s:
        s.start()
        s.wait_online()
        seed(s, "pgt")
        with origin.connect(dbname) as conn, conn.cursor() as cur:  # streamed after the seed
            cur.executemany(INSERT, [typed_row(i) for i in range(201, 301)])
            cur.execute("UPDATE t SET vc = CONCAT(vc, '!'), d = d + 1 WHERE id BETWEEN 1 AND 40")
            cur.execute("UPDATE t SET id = id + 100000 WHERE id IN (41, 42)")  # the key moves
            cur.execute("DELETE FROM t WHERE id IN (43, 44)")
        wait_pg_caught_up(s, pg)

        # Equal, pinned to the PostgreSQL checkpoint.
        equal = _reconcile(spark, origin, pg, [table])
        entry = equal.tables[0]
        assert equal.exit_code == 0, equal.render()
        assert (entry.status, entry.source_rows, entry.target_rows) == ("equal", 298, 298)
        assert equal.hash == "sha256" and entry.pin.startswith("checkpoint"), equal.render()

        _damage(pg, dbname)
        differs = _reconcile(spark, origin, pg, [table], out=tmp_path / "report")
        assert differs.exit_code == 1, differs.render()
        expected = {_key(i): ("changed", (c,)) for i, c, _sql in DAMAGE}
        expected[_key(140)] = ("missing", ())
        expected[(9999, f"k{141 % 7}")] = ("extra", ())  # row 141's copy
        assert found(differs) == expected
        assert (tmp_path / "report" / "rows.parquet").exists()

        # Repaired through the hub: the PostgreSQL store applies the source's images.
        repaired = _reconcile(
            spark,
            origin,
            pg,
            [table],
            repair="hub",
            via=str(s.agents["hub"].config),
            target_hosts=("pgt",),
            out=tmp_path / "repair",
        )
        counts = repaired.repair["targets"]["pgt"]  # type: ignore[index]
        assert (counts["upserts"], counts["deletes"]) == (len(DAMAGE) + 1, 1), repaired.repair

        def repaired_equal() -> bool:
            return _reconcile(spark, origin, pg, [table]).exit_code == 0

        wait_until(repaired_equal, 60, 0.2, "the repaired PostgreSQL copy comparing equal")

        # --since-last: the state is in PostgreSQL; only the keys changed since are compared.
        execute(origin, dbname, "UPDATE t SET si = 7 WHERE id BETWEEN 50 AND 59")
        wait_pg_caught_up(s, pg)
        _pg(pg, f"UPDATE \"{dbname}\".t SET c = 'bad' WHERE id = 55")
        incremental = _reconcile(spark, origin, pg, [table], since_last=True)
        entry = incremental.tables[0]
        assert entry.mode == "since-last", entry.notes
        assert entry.source_rows == 10
        assert found(incremental) == {_key(55): ("changed", ("c",))}
    with pg.connect() as conn:  # not equal: the state row is gone
        left = conn.execute(
            "SELECT count(*) FROM binlogsync.reconcile_verified WHERE source_table = %s", (table,)
        ).fetchone()
    assert left == (0,)


def test_what_postgresql_cannot_compare_exactly_is_refused_with_the_reason(
    spark: Any, origin: Server, dbname: str, pg: PgServer
) -> None:
    source, target = db(origin), (pg_settings(pg),)
    for kwargs, message in (
        ({"repair": "sql", "out": Path("x")}, "--repair=sql writes MariaDB/MySQL statements"),
        ({"json": "value"}, "JSON_NORMALIZE"),
        ({"hash": "crc"}, "--hash crc cannot be computed in PostgreSQL"),
    ):
        with pytest.raises(ConfigError, match=message):
            Options(source, target, ("a.t",), **kwargs)  # type: ignore[arg-type]

    create([origin], dbname, "CREATE TABLE j (id INT PRIMARY KEY, doc JSON)",
           "CREATE TABLE n (id INT PRIMARY KEY, v INT)")  # fmt: skip
    execute(origin, dbname, "INSERT INTO j VALUES (1, '{\"a\": 1}')")
    _pg(
        pg,
        f'CREATE SCHEMA "{dbname}"',
        f'CREATE TABLE "{dbname}".j (id integer PRIMARY KEY, doc jsonb)',
        f'CREATE TABLE "{dbname}".n (id integer PRIMARY KEY, v text)',
    )
    options = Options(source, target, (f"{dbname}.j", f"{dbname}.n", f"{dbname}.gone"), pin="none")
    report = run(options, spark)
    errors = {r.table: r.error for r in report.tables}
    assert "column doc is jsonb on PostgreSQL" in errors[f"{dbname}.j"], errors
    assert "column v is int on the source but text on PostgreSQL" in errors[f"{dbname}.n"]
    assert "no table" in errors[f"{dbname}.gone"]
    assert report.exit_code == 2, report.render()

    unreachable = Options(
        source, (PostgresSettings("127.0.0.1", 1, "postgres", "", "postgres"),), (f"{dbname}.j",)
    )
    failed = run(unreachable, spark)
    assert "cannot connect" in failed.render() and failed.exit_code == 2
