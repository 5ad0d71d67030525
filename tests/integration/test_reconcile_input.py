"""Reconciliation: repair as a SQL file, bad input, tables too big for one task, spark-submit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from binlogsync.config import DatabaseSettings
from binlogsync.reconcile.settings import Options
from binlogsync_dev.sandbox import Server, free_port
from reconcile_kit import (
    ROWS,
    db,
    execute,
    found,
    make_table,
    reconcile,
    spark_fixture,  # noqa: F401 - the session's SparkSession, as fixture `spark`
)

pytestmark = pytest.mark.integration


def _state(server: Server, database: str) -> tuple[Any, ...]:
    """What a server holds: its binlog position and the checksum of every table of `database`."""
    with server.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        position = cur.fetchone()[:2]
        cur.execute("SHOW TABLES")
        tables = [r[0] for r in cur.fetchall()]
        cur.execute("CHECKSUM TABLE " + ", ".join(f"`{t}`" for t in tables))
        return position, tuple(cur.fetchall())


def test_repair_sql_file_then_rerun_is_equal(
    spark: Any, origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    make_table([origin, target], dbname)
    execute(
        target,
        dbname,
        "DELETE FROM t WHERE id IN (5, 6)",
        "INSERT INTO t (id, name) VALUES (9000, 'extra')",
        "UPDATE t SET data = X'00', doc = '{}', note = NULL WHERE id = 77",
        "UPDATE t SET tm = '-838:59:59.999999', ts = '2038-01-19 03:14:08.000001' WHERE id = 78",
    )
    report = reconcile(spark, origin, [target], [f"{dbname}.t"], out=tmp_path, repair="sql")
    assert report.exit_code == 1
    assert set(found(report)) == {(5,), (6,), (9000,), (77,), (78,)}
    sql_file = tmp_path / f"repair-root_127.0.0.1_{target.port}.sql"
    assert sql_file.exists(), sorted(p.name for p in tmp_path.iterdir())
    text = sql_file.read_text()
    assert "DELETE FROM" in text and "ON DUPLICATE KEY UPDATE" in text and "COMMIT;" in text
    assert report.repair and report.repair["targets"]
    # Nothing was applied by reconcile itself; the DBA applies the file.
    assert found(reconcile(spark, origin, [target], [f"{dbname}.t"]))
    with sql_file.open("rb") as script:
        subprocess.run(
            ["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{target.port}", "-uroot"],
            stdin=script,
            check=True,
        )
    again = reconcile(spark, origin, [target], [f"{dbname}.t"])
    assert again.exit_code == 0, again.render()


def test_bad_input_gives_clear_messages_and_changes_nothing(
    spark: Any, origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    make_table([origin, target], dbname)
    for server in (origin, target):
        execute(server, dbname, "SET SESSION sql_log_bin = 0", "CREATE TABLE nokey (a INT, b INT)")
    execute(
        origin,
        dbname,
        "SET SESSION sql_log_bin = 0",
        "CREATE TABLE cols (id INT PRIMARY KEY, a INT, b INT)",
    )
    execute(
        target,
        dbname,
        "SET SESSION sql_log_bin = 0",
        "CREATE TABLE cols (id INT PRIMARY KEY, a INT, c INT)",
    )
    before = (_state(origin, dbname), _state(target, dbname))

    tables = [f"{dbname}.t", f"{dbname}.nope", f"{dbname}.nokey", f"{dbname}.cols"]
    report = reconcile(spark, origin, [target], tables, out=tmp_path)
    assert report.exit_code == 2
    by_name = {r.table.split(".")[1]: r for r in report.tables}
    assert by_name["t"].status == "equal"  # the good table is still compared
    assert f"there is no table {dbname}.nope on the source" in by_name["nope"].error
    assert "no primary key" in by_name["nokey"].error and "not comparable" in by_name["nokey"].error
    assert "columns differ" in by_name["cols"].error
    assert "only on the source: b" in by_name["cols"].error and "c" in by_name["cols"].error
    assert "--common-columns" in by_name["cols"].error
    text = report.render()
    assert text.count("ERROR") == 3

    common = reconcile(spark, origin, [target], [f"{dbname}.cols"], common_columns=True)
    assert common.exit_code == 0, common.render()
    assert any("not compared: b, c" in n for n in common.tables[0].notes), common.tables[0].notes

    closed = DatabaseSettings("127.0.0.1", free_port(), "root", "")
    gone = reconcile(spark, origin, [target], [f"{dbname}.t"])
    assert gone.exit_code == 0
    from binlogsync.reconcile.job import run

    down = run(Options(db(origin), (closed,), (f"{dbname}.t",), pin="none"), spark)
    assert down.exit_code == 2 and "cannot reach MySQL/MariaDB" in down.tables[0].error
    assert f"127.0.0.1:{closed.port}" in down.tables[0].error
    down = run(Options(closed, (db(target),), (f"{dbname}.t",), pin="none"), spark)
    assert down.exit_code == 2 and "source database" in down.errors[0]
    assert (_state(origin, dbname), _state(target, dbname)) == before


def test_table_bigger_than_one_task_is_split_not_loaded(
    spark: Any, origin: Server, target: Server, dbname: str
) -> None:
    """Every row differs, and no task may hold more than 100 rows: the differing chunks are cut
    by checksum until they fit, and every row is still named."""
    make_table([origin, target], dbname)
    execute(target, dbname, "UPDATE t SET name = CONCAT(name, '!')")
    report = reconcile(spark, origin, [target], [f"{dbname}.t"], chunk_rows=1000, max_task_rows=100)
    diffs = found(report)
    assert len(diffs) == ROWS and set(diffs.values()) == {("changed", ("name",))}
    assert 0 < report.tables[0].largest_piece <= 100
    assert report.tables[0].chunks_split >= ROWS // 100


def test_spark_submit_runs_the_job(
    origin: Server, target: Server, dbname: str, tmp_path: Path
) -> None:
    make_table([origin, target], dbname, rows=500)
    execute(target, dbname, "DELETE FROM t WHERE id = 250")
    submit = Path(sys.executable).parent / "spark-submit"
    job = Path(__file__).resolve().parents[2] / "spark_jobs" / "reconcile_job.py"
    result = subprocess.run(
        [
            str(submit),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            str(job),
            "--source",
            f"mysql://root@127.0.0.1:{origin.port}",
            "--target",
            f"mysql://root@127.0.0.1:{target.port}?password_env=NO_PASSWORD",
            "--tables",
            f"{dbname}.t",
            "--pin",
            "none",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "NO_PASSWORD": ""},
        timeout=240,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "missing   id=250" in result.stdout
    assert (tmp_path / "summary.json").exists()


def test_a_job_list_that_is_not_json_is_refused_before_spark_starts(tmp_path: Path) -> None:
    job = Path(__file__).resolve().parents[2] / "spark_jobs" / "reconcile_job.py"
    result = subprocess.run(
        [sys.executable, str(job), "--job", "--source x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "argument --job: not JSON" in result.stderr, result.stderr
    assert "NativeCodeLoader" not in result.stderr  # no JVM was started


def test_native_replica_is_pinned_by_gtid_and_a_stopped_one_is_refused(
    spark: Any, sandbox: Any, dbname: str
) -> None:
    source = sandbox.start("rc_source", 41)
    replica = sandbox.start("rc_replica", 42)
    try:
        sandbox.replicate(source, replica)
        execute(
            source,
            None,
            f"CREATE DATABASE `{dbname}`",
            f"USE `{dbname}`",
            "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
            "INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_2000",
        )
        with source.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            gtid = cur.fetchone()[0]
        with replica.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, 60)", (gtid,))
            assert cur.fetchone()[0] == 0
        # Damage the replica behind replication's back, then keep the source writing a little.
        execute(
            replica, dbname, "SET SESSION sql_log_bin = 0", "UPDATE t SET v = 'x' WHERE id = 1234"
        )
        execute(source, dbname, "UPDATE t SET v = 'live' WHERE id = 7")
        report = reconcile(spark, source, [replica], [f"{dbname}.t"], pin="auto")
        assert report.tables[0].pin == "native replica (GTID wait)"
        assert found(report) == {(1234,): ("changed", ("v",))}, report.render()

        execute(replica, None, "STOP SLAVE SQL_THREAD")
        stopped = reconcile(spark, source, [replica], [f"{dbname}.t"], pin="auto")
        assert stopped.exit_code == 2
        assert "not replicating" in stopped.tables[0].error
        assert "SQL thread: No" in stopped.tables[0].error
    finally:
        sandbox.stop("rc_replica")
        sandbox.stop("rc_source")
