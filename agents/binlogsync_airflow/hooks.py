"""BinlogsyncHook: how Airflow reaches a binlogsync site.

The connection (type `binlogsync`, default id `binlogsync_default`) names the hub: host and
port of its socket, and in its extra the CURVE key files of this admin tool, when the hub
has CURVE on (`secret_key_file`, `hub_public_key_file`; the tool's public key must be in the
hub's `admin_keys_dir`). As a URI:

    binlogsync://hub.example:5555?secret_key_file=/keys/airflow.key_secret&hub_public_key_file=/keys/hub.key

The hook talks to the hub's admin socket through the library, never by shelling out.

Each host's database is the connection `binlogsync_db_<HOST>` (any MySQL-style connection:
host, port, login, password; a PostgreSQL target's is a `postgres` connection whose schema is
the database); an origin's native replicas, for retention, are listed in its
extra as `{"replicas": ["conn_id", …]}`. TLS to a database is in its connection's extra
(docs/tls.md): `ssl_mode`, `ssl_ca`, `ssl_cert`, `ssl_key` for MySQL/MariaDB, libpq's
`sslmode`, `sslrootcert`, `sslcert`, `sslkey` for PostgreSQL (the postgres provider's names). Results the jobs keep for the UI page go to the
state folder: `[binlogsync] state_dir` in airflow.cfg (`AIRFLOW__BINLOGSYNC__STATE_DIR`),
by default `$AIRFLOW_HOME/binlogsync`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from binlogsync.config import (
    AdminConfig,
    DatabaseSettings,
    PostgresSettings,
    admin_from_mapping,
    admin_toml,
)
from binlogsync.errors import ConfigError
from binlogsync.hubcommands import detach, fetch_status
from binlogsync.tls import TlsSettings, from_values

DEFAULT_PORT = 5555
DATABASE_CONN_PREFIX = "binlogsync_db_"
# The connection types of the databases reconcile compares (the others: targets it skips).
COMPARED_CONN_TYPES = ("mysql", "mariadb", "postgres", "postgresql")


def state_dir() -> Path:
    from airflow.configuration import conf

    home = os.environ.get("AIRFLOW_HOME", str(Path.home() / "airflow"))
    return Path(conf.get("binlogsync", "state_dir", fallback=str(Path(home) / "binlogsync")))


class BinlogsyncHook(BaseHook):
    conn_name_attr = "binlogsync_conn_id"
    default_conn_name = "binlogsync_default"
    conn_type = "binlogsync"
    hook_name = "binlogsync"

    def __init__(self, binlogsync_conn_id: str = default_conn_name, timeout: float = 10.0) -> None:
        super().__init__()
        self.binlogsync_conn_id = binlogsync_conn_id
        self.timeout = timeout
        self._admin: AdminConfig | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form on Airflow 3.1; 3.2 and later build it from the provider's
        info (provider.py: a field per extra key)."""
        return {
            "hidden_fields": ["schema", "login", "password"],
            "relabeling": {"host": "Hub host", "port": "Hub port"},
            "placeholders": {
                "host": "hub.example",
                "port": str(DEFAULT_PORT),
                "extra": '{"secret_key_file": "/etc/binlogsync/keys/airflow.key_secret", '
                '"hub_public_key_file": "/etc/binlogsync/keys/hub.key"}',
            },
        }

    def admin_config(self) -> AdminConfig:
        """The connection as an [admin] config, checked as a file would be (key files)."""
        if self._admin is None:
            conn = self.get_connection(self.binlogsync_conn_id)
            if not conn.host:
                raise ConfigError(
                    f"the Airflow connection {self.binlogsync_conn_id} has no host",
                    "set it to the hub's host (and its port), e.g. "
                    "AIRFLOW_CONN_BINLOGSYNC_DEFAULT='binlogsync://hub.example:5555'",
                )
            extra = _extra(conn.extra_dejson)
            data: dict[str, Any] = {
                "admin": {
                    "hub": f"tcp://{conn.host}:{conn.port or DEFAULT_PORT}",
                    "name": extra.get("name") or "airflow",
                }
            }
            keys = {k: extra[k] for k in ("secret_key_file", "hub_public_key_file") if extra.get(k)}
            if keys:
                data["security"] = keys
            self._admin = admin_from_mapping(data, Path.cwd())
        return self._admin

    def write_admin_config(self, path: Path) -> Path:
        """The connection as an [admin] TOML file, for a tool run in another process (the
        Spark job's repair); it holds key file paths, never a key."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(admin_toml(self.admin_config()))
        return path

    def get_conn(self) -> AdminConfig:
        return self.admin_config()

    def status(self, detail: bool = False) -> dict[str, Any]:
        return fetch_status(self.admin_config(), self.timeout, detail=detail)

    def detach(self, origin: str, target: str, reason: str) -> None:
        detach(self.admin_config(), origin, target, reason, self.timeout)

    def test_connection(self) -> tuple[bool, str]:
        """The UI's "Test" button: the hub's status asked with this connection's keys. A
        failure says what is wrong (the hub's address, a key the hub refused, a key file that
        cannot be read) in the form's words, and what to fix. (Airflow tests the form under a
        random connection id, so the message does not name the connection.)"""
        try:
            status = self.status()
        except Exception as exc:  # the UI shows the reason
            return False, _in_form_words(str(exc))
        online = sum(1 for h in status["hosts"] if h["online"])
        return True, (
            f"hub {status['hub']} answered: {online}/{len(status['hosts'])} hosts online, "
            f"{len(status.get('routes', []))} route(s)"
        )

    @staticmethod
    def compared(host: str) -> bool:
        """Whether `reconcile` compares host `host`: its connection `binlogsync_db_<host>` is a
        database reconcile reads (type mysql, mariadb, postgres), or it has none (then the
        comparison fails naming the missing connection). A connection of any other type, e.g.
        `redis`, marks a target that has no rows to compare (Redis, an audit log)."""
        try:
            conn = BaseHook.get_connection(DATABASE_CONN_PREFIX + host)
        except Exception:
            return True
        return conn.conn_type in COMPARED_CONN_TYPES

    @staticmethod
    def database(host: str) -> DatabaseSettings:
        """Host `host`'s database, from the connection `binlogsync_db_<host>`."""
        conn_id = DATABASE_CONN_PREFIX + host
        try:
            conn = BaseHook.get_connection(conn_id)
        except Exception as exc:
            raise ConfigError(
                f"no Airflow connection {conn_id} for host {host}'s database ({exc})",
                f"add it: AIRFLOW_CONN_{conn_id.upper()}='mysql://user:password@host:3306'",
            ) from exc
        if conn.conn_type in ("postgres", "postgresql"):  # a PostgreSQL target
            return PostgresSettings(
                host=conn.host or "127.0.0.1",
                port=int(conn.port or 5432),
                user=conn.login or "postgres",
                password=conn.password or "",
                database=conn.schema or "postgres",
                tls=_tls(conn_id, conn.extra_dejson, libpq=True),
            )
        return DatabaseSettings(
            host=conn.host or "127.0.0.1",
            port=int(conn.port or 3306),
            user=conn.login or "root",
            password=conn.password or "",
            tls=_tls(conn_id, conn.extra_dejson),
        )

    @staticmethod
    def replicas(origin: str) -> tuple[DatabaseSettings, ...]:
        """The native replicas of `origin` (its database connection's extra `replicas`)."""
        conn = BaseHook.get_connection(DATABASE_CONN_PREFIX + origin)
        names = conn.extra_dejson.get("replicas", [])
        if not isinstance(names, list):
            raise ConfigError(
                f"the extra 'replicas' of connection {DATABASE_CONN_PREFIX}{origin} must be a "
                f"list of connection ids, not {type(names).__name__}"
            )
        out = []
        for name in names:
            c = BaseHook.get_connection(str(name))
            out.append(
                DatabaseSettings(
                    c.host or "127.0.0.1",
                    int(c.port or 3306),
                    c.login or "root",
                    c.password or "",
                    tls=_tls(str(name), c.extra_dejson),
                )
            )
        return tuple(out)


def _in_form_words(message: str) -> str:
    """An error about the [admin] config the connection became, with the connection form's
    field names where the config's were (`security.secret_key_file` is the form's "Secret
    key file")."""
    from .provider import CONN_FIELDS

    for key in ("secret_key_file", "hub_public_key_file"):
        message = message.replace(f"security.{key}", f"{CONN_FIELDS[key]['label']} ({key})")
    return message


def _extra(extra: dict[str, Any]) -> dict[str, Any]:
    """The connection's extra with the form's field names as plain keys (a form may store a
    field as `extra__binlogsync__NAME`)."""
    prefix = "extra__binlogsync__"
    plain = {k.removeprefix(prefix): v for k, v in extra.items() if k.startswith(prefix)}
    return {**plain, **{k: v for k, v in extra.items() if not k.startswith(prefix)}}


def _tls(conn_id: str, extra: dict[str, Any], libpq: bool = False) -> TlsSettings:
    """TLS from a connection's extra, its files checked now (ConfigError names the key)."""
    if not libpq and "ssl" in extra:
        raise ConfigError(
            f"the extra of Airflow connection {conn_id} has 'ssl' (the MySQL provider's form), "
            "which binlogsync does not read",
            'write {"ssl_mode": "verify_identity", "ssl_ca": "/path/ca.pem"} (and ssl_cert, '
            "ssl_key for a client certificate)",
        )
    return from_values(extra, f"extra {{}} of Airflow connection {conn_id}", libpq=libpq)
