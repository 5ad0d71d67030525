"""The PostgreSQL engine adapter: what the exactly-once core (apply/core.py) needs of a
PostgreSQL target (`[target] kind = "postgresql"`).

    connection   psycopg through pgedge.py (TLS, its errors); sessions in UTC (MySQL
                 TIMESTAMPs travel as naive UTC and go to `timestamptz`; DATETIMEs are
                 wall-clock values and go to `timestamp`), synchronous commit on
    binlogsync   `binlogsync.checkpoint` (one row per origin, locked FOR UPDATE at the start of
                 every target transaction and compared with what the core expects, so a second
                 writer is refused), `binlogsync.tables` (the origin's definitions: DDL and
                 seeds bring them) and `binlogsync.skipped` (explicit skips)
    catalog      the target's columns, primary key, other unique keys, foreign keys and
                 triggers, read once per table and again after any error
    writes       rows in order, runs of the same kind on the same table as one batch (inserts
                 and updates as `INSERT … ON CONFLICT (key) DO UPDATE` of the whole image, long
                 runs through COPY into a staging table; deletes by key; an update that moves
                 the key as a delete, then an upsert; TRUNCATE). A batch that spans origin
                 transactions and fails is `Ambiguous`: the core finds the one transaction
    schema       the origin's DDL followed as PostgreSQL statements (pgschema.py), by the
                 difference between the origin's definitions before and after it; with
                 `create_tables` a table the target lacks is made from its definition

A zero, partial or invalid date (`0000-00-00`, `2024-00-10`: zerodate.py) has no PostgreSQL
date; `zero_dates` says what happens to one bound for a date or timestamp column: `error` (apply
stops naming the table, the column and the value), `null`, or `epoch` (1970-01-01, midnight UTC
for a timestamptz). A text column takes its exact text.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from .. import tls as tls_settings
from ..ddl import ddl_verb
from ..errors import (
    ApplyError,
    BinlogsyncError,
    MissingTableError,
    SchemaMismatchError,
    UnreachableError,
)
from ..model import Change
from ..position import Position
from ..tabledef import TableDef
from ..tls import TlsSettings
from ..zerodate import ZeroDate, is_zero_date_text
from . import pgedge, pgschema
from .base import Ambiguous

SETUP = (
    "CREATE SCHEMA IF NOT EXISTS binlogsync",
    "CREATE TABLE IF NOT EXISTS binlogsync.checkpoint (origin text PRIMARY KEY, "
    "position jsonb NOT NULL, epoch text, applied bigint NOT NULL DEFAULT 0, "
    "updated_at timestamptz NOT NULL DEFAULT now())",
    "CREATE TABLE IF NOT EXISTS binlogsync.tables (name text PRIMARY KEY, definition jsonb "
    "NOT NULL)",
    "CREATE TABLE IF NOT EXISTS binlogsync.skipped (id bigserial PRIMARY KEY, origin text NOT "
    "NULL, position jsonb NOT NULL, reason text NOT NULL, skipped_at timestamptz NOT NULL "
    "DEFAULT now())",
)
COPY_ROWS = 500  # a batch at least this long goes through COPY (catch-up)
_DATE_TYPES = ("date", "timestamp without time zone", "timestamp with time zone")
_EPOCHS = {
    "date": dt.date(1970, 1, 1),
    "timestamp without time zone": dt.datetime(1970, 1, 1),
    "timestamp with time zone": dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
}
_TRANSIENT = ("transient",)


def checkpoints(
    url: str, password: str = "", tls: TlsSettings = tls_settings.DEFAULT
) -> dict[str, dict[str, object]]:
    """Every origin's checkpoint on the PostgreSQL target, as HELLO carries them."""
    try:
        with pgedge.connect(url, password, tls, connect_timeout=10) as conn:
            exists = conn.execute("SELECT to_regclass('binlogsync.checkpoint')").fetchone()
            if not exists or exists[0] is None:
                return {}
            rows = conn.execute("SELECT origin, position, epoch FROM binlogsync.checkpoint")
            return {
                origin: {**Position.from_json(position).to_json(), "epoch": epoch}
                for origin, position, epoch in rows.fetchall()
            }
    except psycopg.Error as exc:
        raise UnreachableError(
            f"the PostgreSQL target {pgedge.safe(url)} cannot be read: {exc}",
            "is the server up, and are target.url and its password right?",
        ) from exc


@dataclass
class PgTable:
    name: str
    columns: dict[str, str]  # name → PostgreSQL data_type
    key: tuple[str, ...]
    set_order: dict[str, tuple[str, ...]]  # SET column → member order (from the definition)
    other_unique: bool = False  # unique keys besides the primary key
    reacts: bool = False  # foreign keys or triggers: each row's effect matters, never reduced


@dataclass(frozen=True)
class _Plan:
    """How the reducer keys this table's rows (engines/base.KeyPlan)."""

    key: tuple[int, ...]
    unique_keys: bool


class PostgresEngine:
    kind = "postgresql"
    streams = False  # a transaction in parts is held and applied whole

    def __init__(
        self,
        url: str,
        origin: str,
        create_tables: bool = False,
        password: str = "",
        tls: TlsSettings = tls_settings.DEFAULT,
        zero_dates: str = "error",
    ) -> None:
        self.url, self.origin, self.create_tables = url, origin, create_tables
        self.password, self.tls = password, tls
        self.zero_dates = zero_dates  # config.ZERO_DATE_MODES
        self.conn: psycopg.Connection[Any] | None = None
        self.tables: dict[str, PgTable] = {}
        self.definitions: dict[str, TableDef] = {}

    # -- the engine face ----------------------------------------------------------------------
    def checkpoint(self) -> Position | None:
        conn = self.connection()
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(
                    "SELECT position FROM binlogsync.checkpoint WHERE origin = %s", (self.origin,)
                )
                row = cur.fetchone()
        except psycopg.Error as exc:
            raise self.error(exc, "reading the checkpoint") from exc
        return None if row is None else Position.from_json(row[0])

    def begin(self, base: Position | None, known: bool) -> PostgresSession:
        conn = self.connection()
        try:
            cur = conn.cursor()
            cur.execute(
                "SELECT position FROM binlogsync.checkpoint WHERE origin = %s FOR UPDATE",
                (self.origin,),
            )
            row = cur.fetchone()
        except psycopg.Error as exc:
            self.rollback()
            raise self.error(exc, "reading the checkpoint") from exc
        now = None if row is None else Position.from_json(row[0])
        if known and now != base:
            self.rollback()
            raise ApplyError(
                f"{self.origin}'s checkpoint on the PostgreSQL target moved from {base} to {now} "
                "while this agent applied (another agent for the same target?)",
                "run one target agent per PostgreSQL database",
            )
        return PostgresSession(self, cur, now)

    def follow_schema(self, change: Change, position: Position, mode: str) -> list[str]:
        conn = self.connection()
        full = f"{change.schema}.{change.table}"
        try:
            with conn.transaction(), conn.cursor() as cur:
                new = TableDef.from_wire(change.definition) if change.definition else None
                old = self.definition(cur, full)
                steps = pgschema.plan(
                    change.schema, change.table, new, old, self._exists(cur, change),
                    mode, ddl_verb(change.statement),
                )  # fmt: skip
                if steps.refused:
                    raise SchemaMismatchError(
                        f"origin {self.origin}, transaction {position}, table {full}: the "
                        f"origin's DDL ({change.statement[:300]}) cannot be followed on "
                        f'PostgreSQL under apply_schema_changes = "{mode}": '
                        + "; ".join(steps.refused),
                        "run the matching DDL on the target yourself (apply resumes by itself), "
                        'or set apply_schema_changes = "all" where that is wanted, or '
                        "`binlogsync skip` this DDL transaction",
                    )
                for statement in steps.statements:
                    cur.execute(statement)
                if new is not None:
                    self._keep(cur, full, change)
        except psycopg.Error as exc:
            raise self.error(exc, f"following the origin's DDL of {full}") from exc
        finally:
            self.forget()
        return steps.changes

    def note_ddl(self, position: Position, change: Change) -> None:
        """Keep the origin's definition (a seed's, with schema following off): a table made
        later with `create_tables`, and the next DDL's comparison, start from it."""
        if change.definition is None or not change.table:
            return
        conn = self.connection()
        try:
            with conn.transaction(), conn.cursor() as cur:
                self._keep(cur, f"{change.schema}.{change.table}", change)
        except psycopg.Error as exc:
            raise self.error(exc, "keeping the origin's table definition") from exc

    def forget(self) -> None:
        self.tables.clear()
        self.definitions.clear()

    def replayable(self, error: BaseException) -> bool:
        if isinstance(error, UnreachableError):
            return False
        cause = error.__cause__
        return not (isinstance(cause, psycopg.Error) and pgedge.kind_of(cause) in _TRANSIENT)

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg.Error:
                pass
            self.conn = None

    # -- connection, errors -------------------------------------------------------------------
    def connection(self) -> psycopg.Connection[Any]:
        if self.conn is not None and (self.conn.closed or self.conn.broken):
            self.conn = None
        if self.conn is None:
            try:
                conn = pgedge.connect(self.url, self.password, self.tls, connect_timeout=10)
                conn.execute("SET TIME ZONE 'UTC'")
                conn.commit()
                with conn.transaction():
                    for statement in SETUP:
                        conn.execute(statement)
            except psycopg.Error as exc:
                raise self.error(exc, "connecting") from exc
            self.conn = conn
            self.forget()
        return self.conn

    def rollback(self) -> None:
        if self.conn is None:
            return
        try:
            self.conn.rollback()
        except psycopg.Error:
            self.close()

    def error(self, exc: BaseException, doing: str, where: str = "") -> BinlogsyncError:
        if pgedge.kind_of(exc) == "unreachable":
            self.close()
        return pgedge.translate(exc, self.url, doing, where)

    # -- catalog ------------------------------------------------------------------------------
    def table(self, cur: psycopg.Cursor[Any], schema: str, name: str) -> PgTable:
        full = f"{schema}.{name}"
        found = self.tables.get(full)
        if found is not None:
            return found
        cur.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE "
            "table_schema = %s AND table_name = %s ORDER BY ordinal_position", (schema, name),
        )  # fmt: skip
        columns = {c: t for c, t in cur.fetchall()}
        if not columns:
            definition = self.definition(cur, full)
            if definition is None or not self.create_tables:
                raise MissingTableError(
                    f"the PostgreSQL target has no table {full}",
                    "create it, or set create_tables = true and seed the table (the seed "
                    "brings its definition)" if definition is None else
                    "create it, or set create_tables = true",
                )  # fmt: skip
            self._create(cur, definition)
            return self.table(cur, schema, name)
        regclass = sql.Identifier(schema, name).as_string(cur)
        cur.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
            "ORDER BY array_position(i.indkey, a.attnum)",
            (regclass,),
        )
        key = tuple(r[0] for r in cur.fetchall())
        if not key:
            raise SchemaMismatchError(
                f"the PostgreSQL table {full} has no primary key, so rows cannot be applied by key",
                f"add the origin's primary key to {full}",
            )
        cur.execute(
            "SELECT (SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass AND "
            "indisunique AND NOT indisprimary), (SELECT count(*) FROM pg_constraint WHERE "
            "contype = 'f' AND (conrelid = %s::regclass OR confrelid = %s::regclass)), "
            "(SELECT count(*) FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal)",
            (regclass,) * 4,
        )
        unique, foreign, triggers = cur.fetchone()  # type: ignore[misc]
        definition = self.definition(cur, full)
        order = (
            {c.name: c.values for c in definition.columns if c.type == "set"} if definition else {}
        )
        found = self.tables[full] = PgTable(
            full, columns, key, order, bool(unique), bool(foreign or triggers)
        )
        return found

    def definition(self, cur: psycopg.Cursor[Any], full: str) -> TableDef | None:
        if full not in self.definitions:
            cur.execute("SELECT definition FROM binlogsync.tables WHERE name = %s", (full,))
            row = cur.fetchone()
            if row is None:
                return None
            self.definitions[full] = TableDef.from_wire(row[0])
        return self.definitions[full]

    def _keep(self, cur: psycopg.Cursor[Any], full: str, change: Change) -> None:
        assert change.definition is not None
        self.definitions[full] = TableDef.from_wire(change.definition)
        self.tables.pop(full, None)
        cur.execute(
            "INSERT INTO binlogsync.tables (name, definition) VALUES (%s, %s) ON CONFLICT (name) "
            "DO UPDATE SET definition = EXCLUDED.definition", (full, json.dumps(change.definition)),
        )  # fmt: skip

    def _exists(self, cur: psycopg.Cursor[Any], change: Change) -> bool:
        cur.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
            (change.schema, change.table),
        )
        return cur.fetchone() is not None

    def _create(self, cur: psycopg.Cursor[Any], definition: TableDef) -> None:
        if definition.unsupported:
            raise SchemaMismatchError(
                f"{definition.schema}.{definition.table} cannot be created on PostgreSQL: "
                f"{definition.unsupported}"
            )
        cur.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(definition.schema))
        )
        cur.execute(pgschema.create_table(definition))

    # -- values -------------------------------------------------------------------------------
    def adapt(
        self, table: PgTable, columns: Sequence[str], row: Sequence[Any],
        only: Sequence[str] | None = None,
    ) -> list[Any]:  # fmt: skip
        values = dict(zip(columns, row, strict=True))
        out = []
        for column in only or columns:
            value = values[column]
            kind = table.columns[column]
            if isinstance(value, set | frozenset):
                order = table.set_order.get(column)
                value = (
                    ",".join(m for m in order if m in value) if order else ",".join(sorted(value))
                )
            elif isinstance(value, bytes) and kind in ("bigint", "numeric", "integer", "smallint"):
                value = int.from_bytes(value, "big")  # BIT, as a seed reads it
            elif isinstance(value, ZeroDate) or (isinstance(value, str) and kind in _DATE_TYPES):
                value = self._zero_date(table, column, kind, value)
            elif isinstance(value, dt.datetime) and kind == "timestamp with time zone":
                value = value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value
            elif isinstance(value, str) and "\x00" in value:
                raise ApplyError(
                    f"{table.name}.{column}: PostgreSQL text cannot hold the NUL character "
                    "the origin's value has",
                    "make the column bytea on the target, or clean the value on the origin",
                )
            out.append(value)
        return out

    def _zero_date(self, table: PgTable, column: str, kind: str, value: ZeroDate | str) -> Any:
        """A zero, partial or invalid date as `zero_dates` says (module doc). Text in a date
        column is a repair's or an older seed's row read by PyMySQL, which leaves such dates
        as text; any other text there is left to PostgreSQL to read."""
        text = value.text if isinstance(value, ZeroDate) else value
        if kind not in _DATE_TYPES:
            return text  # a text column holds it exactly
        if isinstance(value, str) and not is_zero_date_text(value):
            return value
        if self.zero_dates == "epoch":
            return _EPOCHS[kind]
        if self.zero_dates == "null" and column not in table.key:
            return None
        if self.zero_dates == "null":
            raise ApplyError(
                f"{table.name}.{column}: the origin's value {text!r} is no date PostgreSQL can "
                'hold, and zero_dates = "null" cannot put NULL into a primary key column',
                'set [target] zero_dates = "epoch", make the column text on the target (it then '
                "holds the exact text), or correct the rows on the origin",
            )
        raise ApplyError(
            f"{table.name}.{column}: the origin's value {text!r} is no date PostgreSQL can hold "
            "(a zero, partial or invalid date)",
            'set [target] zero_dates = "null" or "epoch" to map such dates, make the column '
            "text on the target (it then holds the exact text), or correct the rows on the "
            "origin (NO_ZERO_DATE, NO_ZERO_IN_DATE keep new ones out)",
        )


_Run = tuple[str, str, str, tuple[str, ...]]  # kind, schema, table, columns of a batch


class PostgresSession:
    """One PostgreSQL transaction: the checkpoint row locked, rows applied in batches."""

    def __init__(
        self, engine: PostgresEngine, cur: psycopg.Cursor[Any], base: Position | None
    ) -> None:
        self.engine, self.cur, self.base = engine, cur, base
        self.span_from: Position | None = None
        self._run: _Run | None = None
        self._rows: list[Sequence[Any]] = []
        self._first: Position | None = None  # the batch's first and last transaction
        self._last: Position | None = None

    def set_checkpoint(self, new: Position, count: int, epoch: str | None) -> None:
        try:
            self.cur.execute(
                "INSERT INTO binlogsync.checkpoint (origin, position, epoch, applied) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (origin) DO UPDATE SET "
                "position = EXCLUDED.position, epoch = COALESCE(EXCLUDED.epoch, "
                "binlogsync.checkpoint.epoch), "
                "applied = binlogsync.checkpoint.applied + EXCLUDED.applied, updated_at = now()",
                (self.engine.origin, json.dumps(new.to_json()), epoch, count),
            )
        except psycopg.Error as exc:
            raise self.engine.error(exc, "moving the checkpoint") from exc

    def plan(self, change: Change, position: Position) -> _Plan | None:
        try:
            table = self.engine.table(self.cur, change.schema, change.table)
        except psycopg.Error as exc:
            raise self.engine.error(exc, "reading the table definition") from exc
        if table.reacts or any(k not in change.columns for k in table.key):
            return None
        return _Plan(tuple(change.columns.index(k) for k in table.key), table.other_unique)

    def record_skip(self, position: Position, reason: str) -> None:
        try:
            self.cur.execute(
                "INSERT INTO binlogsync.skipped (origin, position, reason) VALUES (%s, %s, %s)",
                (self.engine.origin, json.dumps(position.to_json()), reason),
            )
        except psycopg.Error as exc:
            raise self.engine.error(exc, "recording the skip") from exc

    def add(
        self,
        changes: Sequence[Change],
        position: Position,
        timestamp: float | None = None,
        streamed: bool = False,
    ) -> None:
        first = self.span_from or position
        for change in changes:
            if change.kind == "ddl":
                self.flush()
                if change.definition is not None and change.table:
                    self._guard(
                        lambda c=change: self.engine._keep(
                            self.cur, f"{c.schema}.{c.table}", c
                        ),
                        first, position, "keeping the origin's table definition",
                    )  # fmt: skip
                continue
            if change.kind == "truncate":
                self.flush()
                self._guard(lambda c=change: self._truncate(c), first, position, "truncating")
                continue
            table = self._guard(
                lambda c=change: self.engine.table(self.cur, c.schema, c.table),
                first, position, "reading the table definition",
            )  # fmt: skip
            for i in range(max(len(change.before), len(change.after))):
                before = change.before[i] if change.before else None
                after = change.after[i] if change.after else None
                if change.kind == "update" and before is not None and after is not None:
                    if _key(table, change.columns, before) != _key(table, change.columns, after):
                        self._queue(("delete", change.schema, change.table, change.columns),
                                    before, first, position)  # fmt: skip
                kind = "delete" if change.kind == "delete" else "upsert"
                row = before if kind == "delete" else after
                assert row is not None
                self._queue(
                    (kind, change.schema, change.table, change.columns), row, first, position
                )

    def flush(self) -> None:
        run, rows, first, last = self._run, self._rows, self._first, self._last
        self._run, self._rows, self._first, self._last = None, [], None, None
        if run is None or not rows:
            return
        assert first is not None and last is not None
        kind, schema, name, columns = run
        self._guard(
            lambda: self._write(kind, schema, name, columns, rows), first, last,
            f"applying {len(rows)} {kind}(s) to {schema}.{name}",
        )  # fmt: skip

    def finish(self, commit: bool) -> None:
        self.flush()
        conn = self.engine.conn
        assert conn is not None
        try:
            if commit:
                conn.commit()
            else:
                conn.rollback()
        except psycopg.Error as exc:
            raise self.engine.error(exc, "committing") from exc

    def abort(self) -> None:
        self._run, self._rows = None, []
        self.engine.rollback()

    # -- batches ------------------------------------------------------------------------------
    def _queue(self, run: _Run, row: Sequence[Any], first: Position, position: Position) -> None:
        if self._run != run:
            self.flush()
            self._run, self._first = run, first
        self._rows.append(row)
        self._last = position

    def _guard(self, work: Any, first: Position, last: Position, doing: str) -> Any:
        """Run `work`; a failure as our error, on the transaction it names, or `Ambiguous`
        when the work spans several (the core then finds the one)."""
        where = f"origin {self.engine.origin}, transaction {last}" if first == last else (
            f"origin {self.engine.origin}, transactions {first} … {last}"
        )  # fmt: skip
        try:
            return work()
        except psycopg.Error as exc:
            error = self.engine.error(exc, doing, where)
            error.__cause__ = exc
        except ApplyError as exc:
            error = exc
            if first == last and error.position is None:
                error.position = last
        if (
            isinstance(error, UnreachableError)
            or pgedge.kind_of(error.__cause__ or error) in _TRANSIENT
        ):
            raise error
        if first != last:
            raise Ambiguous(error)
        if isinstance(error, ApplyError) and error.position is None:
            error.position = last
        raise error

    def _truncate(self, change: Change) -> None:
        self.engine.table(self.cur, change.schema, change.table)
        self.cur.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(change.schema, change.table)))

    def _write(
        self, kind: str, schema: str, name: str, columns: tuple[str, ...], rows: list[Sequence[Any]]
    ) -> None:
        engine, cur = self.engine, self.cur
        table = engine.table(cur, schema, name)
        missing = [c for c in columns if c not in table.columns]
        if missing:
            raise SchemaMismatchError(
                f"the PostgreSQL table {schema}.{name} has no column {missing[0]}",
                f"add it (ALTER TABLE {schema}.{name} ADD COLUMN …), set apply_schema_changes = "
                '"additive" so the origin\'s DDL is followed, or drop the table and set '
                "create_tables = true so it is made from the origin's definition",
            )
        ident = sql.Identifier(schema, name)
        if kind == "delete":
            where = sql.SQL(" AND ").join(
                sql.SQL("{} = %s").format(sql.Identifier(k)) for k in table.key
            )
            query = sql.SQL("DELETE FROM {} WHERE {}").format(ident, where)
            cur.executemany(query, [engine.adapt(table, columns, r, only=table.key) for r in rows])
            return
        if len(rows) >= COPY_ROWS:
            self._copy_upsert(table, schema, name, columns, rows)
            return
        query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) ").format(
            ident,
            sql.SQL(", ").join(map(sql.Identifier, columns)),
            sql.SQL(", ").join(sql.Placeholder() * len(columns)),
            sql.SQL(", ").join(map(sql.Identifier, table.key)),
        ) + _on_conflict(columns, table.key)
        cur.executemany(query, [engine.adapt(table, columns, row) for row in rows])

    def _copy_upsert(
        self, table: PgTable, schema: str, name: str, columns: tuple[str, ...],
        rows: list[Sequence[Any]],
    ) -> None:  # fmt: skip
        """A large batch (catch-up): COPY into a temporary table shaped like the target, then
        one INSERT … SELECT … ON CONFLICT. Rows of one batch have distinct keys only if the
        batch is deduplicated first: the last image of each key wins, as in order."""
        cur = self.cur
        latest: dict[tuple[Any, ...], Sequence[Any]] = {}
        for row in rows:
            latest[_key(table, columns, row)] = row
        stage = sql.Identifier(f"bls_stage_{name}"[:63])
        cur.execute(sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS) "
                            "ON COMMIT DELETE ROWS").format(stage, sql.Identifier(schema, name)))  # fmt: skip
        cols = sql.SQL(", ").join(map(sql.Identifier, columns))
        with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(stage, cols)) as copy:
            for row in latest.values():
                copy.write_row(self.engine.adapt(table, columns, row))
        cur.execute(
            sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) ").format(
                sql.Identifier(schema, name), cols, cols, stage,
                sql.SQL(", ").join(map(sql.Identifier, table.key)),
            ) + _on_conflict(columns, table.key)
        )  # fmt: skip
        cur.execute(sql.SQL("TRUNCATE {}").format(stage))


def _key(table: PgTable, columns: Sequence[str], row: Sequence[Any]) -> tuple[Any, ...]:
    values = dict(zip(columns, row, strict=True))
    return tuple(values[k] for k in table.key)


def _on_conflict(columns: Sequence[str], key: Sequence[str]) -> Any:
    others = [c for c in columns if c not in key]
    if not others:
        return sql.SQL("DO NOTHING")
    return sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
        sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others
    )
