"""The one edge between binlogsync and MySQL/MariaDB servers (PyMySQL).

Every connection is opened by `connect` (utf8mb4, a connect timeout, named in messages by what
the caller was doing), and every PyMySQL or socket exception becomes one of our errors through
one table of server error codes (`KINDS`):

    unreachable   the connection failed or was lost (client errors 2000-2999, 1040, 1053, …)
    access        the server refused the user (1045)
    privilege     the user lacks a privilege (1044, 1142, 1143, 1227)
    purged        a binlog position the server no longer has (1236)
    missing_table, missing_column, no_default, value, constraint, transient, too_large

TLS (tls.py) is added here to every connection, the binlog stream's included (`open_connection`):
a handshake that fails, or a server without TLS where the settings require it, is a TlsError
naming the setting and the file, never an "unreachable" retried forever.

`errors(db, doing)` is the context manager that callers wrap their statements in; `translate`
is the same mapping for callers that need the error object. Unreachable servers are
`UnreachableError` (retryable); the rest is `refused`, a class the caller chooses
(PreflightError for capture, ApplyError for apply, DatabaseError by default).
"""

from __future__ import annotations

import functools
import select
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeAlias

import pymysql

from . import tls
from .config import DatabaseSettings
from .errors import ApplyError, BinlogsyncError, DatabaseError, TlsError, UnreachableError
from .tabledef import MAX_IDENTIFIER

_GROUPS: Final[dict[str, frozenset[int]]] = {
    "unreachable": frozenset(
        {1040, 1053, 1152, 1154, 1155, 1156, 1157, 1158, 1159, 1160, 1161, 1927}
    ),
    "access": frozenset({1045}),
    "privilege": frozenset({1044, 1142, 1143, 1227}),
    "purged": frozenset({1236}),
    "missing_table": frozenset({1049, 1146}),
    "missing_column": frozenset({1054}),
    "no_default": frozenset({1364}),
    "value": frozenset({1138, 1264, 1265, 1292, 1366, 1367, 1406, 1411, 1690, 3140, 4078}),
    # 1263: a NULL for a NOT NULL column in LOAD DATA (1048 in an INSERT)
    "constraint": frozenset(
        {1048, 1062, 1216, 1217, 1263, 1451, 1452, 1557, 1586, 1761, 1762, 3819, 4025}
    ),
    "transient": frozenset({1205, 1213}),
    "too_large": frozenset({1153}),
}
KINDS: Final[dict[int, str]] = {code: kind for kind, codes in _GROUPS.items() for code in codes}
_CLIENT_ERRORS = range(2000, 3000)  # CR_* codes: the connection, not the server, failed

Connection: TypeAlias = pymysql.connections.Connection


def code_of(exc: BaseException) -> int | None:
    """The server's (or client library's) error number of a PyMySQL exception."""
    args = tuple(getattr(exc, "args", ()))
    return args[0] if args and isinstance(args[0], int) else None


def text_of(exc: BaseException) -> str:
    args = tuple(getattr(exc, "args", ()))
    return str(args[1]) if len(args) > 1 else str(exc)


def kind_of(exc: BaseException) -> str:
    """What an exception means, by the table above ('other' when it is not in it)."""
    if isinstance(exc, OSError | pymysql.err.InterfaceError):
        return "unreachable"
    code = code_of(exc)
    if code in (None, 0) or (code is not None and code in _CLIENT_ERRORS):
        return "unreachable"
    assert code is not None
    return KINDS.get(code, "other")


def describe(exc: BaseException) -> str:
    """`MySQL error 1146: Table 'x.y' doesn't exist`, or the exception's type and text."""
    code = code_of(exc)
    return f"MySQL error {code}: {text_of(exc)}" if code else f"{type(exc).__name__}: {exc}"


def translate(
    exc: BaseException,
    db: DatabaseSettings,
    doing: str,
    refused: type[BinlogsyncError] = DatabaseError,
    grants: str = "",
) -> BinlogsyncError:
    """`exc` as one of our errors, naming the server, what we were doing, and the fix."""
    where = f"{db.host}:{db.port}"
    kind, text = kind_of(exc), text_of(exc)
    if kind == "unreachable":
        return UnreachableError(
            f"{doing}: cannot reach MySQL/MariaDB at {where}: {text}",
            "check that the server is running, that host and port in the config are right, "
            "and that no firewall blocks the port",
        )
    if kind == "access":
        error = refused(
            f"{doing}: access denied for user {db.user!r} at {where}: {text}",
            "check the user and password in the config (password_file or password_env)"
            + tls.cleartext_refused_hint(db.tls),
        )
    elif kind == "privilege":
        error = refused(
            f"{doing}: user {db.user!r} at {where} lacks a privilege: {text}",
            grants or f"grant {db.user!r} the privilege the message names",
        )
    elif kind == "purged":
        error = refused(
            f"{doing}: the server {where} cannot serve the binlog from the requested "
            f"position: {text}",
            "the position was purged or never existed: reseed the targets, then move capture "
            "on with `binlogsync capture-skip --origin NAME --to current --reason …`",
        )
    else:
        error = refused(f"{doing}: MySQL/MariaDB at {where} refused: {describe(exc)}")
    if isinstance(error, DatabaseError):
        error.code, error.kind = code_of(exc), kind
    return error


@contextmanager
def errors(
    db: DatabaseSettings,
    doing: str,
    refused: type[BinlogsyncError] = DatabaseError,
    grants: str = "",
) -> Iterator[None]:
    """Run the block; a PyMySQL or socket exception leaves it as one of our errors."""
    try:
        yield
    except (pymysql.err.MySQLError, OSError) as exc:
        raise translate(exc, db, doing, refused, grants) from exc


def server(db: DatabaseSettings) -> str:
    """How messages name the server."""
    return f"MySQL/MariaDB at {db.host}:{db.port}"


def open_connection(
    db: DatabaseSettings, factory: Any = pymysql.connections.Connection, /, **kwargs: Any
) -> Connection:
    """A PyMySQL connection (made by `factory`, a Connection class) with `db`'s server, user
    and TLS (`kwargs` may name a database: `db` and `factory` are positional only). TLS failures are TlsError; any other failure is PyMySQL's own exception, for the
    caller to translate. `preferred` with certificate files, against a server without TLS,
    connects again in cleartext (PyMySQL refuses the first: a context means required)."""
    args = {**db.connect_args(), **kwargs}
    factory = reusing_preferred_context(factory)  # changes only what `preferred` asks for
    try:
        try:
            conn = factory(**args)
        except pymysql.err.OperationalError as exc:
            if db.tls.mode != "preferred" or "ssl" not in args or code_of(exc) != 2026:
                raise
            conn = factory(**{**args, "ssl": None, "ssl_disabled": True})
    except (pymysql.err.MySQLError, OSError) as exc:
        failed = tls.failure(exc, db.tls, server(db), db.host)
        if failed is not None:
            raise failed from exc
        raise
    try:
        tls.cleartext(db.tls, server(db), tls.mysql_encrypted(conn))
    except TlsError:
        close(conn)
        raise
    return conn


@functools.cache
def _preferred_context() -> ssl.SSLContext:
    """The context PyMySQL makes for `preferred` (TLS when offered, no certificate checked),
    made once and without the system's CA certificates, which it never uses: PyMySQL makes
    it per connection with them, and loading them cost 35–70 ms of CPU each time (a third of
    a small reconciliation's plan; a tenth of a target agent's start)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


@functools.cache
def reusing_preferred_context(factory: type) -> type:
    """`factory` (a PyMySQL Connection class) with `preferred`'s context made once. PyMySQL
    1.2 asks `_create_ssl_ctx({})` for that context (pinned in pyproject.toml); any other
    request is its own. Every connection `open_connection` makes is of such a class (the
    sandbox's too)."""

    class Reusing(factory):  # type: ignore[misc]
        def _create_ssl_ctx(self, sslp: Any) -> Any:
            if isinstance(sslp, dict) and not sslp:
                return _preferred_context()
            return super()._create_ssl_ctx(sslp)

    Reusing.__name__ = Reusing.__qualname__ = factory.__name__
    return Reusing


def connect(
    db: DatabaseSettings,
    doing: str,
    *,
    autocommit: bool = True,
    connect_timeout: float = 5,
    read_timeout: float | None = None,
    refused: type[BinlogsyncError] = DatabaseError,
    grants: str = "",
    **extra: Any,
) -> Connection:
    """A PyMySQL connection to `db` (utf8mb4); failures are our errors, naming `doing`."""
    try:
        with errors(db, doing, refused, grants):
            return open_connection(
                db,
                charset="utf8mb4",
                autocommit=autocommit,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                **extra,
            )
    except TlsError as exc:
        raise TlsError(f"{doing}: {exc.message}", exc.fix) from exc


def still_open(conn: Any) -> bool:
    """Whether an idle connection is still usable, judged from its socket alone: the server
    closes the socket of a session it kills, times out or shuts down, so a readable socket
    (its end, or an error sent before it) between commands means the session is gone. A
    COM_PING round trip would tell the same at some 50 µs of the agent's CPU, on every
    target transaction. A peer that vanished without closing shows only as the next command's
    failure, as it would under a ping that waits out its read timeout. Relies on PyMySQL's
    `_sock` (pyproject.toml pins PyMySQL below 1.3)."""
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return False
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        if poller.poll(0):
            return False
    except (OSError, ValueError):
        return False
    # A TLS socket may hold decrypted bytes already read from the socket: never between
    # commands on a live session.
    return not (isinstance(sock, ssl.SSLSocket) and sock.pending())


def close(conn: Any) -> None:
    """Close a connection that may already be broken; never raises."""
    if conn is None:
        return
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a broken connection must not raise
        pass


# -- names in statements ----------------------------------------------------------------------


def quote(name: str) -> str:
    """`name` as a MySQL identifier: backtick-quoted, backticks doubled."""
    if not isinstance(name, str) or not name:
        raise ApplyError(f"empty or non-text identifier {name!r}", "this change is malformed")
    if "\x00" in name:
        raise ApplyError(f"identifier {name!r} contains a NUL character", "this is not a name")
    if len(name) > MAX_IDENTIFIER:
        raise ApplyError(
            f"identifier {name[:20]!r}… is {len(name)} characters long",
            f"MySQL names are at most {MAX_IDENTIFIER} characters",
        )
    return "`" + name.replace("`", "``") + "`"


def ident(name: str) -> str:
    """`name` quoted for a statement whose parameters are bound with `%s` (a `%` is doubled)."""
    return quote(name).replace("%", "%%")


def qualified(schema: str, table: str) -> str:
    """`schema`.`table` for a statement whose parameters are bound with `%s`."""
    return f"{ident(schema)}.{ident(table)}"
