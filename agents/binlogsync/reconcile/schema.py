"""What a table looks like on each side, and whether two sides can be compared.

`describe` reads information_schema on one server. `pair` checks that source and target have
the same columns (generated columns are left out on both sides: they are computed, not data,
and binlogsync does not write them) and the same primary key, and returns a `TablePair`: the
columns to compare in the source's order, the key, and notes about type differences (a column
that is DECIMAL(10,2) on one side and DECIMAL(10,4) on the other is compared by value as each
server prints it, so such rows show as changed; the note says why).

Tables without a primary key are not comparable: rows without a key cannot be named, re-checked
or repaired one by one, and binlogsync refuses to replicate them for the same reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import TableError
from ..tables import SYSTEM_SCHEMAS

INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
NUMBER_TYPES = INTEGER_TYPES | {"decimal", "numeric", "year"}
DOUBLE_TYPES = frozenset({"double", "real"})
FLOAT_TYPES = frozenset({"float"})
TEMPORAL_TYPES = frozenset({"date", "datetime", "timestamp", "time"})
BIT_TYPES = frozenset({"bit"})
# Everything else (char, varchar, *text, *blob, binary, varbinary, enum, set, json, geometry …)
# is compared as the bytes the server returns, with its length in the encoding.


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    data_type: str  # information_schema DATA_TYPE, lower case: int, varchar, decimal, json, …
    column_type: str  # the full definition: decimal(15,4), varchar(64), enum('a','b')
    nullable: bool
    charset: str | None = None
    json: bool = False  # MySQL JSON, or MariaDB's LONGTEXT with a json_valid() check

    @property
    def kind(self) -> str:
        """How the value is encoded: number, double, float, temporal, bit or bytes."""
        if self.data_type in NUMBER_TYPES:
            return "number"
        if self.data_type in DOUBLE_TYPES:
            return "double"
        if self.data_type in FLOAT_TYPES:
            return "float"
        if self.data_type in TEMPORAL_TYPES:
            return "temporal"
        if self.data_type in BIT_TYPES:
            return "bit"
        return "bytes"

    @property
    def fraction(self) -> int:
        """Fraction digits of a DATETIME(n), TIMESTAMP(n) or TIME(n); 0 for other types."""
        found = re.search(r"\((\d+)\)", self.column_type)
        return int(found.group(1)) if found and self.data_type in TEMPORAL_TYPES else 0


@dataclass(frozen=True, slots=True)
class TableDef:
    schema: str
    table: str
    columns: tuple[Column, ...]  # stored columns in ordinal order (generated ones left out)
    key: tuple[str, ...]  # primary key columns in key order (empty: none)
    rows_estimate: int = 0
    generated: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class TablePair:
    """One source table and its counterpart on one target, ready to compare."""

    source: TableDef
    target: TableDef
    columns: tuple[str, ...]  # compared columns, in the source's order
    key: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def nullable(self) -> frozenset[str]:
        """Columns that may be NULL on either side."""
        return frozenset(
            c
            for c in self.columns
            if self.source.column(c).nullable or self.target.column(c).nullable
        )


_JSON_CHECK = re.compile(r"json_valid\(`?([^`)]+)`?\)", re.IGNORECASE)


def describe(cursor: object, schema: str, table: str) -> TableDef | None:
    """The definition of `schema`.`table` on the server behind `cursor`; None if it is absent."""
    cur = cursor  # a PyMySQL cursor
    cur.execute(  # type: ignore[attr-defined]
        "SELECT TABLE_TYPE, TABLE_ROWS FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (schema, table),
    )
    row = cur.fetchone()  # type: ignore[attr-defined]
    if row is None:
        return None
    if row[0] != "BASE TABLE":
        raise TableError(
            f"{schema}.{table} is a {str(row[0]).lower()}, not a table",
            "compare the tables the view reads from",
        )
    rows_estimate = int(row[1] or 0)
    cur.execute(  # type: ignore[attr-defined]
        "SELECT COLUMN_NAME, LOWER(DATA_TYPE), LOWER(COLUMN_TYPE), IS_NULLABLE, "
        "CHARACTER_SET_NAME, EXTRA FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (schema, table),
    )
    raw = list(cur.fetchall())  # type: ignore[attr-defined]
    json_columns: set[str] = set()
    try:  # MariaDB: JSON is LONGTEXT with CHECK (json_valid(`c`))
        cur.execute(  # type: ignore[attr-defined]
            "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
            (schema, table),
        )
        for (clause,) in cur.fetchall():  # type: ignore[attr-defined]
            json_columns.update(m.group(1) for m in _JSON_CHECK.finditer(str(clause)))
    except Exception:  # noqa: BLE001 - MySQL 5.7 has no CHECK_CONSTRAINTS; JSON is a type there
        pass
    columns, generated = [], []
    for name, data_type, column_type, nullable, charset, extra in raw:
        if re.search(r"\b(VIRTUAL|STORED|PERSISTENT)\b", extra or "", re.IGNORECASE):
            generated.append(name)
            continue
        columns.append(
            Column(
                name,
                data_type,
                column_type,
                nullable == "YES",
                charset,
                data_type == "json" or name in json_columns,
            )
        )
    cur.execute(  # type: ignore[attr-defined]
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (schema, table),
    )
    key = tuple(r[0] for r in cur.fetchall())  # type: ignore[attr-defined]
    return TableDef(schema, table, tuple(columns), key, rows_estimate, tuple(generated))


def check_name(schema: str, table: str) -> None:
    if schema in SYSTEM_SCHEMAS:
        raise TableError(f"{schema}.{table} is in a system schema", "compare your own tables")


def pair(source: TableDef, target: TableDef, target_label: str) -> TablePair:
    """Check that `source` and `target` can be compared; TableError says why not."""
    if not source.key:
        raise TableError(
            f"{source.name} has no primary key on the source, so its rows cannot be named, "
            "re-checked or repaired one by one: not comparable",
            "add a primary key (binlogsync does not replicate such tables either)",
        )
    if not target.key:
        raise TableError(
            f"{target.name} on {target_label} has no primary key: not comparable",
            "give it the source's primary key",
        )
    src = [c.name for c in source.columns]
    tgt = [c.name for c in target.columns]
    only_source = [c for c in src if c not in tgt]
    only_target = [c for c in tgt if c not in src]
    if only_source or only_target:
        parts = []
        if only_source:
            parts.append(f"only on the source: {', '.join(only_source)}")
        if only_target:
            parts.append(f"only on {target_label}: {', '.join(only_target)}")
        raise TableError(
            f"{source.name}: the columns differ between the source and {target_label} "
            f"({'; '.join(parts)}); nothing was compared",
            "make the column sets equal (ALTER TABLE on the target), or compare only the shared "
            "columns with --common-columns",
        )
    if source.key != target.key:
        raise TableError(
            f"{source.name}: the primary key is ({', '.join(source.key)}) on the source but "
            f"({', '.join(target.key)}) on {target_label}: rows cannot be matched",
            "give both tables the same primary key",
        )
    return _pair(source, target, target_label, tuple(src))


def _pair(source: TableDef, target: TableDef, label: str, columns: tuple[str, ...]) -> TablePair:
    notes = []
    for name in columns:
        a, b = source.column(name), target.column(name)
        if a.column_type != b.column_type or a.charset != b.charset or a.json != b.json:
            notes.append(
                f"column {name} is {_show(a)} on the source but {_show(b)} on {label}; values "
                "are compared as each server returns them"
            )
    return TablePair(source, target, columns, source.key, tuple(notes))


def _show(c: Column) -> str:
    text = c.column_type + (" json" if c.json and c.data_type != "json" else "")
    return f"{text} {c.charset}" if c.charset else text
