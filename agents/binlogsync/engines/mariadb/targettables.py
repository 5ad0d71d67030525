"""What the applier knows of the target's tables: columns, primary key, generated columns,
the statement layout per origin column list, and the origin's DDL that may explain a
difference.

Definitions are read from information_schema once and cached (the foreign keys of all tables
in one scan that the tables read within two seconds share); a "ddl" change from the origin
drops the cached definitions of the tables it names (the DBA is expected to run the same DDL
on the target), and any apply error clears the cache, so a retry sees the target as it is now.

Extra target columns are allowed (they take their defaults), but when the origin's DDL dropped
a column that the target still has, apply stops with SchemaMismatchError instead of filling it
with its default without a word. It stops at the DDL itself (`check_ddl`, for the ALTER TABLE …
DROP forms that ddl.py reads): that transaction is not applied until the target drops the
column too, so the stop survives a restart of the agent, and `binlogsync skip` of that DDL
transaction is the recorded way to keep the column. Where the DDL did not say (another form),
the first change with fewer columns after a DDL stops apply (`_check_dropped`; in memory only:
after a restart an extra column is only named in a warning).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from ...ddl import dropped_columns
from ...errors import ApplyError, MissingTableError, SchemaMismatchError
from ...model import Change
from ...position import Position
from .statements import Layout, TableInfo, is_generated

log = logging.getLogger("binlogsync.apply")

_SHOW_DDL = 500  # characters of a DDL statement quoted in messages
FOREIGN_KEYS_FRESH = 2.0  # seconds a scan of the target's foreign keys serves (_foreign_key_ends)


def context(
    origin: str, target: object, position: Position | str | None, schema: str, table: str
) -> str:
    """The start of every apply error message: who, which transaction, which table, where."""
    where = f" transaction {position}" if position is not None else ""
    return f"origin {origin}: cannot apply{where} to `{schema}`.`{table}` on target {target}: "


class TargetTables:
    def __init__(self, origin: str, target: object) -> None:
        self.origin, self.target = origin, target
        self._tables: dict[tuple[str, str], TableInfo] = {}
        self._layouts: dict[tuple[str, str, tuple[str, ...]], Layout] = {}
        self._ddl: dict[tuple[str, str], tuple[Position, str]] = {}
        # Origin columns last seen per table, and tables whose DDL arrived since: a later change
        # with fewer columns means the origin dropped some.
        self._seen: dict[tuple[str, str], tuple[str, ...]] = {}
        self._changed: set[tuple[str, str]] = set()
        self._extra_warned: set[tuple[str, str, tuple[str, ...]]] = set()
        self.before_query: Callable[[], None] = lambda: None  # the applier waits its pipeline
        self._fk_ends: tuple[float, frozenset[tuple[str, str]]] | None = None  # read at, ends

    def forget(self) -> None:
        """After an error: read every definition again next time."""
        self._tables.clear()
        self._layouts.clear()
        self._fk_ends = None

    def table(self, cursor: Any, position: Position | None, schema: str, table: str) -> TableInfo:
        info = self._tables.get((schema, table))
        if info is not None:
            return info
        self.before_query()
        cursor.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, EXTRA, DATA_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        rows = [r for r in cursor.fetchall() if r[0] == schema and r[1] == table]
        if not rows:
            raise MissingTableError(
                context(self.origin, self.target, position, schema, table)
                + f"the target has no table `{schema}`.`{table}`",
                self.with_ddl(
                    schema,
                    table,
                    "create it on the target as the origin defines it, or exclude it from the "
                    "route; apply resumes by itself",
                ),
            )
        cursor.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, COLUMN_NAME "
            "FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 "
            "ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (schema, table),
        )
        unique: dict[str, list[str]] = {}
        for r in cursor.fetchall():
            if r[0] == schema and r[1] == table:
                unique.setdefault(r[2], []).append(r[3])
        key = tuple(unique.pop("PRIMARY", ()))
        # Foreign keys either way (this table refers to another, or another to it) and
        # triggers: the target reacts to each row, so net-change apply leaves such groups alone
        # (applier.py). Triggers are only listed to accounts with the TRIGGER privilege.
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.TRIGGERS "
            "WHERE EVENT_OBJECT_SCHEMA = %s AND EVENT_OBJECT_TABLE = %s",
            (schema, table),
        )
        found = cursor.fetchone()
        info = TableInfo(
            schema,
            table,
            tuple(r[2] for r in rows),
            key,
            frozenset(r[2].lower() for r in rows if is_generated(r[3])),
            tuple(tuple(columns) for columns in unique.values()),
            (schema.lower(), table.lower()) in self._foreign_key_ends(cursor),
            bool(found and found[0]),
            frozenset(r[2].lower() for r in rows if str(r[4]).lower() == "bit"),
        )
        self._tables[(schema, table)] = info
        return info

    def _foreign_key_ends(self, cursor: Any) -> frozenset[tuple[str, str]]:
        """The tables at either end of any foreign key on the target (schema and name in
        lower case: information_schema compares them so), read in one scan that the tables
        read within FOREIGN_KEYS_FRESH seconds share. Which tables refer to a given one cannot
        be looked up by name: MariaDB opens every table on the server to answer, 10-80 ms
        with 500 tables, and a target agent's first group reads every table it touches."""
        now = time.monotonic()
        if self._fk_ends is None or now - self._fk_ends[0] > FOREIGN_KEYS_FRESH:
            cursor.execute(
                "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, UNIQUE_CONSTRAINT_SCHEMA, "
                "REFERENCED_TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS"
            )
            ends = set()
            for r in cursor.fetchall():
                ends.add((r[0].lower(), r[1].lower()))
                ends.add((r[2].lower(), r[3].lower()))
            self._fk_ends = (now, frozenset(ends))
        return self._fk_ends[1]

    def layout(self, cursor: Any, position: Position, change: Change, strict: bool) -> Layout:
        cache_key = (change.schema, change.table, change.columns)
        layout = self._layouts.get(cache_key)
        if layout is not None:
            return layout
        info = self.table(cursor, position, change.schema, change.table)
        self._check_dropped(info, position, change)
        try:
            layout = Layout.build(info, change.columns, guard=strict)
        except ApplyError as exc:
            fix = exc.fix
            if isinstance(exc, SchemaMismatchError):
                fix = self.with_ddl(change.schema, change.table, f"{fix}; apply resumes by itself")
            raise type(exc)(
                context(self.origin, self.target, position, change.schema, change.table)
                + exc.message,
                fix,
            ) from None
        self._warn_extra(info, change)
        self._layouts[cache_key] = layout
        return layout

    def _check_dropped(self, info: TableInfo, position: Position, change: Change) -> None:
        name = (change.schema, change.table)
        before = self._seen.get(name)
        self._seen[name] = change.columns
        if before is None or name not in self._changed:
            return
        now = {c.lower() for c in change.columns}
        dropped = [c for c in before if c.lower() not in now and c in info.columns]
        if not dropped:
            self._changed.discard(name)
            return
        self._seen[name] = before  # the check holds until the target matches
        columns = ", ".join(f"`{c}`" for c in dropped)
        raise SchemaMismatchError(
            context(self.origin, self.target, position, change.schema, change.table)
            + f"the origin no longer sends column(s) {columns}, which the target still has: "
            "they would be filled with their defaults",
            self.with_ddl(
                change.schema,
                change.table,
                f"drop {columns} on the target as the origin did; apply resumes by itself",
            ),
        )

    def _warn_extra(self, info: TableInfo, change: Change) -> None:
        sent = {c.lower() for c in change.columns}
        extra = tuple(c for c in info.columns if c.lower() not in sent)
        key = (change.schema, change.table, extra)
        if extra and key not in self._extra_warned:
            self._extra_warned.add(key)
            log.warning(
                "origin %s: target table `%s`.`%s` has column(s) %s that the origin does not "
                "send; they take their defaults (if the origin dropped them, drop them here too)",
                self.origin,
                change.schema,
                change.table,
                ", ".join(extra),
            )

    def check_ddl(self, cursor: Any, position: Position, change: Change) -> None:
        """Before the origin's DDL is noted: stop if it drops a column the target still has."""
        dropped = dropped_columns(change.statement) if change.table else []
        if not dropped:
            return
        self.before_query()
        cursor.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (change.schema, change.table),
        )
        have = {
            r[2].lower(): r[2]
            for r in cursor.fetchall()
            if r[0] == change.schema and r[1] == change.table
        }
        kept = [have[c.lower()] for c in dropped if c.lower() in have]
        if not kept:
            return  # dropped here already (or no such table: its first row says so)
        columns = ", ".join(f"`{c}`" for c in kept)
        text = change.statement
        if len(text) > _SHOW_DDL:
            text = text[:_SHOW_DDL] + "…"
        raise SchemaMismatchError(
            context(self.origin, self.target, position, change.schema, change.table)
            + f"the origin dropped column(s) {columns} ({text}), which the target still has: "
            "the rows after it would fill them with their defaults",
            f"drop {columns} on the target as the origin did; apply resumes by itself (to keep "
            "them on purpose, `binlogsync skip` this DDL transaction)",
        )

    def note_ddl(self, position: Position, change: Change) -> None:
        """Remember the origin's DDL and forget what we knew of the tables it touches."""
        self._ddl[(change.schema, change.table)] = (position, change.statement)
        self._fk_ends = None
        for key in list(self._tables):
            if (not change.schema or key[0] == change.schema) and (
                not change.table or key[1] == change.table
            ):
                del self._tables[key]
                self._changed.add(key)
        for name in list(self._seen):
            if (not change.schema or name[0] == change.schema) and (
                not change.table or name[1] == change.table
            ):
                self._changed.add(name)
        for layout_key in list(self._layouts):
            if (not change.schema or layout_key[0] == change.schema) and (
                not change.table or layout_key[1] == change.table
            ):
                del self._layouts[layout_key]

    def with_ddl(self, schema: str, table: str, fix: str) -> str:
        """`fix`, preceded by the origin's DDL that most likely explains the difference."""
        found = self._ddl.get((schema, table))
        if found is None:
            # DDL of the schema that names no table, or names this one (RENAME, CREATE … LIKE).
            named = re.compile(rf"(?<![\w$]){re.escape(table)}(?![\w$])", re.IGNORECASE)
            related = [
                v
                for (s, t), v in self._ddl.items()
                if s == schema and (not t or named.search(v[1]))
            ]
            found = max(related, key=lambda v: v[0].key) if related else None
        if found is None:
            return fix
        position, text = found
        if len(text) > _SHOW_DDL:
            text = text[:_SHOW_DDL] + "…"
        return (
            f"the origin ran: {text} (at {position}); run the same on the target, "
            "apply resumes by itself"
        )
