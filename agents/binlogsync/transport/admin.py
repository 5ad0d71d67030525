"""A short-lived connection to the hub for commands (`status`, repairs), made from any agent's
config: a hub config connects with the hub's own keys, a client config with that client's."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from contextlib import contextmanager

import zmq

from ..config import ClientConfig, HubConfig, load_client, load_hub
from ..errors import ConfigError
from . import curve


def load_any(path: str) -> HubConfig | ClientConfig:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from exc
    return load_hub(path) if "hub" in data else load_client(path)


def hub_endpoint(config: HubConfig | ClientConfig) -> str:
    if isinstance(config, ClientConfig):
        return config.hub
    # A hub bound to every interface is asked on loopback.
    return config.bind.replace("tcp://0.0.0.0:", "tcp://127.0.0.1:").replace(
        "tcp://*:", "tcp://127.0.0.1:"
    )


@contextmanager
def admin_socket(path: str) -> Iterator[tuple[zmq.Socket, str]]:
    """A DEALER connected to the hub named in the config at `path`, and the endpoint."""
    config = load_any(path)
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
