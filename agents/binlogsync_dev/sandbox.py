"""Throwaway MariaDB servers on loopback, for the demo, the tests and the benchmarks.

Each server is Debian's `mariadbd` with a private datadir under one folder, a loopback port,
no system service and no /etc/mysql config (`--no-defaults` first). Servers are started with
everything binlog capture needs (ROW format, FULL row image and metadata, GTID, distinct
server ids). A template datadir is made once with `mariadb-install-db` and copied per server,
which is ~6x faster than installing each. The folder's `sandbox.json` records what runs, so a
later process (`./dev sandbox stop`) can stop it. `tls_options` makes a server speak TLS
(and refuse cleartext): `box.start("db", 1, *tls_options(ca, cert, key))`; the sandbox's own
connections negotiate TLS as PyMySQL does by default.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pymysql

from binlogsync import mysql
from binlogsync.errors import SandboxError

REPLICATION_USER = "repl"
REPLICATION_PASSWORD = "repl-sandbox"
_STATE = "sandbox.json"


@dataclass(frozen=True)
class Server:
    name: str
    port: int
    server_id: int
    datadir: str
    pid: int
    host: str = "127.0.0.1"
    user: str = "root"
    password: str = ""

    def connect(self, database: str | None = None, **kwargs: object) -> pymysql.Connection:
        # PyMySQL's own class would load the system's CA certificates for every connection
        # (~35 ms of CPU): tests poll servers with a new connection each time.
        connection: Any = mysql.reusing_preferred_context(pymysql.connections.Connection)
        return connection(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=database,
            autocommit=True,
            charset="utf8mb4",
            **kwargs,
        )

    def sql(
        self, *statements: str, db: str | None = None, args: Any = None
    ) -> tuple[tuple[Any, ...], ...]:
        """Run `statements` in order in one session (autocommit, in `db`); the rows of the
        last one (empty when it returns none). `args` are the last statement's parameters."""
        with self.connect(db) as conn, conn.cursor() as cur:
            for statement in statements[:-1]:
                cur.execute(statement)
            cur.execute(statements[-1], args)
            return tuple(cur.fetchall())

    def scalar(self, statement: str, db: str | None = None, args: Any = None) -> Any:
        """The first column of the first row `statement` returns; None when there is none."""
        rows = self.sql(statement, db=db, args=args)
        return rows[0][0] if rows else None

    @property
    def url(self) -> str:
        return f"mysql://{self.user}@{self.host}:{self.port}"


def tls_options(
    ca: os.PathLike[str], cert: os.PathLike[str], key: os.PathLike[str], require: bool = True
) -> tuple[str, ...]:
    """mariadbd options for TLS with this CA (which also checks client certificates), server
    certificate and key; `require` turns cleartext away (require_secure_transport)."""
    return (
        f"--ssl-ca={ca}",
        f"--ssl-cert={cert}",
        f"--ssl-key={key}",
        *(("--require-secure-transport=ON",) if require else ()),
    )


def kill_session(conn: Any, session: int, timeout: float = 10.0) -> None:
    """KILL the server session `session` through `conn` (another session), and wait until the
    server has ended it (it is gone from the process list: its socket is closed)."""
    deadline = time.monotonic() + timeout
    with conn.cursor() as cur:
        cur.execute(f"KILL {int(session)}")
        while True:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s", (session,)
            )
            if cur.fetchone()[0] == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"session {session} still listed {timeout} s after KILL")
            time.sleep(0.01)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _require(binary: str) -> str:
    path = shutil.which(binary, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if not path:
        raise SandboxError(
            f"{binary} is not installed",
            "install Debian's MariaDB: apt-get install -y mariadb-server mariadb-client",
        )
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


class Sandbox:
    """A folder of throwaway MariaDB servers. Use as a context manager to stop them all."""

    def __init__(self, root: str | os.PathLike[str], max_binlog_size: str | None = None) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_binlog_size = max_binlog_size
        self.servers: dict[str, Server] = {}
        self._processes: dict[str, subprocess.Popen[bytes]] = {}  # started by this object
        self._load()

    @classmethod
    def running(cls, root: str | os.PathLike[str]) -> Sandbox:
        """The sandbox whose servers run in `root`, for a later process (`sandbox stop`).

        Raises SandboxError when none does, and creates nothing: a mistyped --dir must not
        read as "stopped" (or make a folder).
        """
        folder = Path(root).resolve()
        box = cls(folder) if (folder / _STATE).is_file() else None
        if box is None or not box.servers:
            raise SandboxError(
                f"no sandbox runs in {folder}",
                f"check --dir, or start one: ./dev sandbox start --dir {root}",
            )
        return box

    # -- state ---------------------------------------------------------------------------
    def _load(self) -> None:
        state = self.root / _STATE
        if state.exists():
            for item in json.loads(state.read_text()):
                server = Server(**item)
                if _pid_alive(server.pid):
                    self.servers[server.name] = server

    def _save(self) -> None:
        data = [asdict(s) for s in self.servers.values()]
        (self.root / _STATE).write_text(json.dumps(data, indent=2))

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    # -- servers -------------------------------------------------------------------------
    def _template(self) -> Path:
        template = self.root / "template"
        if (template / "mysql").is_dir():
            return template
        shutil.rmtree(template, ignore_errors=True)
        # The bootstrap server's own temporary folder: a bootstrap starting in a shared /tmp
        # deletes every `#sql-*` file there, including another bootstrap's temporary tables
        # (two test workers making their templates at once failed with "Unknown table").
        scratch = self.root / "template-tmp"
        scratch.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [
                _require("mariadb-install-db"),
                "--no-defaults",
                f"--datadir={template}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
                "--innodb-log-file-size=8M",
                f"--tmpdir={scratch}",
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise SandboxError(
                f"mariadb-install-db failed: {result.stderr.strip()[-500:]}",
                "check that mariadb-server is installed and the folder is writable",
            )
        return template

    def start(self, name: str, server_id: int | None = None, *extra: str) -> Server:
        """Start (or return the running) server `name`, ready for queries."""
        if name in self.servers:
            return self.servers[name]
        server_id = server_id or (len(self.servers) + 1)
        home = self.root / name
        datadir = home / "data"
        if not datadir.exists():
            home.mkdir(parents=True, exist_ok=True)
            shutil.copytree(self._template(), datadir)
        # Each server's own temporary folder: in the shared /tmp another process's clean-up
        # once removed a server's internal temporary table in the middle of a statement.
        (home / "tmp").mkdir(exist_ok=True)
        last_error = ""
        for _attempt in range(3):
            port = free_port()
            args = [
                _require("mariadbd"),
                "--no-defaults",
                f"--datadir={datadir}",
                f"--socket={home / 'mysqld.sock'}",
                f"--pid-file={home / 'mysqld.pid'}",
                f"--log-error={home / 'error.log'}",
                f"--tmpdir={home / 'tmp'}",
                "--user=root",
                "--bind-address=127.0.0.1",
                f"--port={port}",
                f"--server-id={server_id}",
                "--log-bin=binlog",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                "--binlog-row-metadata=FULL",
                "--skip-name-resolve",
                "--innodb-log-file-size=8M",
                "--innodb-buffer-pool-size=64M",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_general_ci",
                "--report-host=127.0.0.1",
                f"--report-port={port}",
                "--max-connections=200",
                *([f"--max-binlog-size={self.max_binlog_size}"] if self.max_binlog_size else []),
                *extra,
            ]
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            server = Server(name, port, server_id, str(datadir), proc.pid)
            if self._wait_ready(server, proc):
                self._grant(server)
                self.servers[name] = server
                self._processes[name] = proc
                self._save()
                return server
            last_error = self._error_tail(home)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        raise SandboxError(
            f"MariaDB server {name!r} did not start: {last_error}",
            f"read {home / 'error.log'}",
        )

    @staticmethod
    def _error_tail(home: Path) -> str:
        log = home / "error.log"
        return " | ".join(log.read_text(errors="replace").splitlines()[-3:]) if log.exists() else ""

    @staticmethod
    def _wait_ready(server: Server, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                server.connect(connect_timeout=1).close()
                return True
            except pymysql.err.OperationalError:
                time.sleep(0.02)
        return False

    @staticmethod
    def _grant(server: Server) -> None:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(
                f"CREATE USER IF NOT EXISTS '{REPLICATION_USER}'@'127.0.0.1' "
                f"IDENTIFIED BY '{REPLICATION_PASSWORD}'"
            )
            cur.execute(
                "GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR, SELECT "
                f"ON *.* TO '{REPLICATION_USER}'@'127.0.0.1'"
            )

    def replicate(self, source: Server, replica: Server) -> None:
        """Make `replica` a native MariaDB replica of `source` (GTID, from the start)."""
        with replica.connect() as conn, conn.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")
            cur.execute("SET GLOBAL gtid_slave_pos = ''")
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, "
                "MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos",
                (source.port,),
            )
            cur.execute("START SLAVE")

    def stop(self, name: str, timeout: float = 30.0) -> None:
        server = self.servers.pop(name, None)
        if server is None:
            return
        _terminate(server.pid, timeout)
        proc = self._processes.pop(name, None)
        if proc is not None:
            proc.wait()
        self._save()

    def stop_all(self) -> None:
        for name in list(self.servers):
            self.stop(name)

    def remove(self) -> None:
        """Stop everything and delete the folder."""
        self.stop_all()
        shutil.rmtree(self.root, ignore_errors=True)

    def remove_data(self) -> None:
        """Stop everything and delete the datadirs and the template (the bulk), keeping each
        server's error.log and sandbox.json for reading afterwards."""
        self.stop_all()
        for datadir in [self.root / "template", *self.root.glob("*/data")]:
            shutil.rmtree(datadir, ignore_errors=True)


def _terminate(pid: int, timeout: float) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while _pid_alive(pid):
        time.sleep(0.02)


@contextmanager
def sandbox(root: str | os.PathLike[str], **kwargs: str) -> Iterator[Sandbox]:
    box = Sandbox(root, **kwargs)
    try:
        yield box
    finally:
        box.stop_all()
