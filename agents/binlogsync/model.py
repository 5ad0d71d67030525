"""What flows through binlogsync: changes grouped into committed transactions.

Only the capture module sees python-mysql-replication's events; everything after it sees these
frozen dataclasses. A transaction too large to travel in one message travels as `Part`s. `to_wire`/`from_wire` give the compact list form that travels inside
msgpack (docs/protocol.md); `from_wire` validates shape and types, because the data may come
from the network.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import chain
from typing import Any, Literal, NamedTuple

from . import rowtext
from .errors import ProtocolError
from .frozen import maker
from .position import Position, file_number, gtid_position, make_position
from .rowtext import TextRows
from .tabledef import TableDef, TableDefError
from .zerodate import ZeroDate

ChangeKind = Literal["insert", "update", "delete", "truncate", "ddl"]
ROW_KINDS = ("insert", "update", "delete")
KINDS = (*ROW_KINDS, "truncate", "ddl")

Row = tuple[Any, ...]


def time_text(value: dt.timedelta) -> str:
    """A TIME value as MySQL writes it, `[-]HH:MM:SS.ffffff` (hours beyond 24 as MySQL allows;
    str() of a negative timedelta is not this form)."""
    micros = value // dt.timedelta(microseconds=1)
    sign = "-" if micros < 0 else ""
    seconds, micro = divmod(abs(micros), 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return f"{sign}{hours:02d}:{minute:02d}:{second:02d}.{micro:06d}"


# The types a column value may have after decoding (codec.py); anything else on the wire, such
# as msgpack's own Timestamp extension, is refused.
VALUE_TYPES = frozenset(
    {type(None), int, float, str, bytes, Decimal, dt.datetime, dt.date, dt.timedelta, set, ZeroDate}
)


_STR = frozenset({str})
_LIST = frozenset({list})
# A msgpack array: a list from `codec.unpack`, a tuple from `codec.unpack(tuples=True)` (the
# target's bodies, whose rows then need no copy into tuples). The short ways below take either,
# a change's arrays all of one kind as msgpack gives them; a tuple that takes the long way is
# made lists first (`_lists`), the form its checks and errors were written for. So a body is
# accepted or refused alike in either form, and lists are checked exactly as before.
_ARRAYS = frozenset({list, tuple})
_ONLY: dict[type[Any], frozenset[type[Any]]] = {list: _LIST, tuple: frozenset({tuple})}
_FEW_ROWS = 4
_OFFSET_LIMIT = 1 << 40  # as Position.from_json checks
_MAX_GTID = 255


@dataclass(frozen=True, slots=True)
class Change:
    """One statement's effect on one table.

    insert: `after` holds the new rows. delete: `before` holds the removed rows.
    update: `before[i]` became `after[i]`. Rows are tuples in `columns` order (FULL row image).
    A seed's insert may carry its rows as LOAD DATA's text (`after` a rowtext.TextRows, which
    reads them into the same tuples when asked; on the wire a map, see rowtext.py).
    truncate: the table was emptied. ddl: `statement` is the origin's DDL text, shown to people
    and never executed; `definition` is the table's definition after it (tabledef.TableDef's
    wire form, None when the table is gone or was not described), from which a target that
    opted in builds its own DDL (engines/mariadb/schemachange.py). On the wire a change is 7 items, or 8
    when it carries a definition.
    """

    kind: ChangeKind
    schema: str
    table: str
    columns: tuple[str, ...] = ()
    before: tuple[Row, ...] = ()
    after: tuple[Row, ...] | TextRows = ()
    statement: str = ""
    definition: dict[str, Any] | None = None

    @property
    def row_count(self) -> int:
        return max(len(self.before), len(self.after), 1 if self.kind not in ROW_KINDS else 0)

    def renamed(self, schema: str) -> Change:
        definition = self.definition
        if definition is not None and definition.get("schema") != schema:
            # A table renamed within its schema moves with it (the route renames the schema).
            before = definition.get("table_renamed_from")
            if isinstance(before, list) and len(before) == 2 and before[0] == self.schema:
                before = [schema, before[1]]
            definition = {**definition, "schema": schema, "table_renamed_from": before}
        return Change(
            self.kind,
            schema,
            self.table,
            self.columns,
            self.before,
            self.after,
            self.statement,
            definition,
        )

    def to_wire(self, packing: bool = False) -> list[Any]:
        """The change as lists, as `from_wire` reads it back. `packing`: for `codec.pack` only,
        rows stay tuples (msgpack writes a tuple as the same array as a list, so the bytes are
        the same; a 1M-row transaction then copies no row on its way out)."""
        wire: list[Any] = [
            self.kind,
            self.schema,
            self.table,
            list(self.columns),
            self.before if packing else [list(r) for r in self.before],
            _after_wire(self.after, packing),
            self.statement,
        ]
        if self.definition is not None:
            wire.append(self.definition)
        return wire

    @classmethod
    def from_wire(cls, data: Any) -> Change:
        array = type(data)
        if array in _ARRAYS and len(data) == 7:
            # The usual change (rows as arrays, no definition) checked and built in one pass;
            # anything else, or anything wrong, takes the full checks below and their errors.
            kind, schema, table, columns, before, after, statement = data
            if (
                kind in ROW_KINDS
                and type(schema) is str
                and type(table) is str
                and type(statement) is str
                and type(columns) is array
                and _STR.issuperset(map(type, columns))
            ):
                width = len(columns)
                old, new = _rows(before, width, array), _rows(after, width, array)
                if (
                    old is not None
                    and new is not None
                    and (kind != "update" or len(old) == len(new))
                ):
                    return make_change(
                        kind, schema, table, tuple(columns), old, new, statement, None
                    )
        if array is tuple:
            data = _lists(data)
        text = _checked_change(data)[2]
        kind, schema, table, columns, before, after, statement = data[:7]
        return make_change(
            kind,
            schema,
            table,
            tuple(columns),
            tuple(map(tuple, before)),
            TextRows(rowtext.split(after["text"]), tuple(after["forms"]))
            if text
            else tuple(map(tuple, after)),
            statement,
            data[7] if len(data) == 8 else None,
        )


def coalesced(changes: Sequence[Change], rows: int = 0) -> Sequence[Change]:
    """`changes` in the same order, each run of row changes of one kind to one table with the
    same columns joined into one change. Capture makes one change per Rows event (about 80
    rows of 100 bytes), and an engine writes a change in bulk (LOAD DATA, multi-row
    statements) only when it sees many rows of it at once. Rows in text form (a seed's) are
    left as they are. Fewer than `rows` row images in all: `changes` as they are (joining
    them would gain the engine nothing, and costs a small transaction microseconds)."""
    if len(changes) < 2 or sum(len(c.before) + len(c.after) for c in changes) < rows:
        return changes
    out: list[Change] = []
    run: list[Change] = []

    def close() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            first = run[0]
            out.append(
                Change(
                    first.kind,
                    first.schema,
                    first.table,
                    first.columns,
                    tuple(chain.from_iterable(c.before for c in run)),
                    tuple(chain.from_iterable(c.after for c in run)),
                )
            )
        run.clear()

    for change in changes:
        if change.kind not in ROW_KINDS or type(change.after) is TextRows:
            close()
            out.append(change)
            continue
        if run and (
            change.kind != run[0].kind
            or change.table != run[0].table
            or change.schema != run[0].schema
            or change.columns != run[0].columns
        ):
            close()
        run.append(change)
    close()
    return out


def _after_wire(after: tuple[Row, ...] | TextRows, packing: bool) -> Any:
    if type(after) is TextRows:  # not isinstance: an ABC's check costs 0.2 µs a change
        return after.to_wire()
    return after if packing else [list(r) for r in after]


def check_change(data: Any) -> tuple[str, str]:
    """Every check of `Change.from_wire`, without building anything; (schema, table).

    The hub runs this on every change it receives (`check_body`): it must refuse whatever
    a target would refuse, and costs a fraction of building the objects.
    """
    schema, table, _ = _checked_change(data)
    return schema, table


def _checked_change(data: Any) -> tuple[str, str, bool]:
    """`check_change`'s checks; also whether the rows are in text form (rowtext.py)."""
    if not isinstance(data, list) or not 7 <= len(data) <= 8:
        raise ProtocolError("a change must be a list of 7 items (8 with a table definition)")
    kind, schema, table, columns, before, after, statement = data[:7]
    if len(data) == 8:
        _check_definition(kind, schema, table, data[7])
    if kind not in KINDS:
        raise ProtocolError(f"unknown change kind {kind!r}")
    if type(schema) is not str or type(table) is not str or type(statement) is not str:
        raise ProtocolError("change schema, table and statement must be strings")
    if type(columns) is not list or not _STR.issuperset(map(type, columns)):
        raise ProtocolError("change columns must be a list of strings")
    width = len(columns)
    text = type(after) is dict
    if text:
        if kind != "insert" or before != []:
            raise ProtocolError("only an insert carries its rows in text form")
        rowtext.check(after, width)
    if not _rows_fit(before, width) or (not text and not _rows_fit(after, width)):
        raise ProtocolError(
            f"rows of {schema}.{table} do not match its columns or carry a value of "
            "a type binlogsync does not send"
        )
    if kind == "update" and len(before) != len(after):
        raise ProtocolError("an update needs as many before as after images")
    return schema, table, text


def _check_definition(kind: Any, schema: Any, table: Any, definition: Any) -> None:
    """A DDL change's table definition: only on "ddl", about its own table, well formed."""
    if kind != "ddl":
        raise ProtocolError("only a ddl change carries a table definition")
    try:
        parsed = TableDef.from_wire(definition)
    except TableDefError as exc:
        raise ProtocolError(f"a malformed table definition: {exc.message}") from exc
    if (parsed.schema, parsed.table) != (schema, table):
        raise ProtocolError("a table definition about another table than its change")


def _rows(image: Any, width: int, array: type[Any] = list) -> tuple[Row, ...] | None:
    """`image` as a tuple of row tuples when `_rows_fit` accepts it, else None (`array`: the
    kind of its arrays; tuples are taken as they are)."""
    if type(image) is not array:
        return None
    if len(image) <= _FEW_ROWS:  # `_rows_fit`'s loop, inline: most changes take it
        for row in image:
            if type(row) is not array or len(row) != width:
                return None
            if not VALUE_TYPES.issuperset(map(type, row)):
                return None
    elif not _rows_fit(image, width, array):
        return None
    return image if array is tuple else tuple(map(tuple, image))


def _rows_fit(image: Any, width: int, array: type[Any] = list) -> bool:
    """A list of rows, each a list of `width` values of the types binlogsync sends (or all of
    those arrays tuples: `array`)."""
    if type(image) is not array:
        return False
    if len(image) <= _FEW_ROWS:  # most changes: a plain loop is cheaper than setting up maps
        for row in image:
            if type(row) is not array or len(row) != width:
                return False
            if not VALUE_TYPES.issuperset(map(type, row)):
                return False
        return True
    # Many rows: C-level iteration only (a generator expression here once cost the hub a
    # third of its time).
    return (
        _ONLY[array].issuperset(map(type, image))
        and {width}.issuperset(map(len, image))
        and VALUE_TYPES.issuperset(map(type, chain.from_iterable(image)))
    )


@dataclass(frozen=True, slots=True)
class Transaction:
    """One committed origin transaction: where it ends, when it committed, what it changed."""

    position: Position
    timestamp: float
    changes: tuple[Change, ...] = field(default=())

    @property
    def row_count(self) -> int:
        return sum(c.row_count for c in self.changes)

    def to_wire(self, packing: bool = False) -> list[Any]:
        """As lists; `packing`: rows as tuples, for `codec.pack` only (Change.to_wire)."""
        return [
            self.position.to_wire(),
            self.timestamp,
            [c.to_wire(packing) for c in self.changes],
        ]

    @classmethod
    def from_wire(cls, data: Any) -> Transaction:
        position, timestamp, changes = _transaction_fields(data)
        return make_transaction(position, timestamp, tuple(map(Change.from_wire, changes)))


@dataclass(frozen=True, slots=True)
class Part:
    """A piece of one origin transaction too large to travel whole.

    Capture cuts a transaction into parts of at most `part_rows` rows (or `part_bytes` of
    binlog events) while it reads it, so no agent ever holds the whole of it. Parts of one
    transaction share `begin` (where the transaction starts in the binlog: its id until it
    ends) and are numbered from 1; the last one has `last` set and carries `end`, the
    transaction's position, and its commit time. The hub stores the parts and delivers them in
    order, to a target that has everything before the transaction as they are stored (its end
    then unknown until the last part), to others once the last one is stored; the target
    applies all of them in one database transaction, so no reader of the target sees part of
    an origin transaction.
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

    def to_wire(self, packing: bool = False) -> list[Any]:
        """As lists; `packing`: rows as tuples, for `codec.pack` only (Change.to_wire)."""
        return [
            self.begin.to_wire(),
            self.number,
            self.last,
            self.end.to_wire() if self.end is not None else None,
            self.timestamp,
            [c.to_wire(packing) for c in self.changes],
        ]

    @classmethod
    def from_wire(cls, data: Any) -> Part:
        begin, number, last, end, timestamp, changes = _part_fields(data)
        return cls(begin, number, last, tuple(map(Change.from_wire, changes)), end, timestamp)


# Constructors without the frozen __init__ (frozen.py), for values checked already: what
# from_wire read, and what capture decoded from the binlog.
make_change = maker(Change)  # all 8 fields, in order
make_transaction = maker(Transaction)


def _transaction_fields(data: Any) -> tuple[Position, float, Sequence[Any]]:
    """A transaction's checked fields; its changes are still to be checked."""
    if type(data) not in _ARRAYS or len(data) != 3:
        raise ProtocolError("a transaction must be a list of 3 items")
    position, timestamp, changes = data
    if not _finite_time(timestamp) or type(changes) not in _ARRAYS:
        raise ProtocolError("malformed transaction timestamp or changes")
    return _position(position), float(timestamp), changes


def _part_fields(
    data: Any,
) -> tuple[Position, int, bool, Position | None, float, Sequence[Any]]:
    """A part's checked fields; its changes are still to be checked."""
    if type(data) not in _ARRAYS or len(data) != 6:
        raise ProtocolError("a transaction part must be a list of 6 items")
    begin, number, last, end, timestamp, changes = data
    if type(number) is not int or not 1 <= number < 1 << 31 or type(last) is not bool:
        raise ProtocolError("malformed part number or last flag")
    if last != (end is not None):
        raise ProtocolError("the last part, and only it, carries the transaction's end")
    if not _finite_time(timestamp) or type(changes) not in _ARRAYS:
        raise ProtocolError("malformed part timestamp or changes")
    return (
        _position(begin),
        number,
        last,
        _position(end) if end is not None else None,
        float(timestamp),
        changes,
    )


def body_from_wire(data: Any) -> Transaction | Part:
    """A BATCH or DELIVER body: a whole transaction (3 items) or a part (6 items)."""
    if type(data) in _ARRAYS and len(data) == 6:
        return Part.from_wire(data)
    return Transaction.from_wire(data)


class CheckedBody(NamedTuple):
    """What `check_body` found in a body, which it did not build into objects.

    A whole transaction: `number` 0, `end` its position. A part: `begin`, `number` ≥ 1, and
    `end` the transaction's position on the last part only (None before it).
    """

    end: Position | None
    timestamp: float
    tables: tuple[tuple[str, str], ...]  # the (schema, table)s its changes touch, sorted
    changes: int
    begin: Position | None = None
    number: int = 0


def check_body(data: Any) -> CheckedBody:
    """Every check `body_from_wire` makes, without building changes and rows.

    The hub stores and forwards the bytes it received, so it needs only the positions and
    the tables; but it must refuse any body that `body_from_wire` would refuse on a target
    (tests/unit/test_model_codec.py holds the two to the same answers).
    """
    if type(data) in _ARRAYS and len(data) == 6:  # as `body_from_wire` tells them apart
        begin, number, _last, end, timestamp, changes = _part_fields(data)
        tables = _tables(changes)
        return CheckedBody(end, timestamp, tables, len(changes), begin, number)
    position, timestamp, changes = _transaction_fields(data)
    return CheckedBody(position, timestamp, _tables(changes), len(changes))


def _tables(changes: Sequence[Any]) -> tuple[tuple[str, str], ...]:
    touched = set(map(check_change, changes))
    return tuple(sorted(touched)) if len(touched) > 1 else tuple(touched)


def _position(data: Any) -> Position:
    """`Position.from_wire`, with a short way for what msgpack gives (the hub checks two of
    these per body); anything else takes the long way, which accepts or refuses it."""
    if type(data) in _ARRAYS and len(data) == 3:
        file, offset, gtid = data
        if (
            type(file) is str
            and type(offset) is int
            and 0 <= offset < _OFFSET_LIMIT
            and (gtid is None or (type(gtid) is str and len(gtid) <= _MAX_GTID))
        ):
            file_number(file)  # the file name's checks
            return make_position(file, offset, gtid, "file")
    elif type(data) in _ARRAYS and len(data) == 4 and data[3] == "gtid":
        file, offset, state, _scheme = data
        if type(file) is str and type(offset) is int and type(state) is str:
            position = gtid_position(file, offset, state)
            if position is not None:
                return position
    return Position.from_wire(_lists(data) if type(data) is tuple else data)


def _lists(data: Any, depth: int = 12) -> Any:
    """`data` with its tuples made lists, also inside lists and maps (see `_ARRAYS`), to
    `depth` levels: deeper than any valid body nests (a table definition's index columns are
    six below their change), so what lies below is refused either way, and hostile nesting
    cannot exhaust the stack."""
    kind = type(data)
    if depth and (kind is tuple or kind is list):
        return [_lists(x, depth - 1) for x in data]
    if depth and kind is dict:
        return {k: _lists(v, depth - 1) for k, v in data.items()}
    return data


def _finite_time(value: Any) -> bool:
    """A commit time that msgpack carried as a number, and that is a real moment."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value < 1 << 40
    )
