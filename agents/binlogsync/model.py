"""What flows through binlogsync: changes grouped into committed transactions.

Only the capture module sees python-mysql-replication's events; everything after it sees these
frozen dataclasses. A transaction too large to travel in one message travels as `Part`s. `to_wire`/`from_wire` give the compact list form that travels inside
msgpack (docs/protocol.md); `from_wire` validates shape and types, because the data may come
from the network.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import chain
from typing import Any, Literal

from .errors import ProtocolError
from .position import Position

ChangeKind = Literal["insert", "update", "delete", "truncate", "ddl"]
ROW_KINDS = ("insert", "update", "delete")
KINDS = (*ROW_KINDS, "truncate", "ddl")

Row = tuple[Any, ...]

# The types a column value may have after decoding (codec.py); anything else on the wire, such
# as msgpack's own Timestamp extension, is refused.
VALUE_TYPES = frozenset(
    {type(None), int, float, str, bytes, Decimal, dt.datetime, dt.date, dt.timedelta, set}
)


_STR = frozenset({str})
_LIST = frozenset({list})


@dataclass(frozen=True, slots=True)
class Change:
    """One statement's effect on one table.

    insert: `after` holds the new rows. delete: `before` holds the removed rows.
    update: `before[i]` became `after[i]`. Rows are tuples in `columns` order (FULL row image).
    truncate: the table was emptied. ddl: `statement` is the origin's DDL text, shown to people
    and never executed by binlogsync (the target's schema is the DBA's to change).
    """

    kind: ChangeKind
    schema: str
    table: str
    columns: tuple[str, ...] = ()
    before: tuple[Row, ...] = ()
    after: tuple[Row, ...] = ()
    statement: str = ""

    @property
    def row_count(self) -> int:
        return max(len(self.before), len(self.after), 1 if self.kind not in ROW_KINDS else 0)

    def renamed(self, schema: str) -> Change:
        return Change(
            self.kind, schema, self.table, self.columns, self.before, self.after, self.statement
        )

    def to_wire(self) -> list[Any]:
        return [
            self.kind,
            self.schema,
            self.table,
            list(self.columns),
            [list(r) for r in self.before],
            [list(r) for r in self.after],
            self.statement,
        ]

    @classmethod
    def from_wire(cls, data: Any) -> Change:
        if not isinstance(data, list) or len(data) != 7:
            raise ProtocolError("a change must be a list of 7 items")
        kind, schema, table, columns, before, after, statement = data
        if kind not in KINDS:
            raise ProtocolError(f"unknown change kind {kind!r}")
        if type(schema) is not str or type(table) is not str or type(statement) is not str:
            raise ProtocolError("change schema, table and statement must be strings")
        if type(columns) is not list or not _STR.issuperset(map(type, columns)):
            raise ProtocolError("change columns must be a list of strings")
        rows = []
        width = len(columns)
        for image in (before, after):
            # Checked with C-level iteration only: this runs for every row the hub and targets
            # get (a generator expression here cost the hub a third of its time).
            if (
                type(image) is not list
                or not _LIST.issuperset(map(type, image))
                or not {width}.issuperset(map(len, image))
                or not VALUE_TYPES.issuperset(map(type, chain.from_iterable(image)))
            ):
                raise ProtocolError(
                    f"rows of {schema}.{table} do not match its columns or carry a value of "
                    "a type binlogsync does not send"
                )
            rows.append(tuple(map(tuple, image)))
        if kind == "update" and len(rows[0]) != len(rows[1]):
            raise ProtocolError("an update needs as many before as after images")
        return cls(kind, schema, table, tuple(columns), rows[0], rows[1], statement)


@dataclass(frozen=True, slots=True)
class Transaction:
    """One committed origin transaction: where it ends, when it committed, what it changed."""

    position: Position
    timestamp: float
    changes: tuple[Change, ...] = field(default=())

    @property
    def row_count(self) -> int:
        return sum(c.row_count for c in self.changes)

    def to_wire(self) -> list[Any]:
        return [self.position.to_wire(), self.timestamp, [c.to_wire() for c in self.changes]]

    @classmethod
    def from_wire(cls, data: Any) -> Transaction:
        if not isinstance(data, list) or len(data) != 3:
            raise ProtocolError("a transaction must be a list of 3 items")
        position, timestamp, changes = data
        if not _finite_time(timestamp) or not isinstance(changes, list):
            raise ProtocolError("malformed transaction timestamp or changes")
        return cls(
            Position.from_wire(position),
            float(timestamp),
            tuple(Change.from_wire(c) for c in changes),
        )


@dataclass(frozen=True, slots=True)
class Part:
    """A piece of one origin transaction too large to travel whole.

    Capture cuts a transaction into parts of at most `part_rows` rows (or `part_bytes` of
    binlog events) while it reads it, so no agent ever holds the whole of it. Parts of one
    transaction share `begin` (where the transaction starts in the binlog: its id until it
    ends) and are numbered from 1; the last one has `last` set and carries `end`, the
    transaction's position, and its commit time. The hub stores the parts and delivers them
    only once the last one is stored, in order; the target applies all of them in one database
    transaction, so no reader of the target sees part of an origin transaction.
    """

    begin: Position
    number: int
    last: bool
    changes: tuple[Change, ...] = field(default=())
    end: Position | None = None
    timestamp: float = 0.0

    @property
    def row_count(self) -> int:
        return sum(c.row_count for c in self.changes)

    def to_wire(self) -> list[Any]:
        return [
            self.begin.to_wire(),
            self.number,
            self.last,
            self.end.to_wire() if self.end is not None else None,
            self.timestamp,
            [c.to_wire() for c in self.changes],
        ]

    @classmethod
    def from_wire(cls, data: Any) -> Part:
        if not isinstance(data, list) or len(data) != 6:
            raise ProtocolError("a transaction part must be a list of 6 items")
        begin, number, last, end, timestamp, changes = data
        if type(number) is not int or not 1 <= number < 1 << 31 or type(last) is not bool:
            raise ProtocolError("malformed part number or last flag")
        if last != (end is not None):
            raise ProtocolError("the last part, and only it, carries the transaction's end")
        if not _finite_time(timestamp) or not isinstance(changes, list):
            raise ProtocolError("malformed part timestamp or changes")
        return cls(
            Position.from_wire(begin),
            number,
            last,
            tuple(Change.from_wire(c) for c in changes),
            Position.from_wire(end) if end is not None else None,
            float(timestamp),
        )


def body_from_wire(data: Any) -> Transaction | Part:
    """A BATCH or DELIVER body: a whole transaction (3 items) or a part (6 items)."""
    if isinstance(data, list) and len(data) == 6:
        return Part.from_wire(data)
    return Transaction.from_wire(data)


def _finite_time(value: Any) -> bool:
    """A commit time that msgpack carried as a number, and that is a real moment."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value < 1 << 40
    )
