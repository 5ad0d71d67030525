"""A private PostgreSQL server for tests and demos: Debian's binaries, its own data folder,
loopback TCP and a socket in that folder, trust authentication for local connections only.
PostgreSQL refuses to run as root, so as root it runs as `nobody` (its folder handed over).

With `tls` (a server certificate and its CA, binlogsync_dev/certs.py) it runs with `ssl = on`, and
pg_hba.conf has only `hostssl` lines: TCP without TLS is refused. `client_certs` makes it
also demand a client certificate signed by that CA whose name is the user (`clientcert =
verify-full`). Its own connections (`connect`, the start-up wait) then go through the socket
in its folder, which needs no certificate."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from .certs import Pair
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
    def __init__(
        self,
        root: Path | None = None,
        port: int | None = None,
        tls: Pair | None = None,
        ca: Path | None = None,
        client_certs: Pair | None = None,
    ) -> None:
        self.root = root or Path(tempfile.mkdtemp(prefix="bls-pg-"))
        self.port = port or free_port()
        self.data = self.root / "data"
        self.user = "postgres"
        self.tls, self.ca, self.client_certs = tls, ca, client_certs

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def _own_tls(self) -> dict[str, Any]:
        """libpq parameters of the sandbox's own connections: with TLS on, the socket (a
        `local` line), so that they need no client certificate."""
        return {} if self.tls is None else {"host": str(self.root)}

    def _configure_tls(self) -> None:
        """Certificate files in the data folder (the server's user must own its key), ssl on,
        and pg_hba.conf with hostssl lines only."""
        assert self.tls is not None and self.ca is not None
        for source, name in ((self.tls.cert, "server.crt"), (self.tls.key, "server.key"),
                             (self.ca, "root.crt")):  # fmt: skip
            target = self.data / name
            shutil.copyfile(source, target)
            os.chmod(target, 0o600)
            if os.geteuid() == 0:
                shutil.chown(target, "nobody")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"
                       "ssl_ca_file = 'root.crt'\n")  # fmt: skip
        client = " clientcert=verify-full" if self.client_certs is not None else ""
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\n"
            f"hostssl all all 127.0.0.1/32 trust{client}\n"
            f"hostssl all all ::1/128 trust{client}\n"
        )

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
            if self.tls is not None:
                self._configure_tls()
        options = f"-p {self.port} -k {self.root} -h 127.0.0.1 -c fsync=on"
        done = self._run(_bin("pg_ctl"), "-D", str(self.data), "-o", options,
                         "-l", str(self.root / "postgres.log"), "-w", "start")  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"pg_ctl start failed: {done.stdout}{done.stderr}")

        def up() -> bool:
            try:
                with psycopg.connect(self.url, connect_timeout=2, **self._own_tls()):
                    return True
            except psycopg.Error:
                return False

        wait_until(up, 30, 0.1, f"PostgreSQL on port {self.port}")
        return self

    def connect(self, dbname: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}",
                               autocommit=True, **self._own_tls())  # fmt: skip

    def stop(self) -> None:
        if self.data.exists():
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
