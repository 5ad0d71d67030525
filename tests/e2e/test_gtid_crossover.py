"""Data of an older version (positions in binlog-file form) crossing over to GTID positions.

binlogsync before GTID positions kept the hub's log (head, floor, cursors) and the targets'
checkpoint rows as `file:offset`. Here a site runs, stops, and its hub log and the target's
checkpoint are put back into exactly that form; rows are written meanwhile. On restart the
origin agent converts the hub's head on the origin (BINLOG_GTID_POS, checked against the
transaction's own GTID), capture continues by GTID, and the hub's log and the target's
checkpoint cross over at that point: nothing is lost or applied twice (counted by a trigger).
A file position that does not match the server (here: a wrong GTID recorded with it, as if
the server were another one) is refused with a message, and nothing moves.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from binlogsync.engines.mariadb import checkpoint as checkpoints
from binlogsync.hubcommands import fetch_status
from binlogsync.position import Position
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Server
from binlogsync_dev.verify import differences, origin_gtid
from sitekit import create, site

pytestmark = pytest.mark.e2e

TABLE = "CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL)"


def _insert(origin: Server, db: str, ids: range) -> None:
    with origin.connect(db) as conn, conn.cursor() as cur:
        for i in ids:
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, i % 7))


def _checkpoint(target: Server) -> Position | None:
    with target.connect() as conn, conn.cursor() as cur:
        found = (checkpoints.read_all(cur) or {}).get("origin")
    return found.position if found else None


def _caught_up(s: LocalSite, target: Server) -> None:
    final = Position.of_state(origin_gtid(s.origin))
    try:
        wait_until(
            lambda: (_checkpoint(target) or Position("binlog.000001", 0)).key >= final.key,
            60,
            0.05,
            f"the target reaching {final}",
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{s.logs()}") from None


def _as_older_version(s: LocalSite, target: Server, old: Position) -> None:
    """The hub log's head, floor and cursor, and the target's checkpoint row, as binlogsync
    before GTID positions wrote them (its log held nothing the target still needed)."""
    text = json.dumps(old.to_json())
    db = sqlite3.connect(s.root / "hub-data" / "hub.sqlite3")
    with db:
        db.execute("DELETE FROM log WHERE origin='origin'")
        db.execute("DELETE FROM parts WHERE origin='origin'")
        db.execute(
            "UPDATE origins SET head_key=?, head=?, floor_key=?, floor=? WHERE origin='origin'",
            (old.key, text, old.key, text),
        )
        db.execute(
            "UPDATE cursors SET pos_key=?, position=? WHERE origin='origin'", (old.key, text)
        )
    db.close()
    target.sql(
        "UPDATE binlogsync.checkpoint SET pos_key=%s, file=%s, `offset`=%s, gtid=%s, "
        "scheme=NULL WHERE origin='origin'",
        args=(old.key, old.file, old.offset, old.gtid),
    )


def test_file_positions_of_an_older_version_cross_over_to_gtids(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, TABLE)
    with target.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE audit (seq INT AUTO_INCREMENT PRIMARY KEY, id INT)")
        cur.execute(
            "CREATE TRIGGER t_audit BEFORE INSERT ON t FOR EACH ROW "
            "INSERT INTO audit (id) VALUES (NEW.id)"
        )
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        _insert(origin, dbname, range(0, 40))
        _caught_up(s, target)
        s.stop()
        now = _checkpoint(target)
        assert now is not None and now.by_gtid and now.gtid and "," not in now.gtid
        assert now.file and now.offset  # where it ended on this server
        [(epoch,)] = target.sql("SELECT epoch FROM binlogsync.checkpoint WHERE origin='origin'")

        # First with a GTID that this file:offset does not end: refused, nothing moves.
        domain, server, seq = now.gtid.split("-")
        wrong = Position(now.file, now.offset, f"{domain}-{server}-{int(seq) - 1}")
        _as_older_version(s, target, wrong)
        _insert(origin, dbname, range(40, 70))  # while the agents are down
        s.start()

        def halted() -> str:
            found = fetch_status(str(s.agents["hub"].config), timeout=5)["origins"][0]["halted"]
            return str(found["error"]) if found else ""

        error = wait_until(halted, 60, 0.1, "the refused conversion in status")
        assert f"is not the end of GTID {wrong.gtid}" in error, error
        assert "not the server that wrote it" in error
        assert target.sql("SELECT COUNT(*) FROM t", db=dbname)[0][0] == 40
        s.stop()

        # Then as the older version really left it: converted, continued by GTID.
        old = Position(now.file, now.offset, now.gtid)
        _as_older_version(s, target, old)
        s.start()
        _caught_up(s, target)
        _insert(origin, dbname, range(70, 90))
        _caught_up(s, target)
        assert (
            "in binlog-file form (stored by an older version)" in s.agents["origin"].log.read_text()
        )

        crossed = _checkpoint(target)
        assert crossed is not None and crossed.by_gtid and crossed.gtid == origin_gtid(origin)
        [(still,)] = target.sql("SELECT epoch FROM binlogsync.checkpoint WHERE origin='origin'")
        assert still == epoch  # the same hub log, carried over
        head = fetch_status(str(s.agents["hub"].config), timeout=5)["origins"][0]["head"]
        assert head["scheme"] == "gtid" and head["gtid"] == crossed.gtid
        problem = differences(origin, target, dbname, "t")
        assert not problem, problem
        [(applied, distinct)] = target.sql(
            "SELECT COUNT(*), COUNT(DISTINCT id) FROM audit", db=dbname
        )
        assert (applied, distinct) == (90, 90)
