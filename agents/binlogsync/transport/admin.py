"""A short-lived connection to the hub for commands (`status`, repairs), made from any agent's
config: a hub config connects with the hub's own keys, a client or admin config with its own.
Commands take a `HubAccess`: a config file's path, or an admin config already made (the
Airflow hook makes one from its connection)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import zmq

from ..config import AdminConfig, ClientConfig, HubConfig, load_any
from ..errors import ConfigError, UnreachableError
from . import curve, sockets

HubAccess = str | os.PathLike[str] | AdminConfig

_EVENTS = (
    zmq.EVENT_CONNECTED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
# The monitor of each open admin socket (by id), so a wait that gets no answer can say why.
_MONITORS: dict[int, zmq.Socket[bytes]] = {}


def hub_endpoint(config: HubConfig | ClientConfig | AdminConfig) -> str:
    if isinstance(config, ClientConfig | AdminConfig):
        return config.hub
    if config.bind.endswith(":*"):
        # The OS chose the port; the running hub wrote down which one.
        found = config.data_dir / "endpoint"
        try:
            return found.read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"hub.bind {config.bind} lets the OS choose the port, and {found} (where the "
                f"hub writes it) cannot be read: {exc.strerror}",
                "start the hub first, or give hub.bind a fixed port",
            ) from exc
    # A hub bound to every interface is asked on loopback.
    return config.bind.replace("tcp://0.0.0.0:", "tcp://127.0.0.1:").replace(
        "tcp://*:", "tcp://127.0.0.1:"
    )


@contextmanager
def admin_socket(access: HubAccess) -> Iterator[tuple[zmq.Socket[bytes], str]]:
    """A DEALER connected to the hub that `access` names, and the endpoint."""
    # The hub is asked; database passwords are not needed.
    config = access if isinstance(access, AdminConfig) else load_any(access, secrets=False)
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.linger = 0
    try:
        security = config.security
        if security.enabled:
            assert security.secret_key_file
            if isinstance(config, HubConfig):
                public, secret = curve.load_pair(security.secret_key_file)
                sock.curve_secretkey, sock.curve_publickey = secret, public
                sock.curve_serverkey = public
            else:
                assert security.hub_public_key_file
                curve.secure_client(sock, security.secret_key_file, security.hub_public_key_file)
        endpoint = hub_endpoint(config)
        _MONITORS[id(sock)] = sock.get_monitor_socket(_EVENTS)
        sock.connect(endpoint)
        yield sock, endpoint
    finally:
        monitor = _MONITORS.pop(id(sock), None)
        if monitor is not None:
            sock.disable_monitor()
            monitor.close(linger=0)
        sock.close(linger=0)
        context.term()


def await_answer(sock: zmq.Socket[bytes], endpoint: str, timeout: float) -> list[bytes]:
    """The hub's next message on an admin socket, or UnreachableError saying why none came
    within `timeout`; a refused CURVE handshake ends the wait at once."""
    monitor = _MONITORS.get(id(sock))
    seen = _Seen()
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    if monitor is not None:
        poller.register(monitor, zmq.POLLIN)
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        ready = dict(poller.poll(int(left * 1000) + 1))
        if sock in ready:
            return sock.recv_multipart()
        if monitor is not None and monitor in ready:
            seen.read(monitor)
            if seen.refused_handshake:
                break
    raise UnreachableError(seen.why(endpoint, timeout), seen.fix())


class _Seen:
    """What the socket monitor reported while waiting for the hub."""

    def __init__(self) -> None:
        self.retried = self.connected = self.dropped = self.handshake_failed = 0
        self.refused_handshake = self.up = False

    def read(self, monitor: zmq.Socket[bytes]) -> None:
        while True:
            try:
                kind = sockets.monitor_event(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            if kind == zmq.EVENT_CONNECT_RETRIED:
                self.retried += 1
            elif kind == zmq.EVENT_CONNECTED:
                self.connected += 1
            elif kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.up = True
            elif kind in (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL):
                self.handshake_failed += 1
                self.refused_handshake = True  # libzmq does not try this endpoint again
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                self.handshake_failed += 1
            elif kind == zmq.EVENT_DISCONNECTED and not self.up:
                self.dropped += 1

    def why(self, endpoint: str, timeout: float) -> str:
        said = f"the hub at {endpoint} did not answer"
        if self.handshake_failed or (self.dropped and self.connected):
            return (
                f"{said}: it refused the CURVE handshake (its public key is not the one in "
                "hub_public_key_file, or this tool's public key is not in the hub's "
                "admin_keys_dir nor authorized_keys_dir, or one side does not use CURVE)"
            )
        if self.up:
            return f"{said} within {timeout:.0f} s, though it accepted the connection"
        if self.retried and not self.connected:
            return f"{said}: nothing listens there (connection refused)"
        return f"{said} within {timeout:.0f} s"

    def fix(self) -> str:
        if self.handshake_failed or (self.dropped and self.connected):
            return (
                "check the key files: hub_public_key_file must be the hub's NAME.key, and "
                "this tool's NAME.key must be in the hub's admin_keys_dir"
            )
        return "is `binlogsync server` running, and are the host and port its socket's?"
