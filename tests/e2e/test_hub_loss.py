"""A hub that loses its data directory (kill -9, then `rm -r data_dir`) under writes.

The binlog is the outbox, so nothing is lost: the new hub log (a new epoch) learns from the
targets' checkpoints where capture must start, restarts capture from the oldest position a
target still needs, and blocks a target with "reseed needed" when the origin's binlog no
longer has it. Before this was so, the origin re-registered "at the current position" and
the rows written meanwhile never reached the target, without a word (issue 6, defect 2: 241
rows lost).

Every target carries a trigger that counts the rows written into it, so "exactly once" is
checked by counting applications, not only by comparing the final rows (an upsert applied
twice leaves the same rows).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlogsync.engines.mariadb import checkpoint as checkpoints
from binlogsync.hubcommands import fetch_status
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Sandbox, Server
from binlogsync_dev.verify import caught_up, differences, origin_gtid
from binlogsync_dev.writer import Writer
from sitekit import create, site

pytestmark = pytest.mark.e2e
AGENTS = str(Path(__file__).resolve().parents[2] / "agents")

TABLE = "CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL, pad VARCHAR(40))"


@pytest.fixture(scope="module")
def target2(sandbox: Sandbox) -> Server:
    return sandbox.start("target2", 3)


def _audit(targets: list[Server], db: str) -> None:
    """A trigger on each target that counts every row the applier writes into `t` (an
    upsert of a row already there counts too: BEFORE INSERT fires for it)."""
    for target in targets:
        with target.connect(db) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE audit (seq INT AUTO_INCREMENT PRIMARY KEY, id INT)")
            cur.execute(
                "CREATE TRIGGER t_audit BEFORE INSERT ON t FOR EACH ROW "
                "INSERT INTO audit (id) VALUES (NEW.id)"
            )


def _count(server: Server, db: str) -> int:
    return int(server.scalar("SELECT COUNT(*) FROM t", db=db))


def _checkpoint(target: Server) -> checkpoints.Checkpoint:
    with target.connect() as conn, conn.cursor() as cur:
        found = (checkpoints.read_all(cur) or {}).get("origin")
    assert found is not None, f"{target.name} has no checkpoint"
    return found


def _status(s: LocalSite) -> dict[str, Any]:
    return fetch_status(str(s.agents["hub"].config), timeout=5)


def _target_row(s: LocalSite, name: str) -> dict[str, Any]:
    return next(t for t in _status(s)["targets"] if t["target"] == name)


def _insert(origin: Server, db: str, ids: range) -> None:
    with origin.connect(db) as conn, conn.cursor() as cur:
        for i in ids:
            cur.execute("INSERT INTO t VALUES (%s, %s, REPEAT('p', 30))", (i, i % 97))


def _insert_turn(cur: Any, rng: random.Random, n: int) -> None:
    cur.execute("INSERT INTO t VALUES (%s, %s, REPEAT('w', 30))", (n, n % 97))


def rows_writer(origin: Server, db: str) -> Writer:
    """Inserts rows 0, 1, 2, … on the origin, one transaction each, at a steady pace."""
    return Writer(origin, db, _insert_turn, pause=0.002)


def _lose_hub(s: LocalSite) -> tuple[str, int]:
    """kill -9 the hub and delete its data directory; returns (old epoch, size of its log
    file so far, where the next run's lines begin)."""
    epoch = str(_status(s)["epoch"])
    s.kill("hub")
    shutil.rmtree(s.root / "hub-data")
    return epoch, s.agents["hub"].log.stat().st_size


def _hub_log_since(s: LocalSite, offset: int) -> str:
    with s.agents["hub"].log.open("rb") as handle:
        handle.seek(offset)
        return handle.read().decode("utf-8", "replace")


def _wait_caught_up(s: LocalSite, targets: list[Server], timeout: float = 90) -> None:
    gtid = origin_gtid(s.origin)
    for target in targets:
        try:
            wait_until(
                lambda t=target: caught_up(t, "origin", gtid), timeout, 0.05, f"{target.name}"
            )
        except TimeoutError as exc:
            raise AssertionError(f"{exc} catching up to {gtid}\n{s.logs()}") from None


def _assert_exactly_once(s: LocalSite, targets: list[Server], db: str) -> None:
    rows = _count(s.origin, db)
    with s.origin.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CHECKSUM TABLE t")
        origin_sum = cur.fetchone()[1]
    for target in targets:
        problem = differences(s.origin, target, db, "t")
        assert not problem, problem
        with target.connect(db) as conn, conn.cursor() as cur:
            cur.execute("CHECKSUM TABLE t")
            assert cur.fetchone()[1] == origin_sum
            cur.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM audit")
            applied, distinct = cur.fetchone()
        # Every row written once: none missing, none applied twice.
        assert (applied, distinct) == (rows, rows), (target.name, applied, distinct, rows)


def _lose_hub_under_writes(
    s: LocalSite, target: Server, writer: Writer, pause_origin: bool
) -> tuple[str, int, checkpoints.Checkpoint]:
    """With the writer running: lose the hub and start a new one (with `pause_origin`, the
    origin's agent is stopped meanwhile, so the target speaks to the new hub first). Returns
    the old epoch, where the new hub's lines begin in its log, and the target's checkpoint at
    the loss."""
    wait_until(lambda: _count(target, writer.db) > 50, 60, 0.05, "rows on the target")
    old_epoch, log_offset = _lose_hub(s)
    origin_agent = s.agents["origin"].process
    assert origin_agent is not None
    if pause_origin:
        origin_agent.send_signal(signal.SIGSTOP)
    try:
        lost_at = writer.done
        # Rows the old hub never saw: the ones a start at "current" would lose.
        wait_until(lambda: writer.more_than(lost_at + 150), 60, 0.01, "writes meanwhile")
        needed = _checkpoint(target)  # nothing moves it while no hub runs
        assert needed.epoch == old_epoch
        s.start("hub")
        if pause_origin:
            wait_until(
                lambda: _target_row(s, target.name)["applied"] is not None,
                30,
                0.05,
                "the target's checkpoint reported to the new hub",
            )
    finally:
        if pause_origin:
            origin_agent.send_signal(signal.SIGCONT)
    resumed_at = writer.done
    wait_until(lambda: writer.more_than(resumed_at + 100), 60, 0.01, "writes after")
    return old_epoch, log_offset, needed


@pytest.mark.parametrize("order", ["target first", "as they come"])
def test_hub_data_dir_lost_under_writes_every_row_arrives_exactly_once(
    tmp_path: Path, origin: Server, target: Server, dbname: str, order: str
) -> None:
    """Writes go on the whole time. "target first": the origin's agent is paused while the
    new hub starts, so the hub registers the origin at the target's checkpoint. "as they
    come": whichever agent says HELLO first; if the origin does, it is registered where it
    stands, and the target's checkpoint then restarts capture from there."""
    create([origin, target], dbname, TABLE)
    _audit([target], dbname)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()  # capture starts at "current": write only after
        writer = rows_writer(origin, dbname)
        with writer:
            old_epoch, log_offset, needed = _lose_hub_under_writes(
                s, target, writer, pause_origin=order == "target first"
            )
        assert writer.error is None, writer.error
        _wait_caught_up(s, [target])
        _assert_exactly_once(s, [target], dbname)
        assert _count(origin, dbname) == writer.done

        status = _status(s)
        new_epoch = status["epoch"]
        assert new_epoch != old_epoch
        assert _checkpoint(target).epoch == new_epoch  # written with the rows it covers
        text = _hub_log_since(s, log_offset)
        registered = (
            f"capture starts at {needed.position}, the oldest checkpoint its targets reported"
        )
        if order == "target first" or "registered, capture starts at" not in text:
            assert registered in text, text
            assert "registered, capture starts at" not in text, text  # never at "current"
        else:  # the origin spoke first: registered where it stood, with a warning, then
            assert "have not reported a checkpoint to this log yet" in text, text
            assert f"capture restarts from {needed.position}" in text, text
        assert status["origins"][0]["halted"] is None
        assert all(t["blocked"] is None for t in status["targets"])


def test_target_down_at_the_loss_capture_restarts_from_the_oldest_checkpoint(
    tmp_path: Path, origin: Server, target: Server, target2: Server, dbname: str
) -> None:
    """target2 is down (and behind) when the hub loses its data; target is up. The new hub
    registers the origin where target (the only one reporting) stands; when target2 comes
    back with an older checkpoint, capture restarts from there. Both end with every row
    exactly once; target skips what it already had."""
    targets = [target, target2]
    create([origin, *targets], dbname, TABLE)
    _audit(targets, dbname)
    with site(tmp_path, origin, targets, dbname) as s:
        s.start()
        s.wait_online()
        _insert(origin, dbname, range(0, 40))
        _wait_caught_up(s, targets)
        s.stop(target2.name)
        _insert(origin, dbname, range(40, 100))  # the hub keeps these for target2, then loses them
        _wait_caught_up(s, [target])
        behind, ahead = _checkpoint(target2), _checkpoint(target)
        assert behind.position < ahead.position
        _old_epoch, log_offset = _lose_hub(s)
        _insert(origin, dbname, range(100, 160))  # while no hub runs
        s.start("hub")
        _insert(origin, dbname, range(160, 200))
        _wait_caught_up(s, [target])
        status = _status(s)
        assert {t["target"]: t["blocked"] for t in status["targets"]} == {
            target.name: None,
            target2.name: None,  # not reported yet: not judged
        }
        s.start(target2.name)
        _wait_caught_up(s, targets)
        _assert_exactly_once(s, targets, dbname)
        text = _hub_log_since(s, log_offset)
        assert f"capture restarts from {behind.position}" in text, text
        assert f"target {target2.name} needs it from {behind.position}" in text, text
        status = _status(s)
        assert all(t["blocked"] is None and t["last_error"] is None for t in status["targets"])
        assert {_checkpoint(t).epoch for t in targets} == {status["epoch"]}


@pytest.fixture
def forget_checkpoint(target: Server) -> Iterator[None]:
    """After a test that purged the origin's binlog: the target's checkpoint of "origin" can
    never be served again, and the next site on these servers would find it blocked. Drop it
    (the next site then starts at the origin's current position)."""
    yield
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM binlogsync.checkpoint WHERE origin = 'origin'")


def _purge_all_but_current(origin: Server) -> str:
    """FLUSH BINARY LOGS, then PURGE BINARY LOGS TO the new file; returns its name. A file
    that a binlog dump still reads is kept by the server, so purge until it is gone."""
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        current = str(cur.fetchone()[0])

        def purged() -> bool:
            cur.execute(f"PURGE BINARY LOGS TO '{current}'")
            cur.execute("SHOW BINARY LOGS")
            return [r[0] for r in cur.fetchall()] == [current]

        wait_until(purged, 30, 0.1, f"binlogs before {current} purged")
    return current


@pytest.mark.parametrize("purge", ["before the hub restarts", "after the hub restarted"])
@pytest.mark.usefixtures("forget_checkpoint")
def test_purged_binlog_blocks_the_target_reseed_needed(
    tmp_path: Path, origin: Server, target: Server, dbname: str, purge: str
) -> None:
    """The binlog the target needs is purged. The target is blocked with "reseed needed" in
    status and gets nothing from the new log (applying it would leave a silent hole). The
    purge comes before the new hub hears from the origin, or after (then the hub's idea of
    the origin's oldest binlog is stale when the target comes back)."""
    create([origin, target], dbname, TABLE)
    _audit([target], dbname)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        _insert(origin, dbname, range(0, 30))
        _wait_caught_up(s, [target])
        s.stop(target.name)
        _insert(origin, dbname, range(30, 60))
        before = _checkpoint(target)
        _old_epoch, log_offset = _lose_hub(s)
        _insert(origin, dbname, range(60, 90))
        if purge == "before the hub restarts":
            first = _purge_all_but_current(origin)
        s.start("hub")
        # The origin speaks to the new hub before the target (the other order is the first
        # test's): it is registered where it stands, with a warning naming the silent target.
        wait_until(lambda: _status(s)["origins"][0]["head"], 30, 0.05, "origin registered")
        if purge == "after the hub restarted":
            first = _purge_all_but_current(origin)
        _insert(origin, dbname, range(90, 120))
        gtid = origin_gtid(origin)
        s.start(target.name)

        def reseed_needed() -> str | None:
            # (Blocked "waiting for origin" first when the hub must ask the origin.)
            blocked = _target_row(s, target.name)["blocked"]
            return blocked if blocked and blocked.startswith("reseed needed") else None

        try:
            reason = wait_until(reseed_needed, 60, 0.05, "the target blocked")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{_status(s)}\n{s.logs()}") from None
        assert str(before.position) in reason and first in reason, reason
        # The origin goes on (other targets would get its changes), the target gets none.
        wait_until(lambda: _status(s)["origins"][0]["head"]["gtid"] == gtid, 30, 0.05, "hub head")
        status = _status(s)
        halted = status["origins"][0]["halted"]
        assert halted is None, f"{halted}\n{s.logs()}"
        assert {h["name"]: h["online"] for h in status["hosts"]}[target.name] is True
        assert _checkpoint(target) == before
        assert _count(target, dbname) == 30
        assert int(target.scalar("SELECT COUNT(*) FROM audit", db=dbname)) == 30
        text = _hub_log_since(s, log_offset)
        assert "reseed needed" in text, text
        assert "have not reported a checkpoint to this log yet" in text, text
        assert "capture restarts from" not in text, text  # the log was kept
        shown = subprocess.run(
            [
                sys.executable,
                "-m",
                "binlogsync.cli",
                "status",
                "--config",
                str(s.agents["hub"].config),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": AGENTS},  # this checkout's code, not the venv's
        )
        assert shown.returncode == 0, shown.stderr
        assert "BLOCKED: reseed needed" in shown.stdout, shown.stdout
