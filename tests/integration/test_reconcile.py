"""Reconciliation on real MariaDB servers with a real local SparkSession: every kind of
difference is found, exactly, and nothing else."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from binlogsync_dev.sandbox import Server
from reconcile_kit import (
    ROWS,
    execute,
    found,
    make_table,
    parquet_rows,
    reconcile,
    spark_fixture,  # noqa: F401 - the session's SparkSession, as fixture `spark`
)

pytestmark = pytest.mark.integration

# Each statement damages the target in one way; EXPECTED is what must be reported, and only it.
DAMAGE = [
    "DELETE FROM t WHERE id IN (1, 10, 3000)",  # missing: first, middle and last key
    "INSERT INTO t (id, name) VALUES (-5, 'below'), (5000, 'above'), (1500000, 'far')",  # extra
    "UPDATE t SET note = '' WHERE id = 98",  # NULL on the source (98 % 7 = 0), '' here
    "UPDATE t SET note = NULL WHERE id = 101",  # text on the source, NULL here
    "UPDATE t SET amount = amount + 0.0001 WHERE id = 200",  # the last digit of the scale
    "UPDATE t SET ts = ts + INTERVAL 1 MICROSECOND WHERE id = 300",  # DATETIME(6) fraction
    'UPDATE t SET doc = \'{"tags":["x","y"],"k":401}\' WHERE id = 401',  # JSON key order
    "UPDATE t SET data = CONCAT(LEFT(data, 3), X'00', SUBSTRING(data, 5)) WHERE id = 500",  # 1 byte
    "UPDATE t a JOIN t b ON a.id = 600 AND b.id = 601 SET a.name = b.name, b.name = a.name",  # swap
    "UPDATE t SET f = f + 0.0001 WHERE id = 700",  # FLOAT: 233.3334 prints as 233.333
    "UPDATE t SET d = d + 1e-12 WHERE id = 701",
    "UPDATE t SET e = 'red' WHERE id = 800",  # ENUM (800 % 3 = 2: 'blue, dark')
    "UPDATE t SET s = 'a' WHERE id = 801",  # SET
    "UPDATE t SET b = b ^ 1 WHERE id = 802",  # BIT
    "UPDATE t SET tm = tm + INTERVAL 1 MICROSECOND WHERE id = 803",  # TIME(6)
    "UPDATE t SET u = u - 1 WHERE id = 804",  # BIGINT UNSIGNED at the top of its range
    "UPDATE t SET data = X'' WHERE id = 11",  # NULL blob on the source (11 % 11 = 0), empty here
]
EXPECTED: dict[tuple[Any, ...], tuple[str, tuple[str, ...]]] = {
    (1,): ("missing", ()),
    (10,): ("missing", ()),
    (3000,): ("missing", ()),
    (-5,): ("extra", ()),
    (5000,): ("extra", ()),
    (1500000,): ("extra", ()),
    (98,): ("changed", ("note",)),
    (101,): ("changed", ("note",)),
    (200,): ("changed", ("amount",)),
    (300,): ("changed", ("ts",)),
    (401,): ("changed", ("doc",)),
    (500,): ("changed", ("data",)),
    (600,): ("changed", ("name",)),
    (601,): ("changed", ("name",)),
    (700,): ("changed", ("f",)),
    (701,): ("changed", ("d",)),
    (800,): ("changed", ("e",)),
    (801,): ("changed", ("s",)),
    (802,): ("changed", ("b",)),
    (803,): ("changed", ("tm",)),
    (804,): ("changed", ("u",)),
    (11,): ("changed", ("data",)),
}


@pytest.fixture
def damaged(origin: Server, target: Server, dbname: str) -> str:
    make_table([origin, target], dbname)
    execute(target, dbname, *DAMAGE)
    return dbname


def test_equal_tables_report_equal(
    spark: Any, origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    make_table([origin, target], dbname)
    report = reconcile(spark, origin, [target], [f"{dbname}.t"], out=tmp_path)
    assert report.exit_code == 0, report.render()
    table = report.tables[0]
    assert (table.status, table.source_rows, table.target_rows) == ("equal", ROWS, ROWS)
    assert table.rows_compared == 0  # matching chunks move no rows
    assert table.chunks > 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["exit_code"] == 0 and summary["tables"][0]["status"] == "equal"
    assert summary["options"]["hash"] == "crc"  # auto: every server here has CRC32C
    assert parquet_rows(spark, tmp_path) == []


@pytest.mark.parametrize("hash", ["crc", "sha1", "sha256"])
def test_every_kind_of_difference_is_found_exactly(
    spark: Any, origin: Server, target: Server, damaged: str, tmp_path: Path, hash: str
) -> None:
    report = reconcile(spark, origin, [target], [f"{damaged}.t"], out=tmp_path, hash=hash)
    assert report.exit_code == 1, report.render()
    assert found(report) == EXPECTED
    table = report.tables[0]
    assert (table.counts["missing"], table.counts["extra"], table.counts["changed"]) == (3, 3, 16)
    assert table.counts["unsettled"] == 0
    assert table.chunks_split > 0  # differing chunks above max_task_rows were split first
    # The Parquet rows say the same, with keys and the differing columns' values.
    rows = {json.loads(r["key"])["id"]: r for r in parquet_rows(spark, tmp_path)}
    assert {(k,): (r["kind"], tuple(r["columns"])) for k, r in rows.items()} == EXPECTED
    assert json.loads(rows[98]["source_values"]) == {"note": None}
    assert json.loads(rows[98]["target_values"]) == {"note": ""}
    assert json.loads(rows[600]["source_values"]) == {"name": "name-600"}
    assert json.loads(rows[600]["target_values"]) == {"name": "name-601"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["tables"][0]["changed"] == 16 and summary["exit_code"] == 1
    assert summary["options"]["hash"] == hash
    # Every stage's time, the report's own write too (it was timed only after summary.json
    # had been written, so the file never held it).
    stages = [s["stage"] for s in summary["stages"]]
    assert stages == ["plan", "checksums", "rows", "write report"], stages
    text = report.render()
    assert "DIFFERENT" in text and "id=600" in text


def test_json_compared_by_value_ignores_key_order(
    spark: Any, origin: Server, target: Server, damaged: str
) -> None:
    report = reconcile(spark, origin, [target], [f"{damaged}.t"], json="value")
    expected = {k: v for k, v in EXPECTED.items() if k != (401,)}
    assert found(report) == expected


def test_composite_and_text_keys(spark: Any, origin: Server, target: Server, dbname: str) -> None:
    ddl = "CREATE TABLE c (region CHAR(2) NOT NULL, n INT NOT NULL, v VARCHAR(20), PRIMARY KEY (region, n))"
    make_table([origin, target], dbname, ddl)
    fill = (
        "INSERT INTO c SELECT ELT(1 + seq % 4, 'eu', 'us', 'ap', 'sa'), seq, CONCAT('v', seq) "
        "FROM seq_1_to_2000"
    )
    text = "CREATE TABLE w (word VARCHAR(30) NOT NULL PRIMARY KEY, v INT)"
    for server in (origin, target):
        execute(
            server,
            dbname,
            "SET SESSION sql_log_bin = 0",
            fill,
            text,
            "INSERT INTO w SELECT CONCAT('word-', seq), seq FROM seq_1_to_1500",
        )
    execute(
        target,
        dbname,
        "DELETE FROM c WHERE region = 'us' AND n = 1",
        "UPDATE c SET v = 'x' WHERE region = 'sa' AND n = 1999",
        "INSERT INTO c VALUES ('zz', 1, 'extra')",
        "UPDATE w SET v = -1 WHERE word = 'word-777'",
        "DELETE FROM w WHERE word = 'word-1'",
    )
    report = reconcile(
        spark, origin, [target], [f"{dbname}.c", f"{dbname}.w"], chunk_rows=250, max_task_rows=100
    )
    by_table: dict[str, dict[Any, Any]] = {}
    from reconcile_kit import all_diffs

    for d in all_diffs(report):
        by_table.setdefault(report.tables[d.table].table, {})[d.key] = (d.kind, d.columns)
    assert by_table == {
        f"{dbname}.c": {
            ("us", 1): ("missing", ()),
            ("sa", 1999): ("changed", ("v",)),
            ("zz", 1): ("extra", ()),
        },
        f"{dbname}.w": {("word-777",): ("changed", ("v",)), ("word-1",): ("missing", ())},
    }


def test_two_targets_each_get_their_own_differences(
    spark: Any, sandbox: Any, origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    second = sandbox.start("rc_target2", 43)
    try:
        make_table([origin, target, second], dbname)
        execute(target, dbname, "DELETE FROM t WHERE id = 42")
        execute(
            second,
            dbname,
            "UPDATE t SET amount = NULL WHERE id = 43",
            "DELETE FROM t WHERE id = 2999",
        )
        report = reconcile(spark, origin, [target, second], [f"{dbname}.t"], out=tmp_path)
        per_target: dict[int, dict[Any, Any]] = {0: {}, 1: {}}
        from reconcile_kit import all_diffs

        for d in all_diffs(report):
            per_target[d.target][d.key] = (d.kind, d.columns)
        assert per_target == {
            0: {(42,): ("missing", ())},
            1: {(43,): ("changed", ("amount",)), (2999,): ("missing", ())},
        }
        assert [r.status for r in report.tables] == ["different", "different"]
        assert {r["target"] for r in parquet_rows(spark, tmp_path)} == {
            report.tables[0].target,
            report.tables[1].target,
        }
    finally:
        sandbox.stop("rc_target2")


def test_zero_dates_equal_on_both_sides_and_against_null_or_1970_are_found(
    spark: Any, origin: Server, target: Server, dbname: str
) -> None:
    """Zero, partial and invalid dates, in the key too: alike on both sides they are equal;
    a zero date where the target has NULL or 1970-01-01 (what capture once sent) is changed."""
    ddl = (
        "CREATE TABLE z (d DATE NOT NULL, n INT NOT NULL, dtm DATETIME(6), ts TIMESTAMP NULL, "
        "PRIMARY KEY (d, n))"
    )
    rows = (
        "('0000-00-00', 1, '0000-00-00', '0000-00-00'), ('0000-00-00', 2, NULL, '0000-00-00'), "
        "('2024-00-10', 1, '2024-05-00 10:11:12.5', NULL), ('2004-04-31', 1, NULL, NULL), "
        "('2024-02-29', 1, '0000-00-00', '2024-02-29 12:00:00'), ('2024-03-01', 1, NULL, NULL)"
    )
    for server in (origin, target):
        execute(
            server,
            None,
            "SET SESSION sql_log_bin = 0, sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+00:00'",
            f"CREATE DATABASE `{dbname}`",
            f"USE `{dbname}`",
            ddl,
            f"INSERT INTO z VALUES {rows}",
        )
    execute(
        target,
        dbname,
        "SET SESSION sql_log_bin = 0, sql_mode = '', time_zone = '+00:00'",
        "UPDATE z SET dtm = NULL WHERE d = '0000-00-00' AND n = 1",  # zero vs NULL
        "UPDATE z SET ts = '1970-01-01 00:00:01' WHERE d = '0000-00-00' AND n = 2",  # vs 1970
        "UPDATE z SET dtm = '1970-01-01 00:00:00' WHERE d = '2024-02-29'",
    )
    report = reconcile(spark, origin, [target], [f"{dbname}.z"], chunk_rows=2, max_task_rows=2)
    assert report.exit_code == 1, report.render()
    assert found(report) == {
        ("0000-00-00", 1): ("changed", ("dtm",)),
        ("0000-00-00", 2): ("changed", ("ts",)),
        (dt.date(2024, 2, 29), 1): ("changed", ("dtm",)),  # a real date key reads as one
    }
