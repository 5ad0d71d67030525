"""A warm Spark application for reconciliations: one driver that stays up and runs the runs
submitted to it, so they do not pay Spark's start-up (the JVM, the SparkContext, the Python
workers, Spark SQL's first query: about four seconds of CPU on every cold run).

    binlogsync reconcile-server --socket /run/binlogsync/reconcile.sock [--master …] [--conf …]
    binlogsync reconcile --spark-server /run/binlogsync/reconcile.sock --source … --target …

The server is a Spark application like any run (`local[*]`, or a cluster's master); each run
is a set of Spark jobs inside it, one run at a time (a second waits). The command line sends
its arguments and the password variables its URLs name over a Unix socket of mode 0600 (only
its owner can connect; nothing listens on the network), and prints what the run prints; exit
codes are the run's. A run's files (`--out`, `?password_file=`) are read and written by the
server, on its machine, as its user.

Requests are one JSON object, answers one JSON object, each framed by a 4-byte big-endian
length (at most 1 MiB): {"argv": [...], "env": {VAR: value}} → {"exit_code": n, "stdout": …,
"stderr": …}. A request that is not that is answered with exit code 2 and the reason; the
server goes on.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import BinlogsyncError, UsageError
from ..runloop import RunLoop

log = logging.getLogger(__name__)
MAX_MESSAGE = 1 << 20
_LENGTH = struct.Struct(">I")
# What a request may carry of the client's environment: the password variables (the URLs'
# ?password_env= and the two defaults); nothing else reaches the server's runs.
DEFAULT_PASSWORD_VARIABLES = ("BINLOGSYNC_SOURCE_PASSWORD", "BINLOGSYNC_TARGET_PASSWORD")


def _send(sock: socket.socket, message: Mapping[str, Any]) -> None:
    data = json.dumps(message).encode()
    sock.sendall(_LENGTH.pack(len(data)) + data)


def _receive(sock: socket.socket) -> dict[str, Any]:
    head = _read(sock, _LENGTH.size)
    (size,) = _LENGTH.unpack(head)
    if size > MAX_MESSAGE:
        raise ValueError(f"a message of {size} bytes (at most {MAX_MESSAGE})")
    found = json.loads(_read(sock, size))
    if not isinstance(found, dict):
        raise ValueError("a message that is not a JSON object")
    return found


def _read(sock: socket.socket, n: int) -> bytes:
    chunks = b""
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        chunks += chunk
    return chunks


def password_variables(argv: Sequence[str]) -> list[str]:
    """The environment variables a run's URLs take passwords from."""
    from urllib.parse import parse_qs, urlsplit

    found = list(DEFAULT_PASSWORD_VARIABLES)
    for word in argv:
        value = word.split("=", 1)[1] if word.startswith("--") and "=" in word else word
        if "://" not in value:
            continue
        try:
            query = parse_qs(urlsplit(value).query)
        except ValueError:
            continue
        found.extend(query.get("password_env", []))
    return found


def submit(path: str, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> int:
    """Run `argv` (reconcile's arguments, without --spark-server) on the server at `path`;
    print what it prints; its exit code. UsageError when no server answers there."""
    import sys

    wanted = {v: env[v] for v in password_variables(argv) if v in env}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(path)
            sock.settimeout(timeout)
            _send(sock, {"argv": list(argv), "env": wanted})
            answer = _receive(sock)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"no reconcile server answers at {path}: {exc}",
            "start one with `binlogsync reconcile-server --socket PATH`, or leave out "
            "--spark-server to run in a Spark application of this command's own",
        ) from exc
    sys.stdout.write(str(answer.get("stdout", "")))
    sys.stderr.write(str(answer.get("stderr", "")))
    return int(answer.get("exit_code", 2))


class ReconcileServer(RunLoop):
    """The warm driver: a SparkSession, a Unix socket, one run at a time."""

    name = "reconcile-server"

    def __init__(
        self,
        socket_path: Path,
        spark: Any,
        environ: MutableMapping[str, str],
        options_of: Callable[[list[str], dict[str, str]], Any],
    ) -> None:
        super().__init__()
        self.path = socket_path
        self.spark = spark  # sparkapp.SparkStart
        self.environ = environ
        # A run's command line and environment as settings.Options (the CLI's own parsing, passed
        # in by options.serve: the CLI starts the server, so the server does not import it).
        self.options_of = options_of
        self.runs = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None

    def bind(self) -> None:
        """Listen at the socket path (mode 0600); UsageError when a live server holds it."""
        if self.path.exists():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(self.path))
            except OSError:
                self.path.unlink()  # left by a server that died
            else:
                raise UsageError(
                    f"a reconcile server already listens at {self.path}",
                    "use it (--spark-server), or stop it first",
                )
            finally:
                probe.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is made 0600: only its owner may connect
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        listener.listen(8)
        listener.settimeout(0.5)
        self._listener = listener

    def run(self) -> int:
        if self._listener is None:
            self.bind()
        assert self._listener is not None
        self.spark.session()  # up before the first run: that is the point
        log.info("reconcile server: Spark up, listening at %s", self.path)
        try:
            while not self.stopping:
                try:
                    conn, _ = self._listener.accept()
                except TimeoutError:
                    continue
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
        finally:
            self._listener.close()
            with contextlib.suppress(OSError):
                self.path.unlink()
        return 0

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(30)
                request = _receive(conn)
                argv = request.get("argv")
                env = request.get("env", {})
                if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                    raise ValueError("argv must be a list of strings")
                if not isinstance(env, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in env.items()
                ):
                    raise ValueError("env must map names to strings")
                allowed = set(password_variables(argv))
                if set(env) - allowed:
                    raise ValueError(f"env may carry only {', '.join(sorted(allowed))}")
            except (OSError, ValueError) as exc:
                with contextlib.suppress(OSError):
                    _send(conn, {"exit_code": 2, "stdout": "", "stderr": f"error: {exc}\n"})
                return
            conn.settimeout(None)  # a run takes as long as it takes
            answer = self._run(argv, env)
            with contextlib.suppress(OSError):
                _send(conn, answer)

    def _run(self, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
        from .job import run

        out, err = io.StringIO(), io.StringIO()
        with self._lock:
            self.runs += 1
            try:
                report = run(self.options_of(argv, env), self.spark)
                report.release()
                out.write(report.render() + "\n")
                code = report.exit_code
            except SystemExit as exc:  # argparse: the message went to its own stderr
                code = 2
                err.write(f"error: bad arguments ({exc})\n")
            except BinlogsyncError as exc:
                code = 2
                err.write(f"error: {exc}\n")
            except Exception as exc:  # noqa: BLE001 - a failed run must not end the server
                log.exception("reconcile run failed")
                code = 2
                err.write(f"error: the reconciliation failed: {type(exc).__name__}: {exc}\n")
        return {"exit_code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
