"""The live demo: throwaway servers, a hub and agents, a workload, store-and-forward, timing.

One origin and two targets (plus a native replica for the timing comparison), CURVE on every
socket. A workload writes the paper's `trx` table while progress is printed; target2's agent
is killed (kill -9) midway and comes back later to catch up from the hub's log; then the
paper's timing table; then a row-for-row check that all three databases are identical.
Everything it starts, it stops. Its folder (--dir, ./demo-run by default) keeps the configs and
logs for reading afterwards; only the servers' datadirs are removed at the end, and the next run
starts afresh.
"""

from __future__ import annotations

import argparse
import random
import shutil
import threading
import time
from pathlib import Path

from ..hubcommands import fetch_status as fetch
from ..statusview import render
from . import paper_timing
from .localsite import LocalSite, wait_until
from .sandbox import Sandbox, Server
from .verify import caught_up, differences, origin_gtid, table_rows

SCHEMA, TABLE = "demo", "trx"


def _say(text: str) -> None:
    print(text, flush=True)


def _count(server: Server) -> int:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{SCHEMA}`.`{TABLE}`")
        return int(cur.fetchone()[0])


def _workload(origin: Server, rows: int, done: threading.Event, stats: dict[str, int]) -> None:
    rng = random.Random(7)
    with origin.connect(SCHEMA) as conn, conn.cursor() as cur:
        for i in range(rows):
            cur.execute(
                f"INSERT INTO `{TABLE}` (NIM, nominal, flag, tgl) VALUES (%s, %s, 0, NOW(6))",
                (str(1800000 + i), rng.randint(1000, 99999) / 100),
            )
            stats["statements"] += 1
            if i % 5 == 4:  # some updates and a few deletes, in multi-statement transactions
                cur.execute("BEGIN")
                cur.execute(
                    f"UPDATE `{TABLE}` SET nominal = nominal * 1.1, flag = 1 WHERE id = %s",
                    (rng.randint(1, i + 1),),
                )
                if i % 25 == 24:
                    cur.execute(f"DELETE FROM `{TABLE}` WHERE id = %s", (rng.randint(1, i),))
                cur.execute("COMMIT")
                stats["statements"] += 2
            time.sleep(0.0015)  # a steady, human-watchable pace (~500 statements/s)
    done.set()


def _progress(origin: Server, targets: list[Server], site: LocalSite) -> str:
    status = fetch(str(site.agents["hub"].config), timeout=2)
    backlog = {t["target"]: t["backlog"] for t in status["targets"]}
    online = {h["name"]: h["online"] for h in status["hosts"]}
    parts = []
    for t in targets:  # targets first, so the origin's count is never behind theirs
        state = "online " if online.get(t.name) else "OFFLINE"
        parts.append(f"{t.name} {_count(t):5} rows ({state}, backlog {backlog.get(t.name, 0):4})")
    return " | ".join([f"origin {_count(origin):5} rows", *parts])


def _fresh(root: Path) -> None:
    """Clear what a previous run left: its servers (still running if it was killed), hub log
    and agent state would otherwise mix with this run's."""
    for servers in (root / "servers", root / "timing" / "servers"):
        if servers.is_dir():
            Sandbox(servers).stop_all()
    for part in ("servers", "site", "timing"):
        shutil.rmtree(root / part, ignore_errors=True)


def run(root: Path, rows: int) -> int:
    _fresh(root)
    box = Sandbox(root / "servers")
    site: LocalSite | None = None
    try:
        _say("== 1. throwaway MariaDB servers (private datadirs, loopback ports)")
        origin = box.start("origin", 1)
        targets = [box.start("target1", 2), box.start("target2", 3)]
        for s in [origin, *targets]:
            _say(f"   {s.name:8} {s.url}  server_id={s.server_id}")
            with s.connect() as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{SCHEMA}`")
                cur.execute(paper_timing.DDL.replace(f"`{paper_timing.SCHEMA}`", f"`{SCHEMA}`"))

        _say("\n== 2. hub and agents (CURVE keys on every socket)")
        site = LocalSite(root / "site", origin, targets, tables=(f"{SCHEMA}.*",), curve=True)
        site.start()
        site.wait_online()
        _say(f"   hub on {site.endpoint}; configs and logs in {site.root}")

        _say(f"\n== 3. live workload: {rows} inserts plus updates and deletes on {SCHEMA}.{TABLE}")
        done, stats = threading.Event(), {"statements": 0}
        writer = threading.Thread(target=_workload, args=(origin, rows, done, stats))
        writer.start()
        stopped = restarted = False
        started = time.monotonic()
        while not done.is_set() or not restarted:
            time.sleep(0.5)
            elapsed = time.monotonic() - started
            if not stopped and stats["statements"] > rows // 3:
                site.kill("target2")
                stopped = True
                _say("   !! target2's agent killed (kill -9); the hub keeps its changes")
            elif stopped and not restarted and stats["statements"] > 2 * rows // 3:
                site.start("target2")
                restarted = True
                _say("   !! target2's agent restarted; it catches up from its checkpoint")
            _say(f"   t={elapsed:5.1f}s  {_progress(origin, targets, site)}")
        writer.join()
        gtid = origin_gtid(origin)
        for t in targets:
            wait_until(lambda t=t: caught_up(t, "origin", gtid), 60, 0.01, f"{t.name} catch-up")
        _say(f"   all caught up: {_progress(origin, targets, site)}")
        _say("\n   binlogsync status:")
        for line in render(fetch(str(site.agents["hub"].config))).splitlines():
            _say(f"   {line}")
        site.stop()
        site = None

        _say("\n== 4. the paper's Table 1, measured here (binlogsync vs native replication)")
        cells = paper_timing.run(
            root / "timing", [100, 200, 400, 600, 1000], runs=1, progress=False
        )
        _say(paper_timing.render(cells, 1))

        _say("\n== 5. final check: are all three databases identical?")
        rows_origin = table_rows(origin, SCHEMA, TABLE)
        ok = True
        for t in targets:
            problem = differences(origin, t, SCHEMA, TABLE)
            ok = ok and not problem
            _say(f"   {t.name}: " + (problem or f"IDENTICAL ({len(rows_origin)} rows)"))
        _say("\nresult: " + ("all databases identical" if ok else "DIFFERENCES FOUND"))
        return 0 if ok else 1
    finally:
        if site is not None:
            site.stop()
        # The datadirs are the bulk; the logs stay for the user to read.
        box.remove_data()
        if (root / "timing" / "servers").is_dir():
            Sandbox(root / "timing" / "servers").remove_data()
        _say(
            f"\nlogs kept in {root.resolve()}: site/*.log (hub and agents), "
            "servers/*/error.log (MariaDB)"
        )


def main(args: argparse.Namespace) -> int:
    # Absolute: the agents' configs name their key files relative to the configs' folder.
    return run(Path(args.dir).resolve(), args.rows)
