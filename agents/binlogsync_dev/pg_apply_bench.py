"""`./dev bench apply --target-kind postgresql`: catching up a backlog into PostgreSQL,
beside pg_chameleon replicating the same binlog from the same origin.

One throwaway MariaDB origin and one private PostgreSQL server. The table (BIGINT key, INT,
VARCHAR, DECIMAL, DATETIME(6)) is created on the origin; binlogsync's PostgreSQL target is
seeded empty (which creates the table in PostgreSQL) and pg_chameleon's replica is initialised
(`init_replica`, which records its binlog position), then both stop. The backlog is written:

    single   N single-row INSERT transactions (default 200,000)
    batch    M 100-row INSERT transactions (default 2,000)

Then each catches up alone, timed from its start until the target holds every row (a row per
backlog, timed from where the one before ended, and their sum: binlogsync's target groups
transactions across the boundary, so only the sum is exact):
binlogsync's target agent (the hub already holds the backlog: capture ran meanwhile) until its
checkpoint is the origin's last GTID; pg_chameleon's `start_replica` (reading the binlog
itself, as it does) until the PostgreSQL table has every row. rows/s is rows / seconds.

pg_chameleon runs from its own venv (binlogsync-pg_chameleon-venv in the system's temporary
folder, made with pip when missing; as nobody when the bench runs as root, since pg_chameleon
refuses root); if it cannot be installed or run, the table says why in its place.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from binlogsync.engines.postgresql import checkpoints

from .localsite import LocalSite, wait_until
from .paper_timing import machine
from .pg_sandbox import PgServer
from .sandbox import Sandbox, Server
from .verify import origin_gtid

SCHEMA = "pgbench"
DDL = (
    "CREATE TABLE {t} (id BIGINT PRIMARY KEY, k INT NOT NULL, name VARCHAR(64), "
    "amount DECIMAL(12,2), created DATETIME(6))"
)


@dataclass
class Result:
    case: str
    transactions: int
    rows: int
    ours_seconds: float
    chameleon_seconds: float | None
    chameleon_note: str = ""

    @property
    def ours_rows_per_second(self) -> float:
        return self.rows / self.ours_seconds

    @property
    def chameleon_rows_per_second(self) -> float | None:
        return self.rows / self.chameleon_seconds if self.chameleon_seconds else None


def _write(origin: Server, table: str, transactions: int, rows: int) -> None:
    sql = f"INSERT INTO {SCHEMA}.{table} VALUES " + ", ".join(["(%s, %s, %s, %s, %s)"] * rows)
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("SET autocommit = 1")
        n = 0
        for _ in range(transactions):
            values: list[object] = []
            for _ in range(rows):
                n += 1
                values += [n, n % 1000, f"customer {n}", n / 100, "2026-01-01 00:00:00.000001"]
            cur.execute(sql, values)


def _chameleon(venv: Path) -> tuple[Path | None, str]:
    binary = venv / "bin" / "chameleon"
    if binary.exists():
        return binary, ""
    # The system's Python when there is one: as root, pg_chameleon runs as nobody, who may not
    # reach this interpreter's installation (e.g. under /root).
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    done = subprocess.run([python, "-m", "venv", str(venv)], capture_output=True, text=True)
    if done.returncode == 0:
        done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "pg_chameleon"],
                              capture_output=True, text=True, timeout=900)  # fmt: skip
    if done.returncode or not binary.exists():
        return None, f"pg_chameleon did not install: {done.stderr.strip()[-300:]}"
    return binary, ""


class Chameleon:
    """pg_chameleon with a config of its own under `home` (its HOME: it keeps everything under
    ~/.pg_chameleon)."""

    def __init__(self, binary: Path, origin: Server, pg: PgServer, tables: list[str]):
        # Its own folder in the system's temporary one: reachable by nobody (see below).
        home = Path(tempfile.mkdtemp(prefix="bls-chameleon-"))
        self.binary, self.home = binary, home
        config = home / ".pg_chameleon" / "configuration"
        config.mkdir(parents=True, exist_ok=True)
        for sub in ("pid", "logs"):
            (home / ".pg_chameleon" / sub).mkdir(parents=True, exist_ok=True)
        text = {
            "pid_dir": str(home / ".pg_chameleon" / "pid"),
            "log_dir": str(home / ".pg_chameleon" / "logs"),
            "log_dest": "file", "log_level": "info", "log_days_keep": 1,
            "rollbar_key": "", "rollbar_env": "", "type_override": {},
            # A password pg_chameleon never needs (trust), but not empty: it writes the libpq
            # string unquoted, and "password= port=N" would take "port=N" as the password.
            "pg_conn": {"host": "127.0.0.1", "port": str(pg.port), "user": pg.user,
                        "password": "unused", "database": "postgres", "charset": "utf8"},
            "sources": {"mysql": {
                "db_conn": {"host": "127.0.0.1", "port": str(origin.port), "user": origin.user,
                            "password": origin.password, "charset": "utf8",
                            "connect_timeout": 10},
                "schema_mappings": {SCHEMA: "chameleon"},
                "limit_tables": [f"{SCHEMA}.{t}" for t in tables], "skip_tables": [],
                "grant_select_to": [], "lock_timeout": "120s", "my_server_id": 4242,
                "replica_batch_size": 10000, "replay_max_rows": 10000,
                "batch_retention": "1 day", "copy_max_memory": "300M", "copy_mode": "file",
                "out_dir": str(home), "sleep_loop": 1, "on_error_replay": "continue",
                "on_error_read": "continue", "auto_maintenance": "disabled",
                "gtid_enable": False, "type": "mysql", "skip_events": {},
                "keep_existing_schema": False, "net_read_timeout": 600,
            }},
        }  # fmt: skip
        (config / "bench.yml").write_text(json.dumps(text, indent=1))  # JSON is YAML
        self.proc: subprocess.Popen[bytes] | None = None
        # pg_chameleon refuses to run as root: as root, it runs as nobody in its own folder.
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            self.prefix = ["runuser", "-u", "nobody", "--", "env", f"HOME={home}"]
            subprocess.run(["chown", "-R", "nobody", str(home)], check=True)

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.prefix, str(self.binary), *args, "--config", "bench"],
            env={**os.environ, "HOME": str(self.home)}, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    def init(self) -> str:
        for step in (("create_replica_schema",), ("add_source", "--source", "mysql"),
                     ("init_replica", "--source", "mysql", "--debug")):  # fmt: skip
            done = self.run(*step)
            if done.returncode or "FATAL" in done.stdout + done.stderr:
                return f"`chameleon {step[0]}` failed: {(done.stdout + done.stderr).strip()[-400:]}"
        return ""

    def start(self) -> None:
        log = (self.home / "start_replica.log").open("ab")
        self.proc = subprocess.Popen(
            [*self.prefix, str(self.binary), "start_replica", "--config", "bench", "--source",
             "mysql", "--debug"],
            env={**os.environ, "HOME": str(self.home)}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()

    def remove(self) -> None:
        """Stop it and remove its folder (kept only where a message points to it)."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)

    def stop(self) -> None:
        if self.proc is not None:
            self.run("stop_replica", "--source", "mysql", timeout=120)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
            self.proc = None


def _seq(gtid: str | None) -> int:
    """The sequence number of a one-domain GTID state (the sandbox origin has one domain)."""
    return int(gtid.rsplit("-", 1)[1]) if gtid else -1


def _applied(pg: PgServer) -> int:
    return _seq(str(checkpoints(pg.url).get("origin", {}).get("gtid") or ""))


def _pg_count(pg: PgServer, table: str) -> int:
    with pg.connect() as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(row[0]) if row else 0


def run(root: Path, single: int, batches: int, chameleon_venv: Path) -> list[Result]:
    root.mkdir(parents=True, exist_ok=True)
    box = Sandbox(root / "servers")
    pg = PgServer(Path(tempfile.mkdtemp(prefix="bls-pgb-"))).start()
    site: LocalSite | None = None
    cham: Chameleon | None = None
    results: list[Result] = []
    try:
        origin = box.start("origin", 1)
        cases = [("single", "t_single", single, 1), ("batch", "t_batch", batches, 100)]
        with origin.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {SCHEMA}")
            for _, table, _, _ in cases:
                cur.execute(DDL.format(t=f"{SCHEMA}.{table}"))
        pgt = Server("pgt", 0, 0, "", 0)
        section = f'[target]\nkind = "postgresql"\nurl = "{pg.url}"\ncreate_tables = true'
        site = LocalSite(root / "site", origin, [pgt], tables=(f"{SCHEMA}.*",),
                         target_sections={"pgt": section})  # fmt: skip
        site.start()
        site.wait_online()
        seeded = subprocess.run(
            [sys.executable, "-m", "binlogsync.cli", "seed", "--config",
             str(site.agents["hub"].config), "--origin", "origin", "--target", "pgt",
             "--source", origin.url, "--quiet"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if seeded.returncode:
            raise RuntimeError(f"the seed failed: {seeded.stderr}")
        binary, why = _chameleon(chameleon_venv)
        if binary is not None:
            cham = Chameleon(binary, origin, pg, [c[1] for c in cases])
            why = cham.init()
            if why:
                cham.remove()
                cham = None
        hub = str(site.agents["hub"].config)
        # Both backlogs are written while both replicas are stopped; each then catches up once,
        # reading the binlog in order, and each case is timed from where the one before ended.
        site.stop("pgt")
        ends = []
        for _case, table, count, rows in cases:
            _write(origin, table, count, rows)
            ends.append(_seq(origin_gtid(origin)))

        def stored() -> bool:
            from binlogsync.hubcommands import fetch_status

            status = fetch_status(hub)
            return any(o["head"] and _seq(o["head"]["gtid"]) >= ends[-1] for o in status["origins"])

        wait_until(stored, 900, 0.2, "the hub holding the whole backlog")
        ours = []
        mark = time.monotonic()
        site.start("pgt")
        for end in ends:
            wait_until(lambda end=end: _applied(pg) >= end, 3600, 0.05,
                       "binlogsync's PostgreSQL target catching up")  # fmt: skip
            now = time.monotonic()
            ours.append(now - mark)
            mark = now
        theirs: list[float | None] = [None] * len(cases)
        if cham is not None:
            mark = time.monotonic()
            cham.start()
            try:
                for i, (_case, table, count, rows) in enumerate(cases):
                    wait_until(
                        lambda table=table, goal=count * rows: _pg_count(pg, f"chameleon.{table}")
                        >= goal, 3600, 0.2, "pg_chameleon catching up",
                    )  # fmt: skip
                    now = time.monotonic()
                    theirs[i] = now - mark
                    mark = now
            except TimeoutError as exc:
                why = f"{exc}; see {cham.home}"
                cham.stop()
                cham = None  # its folder is kept: the message points to it
        for i, (_case, _table, count, rows) in enumerate(cases):
            results.append(Result(f"{count:,} x {rows}-row transactions", count, count * rows,
                                  ours[i], theirs[i], why))  # fmt: skip
        # The target groups transactions across the two backlogs' boundary (net-change apply),
        # so how the time splits between the rows above is approximate; the sum is exact.
        total_theirs = None if None in theirs else sum(t for t in theirs if t is not None)
        results.append(Result("both backlogs, in order", sum(r.transactions for r in results),
                              sum(r.rows for r in results), sum(ours), total_theirs, ""))  # fmt: skip
        return results
    finally:
        if cham is not None:
            cham.remove()
        if site is not None:
            site.stop()
        box.stop_all()
        box.remove_data()
        pg.remove()


def render(results: list[Result]) -> str:
    lines = [f"machine: {machine()}", "",
             f"{'backlog':34} {'tx':>8} {'rows':>9} {'ours s':>8} {'ours rows/s':>12} "
             f"{'pg_chameleon s':>15} {'pg_ch rows/s':>13} {'ours/pg_ch':>10}"]  # fmt: skip
    for r in results:
        ch = r.chameleon_rows_per_second
        lines.append(
            f"{r.case:34} {r.transactions:>8,} {r.rows:>9,} {r.ours_seconds:>8.1f} "
            f"{r.ours_rows_per_second:>12,.0f} "
            + (
                f"{r.chameleon_seconds:>15.1f} {ch:>13,.0f} {r.ours_rows_per_second / ch:>9.2f}x"
                if ch and r.chameleon_seconds
                else f"{'—':>15} {'—':>13} {'—':>10}"
            )  # fmt: skip
        )
        if r.chameleon_note:
            lines.append(f"  pg_chameleon: {r.chameleon_note}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    root = Path(args.dir or tempfile.mkdtemp(prefix="bls-pg-bench-")).resolve()
    # Not under the project: when run as root, pg_chameleon runs as nobody, who must reach it.
    venv = Path(tempfile.gettempdir()) / "binlogsync-pg_chameleon-venv"
    results = run(root, args.single, args.batches, venv)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(render(results))
    return 0
