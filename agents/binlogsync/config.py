"""Agent configuration: one TOML file per agent, loaded once into frozen dataclasses.

Three kinds, told apart by their table: [hub] (`load_hub`), [client] (`load_client`) and
[admin] (`load_admin`, for admin tools away from the hub); `load_any` picks by the table.
Secrets never live in the TOML: a password or key comes from a file (`*_file`) or an
environment variable (`*_env`). The loaders check every key at start-up and raise ConfigError
naming the key and what was expected; unknown keys and tables are errors too, so a typo cannot
silently fall back to a default. Each section declares its keys up front (the `_*_KEYS` tuples
below): a typo is reported first, with the nearest known key as a suggestion, even when the
misspelt key is a required one that would otherwise just look missing. Key files are checked
too (a public key where a secret one belongs would only show later as a silent handshake).
The environment is read only here, passed in as a mapping, never by library modules
themselves. docs/config.md documents every key.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import tls as tls_settings
from .errors import ConfigError
from .tables import TableFilter
from .tls import TlsSettings
from .transport.limits import MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES_DEFAULT

_MISSING = object()

# The keys each table may hold. "password" is listed so that it is refused with the reason
# (secrets never go in the TOML) rather than reported as unknown.
_HUB_KEYS = (
    "name",
    "bind",
    "data_dir",
    "window",
    "batch_transactions",
    "heartbeat_interval",
    "heartbeat_liveness",
    "max_message_bytes",
    "compact_interval",
)
_ROUTE_KEYS = ("origin", "targets", "tables", "rename")
MIN_MESSAGE_BYTES = 1 << 20
MAX_MESSAGE_BYTES = 1 << 30
_CLIENT_KEYS = ("name", "hub", "heartbeat_interval", "heartbeat_liveness", "max_message_bytes")
_DATABASE_KEYS = ("host", "port", "user", "password", "password_file", "password_env")
_TLS_KEYS = tls_settings.KEYS  # ssl_mode, ssl_ca, ssl_cert, ssl_key (docs/tls.md)
_ORIGIN_KEYS = (
    *_DATABASE_KEYS,
    *_TLS_KEYS,
    "server_id",
    "tables",
    "start",
    "batch_transactions",
    "part_rows",
    "part_bytes",
    "candidates",
)
_TARGET_KEYS = (
    *_DATABASE_KEYS,
    *_TLS_KEYS,
    "kind",
    "path",
    "rotate_bytes",
    "url",
    "key_pattern",
    "ttl",
    "create_tables",
    "zero_dates",
    "group_transactions",
    "retry_initial",
    "retry_max",
    "apply_schema_changes",
    "seed_connections",
)
SCHEMA_CHANGE_MODES = ("off", "additive", "all")
ZERO_DATE_MODES = ("error", "null", "epoch")  # what a PostgreSQL target does with a zero date
TARGET_KINDS = ("mysql", "postgresql", "redis", "auditlog")
PLANNED_TARGET_KINDS: tuple[str, ...] = ()
_KIND_ONLY_KEYS = {
    "auditlog": ("path", "rotate_bytes"),
    "redis": ("key_pattern", "ttl"),
    "postgresql": ("create_tables", "zero_dates"),
    "mysql": ("seed_connections",),
}
_URL_KINDS = ("redis", "postgresql")
_DEFAULT_URLS = {
    "redis": "redis://127.0.0.1:6379/0",
    "postgresql": "postgresql://binlogsync@127.0.0.1:5432/postgres",
}
_HUB_SECURITY_KEYS = ("secret_key_file", "public_key_file", "authorized_keys_dir", "admin_keys_dir")
_CLIENT_SECURITY_KEYS = ("secret_key_file", "public_key_file", "hub_public_key_file")
_METRICS_KEYS = ("host", "port")
_BINLOG_SERVICE_KEYS = (
    "bind",
    "user",
    "password",
    "password_file",
    "password_env",
    "server_id",
    "origins",
    "tables",
    "retain_hours",
    "domains",
    "file_bytes",
    "ssl_cert",
    "ssl_key",
    "require_secure_transport",
)
_HUB_TABLES = ("hub", "route", "security", "metrics", "binlog_service")
_CLIENT_TABLES = ("client", "origin", "target", "security", "metrics")
_ADMIN_KEYS = ("name", "hub")
_ADMIN_TABLES = ("admin", "security")
_KINDS = ("hub", "client", "admin")  # the table that tells which kind a config file is


def _suggest(names: Iterable[str], known: Iterable[str]) -> str:
    """'sever_id (did you mean server_id?), zzz' for unknown names."""
    choices = sorted(known)
    out = []
    for name in names:
        close = difflib.get_close_matches(name, choices, n=1)
        out.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return ", ".join(out)


class _Section:
    """Typed access to one TOML table whose keys are declared up front.

    Unknown keys are refused when the section is made, before any value is read: a misspelt
    required key would otherwise be reported as missing, hiding the typo.
    """

    def __init__(self, name: str, data: Any, base: Path, keys: Iterable[str]) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"[{name}] must be a table", f"write it as [{name}] with keys below")
        self.name, self.data, self.base = name, data, base
        self.keys = frozenset(keys)
        unknown = sorted(set(data) - self.keys)
        if unknown:
            raise ConfigError(
                f"[{name}] has unknown key(s): {_suggest(unknown, self.keys)}",
                "check the spelling against docs/config.md",
            )

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
        assert key in self.keys, f"{key} is not declared for [{self.name}]"  # a bug, not a typo
        if key not in self.data:
            if default is _MISSING:
                raise ConfigError(f"{self.name}.{key} is missing", f"set {key} in [{self.name}]")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # TOML ints are fine where floats are expected; bools are not ints here.
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise ConfigError(
                f"{self.name}.{key} must be {names}, got {type(value).__name__} {value!r}"
            )
        return value

    def positive(self, key: str, kind: type, default: Any) -> Any:
        value = self.get(key, kind, default)
        if value <= 0:
            raise ConfigError(f"{self.name}.{key} must be > 0, got {value!r}")
        return value

    def message_bytes(self, key: str) -> int:
        """A message size limit: at least 1 MiB (the hub refuses clients below that: a part
        of a large transaction must fit), at most 1 GiB."""
        value = int(self.get(key, int, MAX_MESSAGE_BYTES_DEFAULT))
        if not MIN_MESSAGE_BYTES <= value <= MAX_MESSAGE_BYTES:
            raise ConfigError(
                f"{self.name}.{key} must be between {MIN_MESSAGE_BYTES} (1 MiB) and "
                f"{MAX_MESSAGE_BYTES} (1 GiB), got {value!r}"
            )
        return value

    def port(self, key: str, default: Any = _MISSING, allow_zero: bool = False) -> int:
        value = self.get(key, int, default)
        if not (0 if allow_zero else 1) <= value <= 65535:
            raise ConfigError(f"{self.name}.{key} must be a TCP port (1-65535), got {value!r}")
        return int(value)

    def path(self, key: str, default: Any = _MISSING) -> Path | None:
        value = self.get(key, str, default)
        if value is None:
            return None
        path = Path(value)
        return path if path.is_absolute() else (self.base / path)

    def tables(self, key: str, default: Any = ("*.*",)) -> TableFilter:
        value = self.get(key, list, list(default))
        if not value or not all(isinstance(p, str) for p in value):
            raise ConfigError(f"{self.name}.{key} must be a non-empty list of 'schema.table'")
        return TableFilter(tuple(value))

    def secret(
        self, key: str, env: Mapping[str, str], required: bool = False, read: bool = True
    ) -> str:
        """A secret from `KEY_file` or `KEY_env`; `KEY` itself is refused.

        With `read=False` the keys are checked but the file and the environment are left alone
        and "" is returned: tools that only talk to the hub have no use for the password.
        """
        if key in self.data:
            raise ConfigError(
                f"{self.name}.{key} is set in the TOML file; secrets never go there",
                f"use {key}_file = 'path' or {key}_env = 'VARIABLE' instead",
            )
        file = self.path(f"{key}_file", None)
        var = self.get(f"{key}_env", str, None)
        if not read:
            return ""
        if file is not None:
            try:
                return file.read_text().rstrip("\n")
            except OSError as exc:
                raise ConfigError(f"{self.name}.{key}_file: cannot read {file}: {exc}") from exc
        if var is not None:
            if var not in env:
                raise ConfigError(
                    f"{self.name}.{key}_env names ${var}, which is not set",
                    f"export {var}=… before starting the agent",
                )
            return env[var]
        if required:
            raise ConfigError(f"{self.name}: set {key}_file or {key}_env")
        return ""


@dataclass(frozen=True)
class DatabaseSettings:
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    # TLS to this server (tls.py); keyword-only, so positional construction stays as it was.
    tls: TlsSettings = field(default=TlsSettings(), kw_only=True)

    def connect_args(self) -> dict[str, Any]:
        """PyMySQL's arguments: the server, the user, and TLS."""
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            **tls_settings.pymysql_args(self.tls),
        }

    def __str__(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    @property
    def kind(self) -> str:
        """The kind of server: "mysql" (MySQL or MariaDB) or "postgresql"."""
        return "mysql"


@dataclass(frozen=True)
class PostgresSettings(DatabaseSettings):
    """A PostgreSQL server and database (reconcile's PostgreSQL targets)."""

    port: int = 5432
    user: str = "postgres"
    database: str = "postgres"

    @property
    def kind(self) -> str:
        return "postgresql"

    def __str__(self) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.database}"


@dataclass(frozen=True)
class Security:
    """CURVE keys. Without them the sockets are plain (loopback or trusted networks only)."""

    secret_key_file: Path | None = None
    public_key_file: Path | None = None
    hub_public_key_file: Path | None = None  # client side: whom we connect to
    authorized_keys_dir: Path | None = None  # hub side: who may connect
    admin_keys_dir: Path | None = None  # hub side: admin tools' public keys (NAME.key)

    @property
    def enabled(self) -> bool:
        return self.secret_key_file is not None


@dataclass(frozen=True)
class Metrics:
    host: str = "127.0.0.1"
    port: int = 0  # 0 = no metrics endpoint


@dataclass(frozen=True)
class Route:
    origin: str
    targets: tuple[str, ...]
    tables: TableFilter = TableFilter()
    rename: Mapping[str, str] = field(default_factory=dict)

    def target_schema(self, schema: str) -> str:
        return self.rename.get(schema, schema)


@dataclass(frozen=True)
class BinlogServiceConfig:
    """[binlog_service]: the hub also speaks the replication protocol (binlogservice/)."""

    bind: str  # host:port
    user: str
    password: str = field(repr=False)
    server_id: int
    origins: tuple[str, ...] | None = None  # None: every origin of the hub
    tables: TableFilter = TableFilter()
    retain_hours: float = 24.0
    domains: Mapping[str, int] = field(default_factory=dict)  # origin -> GTID domain
    file_bytes: int = 256 * 1024 * 1024  # a virtual binlog file is closed past this size
    # TLS for subscribers: the service's certificate and key (PEM); with both, a client that
    # asks for TLS gets it; require_secure_transport refuses the ones that do not.
    ssl_cert: Path | None = None
    ssl_key: Path | None = None
    require_secure_transport: bool = False


@dataclass(frozen=True)
class HubConfig:
    name: str
    bind: str
    data_dir: Path
    routes: tuple[Route, ...]
    security: Security = Security()
    metrics: Metrics = Metrics()
    binlog_service: BinlogServiceConfig | None = None
    window: int = 8
    batch_transactions: int = 1000
    heartbeat_interval: float = 1.0
    heartbeat_liveness: int = 3
    max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT
    compact_interval: float = 5.0


@dataclass(frozen=True)
class OriginConfig:
    database: DatabaseSettings
    server_id: int
    tables: TableFilter = TableFilter()
    start: str = "current"  # where a never-seen origin starts: "current" or "earliest"
    batch_transactions: int = 500
    # A large transaction travels in parts of at most this many rows / bytes.
    part_rows: int = 10000
    part_bytes: int = 8 * 1024 * 1024
    # Other servers that may become the origin's primary (replicas with log_slave_updates),
    # with the same user and password; capture moves to one when `database` is gone.
    candidates: tuple[DatabaseSettings, ...] = ()

    @property
    def servers(self) -> tuple[DatabaseSettings, ...]:
        """Every server capture may read: `database` first, then the candidates."""
        return (self.database, *self.candidates)


@dataclass(frozen=True)
class TargetConfig:
    database: DatabaseSettings
    # Half the hub's default window (8 DELIVERs of 1,000 transactions): while a group applies,
    # the hub sends the next one whole, so a draining target's groups are all this large, and a
    # larger group reduces more and shares its fixed costs (docs/performance-history.md). A live
    # stream's groups are what has arrived, a transaction or a few.
    group_transactions: int = 4000
    retry_initial: float = 0.5
    retry_max: float = 30.0
    # Follow the origin's schema changes (engines/mariadb/schemachange.py): off | additive | all.
    apply_schema_changes: str = "off"
    kind: str = "mysql"  # mysql | auditlog (apply/store.py)
    path: Path | None = None  # auditlog: the folder of the log
    rotate_bytes: int = 64 * 1024 * 1024  # auditlog: a new file past this size
    url: str = ""  # redis, postgresql: the server and database
    create_tables: bool = False  # postgresql: make missing tables from the origin's definitions
    zero_dates: str = "error"  # postgresql: a zero, partial or invalid date: error | null | epoch
    key_pattern: str = "{schema}:{table}:{key}"  # redis: a row's key
    ttl: int = 0  # redis: seconds until a written key expires (0: never)
    seed_connections: int = 3  # mysql: connections that apply a seed's chunks side by side


@dataclass(frozen=True)
class ClientConfig:
    name: str
    hub: str
    origin: OriginConfig | None = None
    target: TargetConfig | None = None
    security: Security = Security()
    metrics: Metrics = Metrics()
    heartbeat_interval: float = 1.0
    heartbeat_liveness: int = 3
    max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT


@dataclass(frozen=True)
class AdminConfig:
    """An admin tool run away from the hub (status, repairs): whom to ask, with which key."""

    name: str
    hub: str
    security: Security = Security()


def _seed_connections(t: _Section) -> int:
    value = t.positive("seed_connections", int, 3)
    if value > 4:
        raise ConfigError(
            f"target.seed_connections is {value}; at most 4",
            "the hub sends a target at most 4 seed chunks ahead (hub/repairs.py REPAIRS_AHEAD)",
        )
    return int(value)


def _read_toml(path: str | os.PathLike[str]) -> tuple[dict[str, Any], Path]:
    file = Path(path)
    try:
        with file.open("rb") as handle:
            return tomllib.load(handle), file.resolve().parent
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {file} does not exist", "pass --config PATH") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {file} is not valid TOML: {exc}") from exc


def _name(section: _Section, key: str = "name", default: Any = _MISSING) -> str:
    value = section.get(key, str, default)
    if not value or not all(ch.isalnum() or ch in "-_." for ch in value):
        raise ConfigError(
            f"{section.name}.{key} must be letters, digits, '-', '_' or '.', got {value!r}"
        )
    return str(value)


def _endpoint(section: _Section, key: str, default: Any = _MISSING) -> str:
    value = section.get(key, str, default)
    if not value.startswith(("tcp://", "ipc://", "inproc://")):
        raise ConfigError(
            f"{section.name}.{key} must be a ZeroMQ endpoint like tcp://127.0.0.1:5555, "
            f"got {value!r}"
        )
    return str(value)


def _security(data: dict[str, Any], base: Path, hub: bool) -> Security:
    if "security" not in data:
        return Security()
    s = _Section(
        "security", data["security"], base, _HUB_SECURITY_KEYS if hub else _CLIENT_SECURITY_KEYS
    )
    secret = s.path("secret_key_file", None)
    public = s.path("public_key_file", None)
    peer = None if hub else s.path("hub_public_key_file", None)
    authorized = s.path("authorized_keys_dir", None) if hub else None
    admins = s.path("admin_keys_dir", None) if hub else None
    security = Security(secret, public, peer, authorized, admins)
    needed = ("authorized_keys_dir",) if hub else ("hub_public_key_file",)
    if secret is not None:
        for key in needed:
            if getattr(security, key) is None:
                raise ConfigError(
                    f"security.{key} is missing (CURVE is on: secret_key_file is set)"
                )
        _key_file("secret_key_file", secret, secret=True)
    if public is not None:
        _key_file("public_key_file", public, secret=False)
    if peer is not None:
        _key_file("hub_public_key_file", peer, secret=False)
    if authorized is not None:
        _keys_dir("authorized_keys_dir", authorized)
    if admins is not None:
        _keys_dir("admin_keys_dir", admins)
    return security


def _key_file(key: str, file: Path, secret: bool) -> None:
    from .transport import curve  # zmq only where keys are checked: Spark executors lack it

    problem = curve.key_file_problem(file, secret)
    if problem is None:
        return
    if secret and problem.endswith("only a public key"):
        fix = f"point {key} at the NAME.key_secret file, not NAME.key"
    else:
        fix = "make keys with: binlogsync keys --dir DIR --name NAME"
    raise ConfigError(f"security.{key}: {problem}", fix)


def _keys_dir(key: str, folder: Path) -> None:
    """A folder of public `NAME.key` files, each of which must be readable."""
    if not folder.is_dir():
        state = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError(
            f"security.{key}: {folder} {state}",
            "make the folder and copy the peers' public NAME.key files into it",
        )
    from .transport import curve

    for file in sorted(folder.glob("*.key")):
        problem = curve.key_file_problem(file, secret=False)
        if problem is not None:
            raise ConfigError(
                f"security.{key}: {problem}",
                "replace it with the peer's NAME.key made by `binlogsync keys`, or remove it",
            )


def _metrics(data: dict[str, Any], base: Path) -> Metrics:
    if "metrics" not in data:
        return Metrics()
    s = _Section("metrics", data["metrics"], base, _METRICS_KEYS)
    return Metrics(s.get("host", str, "127.0.0.1"), s.port("port", 0, allow_zero=True))


def _database(
    s: _Section, env: Mapping[str, str], secrets: bool, tls: TlsSettings | None = None
) -> DatabaseSettings:
    """A MySQL/MariaDB server from its section; TLS from the section's ssl_* keys unless the
    caller read it elsewhere (`tls`: a target's URL)."""
    return DatabaseSettings(
        host=s.get("host", str, "127.0.0.1"),
        port=s.port("port", 3306),
        user=s.get("user", str, "root"),
        password=s.secret("password", env, read=secrets),
        tls=_tls(s, secrets) if tls is None else tls,
    )


def _tls(s: _Section, secrets: bool) -> TlsSettings:
    """The section's ssl_* keys. With `secrets=False` (tools that only talk to the hub) the
    files are not read: they may not be at hand where such a tool runs."""
    return tls_settings.from_values(s.data, f"{s.name}.{{}}", s.base, checked=secrets)


def _target_tls(s: _Section, kind: str, url: str, secrets: bool) -> tuple[str, TlsSettings | None]:
    """A target's URL and TLS: a PostgreSQL target's in its URL with libpq's names, a Redis
    target's from the scheme and the ssl_* keys (beside the URL or in it); None: from the
    section (a MySQL target)."""
    if kind == "postgresql":
        given = [k for k in _TLS_KEYS if k in s.data]
        if given:
            raise ConfigError(
                f"target.{given[0]} is for MySQL and Redis targets; a PostgreSQL target takes "
                "TLS in its URL with libpq's names",
                'write url = "postgresql://user@host:5432/db?sslmode=verify-full&sslrootcert='
                '/path/ca.pem" (sslcert, sslkey for a client certificate)',
            )
        from urllib.parse import parse_qsl, urlsplit

        query = dict(parse_qsl(urlsplit(url).query))
        return url, tls_settings.from_values(
            query, "{} in target.url", s.base, libpq=True, checked=secrets
        )
    if kind == "redis":
        return tls_settings.for_redis(url, s.data, "target.{}", s.base, checked=secrets)
    if kind == "auditlog":
        given = [k for k in _TLS_KEYS if k in s.data]
        if given:
            raise ConfigError(f"target.{given[0]} is for database targets; this one is an audit log",
                              "remove it")  # fmt: skip
        return url, tls_settings.DISABLED
    return url, None


def _candidates(s: _Section, env: Mapping[str, str], secrets: bool) -> tuple[DatabaseSettings, ...]:
    """origin.candidates: ["host:port", …], the same credentials as the origin's."""
    items = s.get("candidates", list, [])
    main = _database(s, env, secrets)
    seen = {(main.host, main.port)}
    out = []
    for i, item in enumerate(items):
        host, sep, port = item.rpartition(":") if isinstance(item, str) else ("", "", "")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f'origin.candidates[{i}] must be "host:port", got {item!r}',
                'write e.g. candidates = ["db2.example:3306", "db3.example:3306"]',
            )
        if (host, int(port)) in seen:
            raise ConfigError(
                f"origin.candidates[{i}] {item!r} is named twice (or is origin.host:port)",
                "list each other server once; origin.host/port is the first candidate already",
            )
        seen.add((host, int(port)))
        out.append(DatabaseSettings(host, int(port), main.user, main.password, tls=main.tls))
    return tuple(out)


def _routes(data: dict[str, Any], base: Path, service: bool = False) -> tuple[Route, ...]:
    items = data.get("route", [])
    if not isinstance(items, list):
        raise ConfigError("route must be an array of tables: write each as [[route]]")
    routes = []
    for i, item in enumerate(items):
        s = _Section(f"route[{i}]", item, base, _ROUTE_KEYS)
        origin = _name(s, "origin")
        targets = s.get("targets", list, [] if service else _MISSING)
        if (not targets and not service) or not all(isinstance(t, str) and t for t in targets):
            raise ConfigError(
                f"route[{i}].targets must be a non-empty list of host names"
                + ("" if service else " (it may be empty when [binlog_service] serves it)")
            )
        if origin in targets:
            raise ConfigError(f"route[{i}] sends {origin!r} to itself", "remove it from targets")
        rename = s.get("rename", dict, {})
        if not all(isinstance(k, str) and isinstance(v, str) and v for k, v in rename.items()):
            raise ConfigError(f"route[{i}].rename must map schema names to schema names")
        routes.append(Route(origin, tuple(targets), s.tables("tables"), dict(rename)))
    return tuple(routes)


def _binlog_service(
    data: dict[str, Any], base: Path, env: Mapping[str, str], routes: tuple[Route, ...]
) -> BinlogServiceConfig | None:
    if "binlog_service" not in data:
        return None
    s = _Section("binlog_service", data["binlog_service"], base, _BINLOG_SERVICE_KEYS)
    bind = s.get("bind", str)
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(
            f"binlog_service.bind must be host:port, got {bind!r}",
            'write e.g. bind = "127.0.0.1:3307"',
        )
    password = s.secret("password", env, required=True)
    if not password:
        raise ConfigError(
            "binlog_service: the password is empty; subscribers would read every origin's "
            "changes without one",
            "put a password in the file password_file names (or the variable password_env names)",
        )
    server_id = s.get("server_id", int)
    if not 1 <= server_id < 1 << 32:
        raise ConfigError(f"binlog_service.server_id must be 1 to 4294967295, got {server_id}")
    known = {r.origin for r in routes}
    origins = s.get("origins", list, None)
    if origins is not None:
        unknown = [o for o in origins if o not in known]
        if not origins or not all(isinstance(o, str) for o in origins) or unknown:
            raise ConfigError(
                "binlog_service.origins must name origins of the hub's routes"
                + (f"; {unknown[0]!r} is none" if unknown else ""),
                f"the hub's origins are: {', '.join(sorted(known)) or 'none'}",
            )
    domains = s.get("domains", dict, {})
    for origin, domain in domains.items():
        if origin not in known or type(domain) is not int or not 0 <= domain < 1 << 32:
            raise ConfigError(
                f"binlog_service.domains must map origins of the hub to GTID domains "
                f"(0 to 4294967295), got {origin} = {domain!r}"
            )
    if len(set(domains.values())) != len(domains):
        raise ConfigError("binlog_service.domains gives two origins the same domain")
    file_bytes = int(s.get("file_bytes", int, 256 * 1024 * 1024))
    if not 4096 <= file_bytes <= 1 << 32:
        raise ConfigError(f"binlog_service.file_bytes must be 4096 to 4 GiB, got {file_bytes}")
    ssl_cert, ssl_key = s.path("ssl_cert", None), s.path("ssl_key", None)
    if (ssl_cert is None) != (ssl_key is None):
        raise ConfigError(
            "binlog_service: ssl_cert and ssl_key go together (one is set, the other is not)",
            "give both PEM files (the service's certificate and its private key), or neither",
        )
    for name, file in (("ssl_cert", ssl_cert), ("ssl_key", ssl_key)):
        if file is not None and not file.is_file():
            raise ConfigError(
                f"binlog_service.{name}: {file} is not a readable file",
                "give the path of a PEM file (relative paths are from the config's folder)",
            )
    require_tls = bool(s.get("require_secure_transport", bool, False))
    if require_tls and ssl_cert is None:
        raise ConfigError(
            "binlog_service.require_secure_transport needs a certificate to offer TLS with",
            "set ssl_cert and ssl_key",
        )
    return BinlogServiceConfig(
        bind=bind,
        user=_name(s, "user"),
        password=password,
        server_id=server_id,
        origins=tuple(origins) if origins is not None else None,
        tables=s.tables("tables"),
        retain_hours=s.positive("retain_hours", float, 24.0),
        domains=dict(domains),
        file_bytes=file_bytes,
        ssl_cert=ssl_cert,
        ssl_key=ssl_key,
        require_secure_transport=require_tls,
    )


def load_hub(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> HubConfig:
    env = os.environ if env is None else env
    data, base = _read_toml(path)
    _no_unknown_tables(data, _HUB_TABLES)
    if "hub" not in data:
        raise ConfigError("the hub config has no [hub] table", "see docs/config.md")
    s = _Section("hub", data["hub"], base, _HUB_KEYS)
    routes = _routes(data, base, service="binlog_service" in data)
    return HubConfig(
        name=_name(s, default="hub"),
        bind=_endpoint(s, "bind"),
        data_dir=s.path("data_dir", None) or base,
        routes=routes,
        binlog_service=_binlog_service(data, base, env, routes),
        security=_security(data, base, hub=True),
        metrics=_metrics(data, base),
        window=s.positive("window", int, 8),
        batch_transactions=s.positive("batch_transactions", int, 1000),
        heartbeat_interval=s.positive("heartbeat_interval", float, 1.0),
        heartbeat_liveness=s.positive("heartbeat_liveness", int, 3),
        max_message_bytes=s.message_bytes("max_message_bytes"),
        compact_interval=s.positive("compact_interval", float, 5.0),
    )


def load_client(
    path: str | os.PathLike[str], env: Mapping[str, str] | None = None, secrets: bool = True
) -> ClientConfig:
    """`secrets=False` leaves the database passwords unread (empty): for tools that only talk
    to the hub, such as `binlogsync status`, run where the password is not at hand."""
    env = os.environ if env is None else env
    data, base = _read_toml(path)
    _no_unknown_tables(data, _CLIENT_TABLES)
    if "client" not in data:
        raise ConfigError("the client config has no [client] table", "see docs/config.md")
    s = _Section("client", data["client"], base, _CLIENT_KEYS)
    origin = target = None
    if "origin" in data:
        o = _Section("origin", data["origin"], base, _ORIGIN_KEYS)
        start = o.get("start", str, "current")
        if start not in ("current", "earliest"):
            raise ConfigError(f"origin.start must be 'current' or 'earliest', got {start!r}")
        origin = OriginConfig(
            database=_database(o, env, secrets),
            server_id=o.positive("server_id", int, _MISSING),
            tables=o.tables("tables"),
            start=start,
            batch_transactions=o.positive("batch_transactions", int, 500),
            part_rows=o.positive("part_rows", int, 10000),
            part_bytes=o.positive("part_bytes", int, 8 * 1024 * 1024),
            candidates=_candidates(o, env, secrets),
        )
    if "target" in data:
        t = _Section("target", data["target"], base, _TARGET_KEYS)
        kind = t.get("kind", str, "mysql")
        if kind in PLANNED_TARGET_KINDS:
            raise ConfigError(
                f"target.kind {kind!r} is not built yet in this version",
                f"use one of {', '.join(TARGET_KINDS)}",
            )
        if kind not in TARGET_KINDS:
            raise ConfigError(f"target.kind must be one of {', '.join(TARGET_KINDS)}, got {kind!r}")
        for other, keys in _KIND_ONLY_KEYS.items():
            wrong = [k for k in keys if other != kind and k in data["target"]]
            if wrong:
                raise ConfigError(
                    f"target.{wrong[0]} is for kind {other!r}, and this target is {kind!r}",
                    f"remove it, or set kind = {other!r}",
                )
        if "url" in data["target"] and kind not in _URL_KINDS:
            raise ConfigError(
                f"target.url is for kinds {' and '.join(_URL_KINDS)}, and this target is {kind!r}",
                "remove it, or set the kind",
            )
        if kind != "mysql":
            shared = ("password", "password_file", "password_env") if kind in _URL_KINDS else ()
            wrong = [k for k in _DATABASE_KEYS if k in data["target"] and k not in shared]
            if wrong:
                raise ConfigError(
                    f"target.{wrong[0]} names a MySQL server, and this target is {kind!r}",
                    "remove it"
                    + (" (give target.url)" if kind in _URL_KINDS else "")
                    + ', or set kind = "mysql"',
                )
        key_pattern = t.get("key_pattern", str, "{schema}:{table}:{key}")
        if "{key}" not in key_pattern:
            raise ConfigError(
                f"target.key_pattern {key_pattern!r} has no {{key}}: rows would share keys",
                'write it like "{schema}:{table}:{key}"',
            )
        schema_changes = t.get("apply_schema_changes", str, "off")
        if schema_changes not in SCHEMA_CHANGE_MODES:
            raise ConfigError(
                f"target.apply_schema_changes must be one of {', '.join(SCHEMA_CHANGE_MODES)}, "
                f"got {schema_changes!r}"
            )
        url, target_tls = _target_tls(
            t, kind, t.get("url", str, _DEFAULT_URLS.get(kind, "")), secrets
        )
        zero_dates = t.get("zero_dates", str, "error")
        if zero_dates not in ZERO_DATE_MODES:
            raise ConfigError(
                f"target.zero_dates must be one of {', '.join(ZERO_DATE_MODES)}, got {zero_dates!r}",
                "see docs/config.md: what a PostgreSQL target does with a zero or partial date",
            )
        target = TargetConfig(
            database=_database(t, env, secrets, target_tls),
            group_transactions=t.positive(
                "group_transactions", int, TargetConfig.group_transactions
            ),
            retry_initial=t.positive("retry_initial", float, 0.5),
            retry_max=t.positive("retry_max", float, 30.0),
            apply_schema_changes=schema_changes,
            kind=kind,
            path=t.path("path") if kind == "auditlog" else None,
            rotate_bytes=t.positive("rotate_bytes", int, 64 * 1024 * 1024),
            url=url,
            create_tables=t.get("create_tables", bool, False),
            zero_dates=zero_dates,
            key_pattern=key_pattern,
            ttl=t.positive("ttl", int, 1) if "ttl" in data["target"] else 0,
            seed_connections=_seed_connections(t),
        )
    if origin is None and target is None:
        raise ConfigError(
            "the client has neither [origin] nor [target]",
            "add [origin] to capture from a database, [target] to apply to one, or both",
        )
    return ClientConfig(
        name=_name(s),
        hub=_endpoint(s, "hub"),
        origin=origin,
        target=target,
        security=_security(data, base, hub=False),
        metrics=_metrics(data, base),
        heartbeat_interval=s.positive("heartbeat_interval", float, 1.0),
        heartbeat_liveness=s.positive("heartbeat_liveness", int, 3),
        max_message_bytes=s.message_bytes("max_message_bytes"),
    )


def load_admin(path: str | os.PathLike[str]) -> AdminConfig:
    data, base = _read_toml(path)
    return admin_from_mapping(data, base)


def admin_from_mapping(data: dict[str, Any], base: Path) -> AdminConfig:
    """An admin config from its tables as a mapping (what a TOML file holds), checked as
    `load_admin` checks a file: the Airflow hook builds one from a connection this way."""
    _no_unknown_tables(data, _ADMIN_TABLES)
    if "admin" not in data:
        raise ConfigError("the admin config has no [admin] table", "see docs/config.md")
    s = _Section("admin", data["admin"], base, _ADMIN_KEYS)
    return AdminConfig(
        name=_name(s, default="admin"),
        hub=_endpoint(s, "hub"),
        security=_security(data, base, hub=False),
    )


def admin_toml(config: AdminConfig) -> str:
    """`config` as the TOML of an [admin] file (for a tool run in another process)."""
    lines = ["[admin]", f"name = {json.dumps(config.name)}", f"hub = {json.dumps(config.hub)}"]
    s = config.security
    if s.enabled:
        lines += ["", "[security]", f"secret_key_file = {json.dumps(str(s.secret_key_file))}"]
        lines.append(f"hub_public_key_file = {json.dumps(str(s.hub_public_key_file))}")
    return "\n".join(lines) + "\n"


def load_any(
    path: str | os.PathLike[str], env: Mapping[str, str] | None = None, secrets: bool = True
) -> HubConfig | ClientConfig | AdminConfig:
    """Any agent's or admin tool's config, by the table it has: [hub], [client] or [admin]."""
    data, _ = _read_toml(path)
    kinds = [kind for kind in _KINDS if kind in data]
    if not kinds:
        others = sorted(set(data) - {*_HUB_TABLES, *_CLIENT_TABLES, *_ADMIN_TABLES})
        raise ConfigError(
            f"config {path} has no [hub], [client] or [admin] table"
            + (f"; it has {_suggest(others, _KINDS)}" if others else ""),
            "see docs/config.md",
        )
    if len(kinds) > 1:
        raise ConfigError(
            f"config {path} has both {' and '.join(f'[{k}]' for k in kinds)}",
            "one file per agent or tool: split it",
        )
    if kinds == ["hub"]:
        return load_hub(path, env)
    if kinds == ["client"]:
        return load_client(path, env, secrets=secrets)
    return load_admin(path)


def _no_unknown_tables(data: dict[str, Any], known: Iterable[str]) -> None:
    """Checked first: a misspelt table would otherwise surface as a confusing later error
    ("neither [origin] nor [target]")."""
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown table(s) in config: {_suggest(unknown, known)}",
            f"allowed here: {', '.join(sorted(known))}",
        )
