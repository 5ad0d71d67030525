"""The Redis target (`[target] kind = "redis"`): each row a hash, exactly once, surviving
kill -9.

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

Exactly once: every group of transactions is one MULTI/EXEC that also writes the checkpoint
(`binlogsync:checkpoint`, field ORIGIN), WATCHing it, so a replay after a crash is skipped
exactly and a concurrent writer of the same checkpoint is refused. A transaction in parts is
queued whole and executed with its last part.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import redis

from .. import tls as tls_settings
from ..errors import ApplyError, MissingTableError, UnreachableError
from ..model import Change, Part, Transaction
from ..position import Position
from ..tabledef import TableDef
from ..tls import TlsSettings
from ..zerodate import ZeroDate
from .auditlog import _time
from .store import HeldParts, plan_group, repair_checkpoint

CHECKPOINT = "binlogsync:checkpoint"
TABLES = "binlogsync:table:"


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
        return _time(value)
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


class RedisStore:
    def __init__(
        self,
        url: str,
        origin: str,
        key_pattern: str = "{schema}:{table}:{key}",
        ttl: int = 0,
        password: str = "",
        epoch: str | None = None,
        tls: TlsSettings = tls_settings.DEFAULT,
    ) -> None:
        self.origin, self.epoch = origin, epoch
        self.url, self.key_pattern, self.ttl, self.tls = url, key_pattern, ttl, tls
        self.client = client(url, password, tls, socket_timeout=30)
        self._answered = False  # no command has succeeded yet (see _tls_failure)
        self.tables: dict[str, TableDef] = {}
        self._checkpoint: Position | None = None
        self._known = False
        self._parts = HeldParts()

    # -- the store protocol -------------------------------------------------------------------
    def checkpoint(self) -> Position | None:
        self.abort_stream()
        raw = self._call(
            lambda: self.client.hget(CHECKPOINT, self.origin), "reading the checkpoint"
        )
        self._checkpoint = None if raw is None else Position.from_json(json.loads(raw)["position"])
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
        self.client.close()

    # -- writing ------------------------------------------------------------------------------
    def _call(self, what: Any, doing: str) -> Any:
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
        changes = [c for tx in fresh for c in tx.changes]

        def run(pipe: redis.client.Pipeline) -> None:
            raw = pipe.hget(CHECKPOINT, self.origin)
            now = None if raw is None else Position.from_json(json.loads(raw)["position"])
            if now != base:
                raise ApplyError(
                    f"{self.origin}'s checkpoint on the Redis target moved from {base} to {now} "
                    "while this agent applied (another agent for the same target?)",
                    "run one target agent per Redis database",
                )
            # Reads (definitions, a truncated table's keys) happen before MULTI.
            plan = self._plan(pipe, changes)
            pipe.multi()
            for change, definition, keys in plan:
                self._queue(pipe, change, definition, keys)
            record = {"position": new.to_json(), "epoch": self.epoch}
            pipe.hset(CHECKPOINT, self.origin, json.dumps(record))

        try:
            self._call(lambda: self.client.transaction(run, CHECKPOINT), "applying a group")
        except BaseException:
            self.tables.clear()  # definitions learnt from a group that did not commit
            self._known = False
            raise
        self._checkpoint = new
        return new

    def _plan(
        self, pipe: Any, changes: Sequence[Change]
    ) -> list[tuple[Change, TableDef | None, list[bytes | str]]]:
        """Each change with the definition it is applied under (DDL in the group counts from
        where it stands) and, for a truncate, the keys to delete: those in Redis now and
        those the group wrote before it."""
        out: list[tuple[Change, TableDef | None, list[bytes | str]]] = []
        written: dict[str, set[bytes | str]] = {}
        for change in changes:
            name = f"{change.schema}.{change.table}"
            if change.kind == "ddl":
                if change.definition is not None and change.table:
                    self.tables[name] = TableDef.from_wire(change.definition)
                out.append((change, None, []))
                continue
            definition = self._definition(change.schema, change.table)
            keys: list[bytes | str] = []
            if change.kind == "truncate":
                pattern = self.key_pattern.format(
                    schema=definition.schema, table=definition.table, key="*"
                )
                keys = [*pipe.scan_iter(match=pattern, count=1000), *written.pop(name, ())]
            else:
                mine = written.setdefault(name, set())
                for row in change.after:
                    mine.add(self._key(definition, change.columns, row))
            out.append((change, definition, keys))
        return out

    def _definition(self, schema: str, table: str) -> TableDef:
        name = f"{schema}.{table}"
        found = self.tables.get(name)
        if found is None:
            raw = self._call(lambda: self.client.get(TABLES + name), "reading a table definition")
            if raw is None:
                raise MissingTableError(
                    f"the Redis target knows no definition of {name}, so it cannot make its "
                    "rows' keys (row events do not carry the primary key)",
                    f"seed the table into this target: binlogsync seed --tables {name} …",
                )
            found = self.tables[name] = TableDef.from_wire(json.loads(raw))
        return found

    def _key(self, definition: TableDef, columns: Sequence[str], row: Sequence[Any]) -> str:
        values = dict(zip(columns, row, strict=True))
        key = ":".join(str(text(values[k]) if not isinstance(values[k], bytes)
                           else values[k].hex()) for k in definition.primary_key)  # fmt: skip
        return self.key_pattern.format(schema=definition.schema, table=definition.table, key=key)

    def _queue(
        self, pipe: Any, change: Change, definition: TableDef | None, keys: list[bytes | str]
    ) -> None:
        if change.kind == "ddl":
            if change.definition is not None and change.table:
                pipe.set(f"{TABLES}{change.schema}.{change.table}", json.dumps(change.definition))
            return
        assert definition is not None
        members = {c.name: c.values for c in definition.columns if c.type == "set"}
        if change.kind == "truncate":
            if keys:
                pipe.delete(*keys)
            return
        for i in range(max(len(change.before), len(change.after))):
            old = self._key(definition, change.columns, change.before[i]) if change.before else None
            if change.kind == "delete":
                pipe.delete(old)
                continue
            row = change.after[i]
            new = self._key(definition, change.columns, row)
            if old is not None and old != new:
                pipe.delete(old)  # the key changed: the row moves
            fields = {
                c: text(_in_order(v, members.get(c)))
                for c, v in zip(change.columns, row, strict=True)
                if v is not None
            }
            pipe.delete(new)
            pipe.hset(new, mapping=fields)
            if self.ttl:
                pipe.expire(new, self.ttl)
