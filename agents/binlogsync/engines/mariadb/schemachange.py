"""The target's own DDL, built from the origin's table definition (tabledef.py), never from
the origin's SQL text.

`plan(desired, actual, mode)` compares the definition that arrived with the target's table (as
`tabledef.describe` reads it) and returns the statements that make the target's table match,
or the reasons it refuses. Every identifier is quoted by statements.py; every literal (a
default, an ENUM member) is a `%s` parameter; type names come from tabledef's closed list.

Modes (the target's `apply_schema_changes`):

    off        nothing is built; a difference stops apply with what to run (today's behaviour)
    additive   a new table (the origin's CREATE), new columns, widened types, new indexes;
               a dropped table is kept; anything else is refused
    all        also dropped columns, indexes and tables, narrowed or changed types, renamed
               columns and tables (named in the definition's `renamed_from` and
               `table_renamed_from`, so a rename is never a drop + add or an empty new table)

A widened type keeps every value the old type could hold: a longer CHAR/VARCHAR/BINARY/
VARBINARY, a bigger integer of the same signedness (or unsigned → a strictly bigger signed),
a DECIMAL with at least as many digits on both sides of the point, a bigger TEXT/BLOB, more
fractional digits, FLOAT → DOUBLE, ENUM/SET members added at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ...ddl import ddl_verb
from ...model import Change
from ...mysql import ident, qualified
from ...tabledef import INTEGER_TYPES, ColumnDef, IndexDef, TableDef

Mode = Literal["off", "additive", "all"]
MODES: tuple[Mode, ...] = ("off", "additive", "all")

_TEXT_ORDER = ("tinytext", "text", "mediumtext", "longtext")
_BLOB_ORDER = ("tinyblob", "blob", "mediumblob", "longblob")


@dataclass
class SchemaPlan:
    statements: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # each names one difference
    changes: list[str] = field(default_factory=list)  # each statement's purpose, for the log

    @property
    def needed(self) -> bool:
        return bool(self.statements or self.refused)


def plan(desired: TableDef, actual: TableDef | None, mode: Mode) -> SchemaPlan:
    out = SchemaPlan()
    if desired.unsupported:
        out.refused.append(
            f"{desired.schema}.{desired.table} cannot be rebuilt from its definition: "
            f"{desired.unsupported}"
        )
        return out
    if actual is None:
        if mode == "off":
            out.refused.append(f"the target has no table {desired.schema}.{desired.table}")
        else:
            sql, params = create_table(desired)
            out.statements.append((sql, params))
            out.changes.append(f"create table {desired.schema}.{desired.table}")
        return out
    if mode == "off":
        if _differs(desired, actual):
            out.refused.append(
                f"the definition of {desired.schema}.{desired.table} differs on the target"
            )
        return out
    clauses: list[tuple[str, tuple[Any, ...]]] = []
    _indexes(desired, actual, mode, out, clauses)
    _columns(desired, actual, mode, out, clauses)
    clauses.sort(
        key=lambda clause: clause[0].startswith("ADD KEY") or clause[0].startswith("ADD UNIQUE")
    )
    if clauses and not out.refused:
        # One statement: atomic, and MariaDB orders a column's drop after its index's.
        sql = ", ".join(c for c, _ in clauses)
        params = tuple(p for _, ps in clauses for p in ps)
        out.statements.append(
            (f"ALTER TABLE {qualified(desired.schema, desired.table)} {sql}", params)
        )
    if tuple(k.lower() for k in desired.primary_key) != tuple(
        k.lower() for k in actual.primary_key
    ):
        out.refused.append(
            f"the primary key changed ({', '.join(actual.primary_key)} → "
            f"{', '.join(desired.primary_key)}); binlogsync never changes a primary key itself"
        )
    return out


def plan_ddl(
    change: Change, mode: Mode, describe_table: Callable[[str, str], TableDef | None]
) -> SchemaPlan:
    """The plan for one "ddl" change of the origin, table-level cases included: a new table is
    created only by the origin's CREATE; a renamed table is renamed (mode "all") so its rows
    stay, never re-created empty; a dropped table is dropped under "all" and kept under
    "additive" (additive never removes). The origin's statement is only classified here."""
    out = SchemaPlan()
    verb = ddl_verb(change.statement)
    where = qualified(change.schema, change.table)
    if change.definition is None:
        # Gone on the origin: dropped, or the old name of a renamed table (its new name's
        # change carries the rename), or not readable there.
        if verb == "DROP" and mode == "all" and describe_table(change.schema, change.table):
            out.statements.append((f"DROP TABLE {where}", ()))
            out.changes.append(f"drop table {change.schema}.{change.table}")
        return out
    desired = TableDef.from_wire(change.definition)
    actual = describe_table(change.schema, change.table)
    if actual is None and desired.table_renamed_from is not None:
        old_schema, old_table = desired.table_renamed_from
        before = describe_table(old_schema, old_table)
        if before is not None:
            if mode != "all":
                out.refused.append(
                    f"table {old_schema}.{old_table} was renamed to {change.schema}.{change.table}"
                )
                return out
            out.statements.append(
                (f"RENAME TABLE {qualified(old_schema, old_table)} TO {where}", ())
            )
            out.changes.append(f"rename table {old_schema}.{old_table}")
            actual = replace(before, schema=change.schema, table=change.table)
    if actual is None and verb != "CREATE":
        out.refused.append(
            f"the target has no table {change.schema}.{change.table} to change (the origin's "
            "statement does not create it)"
        )
        return out
    rest = plan(desired, actual, mode)
    out.statements += rest.statements
    out.refused += rest.refused
    out.changes += rest.changes
    if out.refused:
        out.statements.clear()
    return out


def create_table(table: TableDef) -> tuple[str, tuple[Any, ...]]:
    parts: list[str] = []
    params: list[Any] = []
    for column in table.columns:
        sql, more = column_sql(column)
        parts.append(sql)
        params.extend(more)
    if table.primary_key:
        parts.append(f"PRIMARY KEY ({', '.join(ident(k) for k in table.primary_key)})")
    for index in table.indexes:
        parts.append(_index_sql(index))
    options = ""
    if table.charset:
        options += f" DEFAULT CHARSET={table.charset}"
    if table.collation:
        options += f" COLLATE={table.collation}"
    sql = f"CREATE TABLE {qualified(table.schema, table.table)} ({', '.join(parts)}){options}"
    return sql, tuple(params)


def column_sql(column: ColumnDef) -> tuple[str, tuple[Any, ...]]:
    """`name TYPE … [NOT] NULL [DEFAULT …]`: identifiers quoted, literals as parameters."""
    params: list[Any] = []
    kind = column.type
    if kind in ("enum", "set"):
        params.extend(column.values)
        sql = f"{kind.upper()}({', '.join(['%s'] * len(column.values))})"
    elif kind == "decimal":
        sql = f"DECIMAL({column.length},{column.scale})"
    elif column.length is not None and kind not in INTEGER_TYPES and kind != "year":
        sql = f"{kind.upper()}({column.length})"
    else:
        sql = kind.upper()
    if column.unsigned and (kind in INTEGER_TYPES or kind in ("decimal", "float", "double")):
        sql += " UNSIGNED"
    if column.charset:
        sql += f" CHARACTER SET {column.charset}"
    if column.collation:
        sql += f" COLLATE {column.collation}"
    sql += " NULL" if column.nullable else " NOT NULL"
    default = column.default
    if default is not None:
        if default[0] == "null":
            sql += " DEFAULT NULL"
        elif default[0] == "literal":
            sql += " DEFAULT %s"
            params.append(default[1])
        else:  # ("expr", "current_timestamp", fsp): tabledef's closed list
            fsp = int(default[2])
            sql += f" DEFAULT CURRENT_TIMESTAMP({fsp})" if fsp else " DEFAULT CURRENT_TIMESTAMP"
    return f"{ident(column.name)} {sql}", tuple(params)


def _index_sql(index: IndexDef) -> str:
    columns = ", ".join(
        ident(name) + (f"({prefix})" if prefix else "") for name, prefix in index.columns
    )
    return f"{'UNIQUE ' if index.unique else ''}KEY {ident(index.name)} ({columns})"


def _columns(
    desired: TableDef,
    actual: TableDef,
    mode: Mode,
    out: SchemaPlan,
    clauses: list[tuple[str, tuple[Any, ...]]],
) -> None:
    renamed = {new.lower(): old for new, old in desired.renamed_from.items()}
    kept = {c.name.lower() for c in desired.columns}
    previous: str | None = None
    for column in desired.columns:
        have = actual.column(column.name)
        old_name = renamed.get(column.name.lower())
        if have is None and old_name is not None and actual.column(old_name) is not None:
            if mode != "all":
                out.refused.append(f"column {old_name} was renamed to {column.name}")
            else:
                sql, params = column_sql(column)
                clauses.append((f"CHANGE COLUMN {ident(old_name)} {sql}", params))
                out.changes.append(f"rename column {old_name} to {column.name}")
        elif have is None:
            sql, params = column_sql(column)
            place = f" AFTER {ident(previous)}" if previous else " FIRST"
            clauses.append((f"ADD COLUMN {sql}{place}", params))
            out.changes.append(f"add column {column.name}")
        elif _column_differs(column, have):
            if mode == "all" or widens(have, column):
                sql, params = column_sql(column)
                clauses.append((f"MODIFY COLUMN {sql}", params))
                out.changes.append(f"change column {column.name}")
            else:
                out.refused.append(
                    f"column {column.name} would change from {_type_text(have)} to "
                    f"{_type_text(column)}, which is not a widening"
                )
        previous = column.name
    renamed_old = {old.lower() for old in desired.renamed_from.values()}
    for column in actual.columns:
        if column.name.lower() in kept or column.name.lower() in renamed_old:
            continue
        if mode == "all":
            clauses.append((f"DROP COLUMN {ident(column.name)}", ()))
            out.changes.append(f"drop column {column.name}")
        else:
            out.refused.append(f"column {column.name} was dropped on the origin")


def _indexes(
    desired: TableDef,
    actual: TableDef,
    mode: Mode,
    out: SchemaPlan,
    clauses: list[tuple[str, tuple[Any, ...]]],
) -> None:
    have = {i.name.lower(): i for i in actual.indexes}
    want = {i.name.lower(): i for i in desired.indexes}
    for name, index in want.items():
        old = have.get(name)
        if old == index:
            continue
        if old is not None:
            if mode != "all":
                out.refused.append(f"index {index.name} changed")
                continue
            clauses.append((f"DROP KEY {ident(old.name)}", ()))
        clauses.append((f"ADD {_index_sql(index)}", ()))
        out.changes.append(f"add index {index.name}")
    for name, index in have.items():
        if name in want:
            continue
        if mode == "all":
            clauses.append((f"DROP KEY {ident(index.name)}", ()))
            out.changes.append(f"drop index {index.name}")
        else:
            out.refused.append(f"index {index.name} was dropped on the origin")


def _differs(desired: TableDef, actual: TableDef) -> bool:
    return (
        len(desired.columns) != len(actual.columns)
        or any(_column_differs(a, b) for a, b in zip(desired.columns, actual.columns, strict=False))
        or any(
            a.name.lower() != b.name.lower()
            for a, b in zip(desired.columns, actual.columns, strict=False)
        )
        or {i.name.lower(): i for i in desired.indexes}
        != {i.name.lower(): i for i in actual.indexes}
    )


def _column_differs(a: ColumnDef, b: ColumnDef) -> bool:
    return (
        a.type != b.type
        or a.length != b.length
        or a.scale != b.scale
        or a.unsigned != b.unsigned
        or a.nullable != b.nullable
        or a.default != b.default
        or a.values != b.values
        or (a.charset or None) != (b.charset or None)
    )


def widens(old: ColumnDef, new: ColumnDef) -> bool:
    """True when every value `old` can hold fits `new` unchanged (see the module doc)."""
    if old.nullable and not new.nullable:
        return False
    if (old.charset or None) != (new.charset or None) and old.charset is not None:
        return False
    if old.type in INTEGER_TYPES and new.type in INTEGER_TYPES:
        a, b = INTEGER_TYPES.index(old.type), INTEGER_TYPES.index(new.type)
        if old.unsigned == new.unsigned:
            return b >= a
        return old.unsigned and not new.unsigned and b > a
    if old.type == new.type == "decimal":
        assert old.length is not None and new.length is not None
        old_scale, new_scale = old.scale or 0, new.scale or 0
        if new.unsigned and not old.unsigned:
            return False
        return new.length - new_scale >= old.length - old_scale and new_scale >= old_scale
    if old.type == "float" and new.type == "double":
        return not new.unsigned or old.unsigned
    for order in (_TEXT_ORDER, _BLOB_ORDER):
        if old.type in order and new.type in order:
            return order.index(new.type) >= order.index(old.type)
    if old.type in ("varchar", "char") and new.type in _TEXT_ORDER:
        return True
    if old.type in ("varbinary", "binary") and new.type in _BLOB_ORDER:
        return True
    same_family = {old.type, new.type} <= {"char", "varchar"} or {old.type, new.type} <= {
        "binary",
        "varbinary",
    }
    if same_family and old.length is not None and new.length is not None:
        # CHAR → VARCHAR keeps trailing spaces differently; only lengthen within one type.
        return old.type == new.type and new.length >= old.length
    if old.type == new.type and old.type in ("datetime", "timestamp", "time"):
        return (new.length or 0) >= (old.length or 0)
    if old.type == new.type and old.type in ("enum", "set"):
        return new.values[: len(old.values)] == old.values
    if old.type == new.type == "bit":
        return (new.length or 1) >= (old.length or 1)
    return False


def _type_text(column: ColumnDef) -> str:
    if column.type == "decimal":
        text = f"decimal({column.length},{column.scale})"
    elif column.length is not None and column.type not in INTEGER_TYPES:
        text = f"{column.type}({column.length})"
    else:
        text = column.type
    text += " unsigned" if column.unsigned else ""
    return text + ("" if column.nullable else " not null")
