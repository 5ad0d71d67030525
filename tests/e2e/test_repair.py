"""Repairs through the hub: source images applied on a target, ordered with live changes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from binlogsync.errors import ApplyError
from binlogsync.hubcommands import send_repair
from binlogsync.model import Change
from binlogsync.position import Position
from binlogsync_dev.localsite import LocalSite
from binlogsync_dev.sandbox import Server
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.e2e

T = "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))"


def _snapshot_rows(origin: Server, db: str, ids: list[int]) -> tuple[Position, list[tuple]]:  # type: ignore[type-arg]
    """Rows read in a consistent snapshot, with the GTID position it is pinned to."""
    with origin.connect(db) as conn, conn.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        status = {k.lower(): v for k, v in cur.fetchall()}
        marks = ",".join(["%s"] * len(ids))
        cur.execute(f"SELECT id, v, note FROM t WHERE id IN ({marks}) ORDER BY id", ids)
        rows = list(cur.fetchall())
        file, offset = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, offset))
        state = cur.fetchone()[0]
        cur.execute("COMMIT")
    # MariaDB: positions are GTID states (the hub refuses a file position against them).
    return Position.of_state(state, file, offset), rows


@contextmanager
def _running(
    tmp_path: Path, origin: Server, target: Server, db: str, rows: int
) -> Iterator[LocalSite]:
    """A site whose origin and target hold the same `rows` rows of table t."""
    create([origin, target], db, T)
    with site(tmp_path, origin, [target], db) as s:
        s.start()
        s.wait_online()
        with origin.connect(db) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, 'orig')", [(i, i) for i in range(rows)])
        wait_equal(s, db, ["t"])
        yield s


def test_repair_while_writes_continue(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    with _running(tmp_path, origin, target, dbname, 200) as s:
        # Damage the target behind binlogsync's back: a lost row, a changed row, an extra row.
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM t WHERE id = 5")
            cur.execute("UPDATE t SET v = -1 WHERE id = 6")
            cur.execute("UPDATE t SET note = 'damaged' WHERE id = 7")  # no live change heals it
            cur.execute("INSERT INTO t VALUES (1000, 0, 'extra')")
        stop = threading.Event()

        def writer() -> None:  # live changes, including to the repaired rows
            n = 0
            with origin.connect(dbname) as conn, conn.cursor() as cur:
                while not stop.is_set() and n < 3000:
                    cur.execute("UPDATE t SET v = v + 1 WHERE id IN (5, 6, %s)", (n % 200,))
                    n += 1

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            snapshot, rows = _snapshot_rows(origin, dbname, [5, 6, 7])
            changes = [
                Change("insert", dbname, "t", ("id", "v", "note"), (), tuple(rows)),
                Change("delete", dbname, "t", ("id", "v", "note"), ((1000, 0, "extra"),), ()),
            ]
            config = str(s.agents["hub"].config)
            assert send_repair(config, "origin", "target", snapshot, changes) <= snapshot
        finally:
            stop.set()
            thread.join()
        wait_equal(s, dbname, ["t"])


def test_repair_when_nothing_was_written_after_the_snapshot(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    with _running(tmp_path, origin, target, dbname, 20) as s:
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("UPDATE t SET note = NULL WHERE id = 3")
        snapshot, rows = _snapshot_rows(origin, dbname, [3])
        change = Change("insert", dbname, "t", ("id", "v", "note"), (), tuple(rows))
        send_repair(str(s.agents["hub"].config), "origin", "target", snapshot, [change])
        wait_equal(s, dbname, ["t"])


def test_repair_of_a_target_behind_the_snapshot_skips_nothing(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    with _running(tmp_path, origin, target, dbname, 50) as s:
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("UPDATE t SET note = 'damaged' WHERE id = 1")
        s.stop("target")  # the target falls behind the snapshot
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.executemany("UPDATE t SET v = v + 100 WHERE id = %s", [(i,) for i in range(2, 50)])
        snapshot, rows = _snapshot_rows(origin, dbname, [1])
        change = Change("insert", dbname, "t", ("id", "v", "note"), (), tuple(rows))
        result: dict[str, object] = {}

        def repair() -> None:
            try:
                result["upto"] = send_repair(
                    str(s.agents["hub"].config), "origin", "target", snapshot, [change]
                )
            except Exception as exc:  # reported below
                result["error"] = exc

        thread = threading.Thread(target=repair)
        thread.start()  # queued on the hub; applied first when the target returns
        s.start("target")
        thread.join(90)
        assert "error" not in result, result
        assert result["upto"] < snapshot  # the checkpoint went back to where the target was
        wait_equal(s, dbname, ["t"])


def test_repair_for_an_unrouted_pair_is_refused(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, T)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start("hub")
        with pytest.raises(ApplyError, match="no route"):
            send_repair(
                str(s.agents["hub"].config),
                "origin",
                "elsewhere",
                Position("binlog.000001", 4),
                [],
                timeout=10,
            )
