"""The binlog service as the hub runs it: the indexer's thread, the listener, the subscribers.

The hub makes one `BinlogService` when its config has [binlog_service], starts it before its
loop and stops it after; it calls `wake()` after each commit to its log (the indexer then
takes what is new at once) and asks `compaction_bound(origin)` before compacting (the log is
kept `retain_hours` for subscribers, beyond what targets need). `status()` is what `binlogsync
status` shows of it.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..config import BinlogServiceConfig
from ..errors import ConfigError, TransportError
from ..position import Position, state_text
from . import events as ev
from .dump import Dump, Request, Subscriber
from .handshake import stored_password
from .index import Index, file_name
from .indexer import STEP_ROWS, EventCache, Indexer, Settings
from .packets import Connection
from .render import Shapes
from .server import Listener, Session

log = logging.getLogger("binlogsync.binlogservice")

BASE_NAME = "hub-bin"
_IDLE_STEP = 0.05  # the indexer looks at the hub's log at least this often


class BinlogService:
    def __init__(
        self,
        config: BinlogServiceConfig,
        data_dir: Path,
        origins: list[str],
        maps_version: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self.data_dir = data_dir
        self.version = ev.SERVER_VERSION.removesuffix("-log")
        self.user = config.user
        self.password = stored_password(config.password)
        self.tls = _server_context(config)
        self.require_tls = config.require_secure_transport
        self.stopping = threading.Event()
        self.settings = Settings(
            data_dir=data_dir,
            server_id=config.server_id,
            origins=tuple(origins),
            tables=config.tables,
            domains=dict(config.domains),
            file_bytes=config.file_bytes,
            retain_seconds=config.retain_hours * 3600.0,
            base=BASE_NAME,
        )
        self.cache = EventCache()
        self.shapes = Shapes()
        self.indexer = Indexer(self.settings, self.cache, self.shapes, maps_version)
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self.subscribers: dict[int, Subscriber] = {}
        self._registered: dict[int, tuple[int, str, int]] = {}
        self._local = threading.local()
        self.listener: Listener | None = None
        self._thread = threading.Thread(target=self._index_loop, name="binlog-indexer", daemon=True)
        self.started = time.time()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        host, _, port = self.config.bind.rpartition(":")
        try:
            self.listener = Listener(host.strip("[]"), int(port), self._session)
        except OSError as exc:
            raise TransportError(
                f"binlog_service.bind: cannot listen on {self.config.bind}: {exc.strerror}",
                "choose a free port in binlog_service.bind, or stop the process that holds it",
            ) from exc
        self.indexer.step()  # the files exist before the first subscriber asks
        self._thread.start()
        self.listener.start()
        log.info(
            "binlog service listening on %s:%s (server_id %s, origins %s, files %s.*)",
            *self.listener.address[:2],
            self.config.server_id,
            ", ".join(self.settings.origins),
            BASE_NAME,
        )

    @property
    def address(self) -> tuple[str, int]:
        assert self.listener is not None
        host, port = self.listener.address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()
        with self._lock:
            for subscriber in self.subscribers.values():
                subscriber.stop.set()
        if self.listener is not None:
            self.listener.stop()
        if self._thread.is_alive():
            self._thread.join(10)
        self.indexer.close()

    def wake(self) -> None:
        """The hub stored transactions: index them now."""
        self._wake.set()

    def _index_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                done = self.indexer.step()
            except Exception:  # noqa: BLE001 - logged; the next step tries again
                log.exception("binlog service: indexing failed")
                done = 0
                self.stopping.wait(1.0)
            if done < STEP_ROWS:
                self._wake.wait(_IDLE_STEP)
                self._wake.clear()

    # -- what the hub asks --------------------------------------------------------------------
    def serves(self, origin: str) -> bool:
        return origin in self.settings.origins

    def compaction_bound(self, origin: str) -> Position | None:
        """How far the hub may compact `origin`'s log for the service's sake: up to what was
        indexed `retain_hours` ago (None: nothing yet)."""
        return self.indexer.bounds.get(origin)

    def status(self) -> dict[str, Any]:
        index = self._index()
        files = index.files()
        last = files[-1] if files else None
        now = time.time()
        with self._lock:
            subscribers = list(self.subscribers.values())
        rows = []
        for s in subscribers:
            row = s.row()
            if s.file.startswith(BASE_NAME + "."):
                pending = index.oldest_pending(int(s.file.rsplit(".", 1)[1]), s.position)
                row["lag_seconds"] = round(max(0.0, now - pending.indexed_at), 3) if pending else 0
                row["pending_since"] = pending.indexed_at if pending else None
            registered = self._registered.get(s.id)
            if registered is not None:
                row["report_host"], row["report_port"] = registered[1], registered[2]
            rows.append(row)
        origins = index.origins()
        return {
            "bind": "{}:{}".format(*self.address) if self.listener else self.config.bind,
            "server_id": self.config.server_id,
            "files": len(files),
            "first_file": files[0].name if files else None,
            "head": {"file": last.name, "position": index.end_of(last)} if last else None,
            "gtid_state": state_text(index.state(self.config.server_id)),
            "retain_hours": self.config.retain_hours,
            "origins": [
                {
                    "origin": o.origin,
                    "domain": o.domain,
                    "last_gtid": f"{o.domain}-{self.config.server_id}-{o.last_seq}"
                    if o.last_seq
                    else None,
                    "indexed_key": o.last_key,  # the hub log's key it has indexed up to
                    "stalled": o.stalled,
                }
                for o in sorted(origins.values(), key=lambda o: o.domain)
            ],
            "subscribers": rows,
        }

    # -- sessions -----------------------------------------------------------------------------
    def _session(self, conn: Connection, address: str, number: int) -> None:
        try:
            Session(conn, address, number, self).run()
        finally:
            with self._lock:
                self._registered.pop(number, None)

    def registered(self, number: int, server_id: int, host: str, port: int) -> None:
        with self._lock:
            self._registered[number] = (server_id, host, port)

    def dump(
        self,
        conn: Connection,
        request: Request,
        user_vars: dict[str, object],
        address: str,
        number: int,
    ) -> None:
        mode = "gtid" if user_vars.get("slave_connect_state") is not None else "file"
        me = Subscriber(number, request.server_id, address, mode, time.time(),
                        request.file, request.position)  # fmt: skip
        if isinstance(conn.sock, ssl.SSLSocket):
            me.tls = conn.sock.version() or "TLS"
        with self._lock:
            if request.server_id:
                # A replica that reconnects takes the place of its old dump (as MariaDB's
                # kill_zombie_dump_threads does).
                for other in self.subscribers.values():
                    if other.server_id == request.server_id:
                        other.stop.set()
            self.subscribers[number] = me
        dump = Dump(conn, request, user_vars, self.indexer, self.cache, self.shapes, me,
                    self.stopping)  # fmt: skip
        log.info(
            "binlog service: %s (server_id %s) subscribes from %s",
            address,
            request.server_id,
            f"GTID {user_vars.get('slave_connect_state')!s}"
            if mode == "gtid"
            else f"{request.file or '(first file)'}:{request.position}",
        )
        try:
            dump.run()
        finally:
            dump.close()
            with self._lock:
                self.subscribers.pop(number, None)
            log.info("binlog service: %s (server_id %s) left", address, request.server_id)

    # -- what queries answer from (queries.Facts) ----------------------------------------------
    def _index(self) -> Index:
        index = getattr(self._local, "index", None)
        if index is None:
            index = self._local.index = Index(self.data_dir, BASE_NAME)
        return index

    def binary_logs(self) -> list[tuple[str, int]]:
        index = self._index()
        out = []
        for info in index.files():
            size = info.size if info.size is not None else index.end_of(info)
            out.append((info.name, size))
        return out

    def master_status(self) -> tuple[str, int]:
        index = self._index()
        files = index.files()
        if not files:
            return file_name(BASE_NAME, 1), 4
        return files[-1].name, index.end_of(files[-1])

    def slave_hosts(self) -> list[tuple[int, str, int, int]]:
        with self._lock:
            return [(s, h, p, self.config.server_id) for s, h, p in self._registered.values()]

    def variables(self) -> Mapping[str, object]:
        state = state_text(self._index().state(self.config.server_id))
        host, port = self.address if self.listener else ("127.0.0.1", 0)
        return {
            "version": self.version,
            "version_comment": "binlogsync binlog service",
            "version_compile_os": "Linux",
            "protocol_version": 10,
            "server_id": self.config.server_id,
            "server_uuid": self.indexer.uuid,
            "hostname": socket.gethostname(),
            "port": port,
            "log_bin": "ON",
            "log_bin_basename": str(self.data_dir / BASE_NAME),
            "log_slave_updates": "ON",
            "binlog_format": "ROW",
            "binlog_row_image": "FULL",
            "binlog_row_metadata": "FULL",
            "binlog_checksum": "CRC32",
            "binlog_annotate_row_events": "OFF",
            "max_binlog_size": self.config.file_bytes,
            "gtid_binlog_pos": state,
            "gtid_current_pos": state,
            "gtid_binlog_state": state,
            "gtid_slave_pos": "",
            "gtid_domain_id": 0,
            "gtid_strict_mode": "ON",
            "gtid_mode": "OFF",
            "enforce_gtid_consistency": "OFF",
            "max_allowed_packet": 1073741824,
            "net_buffer_length": 16384,
            "net_write_timeout": 60,
            "net_read_timeout": 30,
            "wait_timeout": 28800,
            "interactive_timeout": 28800,
            "character_set_server": "utf8mb4",
            "collation_server": "utf8mb4_general_ci",
            "character_set_client": "utf8mb4",
            "character_set_connection": "utf8mb4",
            "character_set_results": "utf8mb4",
            "character_set_database": "utf8mb4",
            "collation_connection": "utf8mb4_general_ci",
            "collation_database": "utf8mb4_general_ci",
            "time_zone": "SYSTEM",
            "system_time_zone": "UTC",
            "lower_case_table_names": 0,
            "sql_mode": "",
            "autocommit": "ON",
            "tx_isolation": "REPEATABLE-READ",
            "transaction_isolation": "REPEATABLE-READ",
            "auto_increment_increment": 1,
            "auto_increment_offset": 1,
            "license": "GPL",
            "init_connect": "",
            "query_cache_size": 0,
            "query_cache_type": "OFF",
            "performance_schema": "OFF",
            "have_ssl": "DISABLED",
            "read_only": "ON",
            "rpl_semi_sync_master_enabled": "OFF",
            "bind_address": host,
        }


def _server_context(config: BinlogServiceConfig) -> ssl.SSLContext | None:
    """The TLS context subscribers get, from ssl_cert and ssl_key (TLS 1.2 or newer); None
    without a certificate. A certificate or key that does not load is a ConfigError."""
    if config.ssl_cert is None or config.ssl_key is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(config.ssl_cert, config.ssl_key)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"binlog_service: cannot load the certificate {config.ssl_cert} with the key "
            f"{config.ssl_key}: {exc}",
            "give a PEM certificate and its matching private key (unencrypted)",
        ) from exc
    return context
