"""A table's definition as data: what travels when the origin's schema changes.

The origin agent reads a routed table's definition from information_schema after its DDL and
sends it as a `TableDef` — columns, types, nullability, defaults, keys — never as SQL text. The
target builds its own `ALTER TABLE` / `CREATE TABLE` from it (engines/mariadb/schemachange.py), so what
arrives over the network can only ever name identifiers and pick from a closed list of types.

`from_wire` is the hostile-input edge: every field is type-checked, every type name must be in
`TYPES`, every length within MariaDB's limits, every default a literal or one of a closed list
of expressions. A definition that cannot be described this way (a generated column, a default
expression such as `uuid()`, a spatial index) is described with `unsupported` set to the reason:
the target then stops with that reason rather than guess.

Wire form (msgpack-friendly lists and dicts), version 1:

    {"v": 1, "schema": s, "table": t, "columns": [column...], "primary_key": [names],
     "indexes": [{"name": n, "unique": bool, "columns": [[name, prefix or None], ...]}],
     "charset": cs, "collation": co, "unsupported": reason or None,
     "renamed_from": {new column: old column}, "table_renamed_from": [schema, table] or None}
    column = {"name": n, "type": t, "length": int|None, "scale": int|None,
              "unsigned": bool, "nullable": bool, "default": default, "values": [str],
              "charset": cs|None, "collation": co|None}
    default = None (no default) | ["null"] | ["literal", text] | ["expr", "current_timestamp", fsp]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .errors import BinlogsyncError

WIRE_VERSION = 1
MAX_IDENTIFIER = 64
MAX_COLUMNS = 4096
MAX_INDEXES = 64
MAX_MEMBERS = 65535  # ENUM members; SET has at most 64
MAX_DEFAULT = 65535

INTEGER_TYPES = ("tinyint", "smallint", "mediumint", "int", "bigint")
# The closed list. `length` means: display width is never kept (it has no effect); for char
# types the length in characters, for binary types in bytes, for decimal the precision, for
# temporal types the fractional digits, for bit the bits, for float/double None.
TYPES = frozenset(
    {
        *INTEGER_TYPES,
        "decimal", "float", "double", "bit", "year",
        "date", "datetime", "timestamp", "time",
        "char", "varchar", "binary", "varbinary",
        "tinytext", "text", "mediumtext", "longtext",
        "tinyblob", "blob", "mediumblob", "longblob",
        "enum", "set", "json",
    }
)  # fmt: skip
LENGTH_LIMITS = {
    "decimal": 65,
    "bit": 64,
    "date": 0,
    "datetime": 6,
    "timestamp": 6,
    "time": 6,
    "char": 255,
    "binary": 255,
    "varchar": 65535,
    "varbinary": 65535,
}
LENGTH_REQUIRED = frozenset({"decimal", "bit", "char", "binary", "varchar", "varbinary"})
TEXT_TYPES = frozenset(
    {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
)
EXPRESSIONS = frozenset({"current_timestamp"})
_NAME_RE = re.compile(r"^[0-9A-Za-z_]{1,64}$")  # charset and collation names


class TableDefError(BinlogsyncError):
    """A table definition that is malformed or asks for something outside the closed list."""


@dataclass(frozen=True, slots=True)
class ColumnDef:
    name: str
    type: str
    length: int | None = None
    scale: int | None = None
    unsigned: bool = False
    nullable: bool = True
    default: tuple[Any, ...] | None = None  # see the module doc
    values: tuple[str, ...] = ()  # ENUM / SET members
    charset: str | None = None
    collation: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "length": self.length,
            "scale": self.scale,
            "unsigned": self.unsigned,
            "nullable": self.nullable,
            "default": list(self.default) if self.default is not None else None,
            "values": list(self.values),
            "charset": self.charset,
            "collation": self.collation,
        }

    @classmethod
    def from_wire(cls, data: Any) -> ColumnDef:
        data = _dict(data, "column", 10)
        kind = _str(data.get("type"), "column type", 16).lower()
        if kind not in TYPES:
            raise TableDefError(
                f"a table definition names the column type {kind[:20]!r}, not one binlogsync "
                "builds",
                f"the types it builds are: {', '.join(sorted(TYPES))}",
            )
        length = _opt_int(data.get("length"), "length", 0, 65535)
        scale = _opt_int(data.get("scale"), "scale", 0, 38)
        limit = LENGTH_LIMITS.get(kind)
        if length is not None and limit is not None and length > limit:
            raise TableDefError(f"{kind}({length}) is over MariaDB's limit of {limit}", "")
        if kind in LENGTH_REQUIRED and length is None:
            raise TableDefError(f"a {kind} column without its length", "")
        if kind == "decimal" and (scale is None or length is None or scale > length):
            raise TableDefError("a decimal column needs a scale no larger than its precision", "")
        values = tuple(_str(v, "member", 255) for v in _list(data.get("values", []), MAX_MEMBERS))
        if kind in ("enum", "set") and not values:
            raise TableDefError(f"an {kind} column without members", "")
        return cls(
            name=_identifier(data.get("name"), "column name"),
            type=kind,
            length=length,
            scale=scale,
            unsigned=_bool(data.get("unsigned", False), "unsigned"),
            nullable=_bool(data.get("nullable", True), "nullable"),
            default=_default(data.get("default")),
            values=values,
            charset=_opt_name(data.get("charset"), "charset"),
            collation=_opt_name(data.get("collation"), "collation"),
        )


@dataclass(frozen=True, slots=True)
class IndexDef:
    name: str
    unique: bool
    columns: tuple[tuple[str, int | None], ...]  # column name, prefix length

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unique": self.unique,
            "columns": [list(c) for c in self.columns],
        }

    @classmethod
    def from_wire(cls, data: Any) -> IndexDef:
        data = _dict(data, "index", 3)
        parts = []
        for part in _list(data.get("columns"), 32):
            part = _list(part, 2)
            if len(part) != 2:
                raise TableDefError("an index column must be [name, prefix or null]", "")
            parts.append(
                (_identifier(part[0], "index column"), _opt_int(part[1], "prefix", 1, 3072))
            )
        if not parts:
            raise TableDefError("an index without columns", "")
        return cls(
            _identifier(data.get("name"), "index name"),
            _bool(data.get("unique", False), "unique"),
            tuple(parts),
        )


@dataclass(frozen=True, slots=True)
class TableDef:
    schema: str
    table: str
    columns: tuple[ColumnDef, ...]
    primary_key: tuple[str, ...]
    indexes: tuple[IndexDef, ...] = ()
    charset: str | None = None
    collation: str | None = None
    unsupported: str | None = None  # why this table cannot be rebuilt from its description
    renamed_from: dict[str, str] = field(default_factory=dict)  # new column name → old
    table_renamed_from: tuple[str, str] | None = None  # (schema, table) this one was before
    # When the server last changed the table (information_schema CREATE_TIME, which every ALTER
    # moves), as a UNIX time; read by `describe`, not carried on the wire.
    changed_at: float | None = field(default=None, compare=False)

    def column(self, name: str) -> ColumnDef | None:
        for column in self.columns:
            if column.name.lower() == name.lower():
                return column
        return None

    def to_wire(self) -> dict[str, Any]:
        return {
            "v": WIRE_VERSION,
            "schema": self.schema,
            "table": self.table,
            "columns": [c.to_wire() for c in self.columns],
            "primary_key": list(self.primary_key),
            "indexes": [i.to_wire() for i in self.indexes],
            "charset": self.charset,
            "collation": self.collation,
            "unsupported": self.unsupported,
            "renamed_from": dict(self.renamed_from),
            "table_renamed_from": (
                list(self.table_renamed_from) if self.table_renamed_from else None
            ),
        }

    @classmethod
    def from_wire(cls, data: Any) -> TableDef:
        data = _dict(data, "table definition", 12)
        if data.get("v") != WIRE_VERSION:
            raise TableDefError(
                f"a table definition of version {str(data.get('v'))[:10]}, this agent reads "
                f"version {WIRE_VERSION}",
                "run the same binlogsync version on the origin and the targets",
            )
        columns = tuple(ColumnDef.from_wire(c) for c in _list(data.get("columns"), MAX_COLUMNS))
        names = {c.name.lower() for c in columns}
        if not columns or len(names) != len(columns):
            raise TableDefError("a table definition without columns or with a repeated one", "")
        key = tuple(_identifier(k, "key column") for k in _list(data.get("primary_key"), 32))
        indexes = tuple(IndexDef.from_wire(i) for i in _list(data.get("indexes", []), MAX_INDEXES))
        for name in [*key, *(c for i in indexes for c, _ in i.columns)]:
            if name.lower() not in names:
                raise TableDefError(f"a key names the column {name!r}, which the table lacks", "")
        renamed = _dict(data.get("renamed_from", {}), "renamed_from", MAX_COLUMNS)
        unsupported = data.get("unsupported")
        before = data.get("table_renamed_from")
        if before is not None:
            before = _list(before, 2)
            if len(before) != 2:
                raise TableDefError("table_renamed_from must be [schema, table]", "")
            before = (_identifier(before[0], "schema name"), _identifier(before[1], "table name"))
        return cls(
            schema=_identifier(data.get("schema"), "schema name"),
            table=_identifier(data.get("table"), "table name"),
            columns=columns,
            primary_key=key,
            indexes=indexes,
            charset=_opt_name(data.get("charset"), "charset"),
            collation=_opt_name(data.get("collation"), "collation"),
            unsupported=None if unsupported is None else _str(unsupported, "unsupported", 500),
            renamed_from={
                _identifier(k, "column name"): _identifier(v, "column name")
                for k, v in renamed.items()
            },
            table_renamed_from=before,
        )


# -- reading a definition from a server ----------------------------------------------------

_COLUMN_TYPE = re.compile(r"^(\w+)(?:\((.*)\))?((?:\s+\w+)*)$", re.S)


def describe(cur: Any, schema: str, table: str) -> TableDef | None:
    """The definition of `schema.table` as information_schema shows it; None if missing."""
    cur.execute(
        "SELECT TABLE_COLLATION, UNIX_TIMESTAMP(CREATE_TIME) FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (schema, table),
    )
    found = cur.fetchone()
    if found is None:
        return None
    table_collation, changed_at = found
    cur.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, CHARACTER_SET_NAME, "
        "COLLATION_NAME, EXTRA FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (schema, table),
    )
    columns: list[ColumnDef] = []
    unsupported: list[str] = []
    for name, column_type, nullable, default, charset, collation, extra in cur.fetchall():
        column, why = _column(name, column_type, nullable == "YES", default, charset, collation)
        if extra and extra.strip().lower() not in ("", "on update current_timestamp()"):
            why = why or f"column {name} has {extra}"
        if why:
            unsupported.append(why)
        columns.append(column)
    cur.execute(
        "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME, SUB_PART, INDEX_TYPE "
        "FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
        "ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        (schema, table),
    )
    key: list[str] = []
    indexes: dict[str, tuple[bool, list[tuple[str, int | None]]]] = {}
    for index, non_unique, column_name, sub_part, index_type in cur.fetchall():
        if index == "PRIMARY":
            key.append(column_name)
            continue
        if index_type != "BTREE":
            unsupported.append(f"index {index} is {index_type}")
        unique, parts = indexes.setdefault(index, (not int(non_unique), []))
        parts.append((column_name, int(sub_part) if sub_part is not None else None))
    charset = table_collation.split("_", 1)[0] if table_collation else None
    return TableDef(
        schema,
        table,
        tuple(columns),
        tuple(key),
        tuple(IndexDef(n, u, tuple(p)) for n, (u, p) in sorted(indexes.items())),
        charset,
        table_collation,
        "; ".join(unsupported) or None,
        changed_at=float(changed_at) if changed_at is not None else None,
    )


def _column(
    name: str,
    column_type: str,
    nullable: bool,
    default: str | None,
    charset: str | None,
    collation: str | None,
) -> tuple[ColumnDef, str | None]:
    found = _COLUMN_TYPE.match(column_type.strip())
    if found is None:
        return ColumnDef(name, "int"), f"column {name} has the type {column_type}"
    kind, args, flags = found.group(1).lower(), found.group(2), found.group(3).lower().split()
    if kind == "integer":
        kind = "int"
    if kind == "numeric":
        kind = "decimal"
    length = scale = None
    values: tuple[str, ...] = ()
    if kind in ("enum", "set"):
        values = tuple(_members(args or ""))
    elif args and kind not in INTEGER_TYPES and kind != "year":
        numbers = [int(n) for n in args.split(",")]
        length = numbers[0]
        scale = numbers[1] if len(numbers) > 1 else None
    if kind in ("float", "double"):
        length = scale = None  # FLOAT(M,D) is deprecated: the stored type is what matters
    if kind in ("datetime", "timestamp", "time") and length is None:
        length = 0
    why = None if kind in TYPES else f"column {name} has the type {column_type}"
    column_default, default_why = _parse_default(default)
    return (
        ColumnDef(
            name,
            kind if kind in TYPES else "int",
            length,
            scale,
            "unsigned" in flags,
            nullable,
            column_default,
            values,
            charset if kind in TEXT_TYPES else None,
            collation if kind in TEXT_TYPES else None,
        ),
        why or (f"column {name}: {default_why}" if default_why else None),
    )


def _members(args: str) -> list[str]:
    """ENUM/SET members from information_schema's `'a','b''c'` form."""
    return [m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", args)]


_EXPR_RE = re.compile(r"^current_timestamp(?:\((\d)\))?$", re.I)


def _parse_default(text: str | None) -> tuple[tuple[Any, ...] | None, str | None]:
    """information_schema's COLUMN_DEFAULT (MariaDB ≥ 10.2.7 shows it as an expression)."""
    if text is None:
        return None, None
    if text == "NULL":
        return ("null",), None
    if text.startswith("'") and text.endswith("'") and len(text) >= 2:
        return ("literal", text[1:-1].replace("''", "'").replace("\\\\", "\\")), None
    if re.fullmatch(r"-?\d+(\.\d+)?(e[-+]?\d+)?", text, re.I):
        return ("literal", text), None
    expr = _EXPR_RE.match(text)
    if expr:
        return ("expr", "current_timestamp", int(expr.group(1) or 0)), None
    return None, f"the default {text[:60]} is an expression binlogsync does not rebuild"


# -- checks for from_wire -------------------------------------------------------------------


def _dict(value: Any, what: str, limit: int) -> dict[str, Any]:
    if (
        not isinstance(value, dict)
        or len(value) > limit
        or not all(isinstance(k, str) for k in value)
    ):
        raise TableDefError(f"a table definition's {what} is not a small map", "")
    return value


def _list(value: Any, limit: int) -> list[Any]:
    if not isinstance(value, list | tuple) or len(value) > limit:
        raise TableDefError(f"a table definition holds a list over {limit} items or a non-list", "")
    return list(value)


def _str(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise TableDefError(f"a table definition's {what} is not a string of ≤ {limit}", "")
    return value


def _identifier(value: Any, what: str) -> str:
    name = _str(value, what, MAX_IDENTIFIER)
    if not name or name != name.rstrip() or "\x00" in name:
        raise TableDefError(f"a table definition's {what} {name[:70]!r} is not an identifier", "")
    return name


def _opt_name(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise TableDefError(f"a table definition's {what} is not a plain name", "")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TableDefError(f"a table definition's {what} is not true/false", "")
    return value


def _opt_int(value: Any, what: str, low: int, high: int) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise TableDefError(f"a table definition's {what} is not an integer in {low}..{high}", "")
    return value


def _default(value: Any) -> tuple[Any, ...] | None:
    if value is None:
        return None
    value = _list(value, 3)
    if value == ["null"]:
        return ("null",)
    if len(value) == 2 and value[0] == "literal":
        return ("literal", _str(value[1], "default", MAX_DEFAULT))
    if (
        len(value) == 3
        and value[0] == "expr"
        and value[1] in EXPRESSIONS
        and _opt_int(value[2], "fsp", 0, 6) is not None
    ):
        return ("expr", value[1], value[2])
    raise TableDefError(
        "a table definition's default is not null, a literal or a known expression", ""
    )
