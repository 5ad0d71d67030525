"""`binlogsync seed` end to end: a target seeded through the hub while the origin takes writes,
then the stream carries on; resumed after kill -9 of the seed and of each agent."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Server
from binlogsync_dev.writer import Writer
from sitekit import create, site, target_sql_mode, wait_equal

pytestmark = pytest.mark.e2e

T = (
    "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(40), "
    "f FLOAT, d DECIMAL(20,6), ts DATETIME(6), s SET('a','b','c'), b BLOB)"
)
U = "CREATE TABLE u (a INT NOT NULL, b VARCHAR(10) NOT NULL, n INT, PRIMARY KEY (a, b))"


def _fill(server: Server, db: str, rows: int) -> None:
    with server.connect(db) as conn, conn.cursor() as cur:
        for start in range(0, rows, 5000):
            cur.executemany(
                "INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    (
                        i,
                        i,
                        f"row {i}",
                        i / 7,
                        f"{i}.{i % 1000000:06d}",
                        f"2024-01-01 00:00:{i % 60:02d}.{i % 1000000:06d}",
                        "a,c" if i % 2 else "",
                        bytes([i % 256]) * (i % 5),
                    )
                    for i in range(start, min(rows, start + 5000))
                ],
            )
        cur.executemany(
            "INSERT INTO u VALUES (%s, %s, %s)", [(i % 50, f"k{i}", i) for i in range(rows // 10)]
        )


def seed_writer(server: Server, db: str, rows: int) -> Writer:
    """Changes on the origin while the seed runs: inserts, updates and deletes anywhere."""

    def turn(cur: Any, rnd: random.Random, n: int) -> None:
        i = rnd.randrange(rows + 2000)
        kind = rnd.random()
        if kind < 0.5:
            cur.execute("UPDATE t SET v = v + 1, note = 'w' WHERE id = %s", (i,))
        elif kind < 0.75:
            cur.execute("INSERT INTO t (id, v) VALUES (%s, 0) ON DUPLICATE KEY UPDATE v = -v", (i,))
        elif kind < 0.95:
            cur.execute("DELETE FROM t WHERE id = %s", (i,))
        else:
            cur.execute("UPDATE u SET n = n + 1 WHERE a = %s", (i % 50,))

    return Writer(server, db, turn)


def seed_command(s: LocalSite, target: Server, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "binlogsync.cli",
        "seed",
        "--config",
        str(s.agents["hub"].config),
        "--origin",
        "origin",
        "--target",
        target.name,
        "--source",
        f"mysql://root@127.0.0.1:{s.origin.port}",
        "--timeout",
        "5",
        *extra,
    ]


def run_seed(s: LocalSite, target: Server, *extra: str) -> dict:  # type: ignore[type-arg]
    done = subprocess.run(
        [*seed_command(s, target, *extra), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{s.logs()}"
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@contextmanager
def _site(
    tmp_path: Path, origin: Server, target: Server, db: str, rows: int, **kwargs: object
) -> Iterator[LocalSite]:
    """Rows on the origin before the pipeline exists; the target has empty tables."""
    create([origin, target], db, T, U)
    _fill(origin, db, rows)
    with site(tmp_path, origin, [target], db, **kwargs) as s:
        s.start()
        s.wait_online()
        yield s


def test_seed_a_new_target_while_writes_go_on(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    with _site(tmp_path, origin, target, dbname, 30_000) as s:
        # Stale rows on the target: the seed replaces the table's rows.
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO t (id, v) VALUES (999999, 1), (5, 5)")
            cur.execute("SELECT NOW(6)")
            (started,) = cur.fetchone()
        with seed_writer(origin, dbname, 30_000) as writer:
            report = run_seed(s, target, "--chunk-rows", "3000")
            wait_until(lambda: writer.done > 200, 30, what="writes during the seed")
        assert {t["table"] for t in report["tables"]} == {f"{dbname}.t", f"{dbname}.u"}
        assert report["resumed"] is False
        seeded = {t["table"]: t for t in report["tables"]}
        assert seeded[f"{dbname}.t"]["rows"] > 25_000  # the writer deletes some
        assert seeded[f"{dbname}.t"]["chunks"] >= 10
        wait_equal(s, dbname, ["t", "u"])
        shown = subprocess.run(
            [sys.executable, "-m", "binlogsync.cli", "status", "--config",
             str(s.agents["hub"].config)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        seed_rows = [line for line in shown.stdout.splitlines() if f"{dbname}.t " in line]
        assert seed_rows and "origin -> target" in seed_rows[0] and "done" in seed_rows[0]
        assert _lanes_used(target, started) == 3  # chunks side by side (target.seed_connections)


def _lanes_used(target: Server, since: object) -> int:
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(DISTINCT lane) FROM binlogsync.lane "
            "WHERE origin = 'origin' AND applied_at >= %s",
            (since,),
        )
        return int(cur.fetchone()[0])


def test_seed_of_an_offline_target_stops_at_once_saying_so(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    with _site(tmp_path, origin, target, dbname, 10) as s:
        s.stop(target.name)
        from binlogsync.hubcommands import fetch_status

        hub = str(s.agents["hub"].config)
        wait_until(
            lambda: (
                not any(h["online"] for h in fetch_status(hub)["hosts"] if h["name"] == target.name)
            ),
            30,
            what="the hub seeing the target offline",
        )
        done = subprocess.run(seed_command(s, target), capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert "not connected to the hub" in done.stderr, done.stderr


def test_seed_adds_one_table_to_a_running_pipeline(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    with _site(tmp_path, origin, target, dbname, 5_000) as s:
        # The stream runs: u's rows written from now on arrive; t's old rows are missing.
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO u VALUES (1000, 'new', 1)")
        with seed_writer(origin, dbname, 5_000) as writer:
            report = run_seed(s, target, "--tables", f"{dbname}.t", "--chunk-rows", "1000")
            wait_until(lambda: writer.done > 100, 30, what="writes during the seed")
        assert [t["table"] for t in report["tables"]] == [f"{dbname}.t"]
        wait_equal(s, dbname, ["t"])
        with (
            origin.connect(dbname) as o,
            o.cursor() as oc,
            target.connect(dbname) as t,
            t.cursor() as tc,
        ):
            oc.execute("SELECT * FROM u WHERE a = 1000")
            tc.execute("SELECT * FROM u WHERE a = 1000")
            assert tc.fetchall() == oc.fetchall()


def test_seed_resumes_after_kill_9_of_the_seed(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    with _site(tmp_path, origin, target, dbname, 40_000) as s:
        with seed_writer(origin, dbname, 40_000):
            first = subprocess.Popen(
                [*seed_command(s, target, "--chunk-rows", "2000", "--max-rows-per-second", "8000")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait_until(lambda: _seeded_rows(s, dbname) >= 8_000, 60, what="part of the seed")
            finally:
                first.kill()
                first.wait()
            report = run_seed(s, target, "--chunk-rows", "5000")
        table = {t["table"]: t for t in report["tables"]}[f"{dbname}.t"]
        assert report["resumed"] is True
        assert table["resumed_at"] >= 8_000  # went on, did not start over
        wait_equal(s, dbname, ["t", "u"])


K = "CREATE TABLE k (name VARCHAR(40) NOT NULL PRIMARY KEY, n INT NOT NULL)"  # a text key
E = "CREATE TABLE e (id INT PRIMARY KEY)"  # stays empty


def test_parallel_seed_copies_every_table_exactly_and_hands_over_once(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    """--parallel 3: key ranges of every table read by three reader processes at once, sent
    in key order; with writes going on, every table ends equal to the origin's (the changes
    made meanwhile replayed over the chunks exactly once: nothing lost, nothing stale)."""
    create([origin, target], dbname, T, U, K, E)
    _fill(origin, dbname, 30_000)
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO k VALUES (%s, %s)",
            [(f"Name-{i:05d}-{'x' * (i % 9)}", i) for i in range(4000)],
        )
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        # Stale rows on the target: the seed replaces each table's rows.
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO t (id, v) VALUES (999999, 1), (5, 5)")
            cur.execute("INSERT INTO e VALUES (1)")
        with seed_writer(origin, dbname, 30_000) as writer:
            report = run_seed(s, target, "--parallel", "3", "--chunk-rows", "1000")
            wait_until(lambda: writer.done > 200, 30, what="writes during the seed")
            with origin.connect(dbname) as conn, conn.cursor() as cur:
                cur.execute("UPDATE k SET n = n + 1 WHERE n % 7 = 0")
        assert report["parallel"] == 3
        seeded = {t["table"]: t for t in report["tables"]}
        assert set(seeded) == {f"{dbname}.{n}" for n in "tuke"}
        assert seeded[f"{dbname}.t"]["chunks"] >= 25 and seeded[f"{dbname}.k"]["chunks"] >= 4
        assert seeded[f"{dbname}.e"]["rows"] == 0
        wait_equal(s, dbname, ["t", "u", "k", "e"])


def _children(pid: int) -> set[int]:
    """Processes whose parent is `pid` (from /proc)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_parallel_seed_resumes_after_kill_9_and_leaves_no_reader_behind(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    with _site(tmp_path, origin, target, dbname, 40_000) as s:
        with seed_writer(origin, dbname, 40_000):
            first = subprocess.Popen(
                seed_command(
                    s, target, "--parallel", "3", "--chunk-rows", "2000",
                    "--max-rows-per-second", "8000",
                ),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                wait_until(lambda: len(_children(first.pid)) >= 3, 60, what="the readers")
                readers = _children(first.pid)
                wait_until(lambda: _seeded_rows(s, dbname) >= 8_000, 60, what="part of the seed")
            finally:
                first.kill()
                first.wait()
            # Each reader ends when its pipe to the killed seed closes.
            wait_until(lambda: not any(_alive(p) for p in readers), 30, what="the readers ending")
            report = run_seed(s, target, "--parallel", "3", "--chunk-rows", "5000")
        table = {t["table"]: t for t in report["tables"]}[f"{dbname}.t"]
        assert report["resumed"] is True
        assert table["resumed_at"] >= 8_000  # went on, did not start over
        wait_equal(s, dbname, ["t", "u"])


def _seeded_rows(s: LocalSite, db: str) -> int:
    from binlogsync.hubcommands import fetch_status

    # 30 s, not 5: the hub's log commits with fsync, and in a full suite beside the Docker
    # builds of the deploy tests one hub did not answer for 6.7 s at the seed's start.
    status = fetch_status(str(s.agents["hub"].config), timeout=30)
    return sum(r["rows"] for r in status["seeds"] if r["table"] == f"{db}.t")


@contextmanager
def _seeding(command: list[str]) -> Iterator[subprocess.Popen[str]]:
    """The seed as a process, killed if it still runs on the way out and its pipes closed
    (left open by a failed test, they were collected, with a ResourceWarning that failed
    whichever test ran next)."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as seeding:
        try:
            yield seeding
        finally:
            if seeding.poll() is None:
                seeding.kill()


@pytest.mark.parametrize("victim", ["target", "hub", "origin"])
def test_seed_survives_kill_9_of_an_agent(
    tmp_path: Path, origin: Server, target: Server, dbname: str, victim: str
) -> None:
    with _site(tmp_path, origin, target, dbname, 40_000) as s:
        with seed_writer(origin, dbname, 40_000):
            command = seed_command(
                s, target, "--chunk-rows", "2000", "--max-rows-per-second", "10000",
                "--parallel", "2", "--json",
            )  # fmt: skip
            with _seeding(command) as seeding:
                wait_until(lambda: _seeded_rows(s, dbname) >= 6_000, 60, what="part of the seed")
                name = target.name if victim == "target" else victim
                s.kill(name)
                s.start(name)
                out, err = seeding.communicate(timeout=300)
            assert seeding.returncode == 0, f"{out}\n{err}\n{s.logs()}"
        report = json.loads(out)
        assert {t["table"]: t for t in report["tables"]}[f"{dbname}.t"]["rows"] > 35_000
        wait_equal(s, dbname, ["t", "u"], timeout=120)


def test_seed_survives_kill_9_of_the_target_while_its_lanes_wait_to_commit(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    """The target agent dies with chunks whose rows its lanes have written and whose commits
    wait (another session holds the checkpoint row): nothing of them stays, the hub sends them
    again to the restarted agent, and the copy is exact. (No writes meanwhile: a stream
    delivery between chunks would take the main connection to the locked row first.)"""
    with _site(tmp_path, origin, target, dbname, 30_000) as s:
        command = seed_command(
            s, target, "--chunk-rows", "2000", "--max-rows-per-second", "8000", "--json"
        )
        with _seeding(command) as seeding:
            wait_until(lambda: _seeded_rows(s, dbname) >= 4_000, 60, what="part of the seed")
            with target.connect() as locker, locker.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute(
                    "SELECT * FROM binlogsync.checkpoint WHERE origin = 'origin' FOR UPDATE"
                )
                wait_until(lambda: _lanes_waiting(target) >= 2, 60, what="two lanes waiting")
                s.kill(target.name)
                locker.rollback()
            s.start(target.name)
            out, err = seeding.communicate(timeout=300)
        assert seeding.returncode == 0, f"{out}\n{err}\n{s.logs()}"
        wait_equal(s, dbname, ["t", "u"], timeout=120)


def _lanes_waiting(target: Server) -> int:
    """Sessions reading the checkpoint under its lock after their rows (Target.repair_in_lane)."""
    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
            "WHERE INFO LIKE 'SELECT origin, file%%FOR UPDATE'"
        )
        return int(cur.fetchone()[0])


def test_seed_creates_a_table_the_target_lacks_when_schema_changes_are_followed(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin], dbname, T, U)
    create([target], dbname)
    _fill(origin, dbname, 3_000)
    kw = {"target_extra": 'apply_schema_changes = "additive"'}
    with site(tmp_path, origin, [target], dbname, **kw) as s:  # type: ignore[arg-type]
        s.start()
        s.wait_online()
        run_seed(s, target)
        wait_equal(s, dbname, ["t", "u"])


def test_seed_into_a_missing_table_stops_with_its_name(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin], dbname, T, U)
    create([target], dbname, U)  # no t, and schema changes are not followed (the default)
    _fill(origin, dbname, 100)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        done = subprocess.run(
            seed_command(s, target, "--give-up", "20"), capture_output=True, text=True, timeout=120
        )
        assert done.returncode != 0
        assert f"{dbname}.t" in done.stderr or f"`{dbname}`.`t`" in done.stderr, done.stderr
        assert "seed" in done.stderr


def test_reseed_lifts_a_target_that_fell_behind_the_hub_and_the_binlog(
    tmp_path: Path, sandbox: Any, target: Server, dbname: str
) -> None:
    """A target whose checkpoint neither the hub's log nor the origin's binlog holds any more
    is blocked ("reseed needed"); a seed of every table resets it and it is in sync again."""
    origin = sandbox.servers.get("origin-reseed") or sandbox.start("origin-reseed", 41)
    create([origin, target], dbname, T, U)
    _fill(origin, dbname, 5_000)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        with origin.connect() as conn, conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            first_file = cur.fetchall()[0][0]
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("SHOW MASTER STATUS")
            current = cur.fetchone()[0]
            cur.execute(f"PURGE BINARY LOGS TO '{current}'")
        s.stop(target.name)
        with target.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "REPLACE INTO binlogsync.checkpoint (origin, pos_key, file, `offset`) "
                "VALUES ('origin', %s, %s, 4)",
                ((int(first_file.rsplit(".", 1)[1]) << 40) | 4, first_file),
            )
        s.start(target.name)
        hub = str(s.agents["hub"].config)
        from binlogsync.hubcommands import fetch_status

        def blocked() -> str:
            rows = [t for t in fetch_status(hub)["targets"] if t["target"] == target.name]
            return str(rows[0]["blocked"] or "")

        wait_until(lambda: "reseed needed" in blocked(), 30, what="the target blocked")
        partial = subprocess.run(
            seed_command(s, target, "--tables", f"{dbname}.t"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert partial.returncode != 0 and "without --tables" in partial.stderr, partial.stderr
        with seed_writer(origin, dbname, 5_000):
            run_seed(s, target, "--chunk-rows", "1000")
        wait_until(lambda: blocked() == "", 30, what="the block lifted")
        wait_equal(s, dbname, ["t", "u"])


def test_seed_copies_zero_partial_and_invalid_dates_exactly(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    """As they are, in chunks of two rows whose paging key holds such dates (the next chunk
    starts after a zero date), onto a target whose own sql_mode forbids them."""
    zero_table = (
        "CREATE TABLE z (d DATE NOT NULL, n INT NOT NULL, dtm DATETIME(6), ts TIMESTAMP NULL, "
        "PRIMARY KEY (d, n))"
    )
    create([origin, target], dbname, zero_table)
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute(
            "INSERT INTO z VALUES ('0000-00-00', 1, '0000-00-00', '0000-00-00'), "
            "('0000-00-00', 2, '2024-00-10 10:00:00.5', NULL), "
            "('0000-01-00', 1, NULL, '0000-00-00'), ('2004-04-31', 1, '2004-02-30', NULL), "
            "('2024-00-10', 1, '2024-02-29 12:00:00', '2024-02-29 12:00:00'), "
            "('2024-05-00', 7, '0000-00-00 00:00:00.000001', '1970-01-01 00:00:01')"
        )
    with target_sql_mode(target, "TRADITIONAL"), site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        report = run_seed(s, target, "--chunk-rows", "2")
        assert report["tables"][0]["rows"] == 6 and report["tables"][0]["chunks"] >= 3
        with origin.connect(dbname) as conn, conn.cursor() as cur:  # and the stream goes on
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("UPDATE z SET ts = '0000-00-00' WHERE n = 7")
        wait_equal(s, dbname, ["z"])
    with target.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("SELECT CAST(d AS CHAR), n, CAST(dtm AS CHAR) FROM z ORDER BY d, n")
        assert [r[0] for r in cur.fetchall()] == [
            "0000-00-00", "0000-00-00", "0000-01-00", "2004-04-31", "2024-00-10", "2024-05-00"
        ]  # fmt: skip
