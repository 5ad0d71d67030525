"""What a statement's text says (a binlog Query event's, read by capture; the DDL verb and
dropped columns the target reports): transaction control, DDL of which tables, statement-based
DML, or nothing of interest.

A small tokenizer (comments skipped, executable comments kept, quoted names unquoted) and a
careful, not complete, reading of CREATE/ALTER/DROP/RENAME/TRUNCATE that finds the tables a
statement names. It never executes or rewrites SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<comment>/\*(?![!]|M!).*?\*/|--(?:[ \t][^\n]*)?(?:\n|$)|\#[^\n]*)
    | (?P<exec>/\*M?!\d*)                       # executable comment: keep its content
    | (?P<exec_end>\*/)
    | (?P<bq>`(?:[^`]|``)*`)
    | (?P<str>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
    | (?P<word>[0-9A-Za-z_$\u0080-\uffff\U00010000-\U0010ffff]+)
    | (?P<punct>.)
    """,
    re.S | re.X,
)


@dataclass(frozen=True, slots=True)
class _Tok:
    text: str
    ident: bool  # a name (bare word or backticked)
    quoted: bool = False

    @property
    def upper(self) -> str:
        return "" if self.quoted else self.text.upper()


def _tokens(sql: str, limit: int = 400) -> list[_Tok]:
    out: list[_Tok] = []
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup
        text = match.group()
        if kind in ("ws", "comment", "exec", "exec_end"):
            continue
        if kind == "bq":
            out.append(_Tok(text[1:-1].replace("``", "`"), True, True))
        elif kind == "word":
            out.append(_Tok(text, True))
        elif kind == "str":
            out.append(_Tok(text, False, True))
        else:
            out.append(_Tok(text, False))
        if len(out) >= limit:
            break
    return out


# Statements that are not schema changes of user tables: transaction control, accounts,
# maintenance. They never become changes.
_NOT_DDL_FIRST = {
    "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "XA", "GRANT", "REVOKE", "FLUSH",
    "ANALYZE", "OPTIMIZE", "REPAIR", "CHECK", "INSTALL", "UNINSTALL", "SET", "DO",
}  # fmt: skip
_ACCOUNT_OBJECTS = {"USER", "ROLE", "SERVER"}
_DML_FIRST = {"INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD", "CALL"}
_DDL_FIRST = {"CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE"}


@dataclass(frozen=True, slots=True)
class Statement:
    """What a Query event did, as far as capture cares."""

    kind: str  # "control", "ignore", "dml", "truncate", "ddl"
    tables: tuple[tuple[str, str], ...] = ()  # (schema, table) named by the statement
    schema: str | None = None  # for DDL whose tables are unknown: the schema it concerns


def _name_at(toks: list[_Tok], i: int, default_schema: str) -> tuple[tuple[str, str], int] | None:
    """Parse `name` or `db.name` at toks[i]; return ((schema, table), next index)."""
    if i >= len(toks) or not toks[i].ident:
        return None
    if i + 2 < len(toks) and toks[i + 1].text == "." and toks[i + 2].ident:
        return (toks[i].text, toks[i + 2].text), i + 3
    if not default_schema:
        return None
    return (default_schema, toks[i].text), i + 1


def _skip(toks: list[_Tok], i: int, *words: str) -> int:
    """Skip any of the optional keywords, in any order, at toks[i]."""
    while i < len(toks) and toks[i].upper in words:
        i += 1
    return i


def _skip_if_exists(toks: list[_Tok], i: int) -> int:
    if i < len(toks) and toks[i].upper == "IF":
        i = _skip(toks, i + 1, "NOT")
        if i < len(toks) and toks[i].upper == "EXISTS":
            i += 1
    return i


def parse_statement(sql: str, default_schema: str) -> Statement:
    """Classify a Query event's text and find the tables it names (careful, not complete)."""
    toks = _tokens(sql)
    if not toks:
        return Statement("ignore")
    first = toks[0].upper
    if first in ("BEGIN", "COMMIT", "ROLLBACK", "XA"):
        return Statement("control")
    if first in _NOT_DDL_FIRST:
        return Statement("ignore")
    if first in _DML_FIRST:
        return Statement("dml")
    if first not in _DDL_FIRST:
        return Statement("ddl", schema=default_schema)
    i = 1
    if first == "TRUNCATE":
        i = _skip(toks, i, "TABLE")
        name = _name_at(toks, i, default_schema)
        return Statement("truncate", (name[0],)) if name else Statement("ignore")
    if first == "RENAME":
        if i < len(toks) and toks[i].upper in _ACCOUNT_OBJECTS:
            return Statement("ignore")
        if i < len(toks) and toks[i].upper in ("TABLE", "TABLES"):
            return Statement("ddl", _name_list(toks, i + 1, default_schema, {"TO", ","}))
        return Statement("ddl", schema=default_schema)
    # CREATE / ALTER / DROP [modifiers] OBJECT ...
    i = _skip(
        toks, i, "OR", "REPLACE", "TEMPORARY", "ONLINE", "OFFLINE", "IGNORE", "UNIQUE",
        "FULLTEXT", "SPATIAL", "DEFINER", "SQL", "SECURITY", "ALGORITHM",
    )  # fmt: skip
    obj = toks[i].upper if i < len(toks) else ""
    if obj in _ACCOUNT_OBJECTS:
        return Statement("ignore")
    if obj in ("DATABASE", "SCHEMA"):
        i = _skip_if_exists(toks, i + 1)
        if i < len(toks) and toks[i].ident:
            return Statement("ddl", schema=toks[i].text)
        return Statement("ddl", schema=default_schema)
    if obj == "TABLE":
        i = _skip_if_exists(toks, i + 1)
        if first == "DROP":
            return Statement("ddl", _name_list(toks, i, default_schema, {","}))
        name = _name_at(toks, i, default_schema)
        if name is None:
            return Statement("ddl", schema=default_schema)
        tables = [name[0]]
        if first == "ALTER":  # ALTER TABLE a RENAME [TO|AS] b: b changes too
            j = name[1]
            while j < len(toks):
                if toks[j].upper == "RENAME" and j + 1 < len(toks):
                    k = _skip(toks, j + 1, "TO", "AS")
                    renamed = _name_at(toks, k, default_schema)
                    if renamed and toks[k].upper not in ("COLUMN", "INDEX", "KEY"):
                        tables.append(renamed[0])
                j += 1
        return Statement("ddl", tuple(dict.fromkeys(tables)))
    if obj == "INDEX":  # CREATE INDEX i ON t / DROP INDEX i ON t
        j = i + 1
        while j < len(toks) and toks[j].upper != "ON":
            j += 1
        name = _name_at(toks, j + 1, default_schema)
        if name:
            return Statement("ddl", (name[0],))
    return Statement("ddl", schema=default_schema)


def _name_list(
    toks: list[_Tok], i: int, default_schema: str, separators: set[str]
) -> tuple[tuple[str, str], ...]:
    names: list[tuple[str, str]] = []
    while True:
        name = _name_at(toks, i, default_schema)
        if name is None:
            break
        names.append(name[0])
        i = name[1]
        if i < len(toks) and (toks[i].text in separators or toks[i].upper in separators):
            i += 1
            continue
        break
    return tuple(dict.fromkeys(names))


# Words after which a DML statement names a table: INSERT/REPLACE INTO t, UPDATE t,
# DELETE FROM t, … JOIN t, LOAD DATA … INTO TABLE t; and modifiers that may come between.
_DML_TABLE_AFTER = {"INTO", "UPDATE", "FROM", "JOIN", "TABLE"}
_DML_MODIFIERS = ("LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE", "QUICK", "TABLE")


def dml_tables(sql: str, default_schema: str, limit: int = 2000) -> list[tuple[str, str]]:
    """The tables a DML statement names where a table goes, in order: for messages. Decisions
    use `names_in`, which never misses one (and so names keywords and values too)."""
    toks = _tokens(sql, limit)
    names: list[tuple[str, str]] = []
    for i, tok in enumerate(toks):
        if tok.upper in _DML_TABLE_AFTER:
            name = _name_at(toks, _skip(toks, i + 1, *_DML_MODIFIERS), default_schema)
            if name is not None:
                names.append(name[0])
    return list(dict.fromkeys(names))


# What may follow DROP in ALTER TABLE without being a column (a column so named is quoted).
_NOT_A_COLUMN = {
    "INDEX", "KEY", "PRIMARY", "FOREIGN", "CONSTRAINT", "CHECK", "PARTITION", "PERIOD",
    "SYSTEM", "UNIQUE", "FULLTEXT", "SPATIAL", "DEFAULT",
}  # fmt: skip


def dropped_columns(sql: str, limit: int = 2000) -> list[str]:
    """The columns an ALTER TABLE statement drops (`DROP [COLUMN] [IF EXISTS] c`, any number
    of them); [] for any other statement."""
    toks = _tokens(sql, limit)
    i = _skip(toks, 1, "ONLINE", "OFFLINE", "IGNORE")
    if not toks or toks[0].upper != "ALTER" or i >= len(toks) or toks[i].upper != "TABLE":
        return []
    columns: list[str] = []
    depth = 0
    for j in range(i + 1, len(toks)):
        text = toks[j].text
        depth += (text == "(") - (text == ")")
        if depth or toks[j].upper != "DROP":
            continue
        k = _skip_if_exists(toks, _skip(toks, j + 1, "COLUMN"))
        if k < len(toks) and toks[k].ident and toks[k].upper not in _NOT_A_COLUMN:
            columns.append(toks[k].text)
    return list(dict.fromkeys(columns))


def table_renames(
    sql: str, default_schema: str, limit: int = 2000
) -> dict[tuple[str, str], tuple[str, str]]:
    """The tables a statement renames, new → old: `RENAME TABLE a TO b[, c TO d]` and
    `ALTER TABLE a RENAME [TO|AS] b`; {} for other statements."""
    toks = _tokens(sql, limit)
    if not toks:
        return {}
    statement = parse_statement(sql, default_schema)
    names = list(statement.tables)
    if toks[0].upper == "RENAME" and len(names) % 2 == 0:
        return {names[i + 1]: names[i] for i in range(0, len(names), 2)}
    if toks[0].upper == "ALTER" and len(names) == 2:
        for j, tok in enumerate(toks[:-1]):
            if tok.upper == "RENAME" and toks[j + 1].upper not in ("COLUMN", "INDEX", "KEY"):
                return {names[1]: names[0]}
    return {}


def ddl_verb(sql: str, limit: int = 200) -> str:
    """The statement's first keyword, upper case ("CREATE", "DROP", "ALTER", …); "" if none."""
    toks = _tokens(sql, limit)
    return toks[0].upper if toks else ""


def renamed_columns(sql: str, limit: int = 2000) -> dict[str, str]:
    """The columns an ALTER TABLE statement renames, new name → old: `RENAME COLUMN a TO b`
    and `CHANGE [COLUMN] [IF EXISTS] a b …` where the names differ; {} for other statements."""
    toks = _tokens(sql, limit)
    i = _skip(toks, 1, "ONLINE", "OFFLINE", "IGNORE")
    if not toks or toks[0].upper != "ALTER" or i >= len(toks) or toks[i].upper != "TABLE":
        return {}
    renamed: dict[str, str] = {}
    depth = 0
    for j in range(i + 1, len(toks)):
        depth += (toks[j].text == "(") - (toks[j].text == ")")
        if depth:
            continue
        word = toks[j].upper
        if word == "RENAME" and j + 1 < len(toks) and toks[j + 1].upper == "COLUMN":
            k = _skip_if_exists(toks, j + 2)
            if k + 2 < len(toks) and toks[k + 1].upper == "TO" and toks[k].ident:
                renamed[toks[k + 2].text] = toks[k].text
        elif word == "CHANGE":
            k = _skip_if_exists(toks, _skip(toks, j + 1, "COLUMN"))
            if k + 1 < len(toks) and toks[k].ident and toks[k + 1].ident:
                old, new = toks[k].text, toks[k + 1].text
                if old.lower() != new.lower():
                    renamed[new] = old
    return renamed


def names_in(sql: str, default_schema: str, limit: int = 2000) -> set[tuple[str, str]]:
    """Every (schema, table) a statement could name: each `a.b`, and with a default schema each
    bare name (keywords included, which only makes the answer larger, never smaller)."""
    toks = _tokens(sql, limit)
    names: set[tuple[str, str]] = set()
    i = 0
    while i < len(toks):
        name = _name_at(toks, i, default_schema) if toks[i].ident else None
        if name is None:
            i += 1
            continue
        names.add(name[0])
        i = name[1]
    return names
