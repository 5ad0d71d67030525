"""Test kit for the binlog service: a site whose hub serves the replication protocol, and the
real clients that subscribe to it (a native MariaDB replica, mariadb-binlog,
python-mysql-replication)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymysql

from binlogsync.binlogservice import BinlogService
from binlogsync.binlogservice import events as ev
from binlogsync.binlogservice import tablemap as tm
from binlogsync.codec import pack
from binlogsync.config import BinlogServiceConfig
from binlogsync.hub.log import Entry, HubLog
from binlogsync.hub.tablemaps import TableMaps
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync_dev.localsite import LocalSite, wait_until
from binlogsync_dev.sandbox import Server, free_port

USER = "repl"
PASSWORD = "service-pw"
SERVICE_ID = 900


def service_section(root: Path, port: int, **extra: Any) -> str:
    """The [binlog_service] table of a test hub (the password in a file beside it)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "service.pw").write_text(PASSWORD + "\n")
    lines = [
        "",
        "[binlog_service]",
        f'bind = "127.0.0.1:{port}"',
        f'user = "{USER}"',
        f'password_file = "{root / "service.pw"}"',
        f"server_id = {SERVICE_ID}",
    ]
    for key, value in extra.items():
        if isinstance(value, bool):
            lines.append(f"{key} = {str(value).lower()}")
        elif isinstance(value, str):
            lines.append(f'{key} = "{value}"')
        elif isinstance(value, list | tuple):
            lines.append(f"{key} = [{', '.join(repr(v).replace(chr(39), chr(34)) for v in value)}]")
        elif isinstance(value, dict):
            items = ", ".join(f'"{k}" = {v}' for k, v in value.items())
            lines.append(f"{key} = {{ {items} }}")
        else:
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


_HAS_CHECKPOINTS = (
    "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'binlogsync' "
    "AND TABLE_NAME = 'checkpoint'"
)


def service_site(
    tmp_path: Path,
    origin: Server,
    targets: list[Server],
    db: str,
    port: int | None = None,
    service: dict[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[LocalSite, int]:
    """A LocalSite whose hub runs the binlog service on `port` (a free one by default)."""
    port = port or free_port()
    root = tmp_path / "site"
    for target in targets:  # a fresh deployment: no checkpoint of an earlier test's site
        if target.scalar(_HAS_CHECKPOINTS):
            with target.connect() as conn, conn.cursor() as cur:
                cur.execute("DELETE FROM binlogsync.checkpoint WHERE origin = 'origin'")
    extra = dict(kwargs.pop("agent_extra", {}))
    extra["hub"] = (
        extra.get("hub", "") + service_section(root, port, **(service or {}))
        + kwargs.pop("more_routes", "")
    )  # fmt: skip
    site = LocalSite(root, origin, targets, tables=(f"{db}.*",), agent_extra=extra, **kwargs)
    return site, port


def route(origin: str, tables: list[str], targets: tuple[str, ...] = ()) -> str:
    """Another [[route]] of the hub (before the site's own)."""
    quoted = ", ".join(f'"{t}"' for t in tables)
    names = ", ".join(f'"{t}"' for t in targets)
    return f'\n[[route]]\norigin = "{origin}"\ntables = [{quoted}]\ntargets = [{names}]\n'


def add_origin(site: LocalSite, name: str, server: Server, tables: list[str]) -> None:
    """A second origin agent in the site (the hub's config names it in a route)."""
    quoted = ", ".join(f'"{t}"' for t in tables)
    text = (
        f'[client]\nname = "{name}"\nhub = "{site.endpoint}"\nheartbeat_interval = '
        f'{site.heartbeat}\n\n[origin]\nhost = "127.0.0.1"\nport = {server.port}\n'
        f'user = "root"\nserver_id = {1000 + server.server_id}\ntables = [{quoted}]\n'
        'start = "current"\n'
    )
    site._add(name, "client", text)


def connect(port: int, **kwargs: Any) -> pymysql.Connection:
    return pymysql.connect(
        host="127.0.0.1", port=port, user=USER, password=PASSWORD, connect_timeout=5, **kwargs
    )


def wait_service(port: int, timeout: float = 30) -> None:
    def up() -> bool:
        try:
            connect(port).close()
            return True
        except pymysql.err.OperationalError:
            return False

    wait_until(up, timeout, 0.05, f"the binlog service on port {port}")


def follow(
    replica: Server,
    port: int,
    gtid: bool = True,
    file: str = "",
    pos: int = 4,
    ssl_ca: Path | None = None,
) -> None:
    """Make `replica` a native replica of the service (GTID from an empty state, or a file
    and position); over TLS, verifying the service's certificate, when `ssl_ca` is given."""
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute("STOP SLAVE")
        cur.execute("RESET SLAVE ALL")
        if gtid:
            cur.execute("SET GLOBAL gtid_slave_pos = ''")
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER=%s, "
                "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, "
                "MASTER_HEARTBEAT_PERIOD=1",
                (port, USER, PASSWORD),
            )
        else:
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER=%s, "
                "MASTER_PASSWORD=%s, MASTER_USE_GTID=no, MASTER_LOG_FILE=%s, "
                "MASTER_LOG_POS=%s, MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=1",
                (port, USER, PASSWORD, file, pos),
            )
        if ssl_ca is not None:
            cur.execute(
                "CHANGE MASTER TO MASTER_SSL=1, MASTER_SSL_CA=%s, MASTER_SSL_VERIFY_SERVER_CERT=1",
                (str(ssl_ca),),
            )
        cur.execute("START SLAVE")


def slave_status(replica: Server) -> dict[str, Any]:
    with replica.connect() as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW SLAVE STATUS")
        return cur.fetchone() or {}


def stop_replica(replica: Server) -> None:
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute("STOP SLAVE")
        cur.execute("RESET SLAVE ALL")


# -- a binlog service over a hub log made by hand (no MariaDB) ------------------------------


UTF8MB4 = 45


def map_body(schema: str, table: str, columns: list[tuple[str, int, bytes, bool]]) -> bytes:
    """A Table_map body (what follows the table id and flags) as MariaDB writes it with
    binlog_row_metadata=FULL: columns are (name, type, metadata bytes, unsigned); text
    columns are utf8mb4, the first column is the primary key."""
    types = bytes(t for _, t, _, _ in columns)
    meta = b"".join(m for _, _, m, _ in columns)
    count = len(columns)
    numeric = [u for _, t, _, u in columns if t in tm.NUMERIC]
    sign = bytearray((len(numeric) + 7) // 8)
    for i, unsigned in enumerate(numeric):
        if unsigned:
            sign[i // 8] |= 0x80 >> (i % 8)
    text = [c for c in columns if c[1] in tm.CHARACTER]
    names = b"".join(ev.lenenc(len(n.encode())) + n.encode() for n, *_ in columns)
    optional = b""
    if numeric:
        optional += bytes((tm.SIGNEDNESS,)) + ev.lenenc(len(sign)) + bytes(sign)
    if text:
        charsets = ev.lenenc(UTF8MB4)
        optional += bytes((tm.DEFAULT_CHARSET,)) + ev.lenenc(len(charsets)) + charsets
    optional += bytes((tm.COLUMN_NAME,)) + ev.lenenc(len(names)) + names
    optional += bytes((tm.SIMPLE_PRIMARY_KEY,)) + ev.lenenc(1) + ev.lenenc(0)
    return (
        bytes((len(schema),)) + schema.encode() + b"\0"
        + bytes((len(table),)) + table.encode() + b"\0"
        + ev.lenenc(count) + types + ev.lenenc(len(meta)) + meta
        + ((1 << count) - 2).to_bytes((count + 7) // 8, "little")  # all but the key NULL-able
        + optional
    )  # fmt: skip


# id INT NOT NULL PRIMARY KEY, name VARCHAR(50) (utf8mb4: 200 bytes), n BIGINT UNSIGNED
SIMPLE = [
    ("id", tm.LONG, b"", False),
    ("name", tm.VARCHAR, (200).to_bytes(2, "little"), False),
    ("n", tm.LONGLONG, b"", True),
]


class HandLog:
    """A hub log an origin never wrote: transactions appended by a test."""

    def __init__(self, directory: Path, origin: str = "o1") -> None:
        self.directory, self.origin = directory, origin
        self.log = HubLog(directory)
        self.maps = TableMaps(self.log.db)
        self.seq = 0
        self.log.register(origin, Position.of_state("0-1-0"))

    def add(self, *changes: Change, maps: list[tuple[str, str, bytes]] = ()) -> Position:  # type: ignore[assignment]
        self.seq += 1
        position = Position.of_state(f"0-1-{self.seq}")
        payload = pack(Transaction(position, 1_700_000_000.0 + self.seq, changes).to_wire())
        tables = tuple(sorted({(c.schema, c.table) for c in changes}))
        self.maps.add(self.origin, [(s, t, position.key, b) for s, t, b in maps])
        self.log.append(self.origin, [Entry(position, 1_700_000_000.0 + self.seq, payload,
                                            tables=tables)])  # fmt: skip
        return position

    def ddl(self, statement: str, schema: str = "app", table: str = "t") -> Position:
        return self.add(Change("ddl", schema, table, statement=statement))

    def close(self) -> None:
        self.log.close()


def config(port: int = 0, **kwargs: Any) -> BinlogServiceConfig:
    return BinlogServiceConfig(
        bind=f"127.0.0.1:{port}",
        user=USER,
        password=PASSWORD,
        server_id=SERVICE_ID,
        tables=kwargs.pop("tables", TableFilter()),
        **kwargs,
    )


@contextmanager
def running(
    hand: HandLog, port: int = 0, origins: tuple[str, ...] = ("o1",), **kwargs: Any
) -> Iterator[BinlogService]:
    service = BinlogService(config(port, **kwargs), hand.directory, list(origins),
                            lambda: hand.maps.version)  # fmt: skip
    service.start()
    try:
        yield service
    finally:
        service.stop()


def indexed(service: BinlogService, seq: int, domain: int = 1, timeout: float = 10) -> None:
    """Until the service has given GTID domain-900-seq a place."""
    wait_until(
        lambda: service.indexer.index.state(SERVICE_ID).get(domain, (0, 0))[1] >= seq,
        timeout, 0.01, f"GTID {domain}-{SERVICE_ID}-{seq} indexed",
    )  # fmt: skip
