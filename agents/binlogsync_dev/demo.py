"""The live demo: throwaway servers, a hub and agents, a workload, store-and-forward, Airflow
running the lifecycle, timing.

One origin and two targets (plus a native replica for the timing comparison), CURVE on every
socket. A workload writes the paper's `trx` table while progress is printed; target2's agent
is killed (kill -9) midway and comes back later to catch up from the hub's log; then Airflow
runs each of the four DAGs once against the site (`dag.test()`): outbox_retries,
binlog_retention, reconcile (Spark), and paper_timing (the paper's Table 1, beside native
replication, with its plot); then a row-for-row check that all three databases are identical.
Everything it starts, it stops. Its folder (--dir, ./demo-run by default) keeps the configs and
logs for reading afterwards; only the servers' datadirs are removed at the end, and the next run
starts afresh.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import threading
import time
from pathlib import Path

from binlogsync.hubcommands import fetch_status as fetch
from binlogsync.statusview import render

from . import airflow_site, paper_timing
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


def _dag_line(result: airflow_site.DagResult, state: Path) -> str:
    """One line per DAG run: its outcome and what it found."""
    head = f"{result.dag_id:17} {result.state:8} {result.seconds:6.1f} s"
    if result.dag_id == "outbox_retries":
        data = json.loads((state / "last-outbox.json").read_text())
        online = sum(1 for h in data["hosts"] if h["online"])
        waiting = sum(b["transactions"] for b in data["backlogs"])
        return f"{head}  {online}/{len(data['hosts'])} hosts online, {waiting} tx waiting, " + (
            f"{len(data['alerts'])} alert(s)"
        )
    if result.dag_id == "binlog_retention":
        data = json.loads((state / "last-retention.json").read_text())
        parts = []
        for origin, r in data["origins"].items():
            if "refused" in r:
                parts.append(f"{origin}: refused")
                continue
            kept = sum(1 for f in r["files"] if f["status"] == "kept")
            parts.append(f"{origin}: purged {len(r['purged'])} file(s), kept {kept}")
        return f"{head}  " + "; ".join(parts)
    if result.dag_id == "reconcile":
        found = sorted((state / "reconcile").glob("*/last-reconcile.json"))
        parts = []
        for p in found:
            d = json.loads(p.read_text())
            spark = _spark_of(Path(d.get("out", "")))
            parts.append(
                f"{p.parent.name}: {d['state']} ({d['differing_rows']} rows differ; Spark "
                f"application {spark.get('app_id', '?')} on {spark.get('master', '?')})"
            )
        return f"{head}  " + "; ".join(parts)
    runs = sorted((state / "timing").glob("timing-*.png"))
    return f"{head}  plot {runs[-1]}" if runs else head


def _spark_of(out: Path) -> dict[str, str]:
    try:
        return dict(json.loads((out / "summary.json").read_text()).get("spark", {}))
    except (OSError, ValueError):
        return {}


def _fresh(root: Path) -> None:
    """Clear what a previous run left: its servers (still running if it was killed), hub log
    and agent state would otherwise mix with this run's."""
    for servers in (root / "servers", root / "timing" / "servers"):
        if servers.is_dir():
            Sandbox(servers).stop_all()
    for part in ("servers", "site", "timing", "airflow"):
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

        _say("\n== 4. Airflow runs the lifecycle (each DAG once, dag.test(), against this site)")
        env = airflow_site.site_env(root / "airflow", site)
        airflow_site.migrate(env)
        outcomes = [
            airflow_site.dag_test(env, "outbox_retries"),
            airflow_site.dag_test(env, "binlog_retention"),
            airflow_site.dag_test(env, "reconcile", {"tables": [f"{SCHEMA}.*"]}),
        ]
        for outcome in outcomes:
            _say(f"   {_dag_line(outcome, root / 'airflow' / 'state')}")
        site.stop()  # the timing runs alone, on its own servers
        site = None
        # Medians of 3 runs per cell, as `bench paper` measures it: one run of a 100-statement
        # cell moved by a few milliseconds of one wake-up (1.06-1.20x across demos).
        timed = airflow_site.dag_test(env, "paper_timing", {"runs": 3})
        outcomes.append(timed)
        _say(f"   {_dag_line(timed, root / 'airflow' / 'state')}")
        newest = sorted((root / "airflow" / "state" / "timing").glob("timing-*.json"))
        if newest:
            data = json.loads(newest[-1].read_text())
            cells = [paper_timing.Cell(**c) for c in data["cells"]]
            _say("\n   the paper's Table 1, measured here (binlogsync vs native replication):")
            _say(paper_timing.render(cells, data["runs"]))

        _say("\n== 5. final check: are all three databases identical?")
        rows_origin = table_rows(origin, SCHEMA, TABLE)
        ok = True
        for t in targets:
            problem = differences(origin, t, SCHEMA, TABLE)
            ok = ok and not problem
            _say(f"   {t.name}: " + (problem or f"IDENTICAL ({len(rows_origin)} rows)"))
        _say("\nresult: " + ("all databases identical" if ok else "DIFFERENCES FOUND"))
        failed = [o.dag_id for o in outcomes if not o.ok]
        if failed:
            _say(f"Airflow: {', '.join(failed)} failed (task logs in {root / 'airflow'})")
        return 0 if ok and not failed else 1
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
