"""Reconciliation while the origin keeps writing and the agents replicate: no false differences,
the real ones found exactly, repaired through the hub, and a rerun reports equality."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from binlogsync_dev.sandbox import Server
from binlogsync_dev.writer import Writer
from reconcile_kit import (
    execute,
    found,
    reconcile,
    spark_fixture,  # noqa: F401 - the session's SparkSession, as fixture `spark`
)
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.integration

T = "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(40), amount DECIMAL(12,2))"
LIVE = 1500  # the writer touches ids 1..LIVE and new ids from 10000 on; the damage is elsewhere


def _busy_turn(cur: Any, rng: random.Random, n: int) -> None:
    """An update, delete or insert among ids 1..LIVE, or a new id from 10000 on."""
    i, op = rng.randint(1, LIVE), rng.random()
    if op < 0.7:
        cur.execute(
            "UPDATE t SET v = v + 1, note = %s, amount = amount + 0.01 WHERE id = %s", (f"w{n}", i)
        )
    elif op < 0.8:
        cur.execute("DELETE FROM t WHERE id = %s", (i,))
    elif op < 0.9:
        cur.execute(
            "INSERT INTO t VALUES (%s, 0, 'back', 1) ON DUPLICATE KEY UPDATE v = v + 1", (i,)
        )
    else:
        cur.execute("INSERT INTO t VALUES (%s, 1, NULL, NULL)", (10_000 + n,))


def busy_writer(origin: Server, db: str) -> Writer:
    """Keeps the origin busy with updates, deletes and inserts until stopped."""
    return Writer(origin, db, _busy_turn)


def test_live_writes_no_false_differences_then_repair_through_the_hub(
    spark: Any, tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, T)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO t VALUES (%s, %s, %s, %s)",
                [(i, i, f"n{i}", i / 4) for i in range(1, 3001)],
            )
        wait_equal(s, dbname, ["t"])
        # The session's target holds checkpoints of other tests' origins too: name ours.
        options = {"pin": "auto", "chunk_rows": 500, "max_task_rows": 400, "origin": "origin"}
        with busy_writer(origin, dbname) as writer:
            before = writer.done
            clean = reconcile(spark, origin, [target], [f"{dbname}.t"], **options)
            assert clean.exit_code == 0, clean.render()
            assert writer.done > before + 50, "the origin was not busy during the comparison"
            assert clean.tables[0].pin == "checkpoint of origin origin"

            # Damage the target behind binlogsync's back, where the writer does not write.
            execute(
                target,
                dbname,
                "DELETE FROM t WHERE id = 2001",
                "UPDATE t SET note = 'damaged' WHERE id = 2002",
                "UPDATE t SET amount = amount + 100 WHERE id = 2999",
                "INSERT INTO t VALUES (9999, 0, 'extra', 0)",
            )
            before = writer.done
            report = reconcile(spark, origin, [target], [f"{dbname}.t"], **options)
            assert found(report) == {
                (2001,): ("missing", ()),
                (2002,): ("changed", ("note",)),
                (2999,): ("changed", ("amount",)),
                (9999,): ("extra", ()),
            }, report.render()
            assert writer.done > before + 50

            repaired = reconcile(
                spark,
                origin,
                [target],
                [f"{dbname}.t"],
                repair="hub",
                via=str(s.agents["hub"].config),
                target_hosts=("target",),
                out=tmp_path / "repair",
                **options,
            )
            assert repaired.exit_code == 1  # it found differences, and repaired them
            counts = repaired.repair["targets"]["target"]  # type: ignore[index]
            assert (counts["upserts"], counts["deletes"]) == (3, 1), repaired.repair

            again = reconcile(spark, origin, [target], [f"{dbname}.t"], **options)
            assert again.exit_code == 0, again.render()
        wait_equal(s, dbname, ["t"])
