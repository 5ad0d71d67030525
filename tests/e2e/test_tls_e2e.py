"""The whole pipe over TLS, as a user runs it: an origin and a MariaDB target that both refuse
cleartext (require_secure_transport), a PostgreSQL target with only hostssl lines and a Redis
target on a TLS port that demands a client certificate; seeded, streamed and reconciled with
`verify_identity` everywhere. And the start-up errors: an agent whose CA is wrong, or whose
server has no TLS, stops at once (exit 2) with a message naming the setting and the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from binlogsync import tls
from binlogsync.apply import postgres as pg_apply
from binlogsync.apply import redisstore
from binlogsync_dev.certs import Authority, Pair
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.pg_sandbox import PgServer
from binlogsync_dev.redis_sandbox import RedisServer
from binlogsync_dev.sandbox import Sandbox, Server, tls_options
from binlogsync_dev.verify import origin_gtid
from sitekit import create, wait_equal

pytestmark = pytest.mark.e2e

TABLE = "CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(40), amount DECIMAL(12,2))"


@dataclass(frozen=True)
class Certs:
    ca: Path
    wrong_ca: Path
    server: Pair
    client: Pair  # common name "root": what PostgreSQL's clientcert=verify-full compares


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    folder = tmp_path_factory.mktemp("certs")
    authority = Authority(folder, "site")
    return Certs(
        authority.ca, Authority(folder, "wrong").ca, authority.server(), authority.client()
    )


@pytest.fixture(scope="module")
def tls_servers(
    tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[tuple[Server, Server]]:
    """An origin and a target that turn cleartext away."""
    box = Sandbox(tmp_path_factory.mktemp("tls-sandbox"), max_binlog_size="64K")
    options = tls_options(certs.ca, certs.server.cert, certs.server.key)
    try:
        yield box.start("tls-origin", 81, *options), box.start("tls-target", 82, *options)
    finally:
        box.stop_all()


def _verify(ca: Path) -> str:
    return f'ssl_mode = "verify_identity"\nssl_ca = "{ca}"\n'


def _url(server: Server, ca: Path) -> str:
    return f"mysql://root@127.0.0.1:{server.port}?ssl_mode=verify_identity&ssl_ca={ca}"


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )


def _seed(s: LocalSite, target: str, source: str) -> None:
    done = _cli("seed", "--config", str(s.agents["hub"].config), "--origin", "origin",
                "--target", target, "--source", source, "--quiet", timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr + s.logs()


def _write(origin: Server, db: str) -> None:
    with origin.connect(db) as conn, conn.cursor() as cur:
        for i in range(100, 160):
            conn.begin()
            cur.execute("INSERT INTO t VALUES (%s, %s, %s)", (i, f"row {i}", f"{i}.25"))
            if i % 4 == 0:
                cur.execute("UPDATE t SET note = 'changed' WHERE id = %s", (i - 1,))
            if i % 9 == 0:
                cur.execute("DELETE FROM t WHERE id = %s", (i - 3,))
            conn.commit()


def _no_cleartext(s: LocalSite) -> None:
    logs = s.logs()
    assert "offers no TLS" not in logs and "Traceback" not in logs, logs


def test_capture_apply_seed_and_reconcile_over_tls(
    tmp_path: Path, certs: Certs, tls_servers: tuple[Server, Server], dbname: str
) -> None:
    origin, target = tls_servers
    create([origin, target], dbname, TABLE)
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, 'seeded', 1.5)", [(i,) for i in range(100)])
    with LocalSite(tmp_path / "site", origin, [target], tables=(f"{dbname}.*",),
                   origin_extra=_verify(certs.ca), target_extra=_verify(certs.ca)) as s:  # fmt: skip
        s.start()
        s.wait_online()
        _seed(s, target.name, _url(origin, certs.ca))
        _write(origin, dbname)
        wait_equal(s, dbname, ["t"])
        _no_cleartext(s)
    # Both servers refuse cleartext, so every session above ran over TLS; the
    # reconciliation's too (the driver's and the Spark tasks').
    out = tmp_path / "report"
    done = _cli("reconcile", "--source", _url(origin, certs.ca), "--target",
                _url(target, certs.ca), "--tables", f"{dbname}.t", "--pin", "none",
                "--out", str(out), "--conf", "spark.ui.enabled=false")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tables"][0]["status"] == "equal", summary
    assert summary["tables"][0]["source_rows"] > 100, summary

    wrong = _url(origin, certs.wrong_ca)
    refused = _cli("reconcile", "--source", wrong, "--target", _url(target, certs.ca),
                   "--tables", f"{dbname}.t", "--pin", "none")  # fmt: skip
    said = refused.stdout + refused.stderr
    assert refused.returncode == 2, said[-3000:]
    assert f"ssl_ca in the URL mysql://root@127.0.0.1:{origin.port}" in said, said[-3000:]
    assert str(certs.wrong_ca) in said, said[-3000:]


def test_postgresql_and_redis_targets_over_tls(
    tmp_path: Path, certs: Certs, tls_servers: tuple[Server, Server], dbname: str
) -> None:
    origin, _ = tls_servers
    create([origin], dbname, TABLE)
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, 'seeded', 1.5)", [(i,) for i in range(50)])
    client_key = tmp_path / "client.key"  # libpq: readable by its owner only (it is)
    client_key.write_bytes(certs.client.key.read_bytes())
    client_key.chmod(0o600)
    pg = PgServer(tls=certs.server, ca=certs.ca, client_certs=certs.client).start()
    cache = RedisServer(tmp_path / "redis", tls=certs.server, ca=certs.ca,
                        client_certs=certs.client).start()  # fmt: skip
    pg_query = (f"sslmode=verify-full&sslrootcert={certs.ca}&sslcert={certs.client.cert}"
                f"&sslkey={client_key}")  # fmt: skip
    pg_url = f"postgresql://root@127.0.0.1:{pg.port}/postgres?{pg_query}"
    sections = {
        "pgt": f'[target]\nkind = "postgresql"\nurl = "{pg_url}"\ncreate_tables = true',
        "cache": f'[target]\nkind = "redis"\nurl = "{cache.url}"\nssl_ca = "{certs.ca}"\n'
        f'ssl_cert = "{certs.client.cert}"\nssl_key = "{certs.client.key}"',
    }
    try:
        with pg.connect() as conn:  # the client certificate names "root"
            conn.execute("CREATE ROLE root SUPERUSER LOGIN")
        targets = [Server("pgt", 0, 0, "", 0), Server("cache", 0, 0, "", 0)]
        with LocalSite(tmp_path / "site", origin, targets, tables=(f"{dbname}.*",),
                       origin_extra=_verify(certs.ca), target_sections=sections) as s:  # fmt: skip
            s.start()
            s.wait_online()
            for name in ("pgt", "cache"):
                _seed(s, name, _url(origin, certs.ca))
            _write(origin, dbname)
            gtid = origin_gtid(origin)
            pg_tls = tls.from_values(
                {"sslmode": "verify-full", "sslrootcert": str(certs.ca),
                 "sslcert": str(certs.client.cert), "sslkey": str(client_key)},
                "{}", libpq=True,
            )  # fmt: skip
            redis_url, redis_tls = tls.for_redis(
                cache.url,
                {"ssl_ca": str(certs.ca), "ssl_cert": str(certs.client.cert),
                 "ssl_key": str(certs.client.key)},
                "{}",
            )  # fmt: skip

            def applied() -> bool:
                at_pg = pg_apply.checkpoints(pg_url, "", pg_tls).get("origin", {})
                at_redis = redisstore.checkpoints(redis_url, "", redis_tls).get("origin", {})
                return at_pg.get("gtid") == gtid and at_redis.get("gtid") == gtid

            try:
                wait_until(applied, 90, 0.05, f"both targets reaching {gtid}")
            except TimeoutError as exc:
                raise AssertionError(f"{exc}\n{s.logs()}") from None
            _no_cleartext(s)
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute("SELECT id, note, amount FROM t ORDER BY id")
            expected = [(i, n, a) for i, n, a in cur.fetchall()]
        with pg.connect() as conn:
            got = conn.execute(f'SELECT id, note, amount FROM "{dbname}".t ORDER BY id').fetchall()
        assert [tuple(r) for r in got] == expected
        client = cache.client()
        try:
            assert {k.decode() for k in client.scan_iter(match=f"{dbname}:t:*")} == {
                f"{dbname}:t:{i}" for i, _, _ in expected
            }
        finally:
            client.close()
    finally:
        cache.stop()
        pg.remove()


def _start_alone(s: LocalSite, name: str) -> tuple[int, str]:
    """Start one agent (with the hub) and wait for it to exit; its exit code and log."""
    s.start("hub", name)
    agent = s.agents[name]
    assert agent.process is not None
    try:
        code = agent.process.wait(60)
    finally:
        s.stop()
    return code, agent.log.read_text()


@pytest.mark.parametrize("role", ["origin", "target"])
def test_a_wrong_ca_stops_the_agent_at_start_up(
    tmp_path: Path, certs: Certs, tls_servers: tuple[Server, Server], role: str
) -> None:
    origin, target = tls_servers
    wrong = _verify(certs.wrong_ca)
    extra = {"origin_extra": wrong} if role == "origin" else {"target_extra": wrong}
    s = LocalSite(tmp_path / "site", origin, [target], **extra)  # type: ignore[arg-type]
    code, log = _start_alone(s, "origin" if role == "origin" else target.name)
    assert code == 2, log
    assert f"{role}.ssl_ca" in log and str(certs.wrong_ca) in log, log
    assert "not signed by the CA" in log, log


def test_a_server_without_tls_stops_the_agent_under_verify_identity(
    tmp_path: Path, certs: Certs, origin: Server, target: Server
) -> None:
    s = LocalSite(tmp_path / "site", origin, [target], origin_extra=_verify(certs.ca))
    code, log = _start_alone(s, "origin")
    assert code == 2, log
    assert "does not offer TLS, and origin.ssl_mode = verify_identity requires it" in log, log
    assert str(certs.ca) in log, log
