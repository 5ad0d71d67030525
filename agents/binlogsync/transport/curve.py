"""CURVE keys: make them, load them, and authorise clients on the hub.

Keys are pyzmq certificate files: `NAME.key` (public, shareable) and `NAME.key_secret`
(secret, mode 0600). The hub authorises every `*.key` in its `authorized_keys_dir`; the file's
stem is the host name that key may speak for, so one host cannot pose as another.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zmq
import zmq.auth
from zmq.utils import z85

from ..errors import ConfigError, UsageError

if TYPE_CHECKING:
    from zmq.auth.thread import ThreadAuthenticator

# The ZAP domain of the hub's socket. The socket enforces it: with no ZAP handler running,
# libzmq refuses every CURVE client instead of admitting any key without asking.
ZAP_DOMAIN = "binlogsync"


def refuse_existing(directory: str | os.PathLike[str], name: str) -> None:
    """Raise UsageError when a key file of `name` exists in `directory`.

    A new pair replaces the public key every peer trusts, so overwriting one silently locks
    every client (or the hub) out until the new public key is copied everywhere.
    """
    folder = Path(directory)
    existing = [f for f in (folder / f"{name}.key", folder / f"{name}.key_secret") if f.exists()]
    if existing:
        raise UsageError(
            f"key file(s) already exist: {', '.join(str(f) for f in existing)}",
            "keep them, or pass --force to replace them (then copy the new public key "
            "to every peer that trusts the old one)",
        )


def make_keys(
    directory: str | os.PathLike[str], name: str, force: bool = False
) -> tuple[Path, Path]:
    """Write `NAME.key` and `NAME.key_secret` (0600); refuses to replace a pair unless `force`."""
    if not force:
        refuse_existing(directory, name)
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    public, secret = zmq.auth.create_certificates(str(folder), name)
    os.chmod(secret, 0o600)
    return Path(public), Path(secret)


def key_file_problem(file: Path, secret: bool) -> str | None:
    """What is wrong with `file` as a CURVE key file (None when nothing is).

    `secret`: the file must hold the secret key too (NAME.key_secret). Checked at config load
    because a bad key only shows later as a handshake that never completes: silence.
    """
    if not file.is_file():
        return f"{file} does not exist" if not file.exists() else f"{file} is not a file"
    try:
        public, secret_key = zmq.auth.load_certificate(str(file))
    except (OSError, ValueError) as exc:
        return f"{file} is not a CURVE key file ({exc})"
    keys = {"public": public, "secret": secret_key} if secret_key else {"public": public}
    for kind, key in keys.items():
        try:
            ok = len(z85.decode(key)) == 32
        except (ValueError, KeyError, struct.error):
            ok = False
        if not ok:
            return f"{file} holds a malformed {kind} key (not 40 Z85 characters)"
    if secret and not secret_key:
        return f"{file} holds only a public key"
    return None


def load_pair(secret_file: Path) -> tuple[bytes, bytes]:
    try:
        public, secret = zmq.auth.load_certificate(str(secret_file))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read CURVE key {secret_file}: {exc}") from exc
    if not secret:
        raise ConfigError(
            f"{secret_file} holds no secret key", "point secret_key_file at NAME.key_secret"
        )
    return public, secret


def load_public(public_file: Path) -> bytes:
    try:
        public, _ = zmq.auth.load_certificate(str(public_file))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read CURVE public key {public_file}: {exc}") from exc
    return public


def authorized_keys(directory: Path) -> dict[bytes, str]:
    """Public key (z85) → host name, from `NAME.key` files."""
    keys = {}
    for file in sorted(Path(directory).glob("*.key")):
        keys[load_public(file)] = file.stem
    return keys


def secure_server(socket: zmq.Socket[bytes], secret_file: Path) -> None:
    public, secret = load_pair(secret_file)
    socket.curve_secretkey = secret
    socket.curve_publickey = public
    socket.curve_server = True
    socket.zap_domain = ZAP_DOMAIN.encode()
    socket.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)


def secure_client(socket: zmq.Socket[bytes], secret_file: Path, server_public_file: Path) -> None:
    public, secret = load_pair(secret_file)
    socket.curve_secretkey = secret
    socket.curve_publickey = public
    socket.curve_serverkey = load_public(server_public_file)


class _Keyring:
    def __init__(self, admit: Callable[[bytes], bool]) -> None:
        self.admit = admit

    def callback(self, domain: str, key: bytes) -> bool:
        return self.admit(key)


def start_authenticator(
    context: zmq.Context[Any], admit: Callable[[bytes], bool]
) -> ThreadAuthenticator:
    """ZAP handler that admits the public keys (z85) `admit` accepts; User-Id is the z85 key.
    Start it before the socket binds: a client that connects earlier is refused (the socket
    enforces its ZAP domain), never admitted. (Only the hub authenticates: pyzmq's
    authenticator module imports asyncio, ~30 ms that an agent's start does without.)"""
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(context)
    auth.start()
    auth.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=_Keyring(admit))
    return auth
