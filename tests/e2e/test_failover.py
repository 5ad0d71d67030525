"""Origin failover: the origin's MariaDB dies for good (kill -9) under writes, its native
replica is promoted, and the origin agent moves capture there by GTID; then the same by hand
(the config's host changed to the new primary, the agent restarted).

The pair: a primary and a replica (`log_slave_updates=ON`, `gtid_strict_mode=ON`,
`read_only=ON` until promoted), the origin agent configured with the primary as
`origin.host/port` and the replica as its one `candidates` entry. The origin agent is also
killed with -9 while no server qualifies (during the failover) and restarted; it must neither
read the replica before its promotion nor lose or repeat anything after it. The target counts
every row the applier writes (a trigger), so "nothing applied twice" is counted, not inferred
from equal rows; and the target ends equal (rows and CHECKSUM TABLE) to the new primary.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlogsync.engines.mariadb import checkpoint as checkpoints
from binlogsync.hubcommands import fetch_status
from binlogsync.position import Position, missing_from
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Sandbox, Server
from binlogsync_dev.verify import differences, origin_gtid
from binlogsync_dev.writer import Writer
from sitekit import create, site

pytestmark = pytest.mark.e2e

TABLE = "CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL, pad VARCHAR(40))"
PAIR_FLAGS = ("--gtid-strict-mode=ON", "--log-slave-updates=ON")


@pytest.fixture
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, Server, Server]]:
    """A primary and its native GTID replica, of this test alone (the primary is killed)."""
    box = Sandbox(tmp_path_factory.mktemp("failover"), max_binlog_size="64K")
    try:
        primary = box.start("primary", 11, *PAIR_FLAGS)
        replica = box.start("replica", 12, *PAIR_FLAGS, "--read-only=ON")
        replica.sql("RESET MASTER")  # its own set-up writes (users) would diverge
        box.replicate(primary, replica)
        yield box, primary, replica
    finally:
        box.stop_all()


def _replicated(primary: Server, replica: Server) -> None:
    gtid = origin_gtid(primary)
    [(done,)] = replica.sql(f"SELECT MASTER_GTID_WAIT('{gtid}', 30)")
    assert done == 0, f"the replica did not reach {gtid}"


def _io_pos(cur: Any) -> str:
    """The replica's Gtid_IO_Pos: how far its IO thread received its primary's binlog."""
    cur.execute("SHOW SLAVE STATUS")
    names = [d[0] for d in cur.description]
    return str(dict(zip(names, cur.fetchone(), strict=True))["Gtid_IO_Pos"])


def _received(replica: Server) -> str:
    with replica.connect() as conn, conn.cursor() as cur:
        return _io_pos(cur)


def _hub_head(s: LocalSite) -> str:
    """The GTID state the hub holds of the origin ("" before it holds any)."""
    status = fetch_status(str(s.agents["hub"].config), timeout=5)
    head = status["origins"][0]["head"] if status.get("origins") else None
    return (Position.from_json(head).gtid or "") if head else ""


def _settled(s: LocalSite, replica: Server) -> tuple[str, str]:
    """The hub's head and the replica's received position once neither has moved for 0.5 s
    (the primary frozen: each drains what it had sent)."""
    seen: list[tuple[str, str]] = []

    def still() -> bool:
        seen.append((_hub_head(s), _received(replica)))
        return len(seen) >= 10 and len(set(seen[-10:])) == 1

    wait_until(still, 30, 0.05, "the hub and the replica settled on the frozen primary")
    return seen[-1]


def _kill_once_the_replica_holds_the_hubs_head(
    s: LocalSite, primary: Server, replica: Server
) -> None:
    """kill -9 of the primary while its writer runs, at a moment the promoted replica can
    take over from. Asynchronous replication can lose what the primary committed last, and
    the origin agent, reading the same binlog, can be ahead of the replica's IO thread: then
    the hub holds a GTID the replica never received, and the agent rightly refuses to move
    (docs/operating.md, "What asynchronous replication can lose"; a suite run met this: the
    hub held 0-11-309, which the replica never received). So the primary is frozen (SIGSTOP: its
    writer's transaction stays in flight), both readers drain what it had sent, and it is
    killed (SIGKILL ends a stopped process too) only if the replica received at least what
    the hub holds; else it runs on until the hub moves, and again."""
    for attempt in range(1, 21):
        os.kill(primary.pid, signal.SIGSTOP)
        head, received = _settled(s, replica)
        if not missing_from(received, head):  # the agent's own check of a candidate
            os.kill(primary.pid, signal.SIGKILL)
            print(f"primary killed at freeze {attempt}: hub head {head}, replica {received}")
            return
        print(f"freeze {attempt}: the hub holds {head}, the replica received {received}")
        os.kill(primary.pid, signal.SIGCONT)
        wait_until(lambda: _hub_head(s) != head, 30, 0.05, "the hub moving on")  # noqa: B023
    raise AssertionError("the replica never held the hub's head while the primary was frozen")


def _promote(replica: Server) -> None:
    """What an operator (or an orchestrator) does: apply what the replica received, stop
    following the dead primary, and make it writable."""
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute("STOP SLAVE IO_THREAD")
        received = _io_pos(cur)
        cur.execute("SELECT MASTER_GTID_WAIT(%s, 30)", (received,))
        assert cur.fetchone()[0] == 0
        cur.execute("STOP SLAVE")
        cur.execute("RESET SLAVE ALL")
        cur.execute("SET GLOBAL read_only = 0")


def rows_writer(server: Server, db: str, start: int, killed: bool = False) -> Writer:
    """Inserts rows start, start + 1, … on `server`, one transaction each, at a steady pace;
    `killed`: the test kills the server under it (the writer's error is expected)."""

    def turn(cur: Any, rng: random.Random, n: int) -> None:
        cur.execute("INSERT INTO t VALUES (%s, %s, REPEAT('w', 30))", (start + n, (start + n) % 97))

    return Writer(server, db, turn, pause=0.002, expect_error=killed)


def _count(server: Server, db: str, where: str = "") -> int:
    return int(server.sql(f"SELECT COUNT(*) FROM t {where}", db=db)[0][0])


def _log(s: LocalSite, name: str) -> str:
    return s.agents[name].log.read_text(errors="replace")


def _checkpoint(target: Server) -> Position | None:
    with target.connect() as conn, conn.cursor() as cur:
        found = (checkpoints.read_all(cur) or {}).get("origin")
    return found.position if found else None


def test_origin_moves_to_the_promoted_replica_exactly_once(
    tmp_path: Path, pair: tuple[Sandbox, Server, Server], target: Server, dbname: str
) -> None:
    box, primary, replica = pair
    create([primary, target], dbname, TABLE)  # the replica gets it by replication
    with target.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE audit (seq INT AUTO_INCREMENT PRIMARY KEY, id INT)")
        cur.execute(
            "CREATE TRIGGER t_audit BEFORE INSERT ON t FOR EACH ROW "
            "INSERT INTO audit (id) VALUES (NEW.id)"
        )
    _replicated(primary, replica)
    candidates = f'candidates = ["127.0.0.1:{replica.port}"]'
    with site(tmp_path, primary, [target], dbname, origin_extra=candidates) as s:
        s.start()
        s.wait_online()

        # Writes run on the primary; its mariadbd is killed for good in the middle of them.
        with rows_writer(primary, dbname, 0, killed=True) as first:
            wait_until(lambda: _count(target, dbname) > 300, 60, 0.02, "rows on the target")
            _kill_once_the_replica_holds_the_hubs_head(s, primary, replica)
            first.thread.join(30)
        assert first.error is not None  # the writer lost its server
        box.stop("primary")  # reaps it; it never comes back

        # No server qualifies: the primary is gone, the replica still follows it (read-only).
        refused = "no origin server can be captured"
        wait_until(lambda: refused in _log(s, "origin"), 60, 0.1, "the refused candidates")
        assert "running replica" in _log(s, "origin") or "read_only" in _log(s, "origin")

        # kill -9 of the origin agent during the failover, and a start while the config's
        # host is still the dead primary.
        s.kill("origin")
        seen = _log(s, "origin").count(refused)
        s.start("origin")
        wait_until(lambda: _log(s, "origin").count(refused) > seen, 60, 0.1, "the restarted agent")
        assert "capture moves" not in _log(s, "origin")

        _promote(replica)
        with rows_writer(replica, dbname, 1_000_000) as second:

            def arrived() -> bool:
                assert second.error is None, f"the writer on the new primary: {second.error!r}"
                return _count(target, dbname, "WHERE id >= 1000000") > 200

            try:
                wait_until(arrived, 90, 0.05, "rows written on the new primary reaching the target")
            except TimeoutError as exc:
                written = _count(replica, dbname, "WHERE id >= 1000000")
                status = fetch_status(str(s.agents["hub"].config), timeout=5)
                raise AssertionError(
                    f"{exc}: {written} written there ({second.done} turns), "
                    f"{_count(target, dbname, 'WHERE id >= 1000000')} on the target; "
                    f"the replica's @@gtid_binlog_pos {origin_gtid(replica)}; "
                    f"the hub's status {status}\n{s.logs()}"
                ) from None
        assert second.error is None, second.error
        assert f"to 127.0.0.1:{replica.port}" in _log(s, "origin")

        # The target ends equal to the new primary: every row once, none twice.
        final = Position.of_state(origin_gtid(replica))
        try:
            wait_until(
                lambda: (_checkpoint(target) or Position.of_state("")).key >= final.key,
                90,
                0.05,
                f"the target's checkpoint reaching {final}",
            )
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{s.logs()}") from None
        reached = _checkpoint(target)
        assert reached is not None and reached.by_gtid and reached.gtid == final.gtid
        problem = differences(replica, target, dbname, "t")
        assert not problem, problem
        [(_t, replica_sum)] = replica.sql("CHECKSUM TABLE t", db=dbname)
        [(_t, target_sum)] = target.sql("CHECKSUM TABLE t", db=dbname)
        assert replica_sum == target_sum
        rows = _count(replica, dbname)
        [(applied, distinct)] = target.sql(
            "SELECT COUNT(*), COUNT(DISTINCT id) FROM audit", db=dbname
        )
        assert (applied, distinct) == (rows, rows)

        # status shows GTIDs: the hub's head is the new primary's state.
        status = fetch_status(str(s.agents["hub"].config), timeout=5)
        head = Position.from_json(status["origins"][0]["head"])
        assert head.by_gtid and head.gtid == final.gtid and "-12-" in final.gtid

        # By hand: the config names the new primary (no candidates), the agent restarts.
        s.stop("origin")
        replica.sql("INSERT INTO t VALUES (2000000, 1, 'while the agent is down')", db=dbname)
        s.origin, s.origin_extra = replica, ""
        s._write_clients()
        assert f"port = {replica.port}" in s.agents["origin"].config.read_text()
        assert "candidates" not in s.agents["origin"].config.read_text()
        s.start("origin")
        replica.sql("INSERT INTO t VALUES (2000001, 1, 'after')", db=dbname)
        last = Position.of_state(origin_gtid(replica))
        wait_until(
            lambda: (_checkpoint(target) or final).key >= last.key, 60, 0.05, "the by-hand move"
        )
        problem = differences(replica, target, dbname, "t")
        assert not problem, problem
        rows = _count(replica, dbname)
        [(applied, distinct)] = target.sql(
            "SELECT COUNT(*), COUNT(DISTINCT id) FROM audit", db=dbname
        )
        assert (applied, distinct) == (rows, rows)
