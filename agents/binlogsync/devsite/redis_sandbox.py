"""A private redis-server for tests and demos: loopback only, its own folder, append-only
file fsync'ed on every write (so a target's MULTI/EXEC survives kill -9 of Redis too)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import redis

from .localsite import wait_until
from .sandbox import free_port


class RedisServer:
    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is missing: apt-get install redis-server")
        self.root.mkdir(parents=True, exist_ok=True)
        log = (self.root / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root),
             "--save", "", "--appendonly", "yes", "--appendfsync", "always",
             "--protected-mode", "yes"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited; see {self.root / 'redis.log'}")
            try:
                with redis.Redis.from_url(self.url, socket_timeout=1) as client:
                    return bool(client.ping())
            except redis.RedisError:
                return False

        wait_until(up, 30, 0.05, f"redis-server on port {self.port}")
        return self

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
