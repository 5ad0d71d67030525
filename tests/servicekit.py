"""Test kit for the binlog service: a site whose hub serves the replication protocol, and the
real clients that subscribe to it (a native MariaDB replica, mariadb-binlog,
python-mysql-replication)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymysql

from binlogsync.devsite.localsite import LocalSite, wait_until
from binlogsync.devsite.sandbox import Server, free_port

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
        if isinstance(value, str):
            lines.append(f'{key} = "{value}"')
        elif isinstance(value, list | tuple):
            lines.append(f"{key} = [{', '.join(repr(v).replace(chr(39), chr(34)) for v in value)}]")
        elif isinstance(value, dict):
            items = ", ".join(f'"{k}" = {v}' for k, v in value.items())
            lines.append(f"{key} = {{ {items} }}")
        else:
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


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
    extra = dict(kwargs.pop("agent_extra", {}))
    extra["hub"] = extra.get("hub", "") + service_section(root, port, **(service or {}))
    site = LocalSite(root, origin, targets, tables=(f"{db}.*",), agent_extra=extra, **kwargs)
    return site, port


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


def scalar(server: Server, sql: str, db: str | None = None) -> Any:
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
        return None if row is None else row[0]


def follow(replica: Server, port: int, gtid: bool = True, file: str = "", pos: int = 4) -> None:
    """Make `replica` a native replica of the service (GTID from an empty state, or a file
    and position)."""
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
        cur.execute("START SLAVE")


def slave_status(replica: Server) -> dict[str, Any]:
    with replica.connect() as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW SLAVE STATUS")
        return cur.fetchone() or {}


def stop_replica(replica: Server) -> None:
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute("STOP SLAVE")
        cur.execute("RESET SLAVE ALL")
