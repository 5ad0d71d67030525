"""`./dev airflow`: Airflow over a local sandbox site, for a person to look at.

Starts throwaway MariaDB servers (an origin and two targets), the hub and agents with CURVE,
a small table with rows, then `airflow standalone` with AIRFLOW_HOME under `--dir`
(var/airflow by default, ignored by git), the API on 127.0.0.1:`--port`, the DAGs and
plugins of this repo and the connections (binlogsync_default, spark_default, the sandbox
databases) from environment variables. It prints the URL and the admin password, and keeps
a trickle of writes going so the page has something to show. Ctrl-C (or SIGTERM) stops
everything it started.
"""

from __future__ import annotations

import secrets
import shutil
import threading
import time
from pathlib import Path

from . import airflow_site
from .localsite import LocalSite
from .sandbox import Sandbox

SCHEMA = "shop"
DDL = "CREATE TABLE IF NOT EXISTS shop.orders (id INT PRIMARY KEY, note VARCHAR(100), amount DECIMAL(10,2))"


def _writes(origin_connect, stop: threading.Event) -> None:  # type: ignore[no-untyped-def]
    """One order a second: the page's numbers move."""
    n = 1000
    with origin_connect() as conn, conn.cursor() as cur:
        while not stop.wait(1.0):
            n += 1
            cur.execute("INSERT INTO shop.orders VALUES (%s, 'live', %s)", (n, n % 97))


def run(root: Path, port: int) -> int:
    root = root.resolve()
    if (root / "servers").is_dir():
        Sandbox(root / "servers").stop_all()  # from a run that was killed
    for part in ("servers", "site", "home"):
        shutil.rmtree(root / part, ignore_errors=True)
    box = Sandbox(root / "servers")
    site: LocalSite | None = None
    airflow: airflow_site.Standalone | None = None
    stop = threading.Event()
    try:
        origin = box.start("origin", 1)
        targets = [box.start("target1", 2), box.start("target2", 3)]
        for server in [origin, *targets]:
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
                cur.execute(DDL)
        site = LocalSite(root / "site", origin, targets, tables=(f"{SCHEMA}.*",), curve=True)
        site.start()
        site.wait_online()
        with origin.connect() as conn, conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO shop.orders VALUES (%s, 'seeded', %s)",
                [(i, i % 97) for i in range(1000)],
            )
        writer = threading.Thread(target=_writes, args=(origin.connect, stop), daemon=True)
        writer.start()
        env = airflow_site.site_env(root / "home", site)
        airflow_site.migrate(env)
        password = secrets.token_urlsafe(12)
        airflow = airflow_site.Standalone(env, port, password)
        print(f"starting airflow standalone (AIRFLOW_HOME {root / 'home'}) …", flush=True)
        seconds = airflow.start()
        print(
            f"\nAirflow is up after {seconds:.0f} s: {airflow.url}\n"
            f"  user admin, password {password}\n"
            f"  DAGs: binlog_retention, outbox_retries, reconcile, paper_timing (unpause one and "
            f"trigger it)\n"
            f"  the binlogsync page: {airflow.url}/plugin/binlogsync (Browse → binlogsync)\n"
            f"  site: hub {site.endpoint}, origin {origin.url}, "
            + ", ".join(f"{t.name} {t.url}" for t in targets)
            + f"\n  Airflow's log: {airflow.log}; the agents' logs: {site.root}\n"
            "Ctrl-C stops everything.",
            flush=True,
        )
        while airflow.proc is not None and airflow.proc.poll() is None:
            time.sleep(1)
        print(f"airflow standalone exited; see {airflow.log}")
        return 1
    except KeyboardInterrupt:
        print("\nstopping …", flush=True)
        return 0
    finally:
        stop.set()
        if airflow is not None:
            airflow.stop()
        if site is not None:
            site.stop()
        box.stop_all()
