"""Reconciliation benchmark: `binlogsync reconcile` beside pt-table-checksum on the same pair.

    .venv/bin/python bench/reconcile_bench.py [--sizes 1000000,10000000] [--runs 3] [--dir D]
        [--variants local,local-first,cluster,warm,before] [--before DIR] [--postgres-sizes 1000000]

For each size: a source and a native MariaDB replica of it (Sandbox.replicate), both holding
the same N-row table (loaded on each side without the binlog, so the replica does not replay
it), then a handful of differences made on the replica behind replication's back (a missing
row, an extra row, three changed rows of which two swap values). Then, in the same run:

    pt-table-checksum   Debian's percona-toolkit against the source; it checksums chunks on the
                        source and, through statement-based replication of its own queries, on
                        the replica, and flags differing chunks (it names no row)
    reconcile           `binlogsync reconcile` as a user runs it (a new process, the JVM and
                        Spark's start-up included), source against the replica (pinned by
                        GTID), every differing row named; also its time without the wait for
                        Spark's start. Once per --variants:
                          local        the default: Spark's local[*], the driver JVM's class
                                       archive as an earlier run on this machine left it
                          local-first  the same on a machine that never ran it: no class
                                       archive yet (this run writes it as its JVM exits)
                          cluster      a Spark standalone cluster on this machine: a master and
                                       two workers of one core each (spark-class from the
                                       pyspark wheel), executors on a Python without
                                       binlogsync (the job ships its code)
                          warm         sent to a `binlogsync reconcile-server` started once for
                                       the benchmark (local[*]): Spark's start-up is not paid
                                       per run; --since-last is measured this way too
                          before       `local` with another checkout's code (--before DIR:
                                       DIR/agents first on PYTHONPATH), to give a change's
                                       before and after beside pt-table-checksum in one run
    PostgreSQL target   (sizes in --postgres-sizes) the replica's rows, differences included,
                        copied into a private PostgreSQL server in binlogsync's type mapping;
                        reconcile source against it (hash sha256, local[*], static pin): the
                        same rows must be named. pt-table-checksum cannot compare across the
                        two servers at all; its time on the MariaDB pair is the anchor
    --since-last        after the replica is equal again and verified by a full run: 10,000
                        rows changed on the source in one transaction, spread over the key
                        range, three of them damaged on the replica; reconcile --since-last
                        must name those three

Medians of `--runs` runs, rows/s, the ratio, whether every injected difference was found, and
the peak memory (RSS) of each tool's processes. Needs percona-toolkit (apt-get install
percona-toolkit) and the `spark` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymysql

from binlogsync_dev.sandbox import Sandbox, Server

TABLE = """CREATE TABLE t (
    id BIGINT NOT NULL PRIMARY KEY,
    nim VARCHAR(20) NOT NULL,
    nominal DECIMAL(15,2) NOT NULL,
    flag TINYINT NOT NULL,
    tgl DATETIME(6) NOT NULL,
    note VARCHAR(64) NULL,
    payload BLOB NULL
) ENGINE=InnoDB"""
FILL = (
    "INSERT INTO t SELECT seq, CONCAT('N', seq), seq / 7, seq % 3, "
    "TIMESTAMP('2024-01-01') + INTERVAL seq * 1001 MICROSECOND, "
    "IF(seq % 10 = 0, NULL, CONCAT('note ', seq % 97)), UNHEX(SHA1(seq)) "
    "FROM seq_{lo}_to_{hi}"
)


def damage(n: int) -> tuple[list[str], dict[tuple[int], str]]:
    """Statements for the replica and the differences they make (key -> kind)."""
    a, b, c, d, e = n // 7, n // 3, n // 2, n // 2 + 1, n - 5
    return (
        [
            f"DELETE FROM t WHERE id = {a}",
            f"INSERT INTO t (id, nim, nominal, flag, tgl) VALUES ({n + 1000}, 'x', 0, 0, NOW(6))",
            f"UPDATE t SET nominal = nominal + 0.01 WHERE id = {b}",
            f"UPDATE t x JOIN t y ON x.id = {c} AND y.id = {d} SET x.nim = y.nim, y.nim = x.nim",
            f"UPDATE t SET tgl = tgl + INTERVAL 1 MICROSECOND WHERE id = {e}",
        ],
        {
            (a,): "missing",
            (n + 1000,): "extra",
            (b,): "changed",
            (c,): "changed",
            (d,): "changed",
            (e,): "changed",
        },
    )


def sql(server: Server, *statements: str, db: str | None = None) -> list[Any]:
    with server.connect(db) as conn, conn.cursor() as cur:
        for s in statements:
            cur.execute(s)
        return list(cur.fetchall())


def load(server: Server, n: int, step: int = 500_000) -> None:
    with server.connect("bench") as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for lo in range(1, n + 1, step):
            cur.execute(FILL.format(lo=lo, hi=min(n, lo + step - 1)))


class PeakRss:
    """Peak resident memory of a process and all its descendants, sampled every 50 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry))
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo.extend(children.get(p, []))
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for p in self._tree():
                try:
                    for line in Path(f"/proc/{p}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
                except OSError:
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def timed(args: list[str], env: dict[str, str] | None = None) -> tuple[float, str, int, int]:
    started = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    rss = PeakRss(proc.pid)
    out, _ = proc.communicate()
    seconds = time.monotonic() - started
    return seconds, out.decode(errors="replace"), proc.returncode, rss.stop()


def pt_checksum(source: Server) -> tuple[float, int, int, str]:
    seconds, out, code, rss = timed(
        [
            "pt-table-checksum",
            "--no-version-check",
            "--no-check-binlog-format",
            "--recursion-method=hosts",
            f"h=127.0.0.1,P={source.port},u=root",
            "--databases=bench",
            "--tables=t",
        ]
    )
    diffs = -1
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[-1] == "bench.t" and len(parts) >= 8:
            diffs = int(parts[2])
    return seconds, diffs, rss, out


BEFORE: Path | None = None  # the checkout the `before` variant runs (--before)
CLUSTER: Any = None  # the SparkCluster of the `cluster` variant, started by main when asked
SERVER: Any = None  # the `binlogsync reconcile-server` of the `warm` variant (a process)
SERVER_SOCKET = Path()


def reconcile(
    source: Server, replica: Server | str, out: Path, variant: str, *extra: str
) -> tuple[float, float, dict[Any, str], int, str]:
    """One run as a user runs it (variants: module doc); `replica` is a MariaDB server or a
    target URL."""
    target = replica if isinstance(replica, str) else f"mysql://root@127.0.0.1:{replica.port}"
    env = dict(os.environ)
    options: list[str] = []
    if variant == "local-first":
        fresh = Path(tempfile.mkdtemp(prefix="class-cache-", dir=out.parent))
        options.append(f"--class-cache={fresh}")
    elif variant == "cluster":
        options += [
            f"--master={CLUSTER.master_url}",
            f"--conf=spark.pyspark.python={CLUSTER.python}",
        ]
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
    elif variant == "warm":
        options.append(f"--spark-server={SERVER_SOCKET}")
    elif variant == "before":
        if BEFORE is None:
            raise SystemExit("the `before` variant needs --before DIR (another checkout)")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(BEFORE / "agents"), env.get("PYTHONPATH", "")) if p
        )
    elif variant != "local":
        raise SystemExit(
            f"unknown variant {variant!r}: local, local-first, cluster, warm or before"
        )
    seconds, text, code, rss = timed(
        [
            sys.executable,
            "-m",
            "binlogsync.cli",
            "reconcile",
            f"--source=mysql://root@127.0.0.1:{source.port}",
            f"--target={target}",
            "--tables=bench.t",
            f"--out={out}",
            "--show=50",
            *options,
            *extra,
        ],
        env,
    )
    if code not in (0, 1):
        raise SystemExit(f"reconcile failed ({code}):\n{text}")
    summary = json.loads((out / "summary.json").read_text())
    work = summary["totals"]["seconds_without_spark_startup"]
    named = {tuple(d["key"]): d["kind"] for d in summary["tables"][0]["first_differences"]}
    return seconds, work, named, rss, text


def machine() -> dict[str, str]:
    def version(args: list[str]) -> str:
        try:
            r = subprocess.run(args, capture_output=True, text=True, timeout=30)
            return (r.stdout or r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    import pyspark

    mem = next(
        (
            int(x.split()[1]) // 1024
            for x in Path("/proc/meminfo").read_text().splitlines()
            if x.startswith("MemTotal")
        ),
        0,
    )
    return {
        "cores": str(os.cpu_count()),
        "memory_mb": str(mem),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "java": version(["java", "-version"]),
        "mariadb": version(["/usr/sbin/mariadbd", "--version"]),
        "pt-table-checksum": version(["pt-table-checksum", "--version"]),
    }


PG_TABLE = (
    "CREATE TABLE bench.t (id bigint PRIMARY KEY, nim varchar(20) NOT NULL, nominal "
    "numeric(15,2) NOT NULL, flag smallint NOT NULL, tgl timestamp(6) NOT NULL, note "
    "varchar(64), payload bytea)"
)


def postgres_copy(replica: Server) -> Any:
    """A PostgreSQL server holding the replica's rows (its differences included)."""
    from binlogsync_dev.pg_sandbox import PgServer

    pg = PgServer().start()  # its own folder: as root it runs as nobody, who needs access
    started = time.monotonic()
    with pg.connect() as conn:
        conn.execute("CREATE SCHEMA bench")
        conn.execute(PG_TABLE)
        source = replica.connect("bench", cursorclass=pymysql.cursors.SSCursor)
        try:
            with source.cursor() as cur, conn.cursor() as pcur:
                cur.execute("SELECT id, nim, nominal, flag, tgl, note, payload FROM t")
                with pcur.copy("COPY bench.t FROM STDIN") as copy:
                    for row in cur:
                        copy.write_row(row)
        finally:
            source.close()
        conn.execute("VACUUM ANALYZE bench.t")
    print(f"  copied the replica into PostgreSQL in {time.monotonic() - started:.0f} s", flush=True)
    return pg


def bench_postgres(
    source: Server, replica: Server, injected: dict[Any, str], work: Path, runs: int
) -> dict[str, Any]:
    pg = postgres_copy(replica)
    url = f"postgresql://{pg.user}@127.0.0.1:{pg.port}/postgres"
    times, works, found_all, rss_all = [], [], [], []
    try:
        for run in range(runs):
            wall, work_s, named, rss, text = reconcile(
                source, url, work / f"pg-{replica.name}-{run}", "local", "--pin=none"
            )
            found = named == {tuple(k): v for k, v in injected.items()}
            times.append(wall)
            works.append(work_s)
            found_all.append(found)
            rss_all.append(rss)
            print(
                f"  PostgreSQL target {run + 1}: reconcile {wall:.2f} s, all "
                f"{len(injected)} rows named: {found}",
                flush=True,
            )
            if not found:
                print(f"  named {named}, injected {injected}\n{text}", flush=True)
    finally:
        pg.remove()
    med = statistics.median
    return {
        "seconds": med(times),
        "seconds_without_spark_startup": med(works),
        "all_found": all(found_all),
        "peak_rss_mb": max(rss_all) / 2**20,
        "raw": times,
    }


def bench_size(
    box: Sandbox, n: int, runs: int, work: Path, variants: list[str], postgres: bool = False
) -> dict[str, Any]:
    pool = "--innodb-buffer-pool-size=" + ("3G" if n > 2_000_000 else "512M")
    source = box.start(f"source{n}", 1, pool)
    replica = box.start(f"replica{n}", 2, pool)
    box.replicate(source, replica)
    sql(source, "CREATE DATABASE bench", "USE bench", TABLE)
    gtid = sql(source, "SELECT @@gtid_binlog_pos")[0][0]
    assert sql(replica, f"SELECT MASTER_GTID_WAIT('{gtid}', 60)")[0][0] == 0
    started = time.monotonic()
    loaders = [threading.Thread(target=load, args=(s, n)) for s in (source, replica)]
    for t in loaders:
        t.start()
    for t in loaders:
        t.join()
    print(f"  loaded {n:,} rows on both servers in {time.monotonic() - started:.0f} s", flush=True)
    statements, injected = damage(n)
    sql(replica, "SET SESSION sql_log_bin = 0", *statements, db="bench")
    # Warm both buffer pools the same way for both tools.
    for s in (source, replica):
        sql(s, "SELECT COUNT(*), SUM(LENGTH(payload)) FROM t", db="bench")
    pt_times, pt_rss, pt_diffs = [], [], []
    hashes = variants
    ours: dict[str, dict[str, list[Any]]] = {
        h: {"wall": [], "work": [], "rss": [], "found": []} for h in hashes
    }
    for run in range(runs):
        seconds, diffs, rss, text = pt_checksum(source)
        pt_times.append(seconds)
        pt_rss.append(rss)
        pt_diffs.append(diffs)
        line = f"  run {run + 1}: pt-table-checksum {seconds:.2f} s ({diffs} differing chunks)"
        for h in hashes:
            wall, work_s, named, rss2, text2 = reconcile(
                source, replica, work / f"out-{n}-{run}-{h}", h
            )
            mine = ours[h]
            mine["wall"].append(wall)
            mine["work"].append(work_s)
            mine["rss"].append(rss2)
            found = named == {tuple(k): v for k, v in injected.items()}
            mine["found"].append(found)
            if not found:
                print(f"  run {run}, {h}: reconcile named {named}, injected {injected}\n{text2}")
            line += (
                f"; reconcile {h} {wall:.2f} s ({work_s:.2f} s without the wait for Spark), "
                f"all {len(injected)} rows named: {found}"
            )
        print(line, flush=True)
    on_postgres = bench_postgres(source, replica, injected, work, runs) if postgres else None
    incremental = since_last(source, replica, n, injected, work, runs)
    box.stop(source.name)
    box.stop(replica.name)
    med = statistics.median
    pt = med(pt_times)
    return {
        "rows": n,
        "pt_seconds": pt,
        "pt_differing_chunks": pt_diffs[-1],
        "pt_rows_per_s": n / pt,
        "pt_peak_rss_mb": max(pt_rss) / 2**20,
        "runs": runs,
        "reconcile": {
            h: {
                "seconds": med(m["wall"]),
                "seconds_without_spark_startup": med(m["work"]),
                "ratio": med(m["wall"]) / pt,
                "ratio_without_startup": med(m["work"]) / pt,
                "rows_per_s": n / med(m["wall"]),
                "all_found": all(m["found"]),
                "peak_rss_mb": max(m["rss"]) / 2**20,
                "raw": {"wall": m["wall"], "work": m["work"]},
            }
            for h, m in ours.items()
        },
        "raw_pt": pt_times,
        "since_last": incremental,
        "postgres": on_postgres,
    }


CHANGED = 10_000  # rows the source changes between the full run and the incremental one


def copy_rows(source: Server, replica: Server, keys: list[int]) -> None:
    """The source's rows of `keys` onto the replica, behind replication's back."""
    columns = "id, nim, nominal, flag, tgl, note, payload"
    where = f"id IN ({','.join(map(str, keys))})"
    rows = sql(source, f"SELECT {columns} FROM t WHERE {where}", db="bench")
    with replica.connect("bench") as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DELETE FROM t WHERE {where}")
        cur.executemany(f"INSERT INTO t ({columns}) VALUES (%s, %s, %s, %s, %s, %s, %s)", rows)


def since_last(
    source: Server, replica: Server, n: int, injected: dict[Any, str], work: Path, runs: int
) -> dict[str, Any]:
    """reconcile --since-last after CHANGED rows changed on the source (spread over the whole
    key range, one transaction), with three of them then damaged on the replica behind
    replication's back: all three must be named. The replica is first made equal again and
    verified by a full run (which records the position the incremental run starts from). Once
    as a command of its own (`local`: Spark starts), and, with the warm server running, once
    sent to it (`warm`)."""
    copy_rows(source, replica, [k[0] for k in injected])
    modes = ["local", "warm"] if SERVER is not None else ["local"]
    times: dict[str, list[float]] = {m: [] for m in modes}
    found_all = []
    step = n // CHANGED
    for run in range(runs):
        for m, mode in enumerate(modes):
            round_ = run * len(modes) + m
            wall, _work, named, _rss, text = reconcile(
                source, replica, work / f"full-{n}-{round_}", mode
            )
            if named:
                raise SystemExit(f"the replica is not equal before the incremental run:\n{text}")
            # CHANGED rows change through replication, then three go wrong on the replica.
            sql(source, f"UPDATE t SET flag = flag + 1 WHERE id % {step} = {round_}", db="bench")
            gtid = sql(source, "SELECT @@gtid_binlog_pos")[0][0]
            assert sql(replica, f"SELECT MASTER_GTID_WAIT('{gtid}', 300)")[0][0] == 0
            a, b, c = step * 11 + round_, step * 5000 + round_, step * (CHANGED - 3) + round_
            sql(
                replica,
                "SET SESSION sql_log_bin = 0",
                f"UPDATE t SET nominal = nominal + 1 WHERE id = {a}",
                f"DELETE FROM t WHERE id = {b}",
                f"UPDATE t SET note = 'wrong' WHERE id = {c}",
                db="bench",
            )
            wall, _work, named, _rss, text = reconcile(
                source, replica, work / f"since-{n}-{round_}", mode, "--since-last"
            )
            expected = {(a,): "changed", (b,): "missing", (c,): "changed"}
            times[mode].append(wall)
            found_all.append(named == expected)
            print(
                f"  incremental {run + 1} ({mode}): reconcile --since-last after {CHANGED:,} "
                f"changed rows {wall:.2f} s, all 3 rows named: {found_all[-1]}",
                flush=True,
            )
            if not found_all[-1]:
                print(f"  named {named}, expected {expected}\n{text}", flush=True)
            copy_rows(source, replica, [a, b, c])  # equal again for the next verification
    return {
        "changed_rows": CHANGED,
        "seconds": statistics.median(times["local"]),
        "seconds_warm": statistics.median(times["warm"]) if "warm" in times else None,
        "all_found": all(found_all),
        "raw": times,
    }


def render(results: list[dict[str, Any]], info: dict[str, str]) -> str:
    lines = [
        "machine: " + ", ".join(f"{k} {v}" for k, v in info.items() if v),
        "",
        "| rows | pt-table-checksum (flags chunks) | reconcile (names rows) | time | ratio | without the wait for Spark | ratio | all differences named | peak RSS pt / reconcile |",
        "|---:|---:|:---|---:|---:|---:|---:|:---:|---:|",
    ]
    for r in results:
        for h, m in r["reconcile"].items():
            lines.append(
                f"| {r['rows']:,} | {r['pt_seconds']:.2f} s ({r['pt_rows_per_s']:,.0f} rows/s) "
                f"| {h} | {m['seconds']:.2f} s ({m['rows_per_s']:,.0f} rows/s) "
                f"| {m['ratio']:.2f} | {m['seconds_without_spark_startup']:.2f} s "
                f"| {m['ratio_without_startup']:.2f} | {'yes' if m['all_found'] else 'NO'} "
                f"| {r['pt_peak_rss_mb']:.0f} MB / {m['peak_rss_mb']:.0f} MB |"
            )
    for r in results:
        pg = r.get("postgres")
        if pg:
            lines.append(
                f"| {r['rows']:,} | {r['pt_seconds']:.2f} s (MariaDB pair; it cannot read "
                f"PostgreSQL) | local, sha256, **PostgreSQL target** "
                f"| {pg['seconds']:.2f} s ({r['rows'] / pg['seconds']:,.0f} rows/s) "
                f"| {pg['seconds'] / r['pt_seconds']:.2f} | | | "
                f"{'yes' if pg['all_found'] else 'NO'} | |"
            )
    for r in results:
        inc = r["since_last"]
        lines.append(
            f"| {r['rows']:,} | {r['pt_seconds']:.2f} s | local --since-last after "
            f"{inc['changed_rows']:,} changed rows | {inc['seconds']:.2f} s "
            f"| {inc['seconds'] / r['pt_seconds']:.3f} | | | "
            f"{'yes' if inc['all_found'] else 'NO'} | |"
        )
        if inc.get("seconds_warm") is not None:
            lines.append(
                f"| {r['rows']:,} | {r['pt_seconds']:.2f} s | warm (reconcile-server) "
                f"--since-last after {inc['changed_rows']:,} changed rows | "
                f"{inc['seconds_warm']:.2f} s | {inc['seconds_warm'] / r['pt_seconds']:.3f} "
                f"| | | {'yes' if inc['all_found'] else 'NO'} | |"
            )
    lines.append(
        f"\nmedians of {results[0]['runs'] if results else 0} runs each; "
        "ratio = reconcile / pt-table-checksum"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000000,10000000")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument(
        "--dir", default=None, help="sandbox folder, kept (default: a temporary one, removed)"
    )
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument(
        "--variants",
        default="local,warm,cluster",
        help="reconcile runs, in order: local, local-first, cluster, warm, before (module doc)",
    )
    p.add_argument(
        "--before",
        help="a checkout (its agents/ folder) the `before` variant runs, e.g. the main branch",
    )
    p.add_argument(
        "--postgres-sizes",
        default="1000000",
        help="sizes at which a PostgreSQL copy is compared too ('' for none)",
    )
    args = p.parse_args(argv)
    with bench_root(args.dir) as root:
        return _main(args, root)


@contextmanager
def bench_root(folder: str | None) -> Iterator[Path]:
    """The bench's folder: `--dir` as given (kept), or a temporary one removed at the end
    (it holds the sandbox's servers and each run's report: about 2 GB after a 10M-row run)."""
    if folder:
        yield Path(folder)
        return
    with tempfile.TemporaryDirectory(
        prefix="reconcile-bench-", ignore_cleanup_errors=True
    ) as temporary:
        yield Path(temporary)


def _main(args: argparse.Namespace, root: Path) -> int:
    info = machine()
    global BEFORE, CLUSTER, SERVER, SERVER_SOCKET
    BEFORE = Path(args.before).resolve() if args.before else None
    if "warm" in args.variants.split(","):
        SERVER_SOCKET = root / "reconcile.sock"
        SERVER = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "binlogsync.cli",
                "reconcile-server",
                f"--socket={SERVER_SOCKET}",
            ]
        )
        deadline = time.monotonic() + 120
        while not SERVER_SOCKET.exists():
            if SERVER.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the reconcile server did not start")
            time.sleep(0.1)
    if "cluster" in args.variants.split(","):
        from binlogsync_dev.spark_cluster import SparkCluster, bare_python

        python = bare_python(root / "bare-python")
        CLUSTER = SparkCluster(root / "spark", workers=2, cores=1, python=python).start()
    try:
        results = run_sizes(args, root)
    finally:
        if CLUSTER is not None:
            CLUSTER.stop()
        if SERVER is not None:
            SERVER.terminate()
            SERVER.wait(60)
    text = render(results, info)
    print("\n" + text)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "results": results}, indent=2))
    ok = all(m["all_found"] for r in results for m in r["reconcile"].values())
    ok = ok and all(r["postgres"]["all_found"] for r in results if r["postgres"])
    return 0 if ok and all(r["since_last"]["all_found"] for r in results) else 1


def run_sizes(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    results = []
    with Sandbox(root / "sandbox") as box:
        for n in (int(s) for s in args.sizes.split(",")):
            print(f"{n:,} rows:", flush=True)
            postgres = str(n) in args.postgres_sizes.split(",")
            results.append(bench_size(box, n, args.runs, root, args.variants.split(","), postgres))
    return results


if __name__ == "__main__":
    try:
        sys.exit(main())
    except pymysql.err.MySQLError as exc:
        sys.exit(f"database error: {exc}")
