"""An audit-log target end to end: the agent as a process writing JSON lines, killed with
kill -9 several times mid-stream; afterwards every committed transaction's lines are in the
log exactly once and in commit order, a rolled-back transaction's are not, and the files
rotated by size."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from binlogsync.apply.auditlog import checkpoints
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Server
from binlogsync_dev.verify import origin_gtid
from sitekit import create

pytestmark = pytest.mark.e2e


def _write(origin: Server, db: str, count: int, done: threading.Event) -> None:
    with origin.connect(db) as conn, conn.cursor() as cur:
        for i in range(1, count + 1):
            conn.begin()
            cur.execute("INSERT INTO t VALUES (%s, %s, %s)", (i, f"row {i}", f"{i}.50"))
            if i % 5 == 0:
                cur.execute("UPDATE t SET note = CONCAT(note, ' changed') WHERE id = %s", (i - 1,))
            if i % 7 == 0:
                cur.execute("DELETE FROM t WHERE id = %s", (i - 2,))
            conn.commit()
            if i % 50 == 0:  # one rolled back, never to be logged
                conn.begin()
                cur.execute("INSERT INTO t VALUES (%s, 'rolled back', 0)", (100_000 + i,))
                conn.rollback()
    done.set()


def test_every_line_once_in_order_across_kill_9(
    tmp_path: Path, origin: Server, dbname: str
) -> None:
    create([origin], dbname, "CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(80), "
                             "amount DECIMAL(12,2))")  # fmt: skip
    audit = Server("audit", 0, 0, "", 0)
    log_dir = tmp_path / "audit"
    section = f'[target]\nkind = "auditlog"\npath = "{log_dir}"\nrotate_bytes = 30000'
    with LocalSite(tmp_path / "site", origin, [audit], tables=(f"{dbname}.*",),
                   target_sections={"audit": section}) as s:  # fmt: skip
        s.start()
        s.wait_online()
        done = threading.Event()
        writer = threading.Thread(target=_write, args=(origin, dbname, 600, done))
        writer.start()
        for _ in range(3):
            wait_until(lambda: "origin" in checkpoints(log_dir), 30, 0.05, "first lines")
            s.kill("audit")
            s.start("audit")
        writer.join()
        gtid = origin_gtid(origin)
        wait_until(
            lambda: checkpoints(log_dir).get("origin", {}).get("gtid") == gtid, 60, 0.05,
            f"the audit log reaching {gtid}",
        )  # fmt: skip
    files = sorted((log_dir / "origin").glob("audit-*.jsonl"))
    assert len(files) > 1  # rotated by size
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    keys = [(int(line["gtid"].split("-")[-1]), line["n"]) for line in lines]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)  # in order, each once
    inserted = [line["after"]["id"] for line in lines if line["kind"] == "insert"]
    assert inserted == list(range(1, 601))
    assert sum(1 for line in lines if line["kind"] == "update") == 600 // 5
    assert sum(1 for line in lines if line["kind"] == "delete") == 600 // 7
    assert all(line["types"] == {"amount": "decimal"} for line in lines if line["kind"] == "insert")
    assert lines[0]["after"]["amount"] == "1.50"
