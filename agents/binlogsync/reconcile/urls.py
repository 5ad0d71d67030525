"""Database URLs as typed on the command line: `mysql://user:password@host:port`.

The password may be left out of the URL (it would show in `ps` and shell history) and come
from a file or the environment instead: `?password_file=PATH` names a file that holds the
password alone (what jobs that run unattended use: the Airflow operator, spark-submit with
`--files`), `?password_env=VAR` a variable for one URL; otherwise the caller's default
variable for that role is used (the CLI passes `BINLOGSYNC_SOURCE_PASSWORD` for the source and
`BINLOGSYNC_TARGET_PASSWORD` for targets).
User and password are percent-decoded, so `p%40ss` is `p@ss`. The scheme may be `mysql` or
`mariadb`; the port defaults to 3306; an IPv6 host is written in brackets (`[::1]`).
Where the caller allows it (reconcile's targets), `postgresql://user@host:5432/database` names
a PostgreSQL database instead (the port defaults to 5432, the database to the user's name, as
libpq does).
TLS (docs/tls.md) is in the options too: `?ssl_mode=verify_ca&ssl_ca=/path/ca.pem` (and
`ssl_cert`, `ssl_key`) for MySQL/MariaDB, libpq's `?sslmode=verify-full&sslrootcert=/path`
(`sslcert`, `sslkey`) for PostgreSQL. The files are checked here; on a cluster they must exist
at the same paths on the executors.
The environment is passed in as a mapping: this module never reads `os.environ` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from .. import tls
from ..config import DatabaseSettings, PostgresSettings
from ..errors import ConfigError

SCHEMES = ("mysql", "mariadb")
PG_SCHEMES = ("postgresql", "postgres")
_EXAMPLE = "mysql://user:password@host:3306 (or mysql://user@host:3306 with the password in $VAR)"


def parse_url(
    text: str,
    env: Mapping[str, str] | None = None,
    default_password_env: str | None = None,
    postgres: bool = False,
) -> DatabaseSettings:
    """`DatabaseSettings` for `text` (`PostgresSettings` for a postgresql:// URL where
    `postgres` allows one); ConfigError naming what is wrong otherwise."""
    env = env or {}
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"database URL {_safe(text)!r} is malformed: {exc}", _EXAMPLE) from exc
    is_pg = parts.scheme in PG_SCHEMES
    if parts.scheme not in SCHEMES and not (postgres and is_pg):
        allowed = "mysql://, mariadb:// or postgresql://" if postgres else "mysql:// or mariadb://"
        raise ConfigError(f"database URL {_safe(text)!r} must start with {allowed}", _EXAMPLE)
    if not parts.hostname:
        raise ConfigError(f"database URL {_safe(text)!r} has no host", _EXAMPLE)
    if is_pg and "/" in parts.path.strip("/"):
        raise ConfigError(
            f"database URL {_safe(text)!r}: the path must be one database name",
            "write postgresql://user@host:5432/warehouse",
        )
    if parts.path not in ("", "/") and not is_pg:
        raise ConfigError(
            f"database URL {_safe(text)!r} names a database ({parts.path.lstrip('/')!r})",
            "leave it out: tables are named with their schema in --tables, like shop.orders",
        )
    query = parse_qs(parts.query, keep_blank_values=True)
    tls_keys = tuple(tls.LIBPQ_KEYS.values()) if is_pg else tls.KEYS
    unknown = sorted(set(query) - {"password_env", "password_file", *tls_keys})
    if unknown:
        raise ConfigError(
            f"database URL {_safe(text)!r} has unknown option(s): {', '.join(unknown)}",
            "the options are ?password_file=PATH, ?password_env=VARIABLE and TLS's "
            + ", ".join(tls_keys),
        )
    twice = sorted(k for k, v in query.items() if len(v) > 1)
    if twice:
        raise ConfigError(f"database URL {_safe(text)!r} has {twice[0]} more than once")
    settings = tls.from_values(
        {k: v[0] for k, v in query.items() if k in tls_keys},
        "{} in the URL " + _safe(text).split("?")[0].replace("{", "{{").replace("}", "}}"),
        libpq=is_pg,
    )
    if "password_env" in query and "password_file" in query:
        raise ConfigError(
            f"database URL {_safe(text)!r} names both a password file and a variable",
            "keep one of ?password_file= and ?password_env=",
        )
    user = unquote(parts.username) if parts.username else "root"
    if parts.password is not None:
        password = unquote(parts.password)
    elif "password_file" in query:
        from .passwords import read_password_file

        password = read_password_file(query["password_file"][0])
    else:
        var = query["password_env"][0] if "password_env" in query else default_password_env
        if "password_env" in query and var not in env:
            raise ConfigError(
                f"database URL {_safe(text)!r} takes its password from ${var}, which is not set",
                f"export {var}=… first",
            )
        password = env.get(var, "") if var else ""
    if is_pg:
        user = unquote(parts.username) if parts.username else "postgres"
        database = unquote(parts.path.strip("/")) or user
        return PostgresSettings(
            parts.hostname, port or 5432, user, password, database, tls=settings
        )
    return DatabaseSettings(parts.hostname, port or 3306, user, password, tls=settings)


def _safe(text: str) -> str:
    """`text` with any password replaced by `***`, for messages."""
    try:
        parts = urlsplit(text)
        if parts.password is None:
            return text
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return parts._replace(netloc=netloc).geturl()
    except ValueError:
        return "<unparseable URL>"
