"""Parameterized SQL for applying changes on a target, built from identifiers only.

Identifiers (schema, table, column names) are backtick-quoted with backticks doubled (and `%`
doubled, since the driver binds `%s` parameters by formatting); names with a NUL or longer than
64 characters are refused. Values never enter the SQL text: every
value is a `%s` parameter that the driver escapes. The `statement` of a "ddl" change is never
turned into SQL here (the target's schema is the DBA's to change).

Statements, as gh-ost writes them, by the TARGET's primary key:

    insert, update   INSERT INTO `s`.`t` (`a`,`b`) VALUES (%s,%s),(%s,%s)
                     ON DUPLICATE KEY UPDATE `a`=IF(`a`<=>VALUES(`a`),`a`,NULL),`b`=VALUES(`b`)
                     (an upsert of the after image; the IF guard turns a clash on another
                     unique key into an error instead of overwriting that other row)
    update of a key  DELETE of the old key, then the upsert of the after image
    delete           DELETE FROM `s`.`t` WHERE `id` IN (%s,%s)
                     DELETE FROM `s`.`t` WHERE (`a`,`b`) IN ((%s,%s),(%s,%s))  (composite key)
    truncate         DELETE FROM `s`.`t`                               (transactional)

Merging: consecutive row operations of the same kind on the same table (and, for upserts, the
same column list) become one multi-row statement, across changes and transactions. The order
of operations is kept exactly: an upsert, a delete and an upsert of the same key are three
statements, so the row ends present. A multi-row upsert processes its rows in order (a later
row with the same key wins) and a multi-row delete is order-free, so merging never changes the
result. A statement is closed at `max_rows` rows or when its estimated size would pass
`max_bytes` (kept well under the server's max_allowed_packet; a single larger row still goes
alone).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter, ne
from typing import Any, Literal

from ...errors import ApplyError, NoPrimaryKeyError, SchemaMismatchError
from ...model import Change, Row
from ...mysql import ident, qualified
from ...position import Position
from . import literals, loaddata
from .literals import _PASS, NotBulk, convert

DEFAULT_MAX_ROWS = 2000
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
# A change of at least this many rows has its statements written column by column, already
# bound (literals.py), when the builder's `bulk` is on.
BULK_ROWS = 256
# A LOAD DATA statement takes up to this many pieces of `max_rows` rows (loaddata.py).
LOAD_PIECES = 16

StatementKind = Literal["upsert", "delete", "truncate", "load"]

# Column EXTRA values of generated columns (MariaDB: VIRTUAL/STORED GENERATED, older PERSISTENT;
# MySQL 8 also has DEFAULT_GENERATED, which is an ordinary column with an expression default).
_GENERATED = re.compile(r"\b(VIRTUAL|STORED|PERSISTENT)\b", re.IGNORECASE)


def is_generated(extra: str) -> bool:
    """True for information_schema.COLUMNS.EXTRA of a generated (computed) column."""
    return bool(_GENERATED.search(extra or ""))


# -- values ------------------------------------------------------------------------------------

# Size in the SQL text beyond which a value of these types never goes.
_FIXED_SIZE = {int: 21, float: 26, type(None): 4}


def convert_row(row: Row, indices: Sequence[int]) -> tuple[list[Any], int]:
    """The converted values of `row` at `indices`, and an upper bound of their SQL text size."""
    values = []
    size = 2 + len(indices)
    fixed = _FIXED_SIZE
    for i in indices:
        value = row[i]
        kind = type(value)
        if kind not in _PASS:
            value = convert(value)
            kind = type(value)
        if kind is str:
            size += 4 * len(value) + 3  # 4-byte characters, or every character escaped
        elif kind is bytes:
            size += 2 * len(value) + 4  # X'…'
        else:
            size += fixed.get(kind, 80)
        values.append(value)
    return values, size


# -- target tables -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableInfo:
    """What the target says about one table (information_schema)."""

    schema: str
    table: str
    columns: tuple[str, ...]
    primary_key: tuple[str, ...] = ()
    generated: frozenset[str] = frozenset()  # lower-cased names of generated columns
    unique_keys: tuple[tuple[str, ...], ...] = ()  # unique keys other than the primary key
    foreign_keys: bool = False  # the table has foreign keys, or other tables refer to it
    triggers: bool = False  # the table has triggers (that the account may see)
    bit_columns: frozenset[str] = frozenset()  # lower-cased names of BIT columns

    def missing(self, columns: Iterable[str]) -> list[str]:
        """Columns of a change that the target table lacks (names compare case-insensitively)."""
        have = {c.lower() for c in self.columns}
        return [c for c in columns if c.lower() not in have]


@dataclass(frozen=True, slots=True)
class Layout:
    """How rows of one column list map onto one target table (built once, then cached)."""

    schema: str
    table: str
    write: tuple[int, ...]  # row indices written by an upsert (generated columns left out)
    key: tuple[int, ...]  # row indices of the target's primary key
    upsert_prefix: str
    upsert_row: str
    upsert_suffix: str
    delete_prefix: str
    delete_row: str
    unique_keys: bool = False  # the target table has unique keys besides its primary key
    foreign_keys: bool = False  # the target table has foreign keys, or is referred to by one
    triggers: bool = False  # the target table has triggers
    # The written columns' quoted names (`%` doubled, as in the SQL above), and whether
    # REPLACE means what the upsert means here (loaddata.py).
    write_names: tuple[str, ...] = ()
    replaceable: bool = False

    @classmethod
    def build(cls, info: TableInfo, columns: Sequence[str], guard: bool = True) -> Layout:
        """Check a change's columns against the target table and prepare its statements.

        `guard` (for sessions in strict mode) makes an upsert fail when the row it would update
        is not the one with the same primary key but one that clashes on another unique key of
        the target; without it, the after image replaces the clashing row.

        Raises SchemaMismatchError (a column the target lacks, or a key column the change does
        not carry) and NoPrimaryKeyError, with messages that the applier completes.
        """
        missing = info.missing(columns)
        if missing:
            raise SchemaMismatchError(
                f"the target table lacks column(s) {', '.join(missing)}",
                "add the column(s) on the target as the origin has them",
            )
        if not info.primary_key:
            raise NoPrimaryKeyError(
                "the target table has no primary key",
                "add a primary key on the target, or exclude the table from the route",
            )
        target_name = {c.lower(): c for c in info.columns}
        index = {c.lower(): i for i, c in enumerate(columns)}
        if len(index) != len(columns):
            raise SchemaMismatchError(f"the change names a column twice: {list(columns)}")
        absent = [c for c in info.primary_key if c.lower() not in index]
        if absent:
            raise SchemaMismatchError(
                f"the target's primary key column(s) {', '.join(absent)} are not among the "
                f"origin's columns",
                "give the target the origin's primary key",
            )
        write = tuple(i for i, c in enumerate(columns) if c.lower() not in info.generated)
        key = tuple(index[c.lower()] for c in info.primary_key)
        names = [ident(target_name[columns[i].lower()]) for i in write]
        key_names = {c.lower() for c in info.primary_key}
        table = qualified(info.schema, info.table)
        key_quoted = [ident(c) for c in info.primary_key]
        if guard:
            # The duplicate must be the row with the same primary key. A clash on another
            # unique key sets the key to NULL, which strict mode refuses (error 1048).
            same = " AND ".join(f"{k}<=>VALUES({k})" for k in key_quoted)
            assignments = [f"{key_quoted[0]}=IF({same},{key_quoted[0]},NULL)"]
        else:
            # Without strict mode the guard would write a 0: the after image replaces the
            # clashing row instead (gh-ost's REPLACE semantics).
            assignments = [f"{k}=VALUES({k})" for k in key_quoted]
        assignments += [
            f"{n}=VALUES({n})"
            for n in (
                ident(target_name[columns[i].lower()])
                for i in write
                if columns[i].lower() not in key_names
            )
        ]
        if len(key) == 1:
            delete_prefix = f"DELETE FROM {table} WHERE {key_quoted[0]} IN ("
            delete_row = "%s"
        else:
            delete_prefix = f"DELETE FROM {table} WHERE ({','.join(key_quoted)}) IN ("
            delete_row = "(" + ",".join(["%s"] * len(key)) + ")"
        return cls(
            schema=info.schema,
            table=info.table,
            write=write,
            key=key,
            upsert_prefix=f"INSERT INTO {table} ({','.join(names)}) VALUES ",
            upsert_row="(" + ",".join(["%s"] * len(write)) + ")",
            upsert_suffix=" ON DUPLICATE KEY UPDATE " + ",".join(assignments),
            delete_prefix=delete_prefix,
            delete_row=delete_row,
            unique_keys=bool(info.unique_keys),
            foreign_keys=info.foreign_keys,
            triggers=info.triggers,
            write_names=tuple(names),
            replaceable=_replaceable(info, {columns[i].lower() for i in write}),
        )


def _replaceable(info: TableInfo, written: set[str]) -> bool:
    """True when REPLACE of a row does exactly what the upsert does (loaddata.py): no unique
    key but the primary key (REPLACE deletes a row clashing on another one, where the
    guarded upsert fails), no foreign key or trigger (REPLACE may delete, then insert), no
    BIT column (LOAD DATA reads a field's digits as bytes there), and every column of the
    target written (REPLACE gives a column it does not write its default; the upsert of an
    existing row keeps its value)."""
    if info.unique_keys or info.foreign_keys or info.triggers or info.bit_columns:
        return False
    return all(c.lower() in written for c in info.columns if c.lower() not in info.generated)


def _moves_key(change: Change, layout: Layout) -> bool:
    """An update that changes the target's primary key of some row."""
    if change.kind != "update":
        return False
    get = itemgetter(*layout.key)
    return any(map(ne, map(get, change.before), map(get, change.after)))


# -- statements --------------------------------------------------------------------------------


@dataclass(slots=True)
class Statement:
    """One SQL statement with its parameters, and the origin transactions it carries."""

    kind: StatementKind
    schema: str
    table: str
    sql: str
    params: list[Any] | None  # None once bound into `sql` by the driver
    rows: int
    first: Position | None = None
    last: Position | None = None
    # a "load": the file name its SQL asks for, the rows, their packet size (loaddata.py)
    load: tuple[str, bytes, int] | None = None

    @property
    def where(self) -> str:
        """The origin position(s) of the transactions in this statement, for messages."""
        if self.first is None or self.last is None or self.first == self.last:
            return str(self.first or self.last)
        return f"{self.first} … {self.last}"


@dataclass(slots=True)
class _Group:
    kind: StatementKind
    schema: str
    table: str
    prefix: str
    row: str
    suffix: str
    params: list[Any] = field(default_factory=list)
    rows: int = 0
    size: int = 0
    first: Position | None = None
    last: Position | None = None

    def statement(self) -> Statement:
        sql = self.prefix + ",".join([self.row] * self.rows) + self.suffix
        return Statement(
            self.kind, self.schema, self.table, sql, self.params, self.rows, self.first, self.last
        )


class StatementBuilder:
    """Turns a stream of row changes into merged statements, in order.

    `add()` returns the statements that became complete; `flush()` returns the rest. Run them
    in the order returned.

    With `bulk` on (a session whose server takes backslash escapes), a change of `BULK_ROWS`
    rows or more (an insert, an update that changes no key, a delete) becomes statements of
    its own whose values are already written as literals, column by column (literals.py):
    their `params` are None and their `sql` is final (no `%` left to format). The text is the
    one binding the parameters would give; the statements split at `max_rows` and
    `max_bytes` as the others do.
    """

    def __init__(
        self,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        bulk: bool = False,
        load: bool = False,
    ):
        if max_rows < 1 or max_bytes < 1:
            raise ValueError("max_rows and max_bytes must be positive")
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.bulk = bulk
        self.load = load and bulk
        self._group: _Group | None = None
        self._done: list[Statement] = []
        # When set, every statement starts there (it carries a reduced group: reduce.py).
        self.span_from: Position | None = None

    def add(
        self, change: Change, layout: Layout, position: Position | None = None
    ) -> list[Statement]:
        kind = change.kind
        if (
            self.bulk
            and change.row_count >= BULK_ROWS
            and (
                (self.load and layout.replaceable and self._load(change, layout, position))
                or self._bulk(change, layout, position)
            )
        ):
            done, self._done = self._done, []
            return done
        if kind == "insert":
            for row in change.after:
                self._upsert(layout, row, position)
        elif kind == "update":
            key = layout.key
            for before, after in zip(change.before, change.after, strict=True):
                if any(before[i] != after[i] for i in key):
                    self._delete(layout, before, position)
                self._upsert(layout, after, position)
        elif kind == "delete":
            for row in change.before:
                self._delete(layout, row, position)
        elif kind == "truncate":
            self._truncate(layout.schema, layout.table, position)
        else:
            raise ApplyError(f"a {kind!r} change has no statement")
        done, self._done = self._done, []
        return done

    def truncate(
        self, schema: str, table: str, position: Position | None = None
    ) -> list[Statement]:
        """A truncate needs no layout (and no primary key): `DELETE FROM` the whole table."""
        self._truncate(schema, table, position)
        done, self._done = self._done, []
        return done

    def flush(self) -> list[Statement]:
        self._close()
        done, self._done = self._done, []
        return done

    # -- internals ---------------------------------------------------------------------------
    def _load(self, change: Change, layout: Layout, position: Position | None) -> bool:
        """`change` (an insert, or an update that changes no key, into a `replaceable`
        table) as LOAD DATA statements of up to `LOAD_PIECES` × `max_rows` rows or about
        `max_bytes` of data; False when it must be built otherwise (`NotBulk`)."""
        if change.kind not in ("insert", "update") or _moves_key(change, layout):
            return False
        image, step = change.after, self.max_rows
        chunks = [image[start : start + step] for start in range(0, len(image), step)]
        try:
            pieces = [(len(chunk), *loaddata.rows(chunk, layout.write)) for chunk in chunks]
        except NotBulk:
            return False
        self._close()
        first = position if self.span_from is None else self.span_from
        names = [name % () for name in layout.write_names]
        target = qualified(layout.schema, layout.table) % ()
        taken: list[bytes] = []
        count, size, flags = 0, 0, None

        def close() -> None:
            if taken and flags is not None:
                sql, name = loaddata.statement(target, names, flags)
                self._done.append(
                    Statement(
                        "load", layout.schema, layout.table, sql, None, count, first, position,
                        (name, b"".join(taken), self.max_bytes),
                    )
                )  # fmt: skip

        for rows, data, hexed in pieces:
            if taken and (
                hexed != flags or size + len(data) > self.max_bytes or len(taken) >= LOAD_PIECES
            ):
                close()
                taken, count, size = [], 0, 0
            flags = hexed
            taken.append(data)
            count += rows
            size += len(data)
        close()
        return True

    def _bulk(self, change: Change, layout: Layout, position: Position | None) -> bool:
        """`change` as already-bound statements (see the class); False when it must be built
        row by row (a key-changing update, a value only the driver escapes, too few rows).

        The statements end where the row-by-row way would end them (as long as `max_bytes`
        does not decide): the first rows fill up a statement of the same kind left open
        before, and the last rows, short of `max_rows`, stay open for what follows."""
        kind = change.kind
        statement_kind: StatementKind
        image: Sequence[Row]
        if kind == "delete":
            statement_kind, image, indices = "delete", change.before, layout.key
            raw_prefix, raw_suffix = layout.delete_prefix, ")"
            row = self._delete
        elif kind == "insert" or kind == "update":
            if _moves_key(change, layout):
                return False
            statement_kind, image, indices = "upsert", change.after, layout.write
            raw_prefix, raw_suffix = layout.upsert_prefix, layout.upsert_suffix
            row = self._upsert
        else:
            return False
        count, step = len(image), self.max_rows
        group = self._group
        head = 0
        if (
            group is not None
            and group.rows
            and group.kind == statement_kind
            and group.prefix == raw_prefix
            and group.rows < step
        ):
            head = min(count, step - group.rows)
        tail = head + (count - head) // step * step
        if tail == head:
            return False
        try:
            texts = literals.rows(image[head:tail], indices)
        except NotBulk:
            return False
        for values in image[:head]:
            row(layout, values, position)
        self._close()
        first = position if self.span_from is None else self.span_from
        prefix, suffix = raw_prefix % (), raw_suffix % ()
        if statement_kind == "delete" and len(layout.key) == 1:
            opener, joiner, closer = "", ",", ""
        else:
            opener, joiner, closer = "(", "),(", ")"
        start, bulk = 0, len(texts)
        while start < bulk:
            end = min(bulk, start + step)
            while True:
                sql = prefix + opener + joiner.join(texts[start:end]) + closer + suffix
                size = len(sql) if sql.isascii() else 4 * len(sql)
                if size <= self.max_bytes or end - start == 1:
                    break
                end = start + (end - start) // 2
            self._done.append(
                Statement(
                    statement_kind,
                    layout.schema,
                    layout.table,
                    sql,
                    None,
                    end - start,
                    first,
                    position,
                )
            )
            start = end
        for values in image[tail:]:
            row(layout, values, position)
        return True

    def _truncate(self, schema: str, table: str, position: Position | None) -> None:
        self._close()
        self._done.append(
            Statement(
                "truncate",
                schema,
                table,
                f"DELETE FROM {qualified(schema, table)}",
                [],
                0,
                position if self.span_from is None else self.span_from,
                position,
            )
        )

    def _close(self) -> None:
        if self._group is not None and self._group.rows:
            self._done.append(self._group.statement())
        self._group = None

    def _target(
        self,
        kind: StatementKind,
        layout: Layout,
        prefix: str,
        row: str,
        suffix: str,
        size: int,
        position: Position | None,
    ) -> _Group:
        group = self._group
        if (
            group is None
            or group.kind != kind
            or group.prefix != prefix
            or group.rows >= self.max_rows
            or group.size + size > self.max_bytes
        ):
            self._close()
            group = _Group(
                kind,
                layout.schema,
                layout.table,
                prefix,
                row,
                suffix,
                size=len(prefix) + len(suffix),
                first=position if self.span_from is None else self.span_from,
            )
            self._group = group
        group.last = position
        group.rows += 1
        group.size += size
        return group

    def _upsert(self, layout: Layout, row: Row, position: Position | None) -> None:
        values, size = convert_row(row, layout.write)
        group = self._target(
            "upsert",
            layout,
            layout.upsert_prefix,
            layout.upsert_row,
            layout.upsert_suffix,
            size,
            position,
        )
        group.params.extend(values)

    def _delete(self, layout: Layout, row: Row, position: Position | None) -> None:
        values, size = convert_row(row, layout.key)
        group = self._target(
            "delete", layout, layout.delete_prefix, layout.delete_row, ")", size, position
        )
        group.params.extend(values)
