"""The hub as a binlog service: the MySQL/MariaDB replication protocol over the hub's log.

Native MariaDB replicas, `mariadb-binlog --read-from-remote-server` and CDC tools that read a
binlog (python-mysql-replication, zongji, …) subscribe to the hub instead of to each origin.
docs/binlog-service.md describes it; the modules:

    service.py     what the hub runs: indexer thread, listener, subscribers, status
    indexer.py     follows the hub's log; places each transaction in the virtual files
    index.py       the files' durable index (binlog-service.sqlite3)
    render.py      one transaction as binlog events
    rowencode.py   row images, as the origin wrote them
    tablemap.py    the origin's Table_map bodies read back
    events.py      event layouts (MariaDB 10.11)
    server.py      listener, connections, commands
    handshake.py   greeting and mysql_native_password
    queries.py     the closed set of queries answered
    dump.py        COM_BINLOG_DUMP: the stream
    packets.py     protocol packets
    source.py      the hub's log, read only
"""

from .service import BinlogService

__all__ = ["BinlogService"]
