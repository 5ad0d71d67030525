"""A PostgreSQL target's tables from the origin's definitions (tabledef.py): the type mapping,
CREATE TABLE, and the origin's DDL followed as PostgreSQL's own statements.

The mapping (docs/targets.md) keeps every value: integers one size up where MySQL's unsigned
range needs it, DECIMAL as numeric(p,s), DATETIME as timestamp(n), TIMESTAMP as timestamptz(n),
TIME as interval (MySQL's TIME spans ±838 hours), text and ENUM/SET as text or varchar(n),
binary types as bytea, JSON as jsonb.

Following the origin's DDL compares the origin's new definition with the one it had before (kept
in `binlogsync.tables`): the PostgreSQL table was made from that one, so what changed on the
origin is what must change here, in PostgreSQL's terms:

    additive   a new table (the origin's CREATE), new columns, widened types (a type whose
               PostgreSQL type changes to hold every old value: varchar(n) to a longer one,
               integer to bigint, numeric with more digits, …), new indexes; a dropped table
               or column is kept; anything else is refused, named
    all        also dropped columns, indexes and tables, changed or narrowed types (converted
               with USING col::type), renamed columns and tables

Identifiers are psycopg's sql.Identifier, type names come from the closed mapping, defaults are
sql.Literal of the definition's literal: nothing of the origin's SQL text is ever run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engines.mariadb.schemachange import widens
from ..tabledef import ColumnDef, IndexDef, TableDef


def pg_type(column: Any) -> str:
    """The PostgreSQL type a MySQL/MariaDB column becomes (docs/targets.md)."""
    from ..errors import ApplyError

    t, n, s, unsigned = column.type, column.length, column.scale, column.unsigned
    if t in ("tinyint", "smallint"):
        return "integer" if unsigned and t == "smallint" else "smallint"
    if t == "mediumint":
        return "integer"
    if t == "int":
        return "bigint" if unsigned else "integer"
    if t == "bigint":
        return "numeric(20,0)" if unsigned else "bigint"
    if t == "decimal":
        return f"numeric({n},{s or 0})"
    if t == "float":
        return "real"
    if t == "double":
        return "double precision"
    if t == "bit":
        return "bigint" if (n or 1) < 64 else "numeric(20,0)"
    if t == "year":
        return "smallint"
    if t == "date":
        return "date"
    if t == "datetime":
        return f"timestamp({n or 0})"
    if t == "timestamp":
        return f"timestamptz({n or 0})"
    if t == "time":
        return "interval"  # MySQL TIME spans -838:59:59 … 838:59:59; PostgreSQL's time does not
    if t in ("char", "varchar"):
        return f"varchar({n})"
    if t in ("tinytext", "text", "mediumtext", "longtext", "enum", "set"):
        return "text"
    if t in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        return "bytea"
    if t == "json":
        return "jsonb"
    raise ApplyError(f"no PostgreSQL type for MySQL type {t}")


# What a NOT NULL column without a default holds in rows that existed before it was added:
# MySQL's implicit default, where PostgreSQL has the same value.
_IMPLICIT = {
    "numeric": "0", "smallint": "0", "integer": "0", "bigint": "0", "real": "0",
    "double precision": "0", "text": "", "bytea": "",
}  # fmt: skip


@dataclass
class Steps:
    """What following one DDL change takes: statements (psycopg sql objects), what each does
    (for the log), and the reasons it refuses (each names one difference)."""

    statements: list[Any] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def create_table(definition: TableDef) -> Any:
    from psycopg import sql

    parts = [column_sql(c) for c in definition.columns]
    parts.append(
        sql.SQL("PRIMARY KEY ({})").format(
            sql.SQL(", ").join(map(sql.Identifier, definition.primary_key))
        )
    )
    return sql.SQL("CREATE TABLE {} ({})").format(
        sql.Identifier(definition.schema, definition.table), sql.SQL(", ").join(parts)
    )


def column_sql(column: ColumnDef, existing_rows: bool = False) -> Any:
    """A column as in CREATE TABLE (its mapped type, NOT NULL) or, for a table that has rows
    already (`existing_rows`), as ADD COLUMN gives it to them: the origin's literal default, or
    MySQL's implicit one for a NOT NULL column without a default, as MySQL fills them."""
    from psycopg import sql

    kind = pg_type(column)
    out = sql.SQL("{} {}").format(sql.Identifier(column.name), sql.SQL(kind))
    default = column.default
    if existing_rows and default is not None and default[0] == "literal":
        out = sql.SQL("{} DEFAULT {}").format(out, sql.Literal(default[1]))
    elif existing_rows and not column.nullable and kind.split("(")[0] in _IMPLICIT:
        out = sql.SQL("{} DEFAULT {}").format(out, sql.Literal(_IMPLICIT[kind.split("(")[0]]))
    if not column.nullable:
        out = sql.SQL("{} NOT NULL").format(out)
    return out


def _index_sql(schema: str, table: str, index: IndexDef) -> Any:
    from psycopg import sql

    return sql.SQL("CREATE {}INDEX IF NOT EXISTS {} ON {} ({})").format(
        sql.SQL("UNIQUE " if index.unique else ""),
        sql.Identifier(_index_name(table, index.name)),
        sql.Identifier(schema, table),
        sql.SQL(", ").join(sql.Identifier(name) for name, _prefix in index.columns),
    )


def _index_name(table: str, name: str) -> str:
    # Index names are per schema in PostgreSQL, per table in MySQL.
    return f"{table}_{name}"[:63]


def plan(
    change_schema: str,
    change_table: str,
    new: TableDef | None,
    old: TableDef | None,
    exists: bool,
    mode: str,
    verb: str,
) -> Steps:
    """The steps that make the PostgreSQL table follow one DDL change of the origin: `new`
    the origin's definition after it (None: the table is gone there), `old` the one before
    (None: unknown), `exists` whether the PostgreSQL table exists, `verb` the origin's
    statement's first word."""
    from psycopg import sql

    out = Steps()
    where = sql.Identifier(change_schema, change_table)
    if new is None:
        if verb == "DROP" and mode == "all" and exists:
            out.statements.append(sql.SQL("DROP TABLE {}").format(where))
            out.changes.append(f"drop table {change_schema}.{change_table}")
        return out
    if new.unsupported:
        out.refused.append(
            f"{new.schema}.{new.table} cannot be rebuilt from its definition: {new.unsupported}"
        )
        return out
    if not exists:
        if new.table_renamed_from is not None and old is not None and verb != "CREATE":
            if mode != "all":
                out.refused.append(
                    f"table {'.'.join(new.table_renamed_from)} was renamed to "
                    f"{change_schema}.{change_table}"
                )
                return out
            old_schema, old_table = new.table_renamed_from
            out.statements.append(
                sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    sql.Identifier(old_schema, old_table), sql.Identifier(change_table)
                )
            )
            out.changes.append(f"rename table {old_schema}.{old_table}")
        else:
            out.statements.append(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                sql.Identifier(change_schema)))  # fmt: skip
            out.statements.append(create_table(new))
            out.statements += [_index_sql(new.schema, new.table, i) for i in new.indexes]
            out.changes.append(f"create table {change_schema}.{change_table}")
            return out
    if old is None:
        out.refused.append(
            f"the origin's definition of {change_schema}.{change_table} before this change is "
            "not known here, so what changed cannot be told"
        )
        return out
    _columns(where, new, old, mode, out)
    _indexes(new, old, mode, out)
    if out.refused:
        out.statements.clear()
    return out


def _columns(where: Any, new: TableDef, old: TableDef, mode: str, out: Steps) -> None:
    from psycopg import sql

    renamed = {n.lower(): o for n, o in new.renamed_from.items()}
    kept = {c.name.lower() for c in new.columns}
    for column in new.columns:
        had = old.column(column.name)
        old_name = renamed.get(column.name.lower())
        if had is None and old_name is not None and old.column(old_name) is not None:
            if mode != "all":
                out.refused.append(f"column {old_name} was renamed to {column.name}")
                continue
            out.statements.append(sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                where, sql.Identifier(old_name), sql.Identifier(column.name)))  # fmt: skip
            out.changes.append(f"rename column {old_name} to {column.name}")
            had = old.column(old_name)
            assert had is not None
        if had is None:
            if (
                not column.nullable
                and column.default is None
                and (pg_type(column).split("(")[0] not in _IMPLICIT)
            ):
                out.refused.append(
                    f"column {column.name} ({column.type}) is NOT NULL without a default: the "
                    "rows already there have no value PostgreSQL can hold"
                )
                continue
            out.statements.append(sql.SQL("ALTER TABLE {} ADD COLUMN {}").format(
                where, column_sql(column, existing_rows=True)))  # fmt: skip
            out.changes.append(f"add column {column.name}")
            continue
        if pg_type(had) == pg_type(column) and had.nullable == column.nullable:
            continue  # the same PostgreSQL column (a change PostgreSQL does not see)
        if widens(had, column) or mode == "all":
            if pg_type(had) != pg_type(column):
                out.statements.append(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}::{}").format(
                    where, sql.Identifier(column.name), sql.SQL(pg_type(column)),
                    sql.Identifier(column.name), sql.SQL(pg_type(column))))  # fmt: skip
                out.changes.append(f"change column {column.name} to {pg_type(column)}")
            if had.nullable != column.nullable:
                verb = "DROP NOT NULL" if column.nullable else "SET NOT NULL"
                out.statements.append(sql.SQL("ALTER TABLE {} ALTER COLUMN {} {}").format(
                    where, sql.Identifier(column.name), sql.SQL(verb)))  # fmt: skip
                out.changes.append(f"column {column.name} {verb.lower()}")
        else:
            out.refused.append(
                f"column {column.name} would change from {pg_type(had)} to {pg_type(column)}, "
                "which is not a widening"
            )
    renamed_old = {o.lower() for o in new.renamed_from.values()}
    for column in old.columns:
        if column.name.lower() in kept or column.name.lower() in renamed_old:
            continue
        if mode == "all":
            out.statements.append(sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS {}").format(
                where, sql.Identifier(column.name)))  # fmt: skip
            out.changes.append(f"drop column {column.name}")
        # additive: the column stays; rows the origin writes from now on leave it NULL or at
        # its default (a dropped column is never written again)


def _indexes(new: TableDef, old: TableDef, mode: str, out: Steps) -> None:
    from psycopg import sql

    have = {i.name.lower(): i for i in old.indexes}
    want = {i.name.lower(): i for i in new.indexes}
    for name, index in want.items():
        before = have.get(name)
        if before == index:
            continue
        if any(prefix for _n, prefix in index.columns):
            out.changes.append(
                f"index {index.name} left out (a prefix index has no PostgreSQL form)"
            )
            continue
        if before is not None:
            if mode != "all":
                out.refused.append(f"index {index.name} changed")
                continue
            out.statements.append(sql.SQL("DROP INDEX IF EXISTS {}").format(
                sql.Identifier(new.schema, _index_name(new.table, index.name))))  # fmt: skip
        out.statements.append(_index_sql(new.schema, new.table, index))
        out.changes.append(f"add index {index.name}")
    for name, index in have.items():
        if name not in want and mode == "all":
            out.statements.append(sql.SQL("DROP INDEX IF EXISTS {}").format(
                sql.Identifier(new.schema, _index_name(new.table, index.name))))  # fmt: skip
            out.changes.append(f"drop index {index.name}")
