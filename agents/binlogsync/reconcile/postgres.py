"""A PostgreSQL target in reconciliation: its sessions, its catalog, its checkpoint and state.

Sessions are psycopg connections in autocommit between explicit transactions, with the time
zone UTC (timestamptz values read as the source's TIMESTAMPs, which its sessions read in
+00:00). A snapshot is `BEGIN ISOLATION LEVEL REPEATABLE READ`: PostgreSQL takes it at the
first query, which runs after the wait for the checkpoint, as on MariaDB.

The pin is the `binlogsync.checkpoint` row the PostgreSQL adapter (engines/postgresql.py)
writes in the same transaction as the rows; a PostgreSQL target is never a native replica, so
there is no GTID pin. The state of `--since-last` is `binlogsync.reconcile_verified`, as on MariaDB.

Sessions open through engines/pgedge.py (TLS, the driver), as the adapter's do. psycopg is
the `postgresql` extra: it is imported only when a PostgreSQL target is used, and its absence
is then a ConfigError that says what to install.

Key values read here are given the source's Python types (numeric(20,0) → int, timestamptz →
naive UTC), so keys read on either side match in one dictionary.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

from ..config import DatabaseSettings
from ..engines import pgedge
from ..engines.pgedge import errors as errors  # the dialect table names it here
from ..errors import PinError, UnreachableError
from ..position import Position
from .pinning import Pin
from .schema import Column, TableDef

SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ"
VERIFIED = "binlogsync.reconcile_verified"


def is_postgres(db: DatabaseSettings) -> bool:
    return db.kind == "postgresql"


def connect(db: DatabaseSettings, role: str, read_timeout: int = 3600) -> Any:
    database = getattr(db, "database", "postgres")
    try:
        conn = pgedge.connect(
            "",
            db.password,
            db.tls,
            host=db.host,
            port=db.port,
            user=db.user,
            dbname=database,
            connect_timeout=10,
            autocommit=True,
            application_name="binlogsync-reconcile",
            options=f"-c statement_timeout={int(read_timeout) * 1000}",
        )
    except errors() as exc:
        raise UnreachableError(
            f"reading the {role} database {db}: cannot connect ({str(exc).strip()})",
            "is the PostgreSQL server up, and are the URL, its database and the password right?",
        ) from exc
    conn.execute("SET TIME ZONE 'UTC'")
    return conn


def close(conn: Any) -> None:
    try:
        conn.close()
    except errors():
        pass


# -- the catalog --------------------------------------------------------------------------------
def describe(cur: Any, schema: str, table: str) -> TableDef | None:
    """The table's definition, its types as PostgreSQL names them (format_type); None when
    there is no such table."""
    cur.execute(
        "SELECT c.oid, c.relkind, greatest(c.reltuples, 0)::bigint FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
        (schema, table),
    )
    found = cur.fetchone()
    if found is None:
        return None
    oid, relkind, estimate = found
    cur.execute(
        "SELECT a.attname, format_type(a.atttypid, NULL), format_type(a.atttypid, a.atttypmod), "
        "NOT a.attnotnull, a.attgenerated <> '' FROM pg_attribute a WHERE a.attrelid = %s "
        "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (oid,),
    )
    columns, generated = [], []
    for name, data_type, column_type, nullable, is_generated in cur.fetchall():
        if is_generated:
            generated.append(name)
            continue
        columns.append(Column(name, data_type, column_type, nullable, None, "json" in data_type))
    cur.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisprimary "
        "ORDER BY array_position(i.indkey, a.attnum)",
        (oid,),
    )
    key = tuple(r[0] for r in cur.fetchall())
    if relkind not in ("r", "p"):
        key = ()  # a view: pair() then says it has no key
    return TableDef(schema, table, tuple(columns), key, int(estimate), tuple(generated))


def normalise_key(values: tuple[Any, ...], integer: tuple[bool, ...]) -> tuple[Any, ...]:
    """Key values as the source's driver gives them (module doc)."""
    out = []
    for value, is_integer in zip(values, integer, strict=True):
        if is_integer and isinstance(value, Decimal):
            value = int(value)
        elif isinstance(value, dt.datetime) and value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        out.append(value)
    return tuple(out)


# -- the pin ------------------------------------------------------------------------------------
def origins(conn: Any) -> list[str] | None:
    """Origins with a checkpoint here; None when this is no binlogsync target."""
    row = conn.execute("SELECT to_regclass('binlogsync.checkpoint')").fetchone()
    if row is None or row[0] is None:
        return None
    return sorted(r[0] for r in conn.execute("SELECT origin FROM binlogsync.checkpoint"))


def applied(conn: Any, origin: str) -> Position | None:
    row = conn.execute(
        "SELECT position FROM binlogsync.checkpoint WHERE origin = %s", (origin,)
    ).fetchone()
    return None if row is None else Position.from_json(row[0])


def detect(conn: Any, requested: str, origin: str | None, label: str) -> Pin:
    """The pin of a PostgreSQL target: its checkpoint, or none (a static copy)."""
    from .choices import PIN_MODES
    from .pinning import choose_origin

    if requested not in PIN_MODES:
        raise PinError(f"--pin must be one of {', '.join(PIN_MODES)}, not {requested!r}")
    if requested == "gtid":
        raise PinError(
            f"{label} is PostgreSQL, which is never a native replica: there is no GTID to wait for",
            "use --pin checkpoint (a binlogsync target) or --pin none (a static copy)",
        )
    if requested == "none":
        return Pin("none")
    found = origins(conn)
    if found is None or (not found and requested == "auto"):
        if requested == "checkpoint":
            raise PinError(
                f"{label} has no binlogsync.checkpoint table: it is not a binlogsync target",
                "use --pin none for a static copy",
            )
        return Pin("none")
    return Pin("checkpoint", choose_origin(found, origin, label))


# -- the state of --since-last ------------------------------------------------------------------
def read_verified(conn: Any, source_table: str, target_table: str) -> Position | None:
    try:
        row = conn.execute(
            f"SELECT position FROM {VERIFIED} WHERE source_table = %s AND target_table = %s",
            (source_table, target_table),
        ).fetchone()
    except errors():  # no such table yet (or no grant): a full run rebuilds it
        return None
    return None if row is None else Position.from_json(row[0])


def write_verified(
    conn: Any, source_table: str, target_table: str, position: Position | None
) -> None:
    with conn.transaction():
        conn.execute("CREATE SCHEMA IF NOT EXISTS binlogsync")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {VERIFIED} (source_table text NOT NULL, "
            "target_table text NOT NULL, position jsonb NOT NULL, verified_at timestamptz NOT "
            "NULL DEFAULT now(), PRIMARY KEY (source_table, target_table))"
        )
        if position is None:
            conn.execute(
                f"DELETE FROM {VERIFIED} WHERE source_table = %s AND target_table = %s",
                (source_table, target_table),
            )
        else:
            conn.execute(
                f"INSERT INTO {VERIFIED} (source_table, target_table, position) VALUES "
                "(%s, %s, %s) ON CONFLICT (source_table, target_table) DO UPDATE SET "
                "position = EXCLUDED.position, verified_at = now()",
                (source_table, target_table, json.dumps(position.to_json())),
            )
