"""TLS to the databases: one set of settings for every engine, checked at start-up, the
arguments each driver takes, and the errors that name the setting and the file.

The settings are MySQL's (`ssl_mode`, `ssl_ca`, `ssl_cert`, `ssl_key`) with its five modes:

    disabled          cleartext
    preferred         TLS when the server offers it, else cleartext, and the log says so
    required          TLS or no connection; the certificate is not checked (unless ssl_ca is set)
    verify_ca         TLS, and the server's certificate is signed by ssl_ca (or a CA this system
                      trusts, when ssl_ca is not set)
    verify_identity   verify_ca, and the certificate names the host connected to

PostgreSQL's are libpq's (`sslmode` disable | prefer | require | verify-ca | verify-full,
`sslrootcert`, `sslcert`, `sslkey`), mapped onto the same five. Redis has no negotiation: a
`rediss://` URL is TLS (by default `verify_identity`), a `redis://` URL is cleartext.
Rules that hold for every engine:
- without `ssl_mode`, `ssl_ca` means `verify_ca` (MySQL's rule), and no settings `preferred`;
- a CA that is given is always checked (libpq's rule: also under `required`/`preferred`);
- `ssl_cert` and `ssl_key` come together; `disabled` with any file is refused;
- nothing falls back to cleartext silently: `required` and stronger refuse a server without
  TLS before any password is sent, and `preferred` logs the fallback once per server.

Files are read when the settings are made (`from_values`): a missing file, one that is not
PEM, or a key that does not fit its certificate is a ConfigError at start-up. Handshake
failures are `TlsError` (errors.py): fatal, naming the setting and the file, not retried as
"unreachable". Library modules pass the settings to `pymysql_args`, `libpq_args` and
`redis_args`; nothing here reads the environment. docs/tls.md has the matrix that is tested.
"""

from __future__ import annotations

import functools
import logging
import ssl
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError, TlsError

log = logging.getLogger(__name__)

MODES = ("disabled", "preferred", "required", "verify_ca", "verify_identity")
ENCRYPTING = ("required", "verify_ca", "verify_identity")
VERIFYING = ("verify_ca", "verify_identity")
KEYS = ("ssl_mode", "ssl_ca", "ssl_cert", "ssl_key")
# libpq's names for the same settings, and its values for the modes.
LIBPQ_KEYS = dict(zip(KEYS, ("sslmode", "sslrootcert", "sslcert", "sslkey"), strict=True))
LIBPQ_MODES = {
    "disable": "disabled",
    "prefer": "preferred",
    "require": "required",
    "verify-ca": "verify_ca",
    "verify-full": "verify_identity",
}
_TO_LIBPQ = {ours: theirs for theirs, ours in LIBPQ_MODES.items()}
# redis-py's own URL options for TLS: refused in a URL so that ours are the only ones.
_REDIS_OWN = (
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_path",
    "ssl_ca_data",
    "ssl_check_hostname",
)


@dataclass(frozen=True)
class TlsSettings:
    """How one database connection uses TLS. `where` says how a setting is named in
    messages ("origin.{}" → "origin.ssl_ca"); `libpq` names them as libpq does."""

    mode: str = "preferred"
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    where: str = field(default="{}", compare=False)
    libpq: bool = field(default=False, compare=False)

    def name(self, key: str) -> str:
        """How the user wrote setting `key` (one of KEYS): "target.ssl_ca", "sslrootcert in
        the URL postgresql://…"."""
        return self.where.format(LIBPQ_KEYS[key] if self.libpq else key)

    @property
    def mode_text(self) -> str:
        """`ssl_mode = verify_ca`, or `sslmode = verify-ca`, as written."""
        value = _TO_LIBPQ[self.mode] if self.libpq else self.mode
        return f"{self.name('ssl_mode')} = {value}"

    @property
    def encrypts(self) -> bool:
        """TLS or no connection."""
        return self.mode in ENCRYPTING

    @property
    def verifies(self) -> bool:
        """The server's certificate is checked when TLS is used."""
        return self.mode in VERIFYING or (self.ca is not None and self.mode != "disabled")

    def files(self) -> Iterator[tuple[str, Path]]:
        for key, path in (("ssl_ca", self.ca), ("ssl_cert", self.cert), ("ssl_key", self.key)):
            if path is not None:
                yield key, path

    def to_query(self) -> dict[str, str]:
        """The settings as URL options (libpq's names for a libpq URL), for a URL made for
        another process (ops/site.py's reconcile URLs)."""
        out = {"ssl_mode": _TO_LIBPQ[self.mode] if self.libpq else self.mode}
        out.update((key, str(path)) for key, path in self.files())
        return {LIBPQ_KEYS[k] if self.libpq else k: v for k, v in out.items()}


DEFAULT = TlsSettings()  # what a server without TLS settings gets: MySQL's and libpq's default
DISABLED = TlsSettings("disabled")


# -- reading the settings ----------------------------------------------------------------------
def from_values(
    values: Mapping[str, Any],
    where: str,
    base: Path | None = None,
    *,
    libpq: bool = False,
    default_mode: str | None = None,
    checked: bool = True,
) -> TlsSettings:
    """Settings from `values` (a TOML table, URL options, an Airflow extra), keyed by our
    names, or by libpq's when `libpq`; other keys are ignored. Relative paths are resolved
    against `base`. Every file is read and checked here (unless not `checked`: a tool that
    will not connect): ConfigError names what is wrong."""
    names = {LIBPQ_KEYS[k] if libpq else k: k for k in KEYS}
    given: dict[str, str] = {}
    for written, key in names.items():
        if written not in values:
            continue
        value = values[written]
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where.format(written)} must be a non-empty string, got {value!r}")
        given[key] = value
    probe = TlsSettings(where=where, libpq=libpq)
    mode = _mode(given.get("ssl_mode"), probe, libpq)
    paths = {k: _path(v, base) for k, v in given.items() if k != "ssl_mode"}
    if mode is None:
        mode = default_mode or ("verify_ca" if "ssl_ca" in paths else "preferred")
    tls = TlsSettings(
        mode, paths.get("ssl_ca"), paths.get("ssl_cert"), paths.get("ssl_key"), where, libpq
    )
    if checked:
        check(tls)
    return tls


def _mode(value: str | None, probe: TlsSettings, libpq: bool) -> str | None:
    if value is None:
        return None
    if libpq:
        if value == "allow":
            raise ConfigError(
                f"{probe.name('ssl_mode')} = allow tries cleartext first; binlogsync does not "
                "take it",
                "use prefer (TLS when offered, the fallback logged), require or verify-full",
            )
        if value not in LIBPQ_MODES:
            raise ConfigError(
                f"{probe.name('ssl_mode')} must be one of {', '.join(LIBPQ_MODES)}, got {value!r}"
            )
        return LIBPQ_MODES[value]
    mode = value.lower()
    if mode not in MODES:
        raise ConfigError(
            f"{probe.name('ssl_mode')} must be one of {', '.join(MODES)}, got {value!r}"
        )
    return mode


def _path(value: str, base: Path | None) -> Path:
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    return path


def check(tls: TlsSettings) -> None:
    """ConfigError when the settings cannot work: files missing, unreadable, not PEM, a key
    that does not fit its certificate, a combination that contradicts itself."""
    if tls.mode == "disabled":
        for key, _ in tls.files():
            raise ConfigError(
                f"{tls.mode_text}, and {tls.name(key)} is set",
                f"remove {tls.name(key)}, or choose a mode that uses TLS",
            )
        return
    if (tls.cert is None) != (tls.key is None):
        have, lack = ("ssl_cert", "ssl_key") if tls.key is None else ("ssl_key", "ssl_cert")
        raise ConfigError(
            f"{tls.name(have)} is set without {tls.name(lack)}",
            "a client certificate needs both: the certificate and its private key",
        )
    for key, path in tls.files():
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"{tls.name(key)}: cannot read {path}: {exc.strerror or exc}",
                "check the path and that this user may read the file",
            ) from exc
        if b"-----BEGIN" not in data:
            raise ConfigError(
                f"{tls.name(key)}: {path} is not a PEM file",
                "give the PEM file (text starting with -----BEGIN …)",
            )
    if tls.ca is not None:
        try:
            ssl.create_default_context(cafile=str(tls.ca))
        except ssl.SSLError as exc:
            raise ConfigError(
                f"{tls.name('ssl_ca')}: {tls.ca} holds no usable CA certificate ({exc.reason})",
                "give the PEM file of the CA that signed the server's certificate",
            ) from exc
    if tls.cert is not None and tls.key is not None:
        try:
            ssl.create_default_context().load_cert_chain(str(tls.cert), str(tls.key))
        except ssl.SSLError as exc:
            raise ConfigError(
                f"{tls.name('ssl_cert')} {tls.cert} and {tls.name('ssl_key')} {tls.key} do not "
                f"make a client certificate ({exc.reason})",
                "give the certificate and the private key it was made for, both PEM, the key "
                "unencrypted",
            ) from exc
        if tls.libpq:
            _libpq_key_mode(tls, tls.key)
    if tls.libpq and tls.mode == "verify_ca" and tls.ca is None:
        raise ConfigError(
            f"{tls.mode_text} needs {tls.name('ssl_ca')}: libpq checks a CA only against a file",
            f"set {tls.name('ssl_ca')} to the CA's PEM file, or use verify-full to trust the "
            "system's CAs",
        )


def _libpq_key_mode(tls: TlsSettings, key: Path) -> None:
    """libpq refuses a private key others may read; say so now, with the fix."""
    info = key.stat()
    limit = 0o640 if info.st_uid == 0 else 0o600
    if stat.S_IMODE(info.st_mode) & ~limit:
        raise ConfigError(
            f"{tls.name('ssl_key')}: {key} may be read by others (mode "
            f"{stat.S_IMODE(info.st_mode):o}), and libpq refuses such a key",
            f"chmod 600 {key}",
        )


def for_redis(
    url: str, values: Mapping[str, Any], where: str, base: Path | None = None, checked: bool = True
) -> tuple[str, TlsSettings]:
    """A Redis URL without our TLS options, and the settings from the URL's options and
    `values` (a TOML table; a key may be in one place only). The scheme decides: `rediss://`
    is TLS (`verify_identity` unless `ssl_mode` says less), `redis://` cleartext."""
    from urllib.parse import parse_qsl, urlencode, urlsplit

    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = sorted({k for k, _ in query if k in _REDIS_OWN})
    if own:
        raise ConfigError(
            f"{where.format('url')} has redis-py's own TLS option(s) {', '.join(own)}",
            "use ssl_mode, ssl_ca, ssl_cert and ssl_key (docs/tls.md)",
        )
    from_url = {k: v for k, v in query if k in KEYS}
    both = sorted(set(from_url) & {k for k in KEYS if k in values})
    if both:
        raise ConfigError(
            f"{where.format(both[0])} is set both in {where.format('url')} and beside it",
            "keep one",
        )
    rest = urlencode([(k, v) for k, v in query if k not in KEYS])
    clean = parts._replace(query=rest).geturl()
    merged = {**{k: v for k, v in values.items() if k in KEYS}, **from_url}
    tls_scheme = parts.scheme == "rediss"
    asked = sorted(k for k, v in merged.items() if not (k == "ssl_mode" and v == "disabled"))
    if not tls_scheme and asked:
        raise ConfigError(
            f"{where.format(asked[0])} asks for TLS, and the URL is redis://",
            "write the URL as rediss://host:port/db to use TLS",
        )
    default = "verify_identity" if tls_scheme else "disabled"
    tls = from_values(merged, where, base, default_mode=default, checked=checked)
    if tls_scheme and tls.mode in ("disabled", "preferred"):
        raise ConfigError(
            f"{tls.mode_text} does not fit a rediss:// URL: Redis does not negotiate TLS, "
            "so a rediss:// server always speaks it",
            "use redis:// for cleartext, or ssl_mode required, verify_ca or verify_identity",
        )
    return clean, tls


# -- what each driver takes ----------------------------------------------------------------------
def _mtimes(tls: TlsSettings) -> tuple[float, ...]:
    out = []
    for _, path in tls.files():
        try:
            out.append(path.stat().st_mtime)
        except OSError:
            out.append(0.0)
    return tuple(out)


def context(tls: TlsSettings) -> ssl.SSLContext:
    """An SSLContext for `tls` (never for `disabled`); made again when a file changes, so a
    renewed certificate is used by the next connection."""
    return _context(tls, _mtimes(tls))


@functools.lru_cache(maxsize=32)
def _context(tls: TlsSettings, _mtimes: tuple[float, ...]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # Certificates made by older tools (mysql_ssl_rsa_setup) lack extensions the strict
    # check wants; PyMySQL relaxes it the same way.
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    if tls.verifies:
        ctx.check_hostname = tls.mode == "verify_identity"
        ctx.verify_mode = ssl.CERT_REQUIRED
        if tls.ca is not None:
            ctx.load_verify_locations(cafile=str(tls.ca))
        else:
            ctx.load_default_certs()
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if tls.cert is not None:
        ctx.load_cert_chain(str(tls.cert), str(tls.key) if tls.key else None)
    return ctx


def pymysql_args(tls: TlsSettings) -> dict[str, Any]:
    """PyMySQL's arguments. An SSLContext makes PyMySQL (≥ 1.2) refuse a server without TLS
    before it authenticates; with no arguments it negotiates TLS when offered (`preferred`)."""
    if tls.mode == "disabled":
        return {"ssl_disabled": True}
    if tls.mode == "preferred" and not any(tls.files()):
        return {}
    return {"ssl": context(tls)}


def libpq_args(tls: TlsSettings) -> dict[str, str]:
    """libpq's connection parameters (they override the same ones in a URL)."""
    out = {"sslmode": _TO_LIBPQ[tls.mode]}
    if tls.ca is not None:
        out["sslrootcert"] = str(tls.ca)
    elif tls.mode == "verify_identity":
        out["sslrootcert"] = "system"  # libpq ≥ 16: the system's trusted CAs
    if tls.cert is not None and tls.key is not None:
        out["sslcert"], out["sslkey"] = str(tls.cert), str(tls.key)
    return out


def redis_args(tls: TlsSettings, url: str) -> dict[str, Any]:
    """redis-py's arguments for `url`: none for redis:// (cleartext, which `for_redis` allows
    only with `disabled`), the CA, certificate and checks for rediss://."""
    if not url.startswith("rediss://"):
        if tls.encrypts:
            raise ConfigError(
                f"{tls.mode_text} asks for TLS, and the URL is redis://",
                "write the URL as rediss://host:port/db to use TLS",
            )
        return {}
    out: dict[str, Any] = {
        "ssl_cert_reqs": "required" if tls.verifies else "none",
        "ssl_check_hostname": tls.mode == "verify_identity",
        "ssl_min_version": ssl.TLSVersion.TLSv1_2,
    }
    if tls.ca is not None:
        out["ssl_ca_certs"] = str(tls.ca)
    if tls.cert is not None and tls.key is not None:
        out["ssl_certfile"], out["ssl_keyfile"] = str(tls.cert), str(tls.key)
    return out


# -- after connecting ----------------------------------------------------------------------------
_warned: set[tuple[str, str]] = set()


def cleartext(tls: TlsSettings, server: str, encrypted: bool) -> None:
    """Called with whether a new connection is encrypted: TlsError when it must be and is
    not (a driver that fell back by itself), a log line (once per server) when `preferred`
    fell back to cleartext."""
    if encrypted:
        return
    if tls.encrypts:
        raise no_tls(tls, server)
    if tls.mode == "preferred" and (server, tls.where) not in _warned:
        _warned.add((server, tls.where))
        log.warning(
            "%s offers no TLS: connected in cleartext (%s; set %s = %s to refuse cleartext, "
            "or = %s to silence this)",
            server,
            tls.mode_text,
            tls.name("ssl_mode"),
            "require" if tls.libpq else "required",
            "disable" if tls.libpq else "disabled",
        )


def mysql_encrypted(conn: Any) -> bool:
    """Whether a PyMySQL connection runs over TLS (its socket is an SSLSocket)."""
    return isinstance(getattr(conn, "_sock", None), ssl.SSLSocket)


def open_libpq(
    connect: Any, tls: TlsSettings, server: str, peer: str, *args: Any, **kwargs: Any
) -> Any:
    """`connect(*args, **kwargs)` (psycopg's) with `tls`'s libpq parameters, which override
    the same ones in a URL; a TLS failure is a TlsError, and a cleartext connection is
    checked as `cleartext` says. psycopg is passed in: this module imports no driver."""
    try:
        conn = connect(*args, **kwargs, **libpq_args(tls))
    except Exception as exc:
        failed = failure(exc, tls, server, peer)
        if failed is not None:
            raise failed from exc
        raise
    try:
        cleartext(tls, server, bool(conn.pgconn.ssl_in_use))
    except TlsError:
        conn.close()
        raise
    return conn


# -- errors --------------------------------------------------------------------------------------
def no_tls(tls: TlsSettings, server: str) -> TlsError:
    return TlsError(
        f"{server} does not offer TLS, and {tls.mode_text} requires it"
        + (f" (CA {tls.ca})" if tls.ca else ""),
        f"turn TLS on in the server, or set {tls.name('ssl_mode')} to "
        + ("prefer" if tls.libpq else "preferred")
        + " to accept cleartext (it is logged)",
    )


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        todo += [item.__cause__, item.__context__, getattr(item, "original_exception", None)]
        todo += [a for a in getattr(item, "args", ()) if isinstance(a, BaseException)]


def failure(exc: BaseException, tls: TlsSettings, server: str, host: str = "") -> TlsError | None:
    """The TlsError a driver's exception stands for, or None when it is not about TLS.
    Python's ssl errors (PyMySQL, redis-py) are read by type, libpq's by its messages."""
    texts = []
    for item in _chain(exc):
        if isinstance(item, ssl.SSLCertVerificationError):
            return _verify_failed(tls, server, host, str(item.verify_message or item))
        if isinstance(item, ssl.SSLError):
            return _handshake_failed(tls, server, str(item.reason or item))
        texts.append(str(item))
    text = " ".join(texts)
    low = text.lower()
    if "ssl is required but the server doesn't support it" in low or (
        "server does not support ssl" in low
    ):
        return no_tls(tls, server)
    if "certificate verify failed" in low or "does not match host name" in low:
        return _verify_failed(tls, server, host, _ssl_line(text))
    if "no encryption" in low and not tls.encrypts:  # libpq: pg_hba.conf has only hostssl
        return TlsError(
            f"{server} accepts only TLS connections (no pg_hba.conf line for a connection "
            f"without encryption), and {tls.mode_text}",
            f"set {tls.name('ssl_mode')} = verify-full (with {tls.name('ssl_ca')}) or require",
        )
    if "requires a valid client certificate" in low:  # PostgreSQL's clientcert=verify-*
        return _handshake_failed(tls, server, _ssl_line(text))
    if "ssl error" in low or "ssl syscall error" in low or "tlsv1 alert" in low:
        return _handshake_failed(tls, server, _ssl_line(text))
    return None


def _ssl_line(text: str) -> str:
    for line in text.splitlines():
        if "ssl" in line.lower() or "certificate" in line.lower():
            return line.strip()
    return text.strip()


def _verify_failed(tls: TlsSettings, server: str, host: str, reason: str) -> TlsError:
    low = reason.lower()
    if "mismatch" in low or "does not match host name" in low:
        return TlsError(
            f"TLS to {server}: the server's certificate does not name "
            f"{host or 'the host connected to'} ({tls.mode_text}"
            + (f", CA {tls.ca}" if tls.ca else "")
            + f"): {reason}",
            "connect by a name the certificate holds (host in the settings), or set "
            f"{tls.name('ssl_mode')} = {'verify-ca' if tls.libpq else 'verify_ca'} to check "
            "the CA only",
        )
    if tls.ca is not None:
        return TlsError(
            f"TLS to {server}: the server's certificate is not signed by the CA in {tls.ca} "
            f"({tls.name('ssl_ca')}): {reason}",
            f"set {tls.name('ssl_ca')} to the PEM file of the CA that signed the server's "
            "certificate",
        )
    return TlsError(
        f"TLS to {server}: the server's certificate is not signed by a CA this system trusts "
        f"({tls.name('ssl_ca')} is not set; {tls.mode_text}): {reason}",
        f"set {tls.name('ssl_ca')} to the PEM file of the CA that signed the server's certificate",
    )


def _handshake_failed(tls: TlsSettings, server: str, reason: str) -> TlsError:
    low = reason.lower()
    if "wrong version number" in low or "record layer failure" in low or "packet length" in low:
        return TlsError(
            f"TLS to {server} failed: the server did not answer in TLS ({reason})",
            "check that the port is the server's TLS port, and the scheme (rediss:// for TLS, "
            "redis:// for cleartext)",
        )
    if tls.cert is not None:
        client = f"the client certificate {tls.cert} ({tls.name('ssl_cert')})"
        fix = f"give {tls.name('ssl_cert')} and {tls.name('ssl_key')} a certificate the server's CA signed"
    else:
        client = f"no client certificate ({tls.name('ssl_cert')} is not set)"
        fix = f"if the server wants a client certificate, set {tls.name('ssl_cert')} and {tls.name('ssl_key')}"
    return TlsError(f"TLS to {server} failed with {client}: {reason}", fix)


def cleartext_refused_hint(tls: TlsSettings) -> str:
    """For an access refusal over cleartext: MariaDB answers `require_secure_transport` with
    the same error as a wrong password (1045)."""
    if tls.mode != "disabled":
        return ""
    return (
        f"; if the server requires secure transport (require_secure_transport=ON), set "
        f"{tls.name('ssl_mode')} = verify_identity with {tls.name('ssl_ca')}"
    )
