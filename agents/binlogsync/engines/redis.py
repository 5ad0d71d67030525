"""The Redis engine adapter (`[target] kind = "redis"`; RedisStore in apply/redisstore.py is
the core over it): each row a hash, exactly once, surviving kill -9.

A row of `schema.table` is the hash at `key_pattern` (default `{schema}:{table}:{key}`, where
`{key}` is the primary key's values joined by `:`), one field per non-NULL column (a NULL
column is an absent field). Values are strings as Redis holds them: integers and decimals in
their digits, floats by `repr`, bytes as they are (Redis is binary-safe), dates and times in
ISO 8601 (`time` as `[-]HH:MM:SS.ffffff`; a zero, partial or invalid date as the server's
text, `0000-00-00 00:00:00`, `2024-00-10`), sets joined by `,` in the definition's order.
Inserts and updates write the whole row image (the hash is replaced), deletes delete the key,
an update that changes the key moves it, a truncate deletes the table's keys; `ttl` > 0 gives
every written key that expiry. DDL changes nothing but the stored definition.

A row's key needs the table's primary key, which row events do not carry: it comes from the
table's definition, which a seed (`binlogsync seed`, its first chunk per table) and every DDL
bring, and which the target keeps in Redis (`binlogsync:table:SCHEMA.TABLE`). A change to a
table with no known definition stops apply with a message that says to seed that table.

Exactly once (the core, apply/core.py, decides what is new, reduces groups, names a failing
transaction): every group of transactions is one MULTI/EXEC that also writes the checkpoint
(`binlogsync:checkpoint`, field ORIGIN), WATCHing it, so a replay after a crash is skipped
exactly and a concurrent writer of the same checkpoint is refused. Each change is prepared as
its transaction is added, so a value Redis cannot hold, or a table without a definition, names
its transaction. A transaction in parts is held and executed whole with its last part.
`binlogsync skip` appends {"origin", "position", "reason", "skipped_at"} to the list
`binlogsync:skipped` in the MULTI/EXEC that moves the checkpoint.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import urlsplit

import redis

from .. import tls as tls_settings
from ..errors import ApplyError, MissingTableError, UnreachableError
from ..model import Change, time_text
from ..position import Position
from ..tabledef import TableDef
from ..tls import TlsSettings
from ..zerodate import ZeroDate

CHECKPOINT = "binlogsync:checkpoint"
TABLES = "binlogsync:table:"
SKIPPED = "binlogsync:skipped"  # a list of JSON records, oldest first


def text(value: Any) -> bytes | str:
    if isinstance(value, bytes | str):
        return value
    if isinstance(value, bool | int | Decimal):
        return str(int(value)) if isinstance(value, bool) else str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return time_text(value)
    if isinstance(value, set | frozenset):
        return ",".join(sorted(value))
    if isinstance(value, ZeroDate):
        return value.text
    raise ApplyError(f"a Redis target cannot store a {type(value).__name__} value")


def _in_order(value: Any, members: Sequence[str] | None) -> Any:
    """A SET's members in the definition's order, as MySQL writes them ("b,a" if so defined)."""
    if members and isinstance(value, set | frozenset):
        return ",".join(m for m in members if m in value)
    return value


def client(url: str, password: str, tls: TlsSettings, **kwargs: Any) -> redis.Redis:
    """A client of the target `url` (`rediss://` for TLS, with `tls`'s CA and certificate:
    config.py took our options out of the URL). It connects at its first command."""
    return redis.Redis.from_url(
        url, password=password or None, **tls_settings.redis_args(tls, url), **kwargs
    )


def _tls_failure(
    exc: redis.RedisError, url: str, tls: TlsSettings, first: bool
) -> Exception | None:
    """The TlsError a failed command stands for, if any. redis-py connects at a command, and
    a server that refuses our client certificate says so only at the first write after the
    handshake: every failure of a client's `first` command is read as TLS may explain it;
    later, only a failed connect ("Error … connecting to host:port"), not a lost connection."""
    if not first and "connecting to" not in str(exc):
        return None
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    return tls_settings.failure(exc, tls, f"Redis at {host}:{parts.port or 6379}", host)


def _unreachable_fix(url: str) -> str:
    if url.startswith("rediss://"):  # a cleartext server never answers the TLS hello
        return (
            "is redis-server running, is target.url right, and does the server speak TLS on "
            "that port (--tls-port)?"
        )
    return "is redis-server running, and is target.url right?"


def checkpoints(
    url: str, password: str = "", tls: TlsSettings = tls_settings.DEFAULT, timeout: float = 10
) -> dict[str, dict[str, object]]:
    """Every origin's checkpoint on the Redis target, as HELLO carries them."""
    try:
        with client(url, password, tls, socket_timeout=timeout) as connection:
            raw = connection.hgetall(CHECKPOINT)
    except redis.RedisError as exc:
        failed = _tls_failure(exc, url, tls, first=True)
        if failed is not None:
            raise failed from exc
        raise UnreachableError(
            f"the Redis target {url} cannot be read: {exc}", _unreachable_fix(url)
        ) from exc
    out: dict[str, dict[str, object]] = {}
    for origin, value in raw.items():
        data = json.loads(value)
        position = Position.from_json(data["position"])
        out[origin.decode()] = {**position.to_json(), "epoch": data.get("epoch")}
    return out


@dataclass(frozen=True)
class _Plan:
    """How the reducer keys this table's rows (engines/base.KeyPlan): by the definition's key."""

    key: tuple[int, ...]
    unique_keys: bool = False


# One write prepared when its transaction is added (so a value Redis cannot hold names its
# transaction): ("delete", key), ("hset", key, fields), or ("truncate", table pattern).
_Op = tuple[Any, ...]


class RedisEngine:
    """The Redis engine adapter (module doc): the core (apply/core.py) drives it."""

    kind = "redis"
    streams = False  # a transaction in parts is held and applied whole

    def __init__(
        self,
        url: str,
        origin: str,
        key_pattern: str = "{schema}:{table}:{key}",
        ttl: int = 0,
        password: str = "",
        tls: TlsSettings = tls_settings.DEFAULT,
    ) -> None:
        self.origin = origin
        self.url, self.key_pattern, self.ttl, self.tls = url, key_pattern, ttl, tls
        self.client = client(url, password, tls, socket_timeout=30)
        self._answered = False  # no command has succeeded yet (see _tls_failure)
        self.tables: dict[str, TableDef] = {}

    # -- the engine face ----------------------------------------------------------------------
    def checkpoint(self) -> Position | None:
        raw = self.call(lambda: self.client.hget(CHECKPOINT, self.origin), "reading the checkpoint")
        return None if raw is None else Position.from_json(json.loads(raw)["position"])

    def begin(self, base: Position | None, known: bool) -> RedisSession:
        return RedisSession(self, base if known else self.checkpoint())

    def follow_schema(self, change: Change, position: Position, mode: str) -> list[str]:
        """Redis has no tables to change: the definition is what keys the rows; kept."""
        self.note_ddl(position, change)
        return ["definition kept"] if change.definition is not None else []

    def note_ddl(self, position: Position, change: Change) -> None:
        if change.definition is None or not change.table:
            return
        name = f"{change.schema}.{change.table}"
        self.call(
            lambda: self.client.set(TABLES + name, json.dumps(change.definition)),
            "keeping a table definition",
        )
        self.tables[name] = TableDef.from_wire(change.definition)

    def forget(self) -> None:
        self.tables.clear()

    def replayable(self, error: BaseException) -> bool:
        return not isinstance(error, UnreachableError)

    def close(self) -> None:
        self.client.close()

    # -- Redis --------------------------------------------------------------------------------
    def call(self, what: Any, doing: str) -> Any:
        try:
            result = what()
            self._answered = True
            return result
        except redis.ConnectionError as exc:
            failed = _tls_failure(exc, self.url, self.tls, first=not self._answered)
            if failed is not None:
                raise failed from exc
            raise UnreachableError(
                f"the Redis target {self.url} cannot be reached while {doing}: {exc}",
                _unreachable_fix(self.url),
            ) from exc
        except redis.RedisError as exc:
            raise ApplyError(f"Redis refused {doing}: {exc}") from exc

    def definition(self, schema: str, table: str, overlay: dict[str, TableDef]) -> TableDef:
        name = f"{schema}.{table}"
        found = overlay.get(name) or self.tables.get(name)
        if found is None:
            raw = self.call(lambda: self.client.get(TABLES + name), "reading a table definition")
            if raw is None:
                raise MissingTableError(
                    f"the Redis target knows no definition of {name}, so it cannot make its "
                    "rows' keys (row events do not carry the primary key)",
                    f"seed the table into this target: binlogsync seed --tables {name} …",
                )
            found = self.tables[name] = TableDef.from_wire(json.loads(raw))
        return found

    def key(self, definition: TableDef, columns: Sequence[str], row: Sequence[Any]) -> str:
        values = dict(zip(columns, row, strict=True))
        key = ":".join(str(text(values[k]) if not isinstance(values[k], bytes)
                           else values[k].hex()) for k in definition.primary_key)  # fmt: skip
        return self.key_pattern.format(schema=definition.schema, table=definition.table, key=key)


class RedisSession:
    """One MULTI/EXEC: the changes are prepared as they are added, run with the checkpoint
    (WATCHed, so a concurrent writer of it is refused) at `finish`."""

    def __init__(self, engine: RedisEngine, base: Position | None) -> None:
        self.engine, self.base = engine, base
        self.span_from: Position | None = None
        self.ops: list[_Op] = []
        self.new: Position | None = None
        self.epoch: str | None = None
        self.defined: dict[str, TableDef] = {}  # definitions of this group's DDL
        self.kept: dict[str, Any] = {}  # their wire forms, written with the group
        self.skips: list[str] = []  # records of explicit skips, written with the group

    def set_checkpoint(self, new: Position, count: int, epoch: str | None) -> None:
        self.new, self.epoch = new, epoch

    def plan(self, change: Change, position: Position) -> _Plan | None:
        definition = self.engine.definition(change.schema, change.table, self.defined)
        if any(k not in change.columns for k in definition.primary_key):
            return None
        return _Plan(tuple(change.columns.index(k) for k in definition.primary_key))

    def record_skip(self, position: Position, reason: str) -> None:
        record = {"origin": self.engine.origin, "position": position.to_json(), "reason": reason,
                  "skipped_at": time.time()}  # fmt: skip
        self.skips.append(json.dumps(record))

    def add(
        self,
        changes: Sequence[Change],
        position: Position,
        timestamp: float | None = None,
        streamed: bool = False,
    ) -> None:
        try:
            for change in changes:
                self._prepare(change)
        except ApplyError as exc:
            if exc.position is None and (self.span_from is None or self.span_from == position):
                exc.position = position
            raise

    def flush(self) -> None:
        """Nothing is merged across transactions here."""

    def finish(self, commit: bool) -> None:
        if not commit or self.new is None:
            return
        engine, base = self.engine, self.base
        record = {"position": self.new.to_json(), "epoch": self.epoch}

        def run(pipe: redis.client.Pipeline) -> None:
            raw = pipe.hget(CHECKPOINT, engine.origin)
            stored = None if raw is None else json.loads(raw)
            now = None if stored is None else Position.from_json(stored["position"])
            if record["epoch"] is None and stored is not None:
                record["epoch"] = stored.get("epoch")  # a skip keeps the hub log's epoch
            if now != base:
                raise ApplyError(
                    f"{engine.origin}'s checkpoint on the Redis target moved from {base} to {now} "
                    "while this agent applied (another agent for the same target?)",
                    "run one target agent per Redis database",
                )
            # Reads (a truncated table's keys) happen before MULTI.
            ops = self._resolve(pipe)
            pipe.multi()
            for op in ops:
                if op[0] == "delete":
                    pipe.delete(*op[1:])
                elif op[0] == "hset":
                    pipe.delete(op[1])
                    pipe.hset(op[1], mapping=op[2])
                    if engine.ttl:
                        pipe.expire(op[1], engine.ttl)
            for name, wire in self.kept.items():
                pipe.set(TABLES + name, json.dumps(wire))
            if self.skips:
                pipe.rpush(SKIPPED, *self.skips)
            pipe.hset(CHECKPOINT, engine.origin, json.dumps(record))

        engine.call(lambda: engine.client.transaction(run, CHECKPOINT), "applying a group")
        engine.tables.update(self.defined)

    def abort(self) -> None:
        self.ops, self.defined, self.kept = [], {}, {}

    def _prepare(self, change: Change) -> None:
        engine = self.engine
        name = f"{change.schema}.{change.table}"
        if change.kind == "ddl":
            if change.definition is not None and change.table:
                self.defined[name] = TableDef.from_wire(change.definition)
                self.kept[name] = change.definition
            return
        definition = engine.definition(change.schema, change.table, self.defined)
        if change.kind == "truncate":
            pattern = engine.key_pattern.format(
                schema=definition.schema, table=definition.table, key="*"
            )
            self.ops.append(("truncate", pattern))
            return
        members = {c.name: c.values for c in definition.columns if c.type == "set"}
        for i in range(max(len(change.before), len(change.after))):
            old = (
                engine.key(definition, change.columns, change.before[i]) if change.before else None
            )
            if change.kind == "delete":
                self.ops.append(("delete", old))
                continue
            row = change.after[i]
            new = engine.key(definition, change.columns, row)
            if old is not None and old != new:
                self.ops.append(("delete", old))  # the key changed: the row moves
            fields = {
                c: text(_in_order(v, members.get(c)))
                for c, v in zip(change.columns, row, strict=True)
                if v is not None
            }
            self.ops.append(("hset", new, fields))

    def _resolve(self, pipe: Any) -> list[_Op]:
        """The ops with each truncate as the deletes of its table's keys: those in Redis now
        (before MULTI) and those the group wrote before it."""
        out: list[_Op] = []
        for op in self.ops:
            if op[0] != "truncate":
                out.append(op)
                continue
            pattern = op[1]
            written = [o[1] for o in out if o[0] == "hset" and fnmatchcase(str(o[1]), pattern)]
            keys = [*pipe.scan_iter(match=pattern, count=1000), *written]
            if keys:
                out.append(("delete", *keys))
        return out
