"""A short-lived connection to the hub for commands (`status`, repairs), made from any agent's
config: a hub config connects with the hub's own keys, a client or admin config with its own.
Commands take a `HubAccess`: a config file's path, or an admin config already made (the
Airflow hook makes one from its connection)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import zmq

from ..config import AdminConfig, ClientConfig, HubConfig, load_any
from ..errors import ConfigError
from . import curve

HubAccess = str | os.PathLike[str] | AdminConfig


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
        sock.connect(endpoint)
        yield sock, endpoint
    finally:
        sock.close(linger=0)
        context.term()
