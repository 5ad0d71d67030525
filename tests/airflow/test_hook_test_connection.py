"""The connection form's "Test" (BinlogsyncHook.test_connection) against a real hub with CURVE
on: a right connection answers with what the hub holds; a wrong hub key, a missing key file
and a port where nothing listens each fail with a message that names the problem in the
form's words. Run in a child process, as Airflow's API server runs it, with the connections in
AIRFLOW_CONN_* variables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from binlogsync.config import Security
from binlogsync.transport import curve
from binlogsync_dev.airflow_site import base_env
from binlogsync_dev.sandbox import free_port
from hubkit import HubThread

pytestmark = pytest.mark.airflow

SCRIPT = """
import json, sys
from binlogsync_airflow.hooks import BinlogsyncHook
print(json.dumps({c: BinlogsyncHook(c, timeout=5).test_connection() for c in sys.argv[1:]}))
"""


def test_test_connection_says_what_answered_or_what_is_wrong(tmp_path: Path) -> None:
    keys, admins, authorized = tmp_path / "keys", tmp_path / "admins", tmp_path / "authorized"
    admins.mkdir()
    authorized.mkdir()
    for name in ("hub", "other", "airflow"):
        curve.make_keys(keys, name)
    (admins / "airflow.key").write_bytes((keys / "airflow.key").read_bytes())
    security = Security(
        secret_key_file=keys / "hub.key_secret",
        authorized_keys_dir=authorized,
        admin_keys_dir=admins,
    )
    with HubThread(tmp_path / "hub", security=security) as hub:
        port = int(hub.endpoint.rsplit(":", 1)[1])

        def conn(port: int, hub_key: str, secret: str = "airflow.key_secret") -> str:
            extra = {
                "secret_key_file": str(keys / secret),
                "hub_public_key_file": str(keys / hub_key),
            }
            return json.dumps(
                {"conn_type": "binlogsync", "host": "127.0.0.1", "port": port, "extra": extra}
            )

        env = base_env(tmp_path / "airflow")
        env.update(
            AIRFLOW_CONN_BLS_OK=conn(port, "hub.key"),
            AIRFLOW_CONN_BLS_WRONG_KEY=conn(port, "other.key"),
            AIRFLOW_CONN_BLS_NO_FILE=conn(port, "hub.key", "nowhere.key_secret"),
            AIRFLOW_CONN_BLS_DOWN=conn(free_port(), "hub.key"),
        )
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, "bls_ok", "bls_wrong_key", "bls_no_file", "bls_down"],
            env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(result, indent=1))
    assert result["bls_ok"] == [True, "hub hub answered: 0/2 hosts online, 1 route(s)"]
    ok, wrong = result["bls_wrong_key"]
    assert not ok
    assert wrong.startswith(f"the hub at tcp://127.0.0.1:{port} did not answer")
    assert "refused the CURVE handshake" in wrong and "hub_public_key_file" in wrong
    ok, missing = result["bls_no_file"]
    assert not ok
    assert missing.startswith(
        f"Secret key file (secret_key_file): {keys / 'nowhere.key_secret'} does not exist"
    ), missing
    ok, down = result["bls_down"]
    assert not ok and "nothing listens there" in down
