"""An origin's binary log files as retention sees them, and where its native replicas stand.

`list_files`: SHOW BINARY LOGS, and for each file the GTID state at its start: MariaDB writes
a Gtid_list event second in every binlog file (`SHOW BINLOG EVENTS IN 'file' LIMIT 2` shows it
as `[0-1-5,1-2-7]`). Servers without MariaDB GTIDs (MySQL) have no such event; their files
carry no start state and only file positions map onto them.

`created_at`: when a file was created. SQL shows no event times, and the file's mtime is not
reachable remotely, so it is read from the binlog itself: the first event of every binlog file
is its Format_description event, timestamped when the server opened the file. A binlog dump
from offset 4 (COM_BINLOG_DUMP, as `mariadb-binlog --read-from-remote-server` sends it: server
id 0, which never disconnects a replica with the same id, and the non-blocking flag) sends a
fake Rotate event and then that event; the connection is closed after it, so only a few
hundred bytes travel whatever the file's size. It needs the REPLICATION SLAVE privilege. A
rotation writes the Rotate event and opens the next file at once, so a file was *closed* when
the next one was created: retention measures a file's age from there.

`replica_position`: the GTID state a native MariaDB replica resumes from (its
`Gtid_Slave_Pos`, what it has applied: on a restart it reconnects there and discards what its
relay log held), or the origin file the SQL thread executes for a replica without GTIDs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from pymysql.constants.COMMAND import COM_BINLOG_DUMP

from .. import mysql
from ..capture.positions import has_gtid
from ..config import DatabaseSettings
from ..errors import RetentionRefused, UsageError
from ..position import Position, parse_state, state_text

FORMAT_DESCRIPTION_EVENT = 15
_NON_BLOCKING = 1  # BINLOG_DUMP_NON_BLOCK: end with EOF instead of waiting for new events
_HEADER = struct.Struct("<IBIII")  # after the OK byte: timestamp, type, server id, size, log_pos
_DUMP = struct.Struct("<IHI")  # offset, flags, server id; the file name follows


@dataclass(frozen=True)
class BinlogFile:
    name: str
    size: int
    start: str | None  # the GTID state at the file's start (None: no MariaDB GTIDs)


def list_files(cur: Any) -> list[BinlogFile]:
    """The origin's binlog files, oldest first, with the GTID state at each one's start."""
    cur.execute("SHOW BINARY LOGS")
    rows = [(str(r[0]), int(r[1])) for r in cur.fetchall()]
    if not rows:
        raise UsageError(
            "the origin has no binary logs (binary logging is off)",
            "--source must name the origin's MariaDB server, with log_bin on",
        )
    if not has_gtid(cur):
        return [BinlogFile(name, size, None) for name, size in rows]
    files = []
    for name, size in rows:
        cur.execute(f"SHOW BINLOG EVENTS IN '{_quoted(name)}' LIMIT 2")
        events = cur.fetchall()
        starts = [str(e[5]) for e in events if str(e[2]) == "Gtid_list"]
        if not starts:
            raise RetentionRefused(
                f"binlog file {name} has no Gtid_list event where MariaDB writes one",
                "is --source a MariaDB server? Retention maps GTID positions onto files by it",
            )
        files.append(BinlogFile(name, size, state_text(parse_state(starts[0].strip("[] ")))))
    return files


def _quoted(name: str) -> str:
    if "'" in name or "\\" in name:
        raise RetentionRefused(f"binlog file name {name[:80]!r} cannot be quoted safely")
    return name


def created_at(db: DatabaseSettings, file: str, timeout: float = 10.0) -> float:
    """The creation time of binlog file `file` (its Format_description event's timestamp, the
    server's clock, seconds since the epoch)."""
    doing = f"reading when binlog file {file} was created"
    conn = mysql.connect(db, doing, read_timeout=timeout, refused=RetentionRefused,
                         grants="grant it REPLICATION SLAVE: the file's first event is read "
                         "with a binlog dump")  # fmt: skip
    try:
        with mysql.errors(db, doing, RetentionRefused):
            with conn.cursor() as cur:
                # Announce that checksums are understood (else the server refuses the dump).
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
                cur.execute("SET @mariadb_slave_capability = 4")
            packet = _DUMP.pack(4, _NON_BLOCKING, 0) + file.encode()
            conn._execute_command(COM_BINLOG_DUMP, packet)
            for _event in range(4):  # a fake Rotate first, then the file's own first event
                data = conn._read_packet().get_all_data()
                if data[:1] != b"\x00" or len(data) < 1 + _HEADER.size:
                    break
                timestamp, kind, _server, _size, _pos = _HEADER.unpack_from(data, 1)
                if kind == FORMAT_DESCRIPTION_EVENT:
                    return float(timestamp)
    finally:
        mysql.close(conn)
    raise RetentionRefused(f"{db}: binlog file {file} does not start with a Format_description")


def purge_to(cur: Any, file: str) -> list[str]:
    """PURGE BINARY LOGS TO `file` (the files before it); the server's warnings."""
    cur.execute(f"PURGE BINARY LOGS TO '{_quoted(file)}'")
    cur.execute("SHOW WARNINGS")
    return [str(row[2]) for row in cur.fetchall()]


def replica_position(
    db: DatabaseSettings, origin_server_id: int, origin: DatabaseSettings
) -> tuple[str, Position]:
    """(connection name, position) of the replica `db`'s connection to the origin. Raises
    RetentionRefused when it has none, its IO thread is not running, or its position is
    unknown; UnreachableError (and the like) when it cannot be asked."""
    doing = f"reading where replica {db.host}:{db.port} stands"
    conn = mysql.connect(db, doing, refused=RetentionRefused,
                         grants="grant it SLAVE MONITOR (REPLICATION CLIENT before 10.5)")  # fmt: skip
    try:
        with mysql.errors(db, doing, RetentionRefused), conn.cursor() as cur:
            cur.execute("SHOW ALL SLAVES STATUS")
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        mysql.close(conn)
    where = f"replica {db.host}:{db.port}"
    ours = [
        r
        for r in rows
        if int(r.get("Master_Server_Id") or 0) == origin_server_id
        or (str(r.get("Master_Host")), int(r.get("Master_Port") or 0)) == (origin.host, origin.port)
    ]
    if not ours:
        seen = ", ".join(f"{r.get('Master_Host')}:{r.get('Master_Port')}" for r in rows)
        raise RetentionRefused(
            f"{where} does not replicate from the origin (server_id {origin_server_id}, "
            f"{origin.host}:{origin.port}); its connections: {seen or 'none'}",
            "give only replicas of this origin with --replica",
        )
    if len(ours) > 1:
        raise RetentionRefused(f"{where} has {len(ours)} connections to the origin")
    row = ours[0]
    name = str(row.get("Connection_name") or "")
    label = f"{where}" + (f" (connection {name!r})" if name else "")
    if row.get("Slave_IO_Running") != "Yes":
        error = row.get("Last_IO_Error") or "no error recorded"
        raise RetentionRefused(
            f"the position of {label} is unknown: its IO thread is not running "
            f"(Slave_IO_Running={row.get('Slave_IO_Running')}; {error})",
            "START SLAVE on it (a replica that is stopped may still need every binlog file), "
            "or leave it out of --replica if it is gone for good; nothing was purged",
        )
    if str(row.get("Using_Gtid") or "No") != "No":
        state = str(row.get("Gtid_Slave_Pos") or "")
        return label, Position.of_state(state)
    file = str(row.get("Relay_Master_Log_File") or "")
    if not file:
        raise RetentionRefused(f"the position of {label} is unknown (no Relay_Master_Log_File)")
    return label, Position(file, int(row.get("Exec_Master_Log_Pos") or 0))
