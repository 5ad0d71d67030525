"""The one edge between binlogsync and PostgreSQL servers (psycopg), as mysql.py is PyMySQL's.

Every session is opened by `connect` (TLS as the settings say, tls.py: libpq's parameters
override the URL's), and every psycopg exception becomes one of our errors through one table of
SQLSTATE codes and classes (`kind_of`):

    unreachable   the connection failed or was lost (class 08, 57P01-57P03, a closed session)
    access        the server refused the user (class 28)
    privilege     the user lacks a privilege (42501)
    missing_table an undefined table or schema (42P01, 3F000)
    missing_column                      (42703)
    constraint    a unique, foreign key, not-null or check violation (class 23)
    value         a value the column cannot hold (class 22)
    transient     a serialization failure or deadlock, a lock not available (40001, 40P01, 55P03)
    too_large     a statement or value past the server's limits (class 54)

psycopg itself is imported here only (and by the modules of the PostgreSQL adapter), lazily by
its callers: it is an extra (`binlogsync[postgresql]`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from .. import tls as tls_settings
from ..errors import (
    ApplyError,
    BinlogsyncError,
    ConfigError,
    ConstraintError,
    MissingTableError,
    SchemaMismatchError,
    UnreachableError,
)
from ..tls import TlsSettings

_CODES = {
    "42501": "privilege",
    "42P01": "missing_table",
    "3F000": "missing_table",
    "42703": "missing_column",
    "40001": "transient",
    "40P01": "transient",
    "55P03": "transient",
    "57P01": "unreachable",
    "57P02": "unreachable",
    "57P03": "unreachable",
}
_CLASSES = {
    "08": "unreachable",
    "28": "access",
    "23": "constraint",
    "22": "value",
    "54": "too_large",
}


def driver() -> Any:
    """The psycopg module; its absence is a ConfigError that says what to install."""
    try:
        import psycopg
    except ImportError as exc:
        raise ConfigError(
            "a PostgreSQL database needs psycopg, which is not installed",
            "pip install 'binlogsync[postgresql]'",
        ) from exc
    return psycopg


def connect(url: str, password: str, tls: TlsSettings, **kwargs: Any) -> Any:
    """A session on the server of `url` with TLS as `tls` says; TLS failures are TlsError.
    `url` may be "" with the server given as keywords (host=, port=, user=, dbname=)."""
    psycopg = driver()
    parts = urlsplit(url)
    host = parts.hostname or kwargs.get("host") or "127.0.0.1"
    server = f"PostgreSQL at {host}:{parts.port or kwargs.get('port') or 5432}"
    return tls_settings.open_libpq(
        psycopg.connect, tls, server, host, url, password=password or None, **kwargs
    )


def safe(url: str) -> str:
    """The URL without user, password and options, for messages."""
    return url.split("@")[-1].split("?")[0]


def kind_of(exc: BaseException) -> str:
    """The kind of a psycopg exception (module doc); "other" when none says more."""
    import psycopg

    if isinstance(exc, psycopg.OperationalError) and getattr(exc, "sqlstate", None) is None:
        return "unreachable"  # the connection, not a statement, failed
    if isinstance(exc, psycopg.InterfaceError):
        return "unreachable"
    code = str(getattr(exc, "sqlstate", "") or "")
    return _CODES.get(code) or _CLASSES.get(code[:2], "other")


def errors() -> tuple[type[Exception], ...]:
    """psycopg's error class, when psycopg is installed (else nothing can raise it)."""
    try:
        import psycopg
    except ImportError:
        return ()
    return (psycopg.Error,)


def translate(exc: BaseException, url: str, doing: str, where: str = "") -> BinlogsyncError:
    """A psycopg exception as one of our errors, saying what was being done (`doing`) and,
    when known, on which origin transaction and table (`where`)."""
    kind = kind_of(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    head = f"{where}: " if where else ""
    target = f"the PostgreSQL target {safe(url)}"
    if kind == "unreachable":
        return UnreachableError(
            f"{head}{target} failed while {doing}: {text}",
            "is the server up, and are target.url and its password right?",
        )
    if kind == "access":
        return ApplyError(
            f"{head}{target} refused the user while {doing}: {text}",
            "check target.url's user and its password",
        )
    if kind == "privilege":
        return ApplyError(
            f"{head}{target} refused while {doing}: {text}",
            "grant the user what it needs: USAGE and CREATE on the binlogsync schema, SELECT, "
            "INSERT, UPDATE, DELETE (and TRUNCATE) on the routed tables",
        )
    if kind == "missing_table":
        return MissingTableError(
            f"{head}{target} has no such table while {doing}: {text}",
            "create it, or set create_tables = true (or apply_schema_changes) and seed it",
        )
    if kind == "missing_column":
        return SchemaMismatchError(
            f"{head}{target}: {text} while {doing}",
            'add the column on the target, or set apply_schema_changes = "additive"',
        )
    if kind == "constraint":
        return ConstraintError(f"{head}{target} refused a row while {doing}: {text}")
    if kind == "value":
        return ApplyError(
            f"{head}{target} cannot hold a value while {doing}: {text}",
            "give the column a type that holds the origin's values (docs/targets.md)",
        )
    return ApplyError(f"{head}{target} refused {doing}: {text}")
