"""A private redis-server for tests and demos: loopback only, its own folder, append-only
file fsync'ed on every write (so a target's MULTI/EXEC survives kill -9 of Redis too).

With `tls` (a server certificate and its CA, binlogsync_dev/certs.py) it listens only on a TLS port
(`--tls-port`, `--port 0`) and `url` is rediss://; `client_certs` makes it demand a client
certificate signed by the CA (`--tls-auth-clients yes`), which its own client then uses."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import redis

from .certs import Pair
from .localsite import wait_until
from .sandbox import free_port


class RedisServer:
    def __init__(
        self,
        root: Path,
        port: int | None = None,
        tls: Pair | None = None,
        ca: Path | None = None,
        client_certs: Pair | None = None,
    ) -> None:
        self.root = root
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.tls, self.ca, self.client_certs = tls, ca, client_certs

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def _listen(self) -> list[str]:
        if self.tls is None:
            return ["--port", str(self.port)]
        return ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls.cert),
                "--tls-key-file", str(self.tls.key), "--tls-ca-cert-file", str(self.ca),
                "--tls-auth-clients", "yes" if self.client_certs else "no"]  # fmt: skip

    def _own_tls(self) -> dict[str, object]:
        """redis-py arguments of the sandbox's own client."""
        if self.tls is None:
            return {}
        out: dict[str, object] = {"ssl_ca_certs": str(self.ca)}
        if self.client_certs is not None:
            out |= {"ssl_certfile": str(self.client_certs.cert),
                    "ssl_keyfile": str(self.client_certs.key)}  # fmt: skip
        return out

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is missing: apt-get install redis-server")
        self.root.mkdir(parents=True, exist_ok=True)
        log = (self.root / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [binary, *self._listen(), "--bind", "127.0.0.1", "--dir", str(self.root),
             "--save", "", "--appendonly", "yes", "--appendfsync", "always",
             "--protected-mode", "yes"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited; see {self.root / 'redis.log'}")
            try:
                with redis.Redis.from_url(self.url, socket_timeout=1, **self._own_tls()) as client:
                    return bool(client.ping())
            except redis.RedisError:
                return False

        wait_until(up, 30, 0.05, f"redis-server on port {self.port}")
        return self

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, **self._own_tls())

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
