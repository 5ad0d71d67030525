"""The primary keys a table's changes touched between two source positions (`--since-last`).

Read from the origin's binary log with the capture's own reader (capture/reader.py: the same
decoding as replication), from the last verified position P1 up to the run's position P2, for
one table. Every key of an inserted, updated (before and after: a key-changing update touches
both) or deleted row counts. The answer is None, with the reason, when the keys cannot be
known, and the run then compares the whole table: P1 is gone from the binlog (purged), the
table was truncated or its definition changed in between, or more than `max_keys` keys changed
(a full run is then as cheap). The hub's own log is not asked: it drops what every target has
applied, which is exactly the range an incremental run needs, while the binlog is kept for
days (`binlog_retention`).

Reading the binlog needs REPLICATION SLAVE (and, on MariaDB, BINLOG MONITOR for the position)
on the source account, as capture does.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from ..capture.reader import BinlogReader
from ..config import DatabaseSettings
from ..errors import BinlogsyncError
from ..model import Part
from ..position import Position, comparable
from ..tables import TableFilter

MAX_KEYS = 1_000_000
DEADLINE = 600.0  # seconds the binlog may take to reach P2 before the run compares everything


@dataclass(frozen=True)
class Changed:
    keys: tuple[tuple[Any, ...], ...] | None  # None: unknown, compare the whole table
    why: str  # what was read, or why the keys are unknown


def _server_id() -> int:
    """A replica id for the binlog dump, unique per process and apart from the agents'."""
    return 0x7F000000 | (os.getpid() & 0xFFFFFF)


def changed_keys(
    db: DatabaseSettings,
    schema: str,
    table: str,
    key_columns: tuple[str, ...],
    since: Position,
    upto: Position,
    max_keys: int = MAX_KEYS,
) -> Changed:
    if not comparable(since, upto):
        return Changed(None, f"the last verified position {since} and {upto} are not comparable")
    if upto.key <= since.key:
        return Changed((), f"no transaction after {since}")
    reader = BinlogReader(
        db,
        _server_id(),
        since,
        TableFilter((f"{schema}.{table}",)),
        describe_tables=False,
        decode_only=frozenset(key_columns),  # the other columns' values are never made
    )
    timer = threading.Timer(DEADLINE, reader.stop)  # transactions() returns soon after
    timer.daemon = True
    timer.start()
    keys: set[tuple[Any, ...]] = set()
    transactions = 0
    reached = False
    try:
        for item in reader.transactions():
            end = item.end if isinstance(item, Part) else item.position
            for change in item.changes:
                if (change.schema, change.table) != (schema, table):
                    continue
                if change.kind in ("ddl", "truncate"):
                    return Changed(None, f"a {change.kind.upper()} of the table after {since}")
                try:
                    index = [change.columns.index(c) for c in key_columns]
                except ValueError:
                    return Changed(None, f"the table's key columns changed after {since}")
                for row in (*change.before, *change.after):
                    keys.add(tuple(row[i] for i in index))
                if len(keys) > max_keys:
                    return Changed(None, f"more than {max_keys:,} keys changed after {since}")
            if end is not None:
                transactions += 1
                if end.key >= upto.key:
                    reached = True
                    break
    except BinlogsyncError as exc:
        return Changed(None, f"the origin's binlog from {since} could not be read: {exc}")
    finally:
        timer.cancel()
        reader.close()
    if not reached:
        return Changed(None, f"the binlog did not reach {upto} within {DEADLINE:.0f} s")
    return Changed(
        tuple(sorted(keys, key=repr)),
        f"{len(keys):,} changed keys in {transactions:,} transactions after {since}",
    )
