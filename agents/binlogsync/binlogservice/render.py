"""One transaction of the hub's log as the events of a MariaDB binlog, with their positions.

A transaction with row changes becomes

    GTID (domain of its origin, the service's server id, the origin's next sequence number)
    for each run of consecutive changes to one table:
        Table_map (the origin's body, our table id)
        Write_rows / Update_rows / Delete_rows (v1), ≤ ROWS_EVENT_BYTES of rows each, the
        run's last one flagged STMT_END_F
    Xid

and a DDL or TRUNCATE becomes a standalone GTID and one Query event with the statement
(TRUNCATE's text is made here from the quoted names). A transaction stored in parts is
rendered part by part as they are read, so memory holds one part at a time; a run never
spans two parts. The result depends only on the transaction, the maps in force, the
service's table filter, its GTID and where it starts: the indexer (index.py) renders each
transaction once to fix its size, and every later rendering gives the same bytes (the
indexer's cache serves them while they are fresh).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ..model import ROW_KINDS, Change
from ..tables import TableFilter
from . import events as ev
from .rowencode import RowEncoder
from .tablemap import MapError, TableShape, parse

ROWS_EVENT_BYTES = 8192  # rows per Rows event, as MariaDB's binlog_row_event_max_size
_ROWS_KIND = {"insert": ev.WRITE_ROWS_V1, "update": ev.UPDATE_ROWS_V1, "delete": ev.DELETE_ROWS_V1}

MapLookup = Callable[[str, str, str, int], bytes | None]  # origin, schema, table, key → body


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a transaction goes: its GTID and the offset of its first event in its file."""

    domain: int
    seq: int
    start: int


class NothingServed(MapError):
    """A transaction none of whose changes the service's table filter takes: it gets no GTID
    and no room in the files."""


class Shapes:
    """Parsed Table_map bodies and the table ids the service gives them, shared by every
    renderer of the process (ids only need to be the same within one stream)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[bytes, tuple[int, TableShape, RowEncoder]] = {}
        self._next = 1

    def get(self, body: bytes) -> tuple[int, TableShape, RowEncoder]:
        known = self._known.get(body)
        if known is not None:
            return known
        shape = parse(body)
        encoder = RowEncoder(shape)
        with self._lock:
            known = self._known.get(body)
            if known is None:
                if len(self._known) > 4096:
                    self._known.clear()
                known = self._known[body] = (self._next, shape, encoder)
                self._next = self._next % (ev.TABLE_ID_LIMIT - 2) + 1
        return known


class Renderer:
    def __init__(
        self, server_id: int, tables: TableFilter, maps: MapLookup, shapes: Shapes
    ) -> None:
        self.server_id, self.tables, self.maps, self.shapes = server_id, tables, maps, shapes
        self._matches: dict[tuple[str, str], bool] = {}

    def _match(self, schema: str, table: str) -> bool:
        found = self._matches.get((schema, table))
        if found is None:
            if len(self._matches) > 4096:
                self._matches.clear()
            found = self._matches[(schema, table)] = (
                self.tables.covers_schema(schema)
                if not table
                else self.tables.matches(schema, table)
            )
        return found

    def wanted(self, change: Change) -> bool:
        return self._match(
            change.schema, change.table if change.kind != "ddl" or change.table else ""
        )

    def wanted_tables(self, tables: Iterable[tuple[str, str]] | None) -> bool | None:
        """Whether changes to these tables would be served (None: not known, decode)."""
        if tables is None:
            return None
        return any(self._match(s, t) for s, t in tables)

    def render(
        self,
        origin: str,
        key: int,
        timestamp: float,
        bodies: Iterable[Iterable[Change]],
        place: Placement,
    ) -> Iterator[list[bytes]]:
        """The events of one transaction (changes of each stored body, in order) at `place`,
        one list per stored body (a transaction in parts is made a part at a time). Raises
        NothingServed when none of its changes is served."""
        when = int(timestamp) & 0xFFFFFFFF
        sid = self.server_id
        first: list[Change] | None = None
        batches = iter(bodies)
        for batch in batches:
            first = [c for c in batch if self.wanted(c)]
            if first:
                break
        if not first:
            raise NothingServed("a transaction without any change the service serves")
        if first[0].kind not in ROW_KINDS:
            yield self._ddl(first, place, when)
            return
        pos = place.start + ev.GTID_EVENT_SIZE
        out = [ev.gtid(place.domain, place.seq, False, timestamp=when, server_id=sid, log_pos=pos)]
        changes: list[Change] | None = first
        while changes is not None:
            pos = self._rows(origin, key, changes, when, pos, out)
            changes = None
            for batch in batches:
                changes = [c for c in batch if self.wanted(c)]
                break
            if changes is not None:
                yield out
                out = []
        pos += ev.XID_EVENT_SIZE
        out.append(ev.xid(place.seq, timestamp=when, server_id=sid, log_pos=pos))
        yield out

    def _ddl(self, changes: list[Change], place: Placement, when: int) -> list[bytes]:
        statements = {_statement(c) for c in changes}
        if len(statements) != 1 or any(c.kind in ROW_KINDS for c in changes):
            raise MapError("a DDL transaction that is not one statement")
        change = changes[0]
        text = statements.pop().encode()
        schema = change.schema.encode() if change.table else b""
        pos = place.start + ev.GTID_EVENT_SIZE
        sid = self.server_id
        gtid = ev.gtid(place.domain, place.seq, True, timestamp=when, server_id=sid, log_pos=pos)
        pos += ev.query_size(text, schema)
        return [gtid, ev.query(text, schema, timestamp=when, server_id=sid, log_pos=pos)]

    def _rows(
        self, origin: str, key: int, changes: list[Change], when: int, pos: int, out: list[bytes]
    ) -> int:
        """Append the Table_map and Rows events of `changes` to `out`; where they end."""
        sid = self.server_id
        finish = ev.finish
        i = 0
        while i < len(changes):
            change = changes[i]
            if change.kind not in ROW_KINDS:
                raise MapError(
                    f"a transaction with row changes also holds {change.kind} of "
                    f"{change.schema}.{change.table}"
                )
            run = i + 1
            while (
                run < len(changes)
                and changes[run].schema == change.schema
                and changes[run].table == change.table
            ):
                run += 1
            body = self.maps(origin, change.schema, change.table, key)
            if body is None:
                raise MapError(
                    f"the hub holds no Table_map of {change.schema}.{change.table} for "
                    f"{origin}'s transaction at key {key}",
                    "its origin agent runs a binlogsync that does not send them: upgrade it; "
                    "transactions captured before that cannot be served",
                )
            table_id, shape, encoder = self.shapes.get(body)
            if shape.names != change.columns:
                raise MapError(
                    f"the columns of {change.schema}.{change.table} in the transaction "
                    f"({', '.join(change.columns)[:200]}) differ from its Table_map's "
                    f"({', '.join(shape.names)[:200]})"
                )
            pos += ev.size_of(8 + len(body))
            out.append(ev.table_map(table_id, body, timestamp=when, server_id=sid, log_pos=pos))
            heads = _heads(table_id, encoder.width)
            pending: list[bytes] = []
            size = 0
            kind = 0
            for j in range(i, run):
                current = changes[j]
                this = _ROWS_KIND[current.kind]
                for image in _images(current, encoder):
                    if pending and (this != kind or size + len(image) > ROWS_EVENT_BYTES):
                        rows = heads[kind, False] + b"".join(pending)
                        pos += ev.HEADER_SIZE + len(rows) + ev.CHECKSUM_SIZE
                        out.append(finish(kind, rows, timestamp=when, server_id=sid, log_pos=pos))
                        pending, size = [], 0
                    kind = this
                    pending.append(image)
                    size += len(image)
            if pending:
                rows = heads[kind, True] + b"".join(pending)
                pos += ev.HEADER_SIZE + len(rows) + ev.CHECKSUM_SIZE
                out.append(finish(kind, rows, timestamp=when, server_id=sid, log_pos=pos))
            i = run
        return pos


@functools.lru_cache(maxsize=4096)
def _heads(table_id: int, width: int) -> dict[tuple[int, bool], bytes]:
    """What every Rows event of a table starts with, by (event type, last of its statement)."""
    return {
        (kind, last): ev.rows_header(kind, table_id, width, last)
        for kind in _ROWS_KIND.values()
        for last in (False, True)
    }


def _images(change: Change, encoder: RowEncoder) -> list[bytes]:
    row = encoder.row
    if change.kind == "insert":
        return [row(r) for r in change.after]
    if change.kind == "delete":
        return [row(r) for r in change.before]
    return [row(b) + row(a) for b, a in zip(change.before, change.after, strict=True)]


def _statement(change: Change) -> str:
    if change.kind == "truncate":
        return f"TRUNCATE TABLE {_quote(change.schema)}.{_quote(change.table)}"
    return change.statement


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
