"""One process as both origin and target: two-way sync between two servers, without echoes."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlogsync.errors import UnreachableError
from binlogsync.hubcommands import fetch_status as fetch
from binlogsync_dev.localsite import Agent, wait_until
from binlogsync_dev.sandbox import Sandbox, Server, free_port
from binlogsync_dev.verify import caught_up, differences
from sitekit import create

pytestmark = pytest.mark.e2e


def _client(root: Path, name: str, hub: str, server: Server, server_id: int) -> Agent:
    config = root / f"{name}.toml"
    config.write_text(
        f'[client]\nname = "{name}"\nhub = "{hub}"\nheartbeat_interval = 0.5\n'
        f'[origin]\nport = {server.port}\nserver_id = {server_id}\ntables = ["{root.name}.*"]\n'
        f"[target]\nport = {server.port}\n"
    )
    return Agent(name, config, "client", root / f"{name}.log")


def test_two_way_sync_converges_and_does_not_echo(
    tmp_path: Path, sandbox: Sandbox, dbname: str
) -> None:
    a, b = sandbox.start("twoway_a", 61), sandbox.start("twoway_b", 62)
    create(
        [a, b],
        dbname,
        "CREATE TABLE from_a (id INT PRIMARY KEY, v VARCHAR(10))",
        "CREATE TABLE from_b (id INT PRIMARY KEY, v VARCHAR(10))",
    )
    root = tmp_path / dbname
    root.mkdir()
    hub_endpoint = f"tcp://127.0.0.1:{free_port()}"
    hub_config = root / "hub.toml"
    hub_config.write_text(
        f'[hub]\nbind = "{hub_endpoint}"\ndata_dir = "{root / "hub"}"\nheartbeat_interval = 0.5\n'
        f'[[route]]\norigin = "a"\ntargets = ["b"]\ntables = ["{dbname}.*"]\n'
        f'[[route]]\norigin = "b"\ntargets = ["a"]\ntables = ["{dbname}.*"]\n'
    )
    agents = [
        Agent("hub", hub_config, "server", root / "hub.log"),
        _client(root, "a", hub_endpoint, a, 4061),
        _client(root, "b", hub_endpoint, b, 4062),
    ]
    try:
        for agent in agents:
            agent.start()

        def online() -> bool:
            try:
                status = fetch(str(hub_config), timeout=1)
            except UnreachableError:
                # Not listening yet (a loaded machine once took over 5 s to start the hub's
                # Python); a hub that died says why in its log.
                assert agents[0].running, (root / "hub.log").read_text()[-3000:]
                return False
            return all(h["online"] for h in status["hosts"]) and all(
                o["head"] for o in status["origins"]
            )

        wait_until(online, 30, 0.1, "online")
        with a.connect(dbname) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO from_a VALUES (%s, 'a')", [(i,) for i in range(100)])
        with b.connect(dbname) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO from_b VALUES (%s, 'b')", [(i,) for i in range(100)])

        def converged() -> bool:
            return not differences(a, b, dbname, "from_a") and not differences(
                a, b, dbname, "from_b"
            )

        wait_until(converged, 60, 0.05, "both servers equal")

        # No echo: what a applied from b is not captured again as a's change (and back). A
        # fence written on each side after convergence comes later in its binlog than every
        # change applied there; once each fence is applied on the other side, capture has read
        # past all of them, so an echo would have been stored by then.
        fences = {}
        for name, server in (("a", a), ("b", b)):
            with server.connect(dbname) as conn, conn.cursor() as cur:
                cur.execute(f"INSERT INTO from_{name} VALUES (100, 'fence')")
                cur.execute("SELECT @@last_gtid")  # this session's: the fence's own GTID
                fences[name] = str(cur.fetchone()[0])
        wait_until(
            lambda: caught_up(b, "a", fences["a"]) and caught_up(a, "b", fences["b"]),
            30,
            0.05,
            "both fences applied on the other side",
        )
        appended = {o["origin"]: o["appended"] for o in fetch(str(hub_config))["origins"]}
        assert appended == {"a": 101, "b": 101}, appended
        assert converged()
    finally:
        for agent in reversed(agents):
            agent.stop()
        sandbox.stop("twoway_a")
        sandbox.stop("twoway_b")
