"""A private PostgreSQL server for tests and demos: Debian's binaries, its own data folder,
loopback TCP and a socket in that folder, trust authentication for local connections only.
PostgreSQL refuses to run as root, so as root it runs as `nobody` (its folder handed over)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from .localsite import wait_until
from .sandbox import free_port


def _bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if found:
        return str(found[-1])
    on_path = shutil.which(name)
    if on_path is None:
        raise RuntimeError(f"{name} is missing: apt-get install postgresql")
    return on_path


class PgServer:
    def __init__(self, root: Path | None = None, port: int | None = None) -> None:
        self.root = root or Path(tempfile.mkdtemp(prefix="bls-pg-"))
        self.port = port or free_port()
        self.data = self.root / "data"
        self.user = "postgres"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if os.geteuid() == 0:
            command = ["runuser", "-u", "nobody", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    def start(self) -> PgServer:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "nobody")
        if not self.data.exists():
            done = self._run(_bin("initdb"), "-D", str(self.data), "-U", self.user,
                             "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8")  # fmt: skip
            if done.returncode:
                raise RuntimeError(f"initdb failed: {done.stdout}{done.stderr}")
        options = f"-p {self.port} -k {self.root} -h 127.0.0.1 -c fsync=on"
        done = self._run(_bin("pg_ctl"), "-D", str(self.data), "-o", options,
                         "-l", str(self.root / "postgres.log"), "-w", "start")  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"pg_ctl start failed: {done.stdout}{done.stderr}")

        def up() -> bool:
            try:
                with psycopg.connect(self.url, connect_timeout=2):
                    return True
            except psycopg.Error:
                return False

        wait_until(up, 30, 0.1, f"PostgreSQL on port {self.port}")
        return self

    def connect(self, dbname: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}",
                               autocommit=True)  # fmt: skip

    def stop(self) -> None:
        if self.data.exists():
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
