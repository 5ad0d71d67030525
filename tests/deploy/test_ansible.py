"""The Ansible role (deploy/ansible) against real hosts: four containers from a local Debian
image with systemd as PID 1 (a hub, an origin and a target with MariaDB, and a PostgreSQL
target: Debian's postgresql, its account and table made by the test as a DBA would), reached
through the community.docker.docker connection of a private Docker engine.

The playbook runs three times: the first deploys everything (the origin's MariaDB gets the
binlog settings capture needs). The second changes one target setting, after the test damaged
a wheel on another host: it must change exactly those two things (read from the play recap:
the hub and the origin nothing, the target its TOML and the restart, the PostgreSQL host the
wheel copied again; so every other task of the role changed nothing, on every host), restart
that agent alone (systemd's MainPID and ActiveEnterTimestamp of each unit), rotate no key and
not restart MariaDB. The third, limited to that target and the hub, has a misspelt setting
that `validate:` refuses without touching the running agent. Between them a row written on the
origin must arrive on both targets (MariaDB and PostgreSQL), and `binlogsync status` on the hub
must show every host online. The units' sandboxing is rated by `systemd-analyze security`.

Without Docker: the example inventory renders the TOML and units it implies, and
`ansible-lint` (production profile, offline) passes on deploy/ansible.

community.docker (the connection plugin) is taken from the `ansible` wheel on PyPI when it is
not installed: only that collection is extracted, into the binlogsync cache (~/.cache/binlogsync).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from binlogsync_dev.docker_kit import CACHE, Engine, debian_image, wheelhouse
from binlogsync_dev.localsite import wait_until

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "deploy" / "ansible"
BIN = Path(sys.executable).parent
IMAGE = "local/bls-systemd:bookworm"
PACKAGES = [
    "systemd", "systemd-sysv", "python3", "python3-venv", "python3-packaging", "mariadb-server",
    "mariadb-client", "ca-certificates", "procps", "sudo", "postgresql",
]  # fmt: skip
SYSTEMD_RUN = [
    "--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined", "--cgroupns=host",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "--tmpfs", "/run/lock",
]  # fmt: skip
VENV = "/opt/binlogsync/venv"
RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.M,
)
TABLE = "CREATE DATABASE shop; CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(40))"
# The PostgreSQL target's account and table, made as its DBA would (the role makes none there).
PG_PASSWORD = "pg-secret"
PG_SETUP = (
    f"CREATE USER binlogsync PASSWORD '{PG_PASSWORD}'; "
    "GRANT CREATE ON DATABASE postgres TO binlogsync; "
    "CREATE SCHEMA shop AUTHORIZATION binlogsync; "
    "CREATE TABLE shop.orders (id integer PRIMARY KEY, item varchar(40)); "
    "ALTER TABLE shop.orders OWNER TO binlogsync;"
)
PG_VARS = {
    "binlogsync_target_kind": "postgresql",
    "binlogsync_target_url": "postgresql://binlogsync@127.0.0.1:5432/postgres",
    "binlogsync_db_password": PG_PASSWORD,
}


@dataclass(frozen=True)
class Host:
    name: str  # inventory host name = binlogsync host name
    container: str
    unit: str
    mariadb_server_id: int | None = None


def community_docker(scratch: Path, cache: Path = CACHE) -> Path | None:
    """A collections folder holding community.docker, or None when Ansible finds it already
    (e.g. the full `ansible` package is installed)."""
    listed = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "list", "community.docker"],
        capture_output=True, text=True, env={**os.environ, **_ansible_home(scratch)},
    )  # fmt: skip
    if listed.returncode == 0 and "community.docker" in listed.stdout:
        return None
    folder = cache / "ansible-collections"
    if (folder / "ansible_collections/community/docker/MANIFEST.json").exists():
        return folder
    core = subprocess.run(
        [sys.executable, "-c", "import ansible.release as r; print(r.__version__)"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    minor = int(core.split(".")[1])  # ansible-core 2.19 ships in ansible 12, 2.18 in 11, …
    download = scratch / "ansible-wheel"  # 50 MB; only the 2 MB collection is kept
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(download),
         f"ansible=={minor - 7}.*"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    wheel = sorted(download.glob("ansible-*.whl"))[-1]
    partial = folder.with_suffix(".partial")
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.filename.startswith("ansible_collections/community/docker/"):
                archive.extract(member, partial)
    partial.replace(folder)
    return folder


def _ansible_home(base: Path) -> dict[str, str]:
    return {
        "ANSIBLE_HOME": str(base / "home"),
        "ANSIBLE_LOCAL_TEMP": str(base / "tmp"),
        "ANSIBLE_REMOTE_TEMP": "/tmp/.ansible-remote",
        "XDG_CACHE_HOME": str(base / "cache"),
    }


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP lines: host -> {ok, changed, unreachable, failed}."""
    tail = output[output.rindex("PLAY RECAP") :]
    return {
        m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
        for m in RECAP.finditer(tail)
    }


def inventory(hosts: list[Host], wheels: Path, extra: dict[str, dict[str, object]]) -> str:
    def host_vars(host: Host) -> dict[str, object]:
        found: dict[str, object] = {"ansible_host": host.container}
        if host.mariadb_server_id is not None:
            found["binlogsync_mariadb_server_id"] = host.mariadb_server_id
        return {**found, **extra.get(host.name, {})}

    hub, origin, target, pg = hosts
    data = {
        "all": {
            "vars": {
                "ansible_connection": "community.docker.docker",
                "ansible_python_interpreter": "/usr/bin/python3",
                "binlogsync_wheelhouse": str(wheels),
                "binlogsync_mariadb_manage": True,
            },
            "children": {
                "hub": {"hosts": {hub.name: host_vars(hub)}},
                "origins": {
                    "vars": {"binlogsync_origin_tables": ["shop.*"]},
                    "hosts": {origin.name: host_vars(origin)},
                },
                "targets": {
                    "vars": {"binlogsync_target_schemas": ["shop"]},
                    "hosts": {
                        target.name: host_vars(target),
                        pg.name: {**PG_VARS, **host_vars(pg)},
                    },
                },
            },
        }
    }
    return json.dumps(data, indent=2)  # JSON is YAML


class Site:
    def __init__(self, engine: Engine, work: Path, collections: Path | None) -> None:
        self.engine = engine
        self.work = work
        tag = f"bls-ans-{os.getpid()}"
        self.network = tag
        self.hosts = [
            Host("sync-hub", f"{tag}-hub", "binlogsync-hub"),
            Host("shop-db", f"{tag}-origin", "binlogsync-client", mariadb_server_id=11),
            Host("report-db", f"{tag}-target", "binlogsync-client", mariadb_server_id=12),
            Host("warehouse", f"{tag}-pg", "binlogsync-client"),
        ]
        self.env = {
            **self.engine.env,
            **_ansible_home(work / "ansible"),
            "ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        if collections is not None:
            self.env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)

    def start(self) -> None:
        self.engine.docker("network", "create", self.network)
        for host in self.hosts:
            self.engine.docker(
                "run", "-d", "--name", host.container, "--hostname", host.name,
                "--network", self.network, *SYSTEMD_RUN, IMAGE, "/sbin/init",
            )  # fmt: skip
        for host in self.hosts:
            wait_until(
                lambda h=host: self.sh(h, "systemctl is-system-running", check=False)
                in ("running", "degraded"),
                60, 0.2, f"systemd running in {host.container}",
            )  # fmt: skip

    def stop(self) -> None:
        for host in self.hosts:  # kept in the test's folder, for when something failed
            journal = self.engine.docker(
                "exec", host.container, "journalctl", "--no-pager", "-u", "binlogsync-*",
                "-u", "mariadb", check=False,
            )  # fmt: skip
            (self.work / f"journal-{host.name}.log").write_bytes(journal.stdout + journal.stderr)
        names = [h.container for h in self.hosts]
        self.engine.docker("rm", "-f", *names, check=False, timeout=120)
        self.engine.docker("network", "rm", self.network, check=False)

    def sh(self, host: Host, command: str, user: str = "root", check: bool = True) -> str:
        done = self.engine.docker(
            "exec", "-u", user, host.container, "sh", "-c", command, check=check
        )
        return done.stdout.decode().strip()

    def sql(self, host: Host, statement: str) -> str:
        return self.sh(host, f"mariadb --batch --skip-column-names -e {_quote(statement)}")

    def psql(self, host: Host, statement: str) -> str:
        return self.sh(
            host, f"psql -X -q -At -d postgres -v ON_ERROR_STOP=1 -c {_quote(statement)}",
            user="postgres",
        )  # fmt: skip

    def playbook(
        self, inventory_text: str, label: str, fails: bool = False, limit: str = ""
    ) -> tuple[dict[str, dict[str, int]], float, str]:
        path = self.work / f"inventory-{label}.yml"
        path.write_text(inventory_text)
        started = time.monotonic()
        done = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", str(path), "site.yml",
             *(["--limit", limit] if limit else [])],
            cwd=PLAYBOOKS, env=self.env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        took = time.monotonic() - started
        (self.work / f"ansible-{label}.log").write_text(done.stdout + done.stderr)
        if fails:
            assert done.returncode != 0, f"{label} run should have failed:\n{done.stdout[-6000:]}"
        else:
            assert done.returncode == 0, f"{label} run failed:\n{done.stdout[-6000:]}{done.stderr}"
        return recap(done.stdout), took, done.stdout

    def unit_state(self, host: Host) -> tuple[str, str]:
        shown = self.sh(host, f"systemctl show -p MainPID -p ActiveEnterTimestamp {host.unit}")
        values = dict(line.split("=", 1) for line in shown.splitlines())
        assert values["MainPID"] != "0", f"{host.unit} is not running on {host.name}"
        user = self.sh(host, f"ps -o user= -p {values['MainPID']}")
        assert user == "binlogsync", f"{host.unit} runs as {user}"
        return values["MainPID"], values["ActiveEnterTimestamp"]

    def exposure(self, host: Host) -> tuple[float, str]:
        """systemd's rating of the unit's sandboxing (`systemd-analyze security`): 0 to 10,
        lower is safer, e.g. (1.6, "OK")."""
        text = self.sh(host, f"systemd-analyze security --no-pager {host.unit}")
        found = re.search(r"exposure level for \S+: ([\d.]+) (\w+)", text)
        assert found, text[-500:]
        return float(found[1]), found[2]

    def secret_key_digest(self, host: Host) -> str:
        return self.sh(host, f"sha256sum /etc/binlogsync/keys/{host.name}.key_secret").split()[0]

    def status(self) -> dict[str, object]:
        hub = self.hosts[0]
        text = self.sh(
            hub,
            f"{VENV}/bin/binlogsync status --config /etc/binlogsync/hub.toml --json",
            user="binlogsync",
            check=False,
        )
        return json.loads(text) if text.startswith("{") else {}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@pytest.fixture
def site(engine: Engine, tmp_path: Path) -> Iterator[Site]:
    debian_image(engine, IMAGE, PACKAGES)
    box = Site(engine, tmp_path, community_docker(tmp_path / "galaxy"))
    try:
        box.start()
        yield box
    finally:
        box.stop()


# Set-up and five playbooks took 900 s on a 2-vCPU EPYC guest beside the compose test (its four
# playbooks passed; the timeout stopped the fifth), 600-700 s on the Xeon machines before.
@pytest.mark.timeout(1800)
def test_role_deploys_a_site_idempotently_and_restarts_only_what_changed(
    site: Site, tmp_path: Path
) -> None:
    hub, origin, target, pg = site.hosts
    wheels = wheelhouse(tmp_path / "wheelhouse", "[postgresql]")
    for host in (origin, target):  # the routed table exists on both before the agents start
        site.sql(host, TABLE)
    wait_until(
        lambda: site.sh(pg, "pg_isready -q -h 127.0.0.1 && echo ready", check=False) == "ready",
        60, 0.2, "PostgreSQL running in the PostgreSQL target's container",
    )  # fmt: skip
    site.psql(pg, PG_SETUP)

    first, first_s, _ = site.playbook(inventory(site.hosts, wheels, {}), "first")
    assert set(first) == {h.name for h in site.hosts}
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in first.values()), first
    keys = {h.name: site.secret_key_digest(h) for h in site.hosts}
    exposure = {h.name: site.exposure(h) for h in site.hosts}
    assert all(score <= 2.0 for score, _ in exposure.values()), exposure  # systemd: "OK"
    settings = "@@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, @@server_id"
    assert site.sql(origin, f"SELECT {settings}").split() == ["1", "ROW", "FULL", "FULL", "11"]
    mariadb = {h.name: site.sh(h, "systemctl show -p MainPID mariadb") for h in (origin, target)}

    # Only public keys travelled: the hub holds the clients' NAME.key files, nothing secret.
    authorized = site.sh(hub, "ls /etc/binlogsync/keys/authorized").split()
    assert sorted(authorized) == ["report-db.key", "shop-db.key", "warehouse.key"]
    assert site.sh(origin, "ls /etc/binlogsync/keys").split() == [
        "shop-db.key", "shop-db.key_secret", "sync-hub.key",
    ]  # fmt: skip

    # The PostgreSQL target's config: the kind's keys, no MySQL host/port/user.
    pg_toml = tomllib.loads(site.sh(pg, "cat /etc/binlogsync/client.toml"))["target"]
    assert pg_toml["kind"] == "postgresql" and not {"host", "port", "user"} & set(pg_toml)
    assert "mariadb" not in site.sh(pg, f"systemctl show -p After {pg.unit}")

    # A row written on the origin arrives on both targets.
    site.sql(origin, "INSERT INTO shop.orders VALUES (1, 'deployed by ansible')")
    wait_until(
        lambda: site.sql(target, "SELECT item FROM shop.orders WHERE id = 1")
        == "deployed by ansible",
        60, 0.2, "the origin's row on the target",
    )  # fmt: skip
    wait_until(
        lambda: site.psql(pg, "SELECT item FROM shop.orders WHERE id = 1")
        == "deployed by ansible",
        60, 0.2, "the origin's row on the PostgreSQL target",
    )  # fmt: skip

    def all_online() -> bool:
        hosts = site.status().get("hosts", [])
        assert isinstance(hosts, list)
        return {h["name"] for h in hosts if h["online"]} == {origin.name, target.name, pg.name}

    wait_until(all_online, 30, 0.2, "every host online in `binlogsync status` on the hub")

    # One changed setting restarts the one agent whose config changed. A wheel damaged on a
    # host is copied again (its checksum differs), which restarts nothing. Nothing else
    # changes anywhere: the run is otherwise a repeat of the first (an unchanged run took
    # about 50 s of this test on its own before it was folded into this one).
    before = {h.name: site.unit_state(h) for h in site.hosts}
    wheel = sorted(wheels.glob("pymysql-*.whl"))[0]
    damaged = f"/opt/binlogsync/wheels/{wheel.name}"
    site.sh(pg, f"truncate -s 100 {damaged}")
    changed = {target.name: {"binlogsync_target_settings": {"group_transactions": 500}}}
    second, second_s, _ = site.playbook(inventory(site.hosts, wheels, changed), "second")
    assert {name: r["changed"] for name, r in second.items()} == {
        hub.name: 0,
        origin.name: 0,
        target.name: 2,  # the TOML and its restart handler
        pg.name: 1,  # the damaged wheel, copied again
    }, second
    assert {h.name: site.secret_key_digest(h) for h in site.hosts} == keys  # never rotated
    assert (
        site.sh(pg, f"sha256sum {damaged}").split()[0]
        == hashlib.sha256(wheel.read_bytes()).hexdigest()
    )
    assert "group_transactions = 500" in site.sh(target, "cat /etc/binlogsync/client.toml")
    after = {h.name: site.unit_state(h) for h in site.hosts}
    assert after[hub.name] == before[hub.name]
    assert after[origin.name] == before[origin.name]
    assert after[pg.name] == before[pg.name]
    assert after[target.name][0] != before[target.name][0]
    assert after[target.name][1] != before[target.name][1]
    assert {h.name: site.sh(h, "systemctl show -p MainPID mariadb") for h in (origin, target)} == (
        mariadb
    )  # MariaDB restarted only when its settings changed (the first run)

    # The restarted target still applies.
    site.sql(origin, "INSERT INTO shop.orders VALUES (2, 'after the restart')")
    wait_until(
        lambda: site.sql(target, "SELECT item FROM shop.orders WHERE id = 2")
        == "after the restart",
        60, 0.2, "a row on the target after its agent restarted",
    )  # fmt: skip
    wait_until(
        lambda: site.psql(pg, "SELECT count(*) FROM shop.orders") == "2",
        60, 0.2, "both rows on the PostgreSQL target",
    )  # fmt: skip

    # A mistake in a setting is refused by binlogsync's own loader before the file is replaced.
    # The run is limited to the host changed and the hub (whose key the role reads), as a DBA
    # changing one host would run it.
    before = after
    typo = {target.name: {"binlogsync_target_settings": {"group_transaction": 5}}}
    third, _, output = site.playbook(
        inventory(site.hosts, wheels, typo), "third", fails=True, limit=f"{hub.name},{target.name}"
    )
    assert set(third) == {hub.name, target.name}, third
    assert third[target.name]["failed"] == 1 and third[hub.name]["failed"] == 0
    assert "did you mean group_transactions?" in output
    assert "group_transactions = 500" in site.sh(target, "cat /etc/binlogsync/client.toml")
    assert {h.name: site.unit_state(h) for h in site.hosts} == before
    print(
        f"\nansible-playbook on 4 systemd hosts: first run {first_s:.1f} s, second (one target "
        f"setting, one damaged wheel) {second_s:.1f} s"
    )
    print(f"systemd-analyze security: {exposure}")


def test_ansible_lint_production_profile(tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [str(BIN / "ansible-lint"), "--offline", "--profile", "production", "--nocolor"],
        cwd=PLAYBOOKS, capture_output=True, text=True, timeout=300,
        env={**os.environ, **_ansible_home(tmp_path), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    print(f"\nansible-lint --profile production: passed in {time.monotonic() - started:.1f} s")


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
"""


def test_example_inventory_renders_valid_configs(tmp_path: Path) -> None:
    """The example inventory's hosts get the TOML and units the groups imply (routes from
    the groups; explicit routes with a rename render too), without any host."""
    # A role with the real defaults, vars and templates whose only tasks render the templates
    # here (so inventory variables take precedence over defaults, as in the real role).
    role = PLAYBOOKS / "roles" / "binlogsync"
    render = tmp_path / "roles" / "render"
    (render / "tasks").mkdir(parents=True)
    (render / "tasks" / "main.yml").write_text(RENDER)
    for part in ("defaults", "vars", "templates"):
        (render / part).symlink_to(role / part)
    play = tmp_path / "render.yml"
    play.write_text("- {hosts: all, connection: local, gather_facts: false, roles: [render]}\n")
    env = {
        **os.environ,
        **_ansible_home(tmp_path),
        "ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(tmp_path / "roles"),
    }
    routes = [
        {"origin": "shop-db", "targets": ["report-db"], "tables": ["shop.*"]},
        {"origin": "shop-db", "targets": ["backup-db"], "rename": {"shop": "shop_copy"}},
    ]
    for extra in ({}, {"binlogsync_routes": routes}):
        done = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", str(PLAYBOOKS / "inventory/example.yml"),
             "-e", json.dumps({"out": str(tmp_path), **extra}), str(play)],
            cwd=PLAYBOOKS, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr
        hub = tomllib.loads((tmp_path / "sync-hub.toml").read_text())
        assert hub["hub"]["bind"] == "tcp://0.0.0.0:5555"
        assert hub["route"] == (
            routes if extra else [
                {"origin": "shop-db", "targets": ["report-db", "backup-db"], "tables": ["shop.*"]}
            ]
        )  # fmt: skip
        origin = tomllib.loads((tmp_path / "shop-db.toml").read_text())
        assert origin["client"] == {"name": "shop-db", "hub": "tcp://hub.example.net:5555"}
        assert origin["origin"]["server_id"] != 1 and "target" not in origin
        backup = tomllib.loads((tmp_path / "backup-db.toml").read_text())
        assert backup["target"]["group_transactions"] == 500 and "origin" not in backup
        assert backup["security"]["hub_public_key_file"] == "/etc/binlogsync/keys/sync-hub.key"
        unit = (tmp_path / "backup-db.service").read_text()
        assert "ExecStart=/opt/binlogsync/venv/bin/binlogsync client --config" in unit
        assert "After=network-online.target mariadb.service" in unit
