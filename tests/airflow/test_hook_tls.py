"""TLS from Airflow connections: the hook's database settings take `ssl_mode`/`ssl_ca`/… (libpq's
names for a postgres connection) from the extra, connect over TLS to a server that refuses
cleartext, and carry the same settings into the reconcile URLs made for spark-submit. Run in
a child process, as Airflow's tasks run, with the connections in AIRFLOW_CONN_* variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from binlogsync_dev.certs import Authority
from binlogsync_dev.sandbox import Sandbox, tls_options

pytestmark = pytest.mark.airflow


SCRIPT = """
import json, sys
from pathlib import Path
from binlogsync import mysql
from binlogsync.errors import ConfigError
from binlogsync.ops.site import database_url
from binlogsync.reconcile.urls import parse_url
from binlogsync_airflow.hooks import BinlogsyncHook

db = BinlogsyncHook.database("origin")
conn = mysql.connect(db, "testing")
with conn.cursor() as cur:
    cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
    cipher = cur.fetchone()[1]
conn.close()
pg = BinlogsyncHook.database("wh")
url, _ = database_url("wh", pg, Path(sys.argv[1]))
again = parse_url(url, postgres=True)
try:
    BinlogsyncHook.database("legacy")
    legacy = ""
except ConfigError as exc:
    legacy = str(exc)
print(json.dumps({"cipher": cipher, "mode": db.tls.mode, "pg_mode": pg.tls.mode,
                  "pg_url": url, "same": again.tls == pg.tls, "legacy": legacy}))
"""


def test_hook_databases_use_tls_from_the_extra(tmp_path: Path) -> None:
    authority = Authority(tmp_path / "certs")
    server_pair = authority.server()
    with Sandbox(tmp_path / "box") as box:
        server = box.start("tlsdb", 91, *tls_options(authority.ca, server_pair.cert,
                                                     server_pair.key))  # fmt: skip
        conns = {
            "ORIGIN": {"conn_type": "mysql", "host": "127.0.0.1", "port": server.port,
                       "login": "root",
                       "extra": {"ssl_mode": "verify_identity", "ssl_ca": str(authority.ca)}},
            "WH": {"conn_type": "postgres", "host": "pg.example", "login": "bls",
                   "schema": "wh",
                   "extra": {"sslmode": "verify-full", "sslrootcert": str(authority.ca)}},
            "LEGACY": {"conn_type": "mysql", "host": "db", "extra": {"ssl": {"ca": "/x"}}},
        }  # fmt: skip
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            **{f"AIRFLOW_CONN_BINLOGSYNC_DB_{k}": json.dumps(v) for k, v in conns.items()},
        }
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp_path / "secrets")],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["cipher"]  # the session ran over TLS (the server refuses cleartext anyway)
    assert (result["mode"], result["pg_mode"]) == ("verify_identity", "verify_identity")
    assert f"sslmode=verify-full&sslrootcert={authority.ca}" in result["pg_url"]
    assert result["same"]
    assert "'ssl' (the MySQL provider's form)" in result["legacy"]
    assert "binlogsync_db_legacy" in result["legacy"]
