"""The Ansible role's templates for every kind of host, rendered without any host (fast): a
hub with the binlog service and metrics, a MariaDB origin with TLS, and a target of each kind
(mysql with TLS, postgresql, redis over TLS, an audit log). Each TOML must load with
binlogsync's own config loader (which refuses host/port/user under [target] for every kind but
mysql), hold what the inventory said, and the Prometheus scrape config must list every agent
with metrics on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from binlogsync.config import load_client, load_hub

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "deploy" / "ansible"
BIN = Path(sys.executable).parent

RENDER = """
- name: Stand-in for the key exchange
  ansible.builtin.set_fact:
    binlogsync_key_share: {name: "{{ binlogsync_name }}", agent: "{{ binlogsync_agent }}"}
- name: Agent config
  ansible.builtin.template:
    src: "{{ binlogsync_agent }}.toml.j2"
    dest: "{{ out }}/{{ inventory_hostname }}.toml"
    mode: "0644"
- name: Unit
  ansible.builtin.template:
    src: binlogsync.service.j2
    dest: "{{ out }}/{{ inventory_hostname }}.service"
    mode: "0644"
- name: Scrape config
  ansible.builtin.template:
    src: prometheus-scrape.yml.j2
    dest: "{{ out }}/scrape.yml"
    mode: "0644"
  run_once: true
"""


def render(tmp_path: Path, inventory: dict[str, Any]) -> Path:
    """Renders the real role's templates (its defaults and vars too) for every host of
    `inventory` into a folder, through a role whose only tasks are the templates."""
    role = PLAYBOOKS / "roles" / "binlogsync"
    render = tmp_path / "roles" / "render"
    (render / "tasks").mkdir(parents=True)
    (render / "tasks" / "main.yml").write_text(RENDER)
    for part in ("defaults", "vars", "templates"):
        (render / part).symlink_to(role / part)
    play = tmp_path / "render.yml"
    play.write_text("- {hosts: all, connection: local, gather_facts: false, roles: [render]}\n")
    out = tmp_path / "out"
    out.mkdir()
    path = tmp_path / "inventory.yml"
    path.write_text(json.dumps(inventory))
    env = {
        **os.environ,
        "ANSIBLE_HOME": str(tmp_path / "home"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(tmp_path / "roles"),
    }
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(path), "-e", json.dumps({"out": str(out)}),
         str(play)],
        cwd=PLAYBOOKS, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    return out


def site(tmp_path: Path) -> dict[str, Any]:
    service_password = tmp_path / "binlog-service.password"
    service_password.write_text("s3cret")
    return {
        "all": {
            "vars": {
                "ansible_python_interpreter": sys.executable,
                "binlogsync_curve": False,
                "binlogsync_mariadb_manage": True,
                "binlogsync_metrics_host": "0.0.0.0",
            },
            "children": {
                "hub": {"hosts": {"sync-hub": {
                    "ansible_host": "10.0.0.1",
                    "binlogsync_metrics_port": 9100,
                    "binlogsync_binlog_service": {
                        "bind": "0.0.0.0:3307", "user": "repl", "server_id": 900,
                        "domains": {"shop-db": 7},
                    },
                    "binlogsync_binlog_service_password_file": str(service_password),
                }}},
                "origins": {"hosts": {"shop-db": {
                    "ansible_host": "10.0.0.2",
                    "binlogsync_metrics_port": 9101,
                    "binlogsync_origin_tables": ["shop.*"],
                    "binlogsync_origin_tls": {
                        "ssl_mode": "verify_identity", "ssl_ca": "/etc/binlogsync/tls/ca.pem",
                    },
                }}},
                "targets": {"hosts": {
                    "report-db": {
                        "binlogsync_target_tls": {"ssl_mode": "required"},
                        "binlogsync_metrics_port": 9102,
                        "binlogsync_metrics_address": "report-db.internal",
                    },
                    "warehouse": {
                        "binlogsync_target_kind": "postgresql",
                        "binlogsync_target_url": "postgresql://binlogsync@pg.internal:5432/wh?sslmode=verify-full&sslrootcert=/etc/binlogsync/tls/pg-ca.pem",
                        "binlogsync_db_password": "pw",
                        "binlogsync_target_settings": {"create_tables": True},
                    },
                    "cache": {
                        "binlogsync_target_kind": "redis",
                        "binlogsync_target_url": "rediss://cache.internal:6380/0",
                        "binlogsync_target_tls": {"ssl_ca": "/etc/binlogsync/tls/ca.pem"},
                        "binlogsync_target_settings": {"ttl": 3600},
                    },
                    "audit": {"binlogsync_target_kind": "auditlog"},
                }},
            },
        }
    }  # fmt: skip


def test_every_kind_renders_a_config_binlogsync_loads(tmp_path: Path) -> None:
    out = render(tmp_path, site(tmp_path))
    configs = {p.stem: tomllib.loads(p.read_text()) for p in out.glob("*.toml")}
    assert set(configs) == {"sync-hub", "shop-db", "report-db", "warehouse", "cache", "audit"}

    hub = load_hub(out / "sync-hub.toml", env={})
    assert hub.binlog_service is not None
    assert hub.binlog_service.bind == "0.0.0.0:3307" and hub.binlog_service.password == "s3cret"
    assert hub.binlog_service.domains == {"shop-db": 7}
    assert hub.metrics.port == 9100
    assert configs["sync-hub"]["route"] == [
        {"origin": "shop-db", "targets": ["report-db", "warehouse", "cache", "audit"],
         "tables": ["shop.*"]}
    ]  # fmt: skip

    origin = load_client(out / "shop-db.toml", env={}, secrets=False)
    assert origin.origin is not None and origin.target is None
    assert configs["shop-db"]["origin"]["ssl_mode"] == "verify_identity"
    assert configs["shop-db"]["origin"]["ssl_ca"] == "/etc/binlogsync/tls/ca.pem"
    assert configs["shop-db"]["origin"]["password_file"] == "/etc/binlogsync/db.password"

    mysql = load_client(out / "report-db.toml", env={}, secrets=False)
    assert mysql.target is not None and mysql.target.kind == "mysql"
    assert configs["report-db"]["target"]["host"] == "127.0.0.1"
    assert configs["report-db"]["target"]["ssl_mode"] == "required"
    assert "After=network-online.target mariadb.service" in (out / "report-db.service").read_text()

    pg = load_client(out / "warehouse.toml", env={}, secrets=False)
    assert pg.target is not None and pg.target.kind == "postgresql"
    assert pg.target.url.startswith(
        "postgresql://binlogsync@pg.internal:5432/wh?sslmode=verify-full"
    )
    assert pg.target.create_tables
    wh = configs["warehouse"]["target"]
    assert not {"host", "port", "user"} & set(wh), wh
    assert wh["password_file"] == "/etc/binlogsync/db.password"
    # Not a MariaDB host: the unit does not wait for one.
    assert "mariadb.service" not in (out / "warehouse.service").read_text()

    redis = load_client(out / "cache.toml", env={}, secrets=False)
    assert redis.target is not None and redis.target.kind == "redis" and redis.target.ttl == 3600
    cache = configs["cache"]["target"]
    assert cache["url"] == "rediss://cache.internal:6380/0"
    assert cache["ssl_ca"] == "/etc/binlogsync/tls/ca.pem"
    assert not {"host", "port", "user", "password_file"} & set(cache), cache  # no password given

    audit = load_client(out / "audit.toml", env={}, secrets=False)
    assert audit.target is not None and audit.target.kind == "auditlog"
    assert str(audit.target.path) == "/var/lib/binlogsync/audit"
    assert not {"host", "port", "user", "password_file", "url"} & set(configs["audit"]["target"])

    scrape = yaml.safe_load((out / "scrape.yml").read_text())
    (job,) = scrape["scrape_configs"]
    assert job["job_name"] == "binlogsync"
    found = {c["labels"]["binlogsync_host"]: (c["targets"], c["labels"]["binlogsync_agent"])
             for c in job["static_configs"]}  # fmt: skip
    assert found == {
        "sync-hub": (["10.0.0.1:9100"], "hub"),
        "shop-db": (["10.0.0.2:9101"], "client"),
        "report-db": (["report-db.internal:9102"], "client"),
    }
