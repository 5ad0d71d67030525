"""`reconcile --since-last` on a running pipeline: only the keys the origin's binlog changed
since the last equal run are compared; a wrong change there is caught, a change made outside
replication (by design) is not, and the full run that follows catches it. The state lives in
the target's binlogsync schema and is rebuilt when missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from binlogsync_dev.sandbox import Server
from reconcile_kit import (
    execute,
    found,
    reconcile,
    spark_fixture,  # noqa: F401 - the session's SparkSession, as fixture `spark`
)
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.integration

T = "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(40))"
OPTIONS = {"pin": "auto", "origin": "origin", "chunk_rows": 500, "since_last": True}


def _run(spark: Any, origin: Server, target: Server, db: str) -> Any:
    return reconcile(spark, origin, [target], [f"{db}.t"], **OPTIONS)


def _state(target: Server, db: str) -> list[Any]:
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT target_table, pos_key FROM binlogsync.reconcile_verified "
            "WHERE source_table = %s",
            (f"{db}.t",),
        )
        return list(cur.fetchall())


def test_since_last_checks_the_changed_keys_only(
    spark: Any, tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, T)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO t VALUES (%s, %s, %s)", [(i, i, f"n{i}") for i in range(1, 3001)]
            )
        wait_equal(s, dbname, ["t"])

        first = _run(spark, origin, target, dbname)  # nothing verified yet: the whole table
        table = first.tables[0]
        assert first.exit_code == 0 and table.mode == "full", first.render()
        assert any("no earlier run found it equal" in n for n in table.notes), table.notes
        assert table.source_rows == 3000
        assert [name for name, _key in _state(target, dbname)] == [f"{dbname}.t"]

        # 50 rows change through the stream, one key moves, one row is deleted.
        execute(
            origin,
            dbname,
            "UPDATE t SET v = v + 1 WHERE id BETWEEN 10 AND 59",
            "UPDATE t SET id = 5000 WHERE id = 70",
            "DELETE FROM t WHERE id = 80",
        )
        wait_equal(s, dbname, ["t"])
        # Then the target goes wrong: on a key the stream changed (as a faulty apply would),
        # and on one it did not (outside replication).
        execute(
            target,
            dbname,
            "UPDATE t SET note = 'bad' WHERE id = 20",
            "INSERT INTO t VALUES (80, 80, 'came back')",
            "UPDATE t SET note = 'outside' WHERE id = 2500",
        )
        incremental = _run(spark, origin, target, dbname)
        table = incremental.tables[0]
        assert table.mode == "since-last", table.notes
        assert any("53 changed keys" in n for n in table.notes), table.notes
        assert found(incremental) == {(20,): ("changed", ("note",)), (80,): ("extra", ())}
        assert table.source_rows == 51  # 50 updated rows and the moved one; 80 is gone
        assert _state(target, dbname) == []  # not equal: the next run starts whole

        whole = _run(spark, origin, target, dbname)
        assert whole.tables[0].mode == "full"
        assert found(whole) == {
            (20,): ("changed", ("note",)),
            (80,): ("extra", ()),
            (2500,): ("changed", ("note",)),
        }

        execute(
            target,
            dbname,
            "UPDATE t SET note = 'n20' WHERE id = 20",
            "DELETE FROM t WHERE id = 80",
            "UPDATE t SET note = 'n2500' WHERE id = 2500",
        )
        assert _run(spark, origin, target, dbname).exit_code == 0  # whole again, and equal
        nothing = _run(spark, origin, target, dbname)  # nothing changed since
        assert nothing.exit_code == 0 and nothing.tables[0].mode == "since-last"
        assert nothing.tables[0].source_rows == 0 and nothing.tables[0].chunks == 0

        # The state table lost: the next run compares whole and writes it again.
        execute(target, None, "DROP TABLE binlogsync.reconcile_verified")
        rebuilt = _run(spark, origin, target, dbname)
        assert rebuilt.exit_code == 0 and rebuilt.tables[0].mode == "full"
        assert len(_state(target, dbname)) == 1
        execute(origin, dbname, "UPDATE t SET v = 0 WHERE id = 1")
        wait_equal(s, dbname, ["t"])
        after = _run(spark, origin, target, dbname)
        assert after.tables[0].mode == "since-last" and after.tables[0].source_rows == 1
