"""The agents as separate processes on real MariaDB servers and real sockets."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from binlogsync.hubcommands import fetch_status as fetch
from binlogsync_dev.localsite import wait_until
from binlogsync_dev.sandbox import Sandbox, Server
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.e2e

TRX = (
    "CREATE TABLE trx (id INT AUTO_INCREMENT PRIMARY KEY, NIM VARCHAR(20), "
    "nominal DECIMAL(15,2), flag TINYINT, tgl DATETIME(6))"
)


@pytest.fixture(scope="module")
def target2(sandbox: Sandbox) -> Server:
    return sandbox.start("target2", 3)


def _write(origin: Server, db: str, n: int, start: int = 0) -> None:
    with origin.connect(db) as conn, conn.cursor() as cur:
        for i in range(start, start + n):
            cur.execute(
                "INSERT INTO trx (NIM, nominal, flag, tgl) VALUES (%s, %s, 0, NOW(6))",
                (str(i), i / 7),
            )
            if i % 3 == 0:
                cur.execute(
                    "UPDATE trx SET flag = flag + 1, nominal = nominal * 2 WHERE id = %s",
                    (i // 2 + 1,),
                )
            if i % 10 == 9:
                cur.execute("DELETE FROM trx WHERE id = %s", (i - 5,))


def _status(s) -> dict:  # type: ignore[no-untyped-def]
    return fetch(str(s.agents["hub"].config), timeout=5)


def test_replicates_to_two_targets_with_curve(
    tmp_path: Path, origin: Server, target: Server, target2: Server, dbname: str
) -> None:
    create([origin, target, target2], dbname, TRX)
    with site(tmp_path, origin, [target, target2], dbname, curve=True) as s:
        s.start()
        s.wait_online()
        wait_until(lambda: all(h["online"] for h in _status(s)["hosts"]), 30, 0.05, "online")
        _write(origin, dbname, 300)
        wait_equal(s, dbname, ["trx"])
        status = _status(s)
        assert {t["target"]: t["backlog"] for t in status["targets"]} == {"target": 0, "target2": 0}
        assert all(t["last_error"] is None for t in status["targets"])


def test_offline_target_catches_up_after_store_and_forward(
    tmp_path: Path, origin: Server, target: Server, target2: Server, dbname: str
) -> None:
    create([origin, target, target2], dbname, TRX)
    with site(tmp_path, origin, [target, target2], dbname) as s:
        s.start()
        s.wait_online()
        _write(origin, dbname, 50)
        wait_equal(s, dbname, ["trx"])
        s.stop("target2")
        _write(origin, dbname, 200, start=50)
        wait_until(
            lambda: {t["target"]: t["backlog"] for t in _status(s)["targets"]}["target2"] > 0,
            30,
            0.05,
            "a backlog for the offline target",
        )
        offline = {h["name"]: h["online"] for h in _status(s)["hosts"]}
        assert offline["target2"] is False and offline["target"] is True
        stored = _status(s)["origins"][0]["stored"]
        assert stored > 0  # kept for target2 while it is away
        s.start("target2")
        wait_equal(s, dbname, ["trx"])
        # Once every target has applied them, the hub's log is compacted away.
        wait_until(lambda: _status(s)["origins"][0]["stored"] == 0, 30, 0.1, "compaction")


def test_kill_9_of_every_agent_during_steady_writes_loses_nothing(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, TRX)
    rng = random.Random(11)
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        stop = threading.Event()
        written = {"n": 0}

        def writer() -> None:
            while not stop.is_set():
                _write(origin, dbname, 10, start=written["n"])
                written["n"] += 10

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            for victim in ("origin", "hub", "target", "hub", "origin", "target", "hub"):
                time.sleep(rng.uniform(0.1, 0.8))  # a random moment to crash, not a wait
                s.kill(victim)
                time.sleep(rng.uniform(0.1, 0.5))
                s.start(victim)
        finally:
            stop.set()
            thread.join()
        assert written["n"] > 100
        wait_equal(s, dbname, ["trx"])


def test_apply_error_stops_retries_and_skip_moves_past(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, TRX)
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE only_on_origin (id INT PRIMARY KEY, v INT)")
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        _write(origin, dbname, 10)
        wait_equal(s, dbname, ["trx"])
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO only_on_origin VALUES (1, 1)")
        _write(origin, dbname, 10, start=10)

        def failing() -> dict | None:  # type: ignore[type-arg]
            row = _status(s)["targets"][0]
            return row if row["last_error"] else None

        row = wait_until(failing, 30, 0.1, "the apply error in status")
        assert "only_on_origin" in row["last_error"]
        position = row["error_position"]["gtid"]  # MariaDB: the GTID state names it
        assert row["error_position"]["scheme"] == "gtid" and position
        # The failing transaction is retried, never skipped by itself:
        with target.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM trx")
            assert cur.fetchone()[0] < 20
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "binlogsync.cli",
                "skip",
                "--config",
                str(s.agents["target"].config),
                "--origin",
                "origin",
                "--position",
                position,
                "--reason",
                "table not wanted on the target",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        wait_equal(s, dbname, ["trx"])
        with target.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT reason FROM binlogsync.skipped WHERE gtid=%s AND scheme='gtid'",
                (position,),
            )
            assert cur.fetchone()[0] == "table not wanted on the target"


def test_status_json_and_metrics(
    tmp_path: Path, origin: Server, target: Server, dbname: str
) -> None:
    create([origin, target], dbname, TRX)
    with site(tmp_path, origin, [target], dbname) as s:
        from binlogsync_dev.sandbox import free_port

        port = free_port()
        hub_config = s.agents["hub"].config
        hub_config.write_text(hub_config.read_text() + f"\n[metrics]\nport = {port}\n")
        s.start()
        s.wait_online()
        _write(origin, dbname, 20)
        wait_equal(s, dbname, ["trx"])
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "binlogsync.cli",
                "status",
                "--json",
                "--config",
                str(s.agents["target"].config),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        status = json.loads(result.stdout)
        assert {h["name"] for h in status["hosts"] if h["online"]} == {"origin", "target"}
        assert status["origins"][0]["appended"] >= 20
        text = subprocess.run(
            [sys.executable, "-m", "binlogsync.cli", "status", "--config", str(hub_config)],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        assert "BACKLOG" in text and "online" in text
        body = wait_until(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode(),
            10,
            0.1,
            "metrics",
        )
        assert 'binlogsync_backlog_transactions{origin="origin",target="target"}' in body
        assert "binlogsync_hub_transactions_total" in body


def test_misconfigured_origin_is_refused_at_start_up(
    tmp_path: Path, sandbox: Sandbox, target: Server, dbname: str
) -> None:
    bad = sandbox.start("statement_origin", 50, "--binlog-format=STATEMENT")
    s = site(tmp_path, bad, [target], dbname, hub_port=1)  # refused before it connects
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "binlogsync.cli",
            "client",
            "--config",
            str(s.agents["origin"].config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "binlog_format" in result.stderr and "ROW" in result.stderr


def test_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "client.toml"
    config.write_text('[client]\nname = "x"\nhub = "tcp://127.0.0.1:1"\n[target]\nport = "3306"\n')
    result = subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", "client", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "target.port must be int" in result.stderr
