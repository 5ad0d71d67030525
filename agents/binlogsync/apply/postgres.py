"""The PostgreSQL target (`[target] kind = "postgresql"`), exactly once, surviving kill -9.

Each group of origin transactions is one PostgreSQL transaction that also moves the
checkpoint (`binlogsync.checkpoint`, one row per origin, locked FOR UPDATE and compared with
what this agent read, so a second writer is refused). Rows are applied in order, runs of the
same kind on the same table as one batch: inserts and updates as `INSERT … ON CONFLICT (key)
DO UPDATE` of the whole row image, deletes by key, an update that changes the key as a delete
of the old key then an upsert; a truncate is `TRUNCATE`. DDL is never executed: it carries the
origin's table definition, which is kept (`binlogsync.tables`) and, with `create_tables`,
used to create a table the target lacks (docs/targets.md: the type mapping). The target's own
tables say which columns and key to use (read from its catalog); an origin column the target
table lacks stops apply with the table and column named.

Sessions: time zone UTC (MySQL TIMESTAMPs travel as naive UTC and go to `timestamptz`;
DATETIMEs are wall-clock values and go to `timestamp`), synchronous commit on.

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
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from .. import tls as tls_settings
from ..errors import ApplyError, MissingTableError, SchemaMismatchError, UnreachableError
from ..model import Change, Part, Transaction
from ..position import Position
from ..tabledef import TableDef
from ..tls import TlsSettings
from ..zerodate import ZeroDate, is_zero_date_text
from .store import HeldParts, plan_group, repair_checkpoint

SETUP = (
    "CREATE SCHEMA IF NOT EXISTS binlogsync",
    "CREATE TABLE IF NOT EXISTS binlogsync.checkpoint (origin text PRIMARY KEY, "
    "position jsonb NOT NULL, epoch text, applied bigint NOT NULL DEFAULT 0, "
    "updated_at timestamptz NOT NULL DEFAULT now())",
    "CREATE TABLE IF NOT EXISTS binlogsync.tables (name text PRIMARY KEY, definition jsonb "
    "NOT NULL)",
)


def pg_type(column: Any) -> str:
    """The PostgreSQL type a MySQL/MariaDB column becomes (docs/targets.md)."""
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


def connect(url: str, password: str, tls: TlsSettings, **kwargs: Any) -> psycopg.Connection[Any]:
    """A session on the target `url` with TLS as `tls` says (its libpq parameters override
    the URL's); TLS failures are TlsError (tls.py)."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    server = f"PostgreSQL at {host}:{parts.port or 5432}"
    conn: psycopg.Connection[Any] = tls_settings.open_libpq(
        psycopg.connect, tls, server, host, url, password=password or None, **kwargs
    )
    return conn


def checkpoints(
    url: str, password: str = "", tls: TlsSettings = tls_settings.DEFAULT
) -> dict[str, dict[str, object]]:
    """Every origin's checkpoint on the PostgreSQL target, as HELLO carries them."""
    try:
        with connect(url, password, tls, connect_timeout=10) as conn:
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
            f"the PostgreSQL target {_safe(url)} cannot be read: {exc}",
            "is the server up, and are target.url and its password right?",
        ) from exc


def _safe(url: str) -> str:
    """The URL without user, password and options, for messages."""
    return url.split("@")[-1].split("?")[0]


COPY_ROWS = 500  # a batch at least this long goes through COPY (catch-up)
_DATE_TYPES = ("date", "timestamp without time zone", "timestamp with time zone")
_EPOCHS = {
    "date": dt.date(1970, 1, 1),
    "timestamp without time zone": dt.datetime(1970, 1, 1),
    "timestamp with time zone": dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
}


@dataclass
class _Table:
    name: str
    columns: dict[str, str]  # name → PostgreSQL data_type
    key: tuple[str, ...]
    set_order: dict[str, tuple[str, ...]]  # SET column → member order (from the definition)


class PostgresStore:
    def __init__(
        self, url: str, origin: str, create_tables: bool = False, password: str = "",
        epoch: str | None = None, tls: TlsSettings = tls_settings.DEFAULT,
        zero_dates: str = "error",
    ) -> None:  # fmt: skip
        self.url, self.origin, self.create_tables, self.epoch = url, origin, create_tables, epoch
        self.password, self.tls = password, tls
        self.zero_dates = zero_dates  # config.ZERO_DATE_MODES
        self._conn: psycopg.Connection[Any] | None = None
        self._tables: dict[str, _Table] = {}
        self._definitions: dict[str, TableDef] = {}
        self._checkpoint: Position | None = None
        self._known = False
        self._parts = HeldParts()

    # -- the store protocol -------------------------------------------------------------------
    def checkpoint(self) -> Position | None:
        self.abort_stream()
        conn = self._connection()
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT position FROM binlogsync.checkpoint WHERE origin = %s",
                            (self.origin,))  # fmt: skip
                row = cur.fetchone()
        except psycopg.Error as exc:
            raise self._error(exc, "reading the checkpoint") from exc
        self._checkpoint = None if row is None else Position.from_json(row[0])
        self._known = True
        return self._checkpoint

    def apply(
        self, transactions: Sequence[Transaction], upto: Position | None = None
    ) -> Position | None:
        self.abort_stream()
        return self._write(transactions, upto)

    def apply_part(self, part: Part, end: Position) -> Position | None:
        # Held until the last part, then applied whole in one target transaction.
        whole = self._parts.add(part, end)
        return None if whole is None else self._write([whole], None)

    def abort_stream(self) -> None:
        self._parts.drop()

    def repair(
        self, transaction: Transaction, snapshot: Position, seed: bool = False, reset: bool = False
    ) -> Position:
        new = repair_checkpoint(self.origin, self.checkpoint(), snapshot, seed, reset)
        self._write([transaction], None, force=new)
        return new

    def close(self) -> None:
        self.abort_stream()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- the connection -----------------------------------------------------------------------
    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            try:
                conn = connect(self.url, self.password, self.tls, connect_timeout=10)
                conn.execute("SET TIME ZONE 'UTC'")
                conn.commit()
                with conn.transaction():
                    for statement in SETUP:
                        conn.execute(statement)
            except psycopg.Error as exc:
                raise self._error(exc, "connecting") from exc
            self._conn, self._tables = conn, {}
        return self._conn

    def _error(self, exc: psycopg.Error, doing: str) -> Exception:
        self._forget()
        if isinstance(exc, psycopg.OperationalError):
            return UnreachableError(
                f"the PostgreSQL target {self._safe_url()} failed while {doing}: {exc}",
                "is the server up, and are target.url and its password right?",
            )
        return ApplyError(f"PostgreSQL refused {doing}: {exc}".strip())

    def _safe_url(self) -> str:
        return _safe(self.url)

    def _forget(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
        self._conn, self._known = None, False

    # -- writing ------------------------------------------------------------------------------
    def _write(
        self,
        transactions: Sequence[Transaction],
        upto: Position | None,
        force: Position | None = None,
    ) -> Position | None:
        if not self._known:
            self.checkpoint()
        base = self._checkpoint
        planned = plan_group(self.origin, base, transactions, upto, force)
        if planned is None:
            return base
        fresh, new = planned
        conn = self._connection()
        doing = "applying a group"
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT position FROM binlogsync.checkpoint WHERE origin = %s "
                            "FOR UPDATE", (self.origin,))  # fmt: skip
                row = cur.fetchone()
                now = None if row is None else Position.from_json(row[0])
                if now != base:
                    raise ApplyError(
                        f"{self.origin}'s checkpoint on the PostgreSQL target moved from {base} "
                        f"to {now} while this agent applied (another agent for the same target?)",
                        "run one target agent per PostgreSQL database",
                    )
                # One run of batches over the whole group: runs of the same kind on the same
                # table span transactions (the order of every change is kept).
                if fresh:
                    doing = f"applying the transactions {fresh[0].position} … {fresh[-1].position}"
                self._apply_changes(cur, [c for tx in fresh for c in tx.changes])
                cur.execute(
                    "INSERT INTO binlogsync.checkpoint (origin, position, epoch, applied) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (origin) DO UPDATE SET "
                    "position = EXCLUDED.position, epoch = EXCLUDED.epoch, "
                    "applied = binlogsync.checkpoint.applied + EXCLUDED.applied, updated_at = now()",
                    (self.origin, json.dumps(new.to_json()), self.epoch, len(fresh)),
                )
        except psycopg.Error as exc:
            self._definitions.clear()
            raise self._error(exc, doing) from exc
        except BaseException:
            self._definitions.clear()
            self._tables.clear()
            raise
        self._checkpoint = new
        return new

    def _apply_changes(self, cur: psycopg.Cursor[Any], changes: Sequence[Change]) -> None:
        batch: list[Sequence[Any]] = []
        current: tuple[str, str, str, tuple[str, ...]] | None = None

        def flush() -> None:
            if current is not None and batch:
                kind, schema, table, columns = current
                self._run(cur, kind, schema, table, columns, batch)
            batch.clear()

        for change in changes:
            if change.kind == "ddl":
                flush()
                current = None
                self._ddl(cur, change)
                continue
            if change.kind == "truncate":
                flush()
                current = None
                self._table(cur, change.schema, change.table)
                cur.execute(
                    sql.SQL("TRUNCATE {}").format(sql.Identifier(change.schema, change.table))
                )
                continue
            table = self._table(cur, change.schema, change.table)
            for i in range(max(len(change.before), len(change.after))):
                before = change.before[i] if change.before else None
                after = change.after[i] if change.after else None
                if change.kind == "update" and before is not None and after is not None:
                    old = self._key(table, change.columns, before)
                    if old != self._key(table, change.columns, after):
                        item: tuple[str, str, str, tuple[str, ...]] = (
                            "delete",
                            change.schema,
                            change.table,
                            change.columns,
                        )
                        if current != item:
                            flush()
                            current = item
                        batch.append(before)
                kind = "delete" if change.kind == "delete" else "upsert"
                item = (kind, change.schema, change.table, change.columns)
                if current != item:
                    flush()
                    current = item
                batch.append(before if kind == "delete" else after)  # type: ignore[arg-type]
        flush()

    def _key(self, table: _Table, columns: Sequence[str], row: Sequence[Any]) -> tuple[Any, ...]:
        values = dict(zip(columns, row, strict=True))
        return tuple(values[k] for k in table.key)

    def _run(
        self, cur: psycopg.Cursor[Any], kind: str, schema: str, name: str,
        columns: tuple[str, ...], rows: list[Sequence[Any]],
    ) -> None:  # fmt: skip
        table = self._table(cur, schema, name)
        missing = [c for c in columns if c not in table.columns]
        if missing:
            raise SchemaMismatchError(
                f"the PostgreSQL table {schema}.{name} has no column {missing[0]}",
                f"add it (ALTER TABLE {schema}.{name} ADD COLUMN …), or drop the table and set "
                "create_tables = true so it is made from the origin's definition",
            )
        ident = sql.Identifier(schema, name)
        if kind == "delete":
            where = sql.SQL(" AND ").join(
                sql.SQL("{} = %s").format(sql.Identifier(k)) for k in table.key
            )
            query = sql.SQL("DELETE FROM {} WHERE {}").format(ident, where)
            keyed = [self._adapt(table, columns, row, only=table.key) for row in rows]
            cur.executemany(query, keyed)
            return
        if len(rows) >= COPY_ROWS:
            self._copy_upsert(cur, table, schema, name, columns, rows)
            return
        others = [c for c in columns if c not in table.key]
        update = (
            sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others)
            if others else sql.SQL("DO NOTHING")
        )  # fmt: skip
        query = (
            sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) ").format(
                ident,
                sql.SQL(", ").join(map(sql.Identifier, columns)),
                sql.SQL(", ").join(sql.Placeholder() * len(columns)),
                sql.SQL(", ").join(map(sql.Identifier, table.key)),
            )
            + update
        )
        cur.executemany(query, [self._adapt(table, columns, row) for row in rows])

    def _copy_upsert(
        self, cur: psycopg.Cursor[Any], table: _Table, schema: str, name: str,
        columns: tuple[str, ...], rows: list[Sequence[Any]],
    ) -> None:  # fmt: skip
        """A large batch (catch-up): COPY into a temporary table shaped like the target, then
        one INSERT … SELECT … ON CONFLICT. Rows of one batch have distinct keys only if the
        batch is deduplicated first: the last image of each key wins, as in order."""
        latest: dict[tuple[Any, ...], Sequence[Any]] = {}
        for row in rows:
            latest[self._key(table, columns, row)] = row
        stage = sql.Identifier(f"bls_stage_{name}"[:63])
        cur.execute(sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS) "
                            "ON COMMIT DELETE ROWS").format(stage, sql.Identifier(schema, name)))  # fmt: skip
        cols = sql.SQL(", ").join(map(sql.Identifier, columns))
        with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(stage, cols)) as copy:
            for row in latest.values():
                copy.write_row(self._adapt(table, columns, row))
        others = [c for c in columns if c not in table.key]
        update = (
            sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others)
            if others else sql.SQL("DO NOTHING")
        )  # fmt: skip
        cur.execute(
            sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) ").format(
                sql.Identifier(schema, name), cols, cols, stage,
                sql.SQL(", ").join(map(sql.Identifier, table.key)),
            ) + update
        )  # fmt: skip
        cur.execute(sql.SQL("TRUNCATE {}").format(stage))

    def _adapt(
        self, table: _Table, columns: Sequence[str], row: Sequence[Any],
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

    def _zero_date(self, table: _Table, column: str, kind: str, value: ZeroDate | str) -> Any:
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

    # -- tables -------------------------------------------------------------------------------
    def _table(self, cur: psycopg.Cursor[Any], schema: str, name: str) -> _Table:
        full = f"{schema}.{name}"
        found = self._tables.get(full)
        if found is not None:
            return found
        cur.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE "
            "table_schema = %s AND table_name = %s ORDER BY ordinal_position", (schema, name),
        )  # fmt: skip
        columns = {c: t for c, t in cur.fetchall()}
        if not columns:
            definition = self._definition(cur, full)
            if definition is None or not self.create_tables:
                raise MissingTableError(
                    f"the PostgreSQL target has no table {full}",
                    "create it, or set create_tables = true and seed the table (the seed "
                    "brings its definition)" if definition is None else
                    "create it, or set create_tables = true",
                )  # fmt: skip
            self._create(cur, definition)
            return self._table(cur, schema, name)
        cur.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
            "ORDER BY array_position(i.indkey, a.attnum)",
            (sql.Identifier(schema, name).as_string(cur),),
        )
        key = tuple(r[0] for r in cur.fetchall())
        if not key:
            raise SchemaMismatchError(
                f"the PostgreSQL table {full} has no primary key, so rows cannot be applied by key",
                f"add the origin's primary key to {full}",
            )
        definition = self._definition(cur, full)
        order = (
            {c.name: c.values for c in definition.columns if c.type == "set"} if definition else {}
        )
        found = self._tables[full] = _Table(full, columns, key, order)
        return found

    def _definition(self, cur: psycopg.Cursor[Any], full: str) -> TableDef | None:
        if full not in self._definitions:
            cur.execute("SELECT definition FROM binlogsync.tables WHERE name = %s", (full,))
            row = cur.fetchone()
            if row is None:
                return None
            self._definitions[full] = TableDef.from_wire(row[0])
        return self._definitions[full]

    def _ddl(self, cur: psycopg.Cursor[Any], change: Change) -> None:
        if change.definition is None or not change.table:
            return
        full = f"{change.schema}.{change.table}"
        definition = TableDef.from_wire(change.definition)
        self._definitions[full] = definition
        self._tables.pop(full, None)
        cur.execute(
            "INSERT INTO binlogsync.tables (name, definition) VALUES (%s, %s) ON CONFLICT (name) "
            "DO UPDATE SET definition = EXCLUDED.definition", (full, json.dumps(change.definition)),
        )  # fmt: skip

    def _create(self, cur: psycopg.Cursor[Any], definition: TableDef) -> None:
        if definition.unsupported:
            raise SchemaMismatchError(
                f"{definition.schema}.{definition.table} cannot be created on PostgreSQL: "
                f"{definition.unsupported}"
            )
        cur.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(definition.schema))
        )
        parts = [
            sql.SQL("{} {}{}").format(
                sql.Identifier(c.name),
                sql.SQL(pg_type(c)),  # from the closed list above
                sql.SQL("") if c.nullable else sql.SQL(" NOT NULL"),
            )
            for c in definition.columns
        ]
        parts.append(sql.SQL("PRIMARY KEY ({})").format(
            sql.SQL(", ").join(map(sql.Identifier, definition.primary_key))))  # fmt: skip
        cur.execute(sql.SQL("CREATE TABLE {} ({})").format(
            sql.Identifier(definition.schema, definition.table), sql.SQL(", ").join(parts)))  # fmt: skip
