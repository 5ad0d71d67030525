"""Test kit for reconciliation: one SparkSession (local mode) for the whole test session, tables
with every column type, and a way to run a reconciliation in it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlogsync.config import DatabaseSettings
from binlogsync.reconcile.job import run
from binlogsync.reconcile.options import CLASS_CACHE
from binlogsync.reconcile.recheck import Diff
from binlogsync.reconcile.report import Report
from binlogsync.reconcile.settings import Options
from binlogsync.reconcile.sparkapp import SparkSettings, SparkStart
from binlogsync_dev.sandbox import Server

ROWS = 3000

ALL_TYPES = """CREATE TABLE t (
    id INT NOT NULL PRIMARY KEY,
    name VARCHAR(40) NOT NULL,
    note VARCHAR(40) NULL,
    amount DECIMAL(14,4) NULL,
    ts DATETIME(6) NULL,
    doc JSON NULL,
    data BLOB NULL,
    f FLOAT NULL,
    d DOUBLE NULL,
    e ENUM('red','green','blue, dark') NULL,
    s SET('a','b','c') NULL,
    b BIT(8) NULL,
    tm TIME(6) NULL,
    u BIGINT UNSIGNED NULL
) ENGINE=InnoDB"""

FILL = """INSERT INTO t
SELECT seq, CONCAT('name-', seq), IF(seq % 7 = 0, NULL, CONCAT('note ', seq % 13)),
       seq / 8, TIMESTAMP('2024-01-01 00:00:00') + INTERVAL seq * 1001 MICROSECOND,
       IF(seq % 5 = 0, NULL, CONCAT('{"k":', seq, ',"tags":["x","y"]}')),
       IF(seq % 11 = 0, NULL, UNHEX(SHA1(seq))), seq / 3, seq / 9,
       ELT(1 + seq % 3, 'red', 'green', 'blue, dark'), IF(seq % 2 = 0, 'a,c', 'b'),
       seq % 256, SEC_TO_TIME(seq) + INTERVAL 123456 MICROSECOND, 18446744073709551615 - seq
FROM seq_1_to_{rows}"""


@pytest.fixture(scope="session", name="spark")
def spark_fixture() -> Iterator[Any]:
    """One local SparkSession for every reconciliation test (import `spark_fixture`), started
    as the command starts its own (sparkapp.SparkStart; the shared class archive)."""
    settings = SparkSettings("local[2]", (("spark.ui.enabled", "false"),), CLASS_CACHE.expanduser())
    start = SparkStart(settings, os.environ)
    try:
        yield start.session()
    finally:
        start.stop()


def db(server: Server) -> DatabaseSettings:
    return DatabaseSettings(server.host, server.port, server.user, server.password)


def execute(server: Server, database: str | None, *statements: str, args: Any = None) -> None:
    with server.connect(database) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement, args)


def make_table(
    servers: list[Server], database: str, ddl: str = ALL_TYPES, rows: int = ROWS
) -> None:
    """The same table with the same rows on every server (written without the binlog)."""
    for server in servers:
        execute(
            server,
            None,
            "SET SESSION sql_log_bin = 0",
            f"CREATE DATABASE IF NOT EXISTS `{database}`",
            f"USE `{database}`",
            ddl,
            FILL.replace("{rows}", str(rows)) if ddl is ALL_TYPES else "DO 0",
        )


def reconcile(
    spark: Any, source: Server, targets: list[Server], tables: list[str], **kwargs: Any
) -> Report:
    kwargs.setdefault("pin", "none")
    kwargs.setdefault("chunk_rows", 400)
    kwargs.setdefault("max_task_rows", 300)
    kwargs.setdefault("connections", 2)
    kwargs.setdefault("wait_timeout", 60.0)
    options = Options(db(source), tuple(db(t) for t in targets), tuple(tables), **kwargs)
    return run(options, spark)


def found(report: Report) -> dict[tuple[Any, ...], tuple[str, tuple[str, ...]]]:
    """Every reported difference of the first table/target pair: key -> (kind, columns), read
    back from rows.parquet when the report was written, else from the sample."""
    return {d.key: (d.kind, d.columns) for d in all_diffs(report)}


def all_diffs(report: Report) -> list[Diff]:
    """Every differing row the run found, from its DataFrame (rowstage.diffs)."""
    import pickle

    if report.rows is None:
        return []
    return [
        Diff(
            r["table_index"],
            r["target_index"],
            tuple(pickle.loads(r["key_pickle"])),
            r["kind"],
            tuple(r["columns"]),
            r["source_values"] or "",
            r["target_values"] or "",
        )
        for r in report.rows.collect()
    ]


def parquet_rows(spark: Any, out: Path) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.read.parquet(str(out / "rows.parquet")).collect()]
