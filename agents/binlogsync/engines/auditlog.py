"""The audit-log engine (`[target] kind = "auditlog"`): every change as one JSON line, exactly
once, in order, surviving kill -9. apply/auditlog.py is the core (apply/core.py) over it.

Layout under `path`, per origin:

    <origin>/audit-000001.jsonl      the lines, in files rotated at `rotate_bytes`
    <origin>/checkpoint.json         {"position", "file", "offset"}: what is in the files

A group of transactions is written, flushed and fsync'ed, and only then does the checkpoint
move (written to a temporary file, fsync'ed, renamed over, the folder fsync'ed). After a crash
the checkpoint is the truth: on open, the current file is cut back to its offset and any newer
file removed, so lines written after the last checkpoint are dropped and replayed by the hub
— no line is ever in the log twice, and none is missing.

One line per row change (an update's before and after together), a truncate or a DDL:

    {"origin": …, "position": "0-1-42 (binlog.000003:1234)", "gtid": "0-1-42",
     "commit_time": "2026-11-24T10:00:00.123456+00:00", "n": 0, "table": "shop.orders",
     "kind": "update", "before": {…}, "after": {…}, "types": {"amount": "decimal"}}

Values keep their exact types: JSON numbers for integers and floats, strings for text, and
for the rest a string whose type is named in `types`: `decimal` (every digit, as text),
`bytes` (base64), `datetime` / `date` (ISO 8601), `time` (`[-]HH:MM:SS.ffffff`, beyond 24 h
as MySQL allows), `set` (a JSON list), and `zero_date` / `zero_datetime` / `zero_timestamp`
for a date that is no calendar date (zero, partial or invalid), as the server's text, which an
ISO 8601 parser refuses: `"0000-00-00 00:00:00.000000"`, `"2024-00-10"` (zerodate.py). `n`
numbers the lines of one transaction. A transaction that arrives in parts (a large one) is
written part by part: its change lines carry `"commit_time": null`, and a closing
`{"kind": "commit", "commit_time": …}` line gives it once the last part is there.

A repair cannot rewind a log that is a record: repairs are refused. A seed may start an empty
log: its rows are written as `snapshot` lines at the seed's position. `binlogsync skip` writes a
`{"kind": "skip", "reason": …}` line at the skipped position, so the record says what it lacks.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from ..errors import ApplyError, BinlogsyncError, ConfigError
from ..model import Change, Transaction, time_text
from ..position import Position
from ..zerodate import ZeroDate
from .base import KeyPlan

FILE = re.compile(r"^audit-(\d{6})\.jsonl$")
CHECKPOINT = "checkpoint.json"


def encode(value: Any) -> tuple[Any, str | None]:
    """A value as JSON, and its type's name when JSON alone would lose it."""
    if value is None or isinstance(value, bool | int | float | str):
        return value, None
    if isinstance(value, Decimal):
        return str(value), "decimal"
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii"), "bytes"
    if isinstance(value, dt.datetime):
        return value.isoformat(), "datetime"
    if isinstance(value, dt.date):
        return value.isoformat(), "date"
    if isinstance(value, dt.timedelta):
        return time_text(value), "time"
    if isinstance(value, set | frozenset):
        return sorted(value), "set"
    if isinstance(value, ZeroDate):
        return value.text, f"zero_{value.kind}"
    raise ApplyError(f"the audit log cannot encode a {type(value).__name__} value")


def _row(columns: Sequence[str], row: Sequence[Any], types: dict[str, str]) -> dict[str, Any]:
    out = {}
    for column, value in zip(columns, row, strict=True):
        out[column], kind = encode(value)
        if kind:
            types[column] = kind
    return out


def _when(timestamp: float | None) -> str | None:
    return None if timestamp is None else dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat()


def lines(
    origin: str,
    tx: Transaction,
    kind_override: str | None = None,
    first: int = 0,
    commit_time: float | None = -1.0,
) -> list[str]:
    """The JSON lines of one transaction (or of one part of it: numbered from `first`, with
    `commit_time` None while the commit time is not known yet)."""
    head = {
        "origin": origin,
        "position": str(tx.position),
        "gtid": tx.position.gtid,
        "commit_time": _when(tx.timestamp if commit_time == -1.0 else commit_time),
    }
    out: list[str] = []
    for change in tx.changes:
        for item in _items(change, kind_override):
            out.append(json.dumps({**head, "n": first + len(out), **item}, ensure_ascii=False))
    return out


def _items(change: Change, kind_override: str | None) -> list[dict[str, Any]]:
    table = f"{change.schema}.{change.table}" if change.table else change.schema
    if change.kind == "ddl":
        return [{"table": table, "kind": "ddl", "statement": change.statement}]
    if change.kind == "truncate":
        return [{"table": table, "kind": "truncate"}]
    items = []
    count = max(len(change.before), len(change.after))
    for i in range(count):
        types: dict[str, str] = {}
        before = _row(change.columns, change.before[i], types) if change.before else None
        after = _row(change.columns, change.after[i], types) if change.after else None
        item = {"table": table, "kind": kind_override or change.kind, "before": before}
        item.update(after=after, types=types)
        items.append(item)
    return items


def checkpoints(path: Path) -> dict[str, dict[str, object]]:
    """Every origin's checkpoint in the audit log at `path`, as HELLO carries them."""
    found: dict[str, dict[str, object]] = {}
    for file in sorted(path.glob(f"*/{CHECKPOINT}")):
        try:
            data = json.loads(file.read_text())
            position = Position.from_json(data["position"])
        except (OSError, ValueError, KeyError, BinlogsyncError) as exc:
            raise ApplyError(f"the audit log checkpoint {file} cannot be read: {exc}") from exc
        found[file.parent.name] = {**position.to_json(), "epoch": data.get("epoch")}
    return found


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AuditLogEngine:
    """One origin's folder of the audit log: its files and its checkpoint (one writer)."""

    kind = "auditlog"
    streams = True  # a part's lines are written as it arrives, the checkpoint with the last

    def __init__(self, path: Path, origin: str, rotate_bytes: int):
        self.origin = origin
        self.rotate_bytes = rotate_bytes
        self.dir = path / origin
        self.snapshot = False  # write row changes as `snapshot` lines (a seed)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"target.path {path}: cannot make {self.dir}: {exc.strerror}",
                "give a folder the agent may write",
            ) from exc
        self._checkpoint, self._file, self._offset = self._recover()
        self._out: IO[str] | None = None
        self._pending = 0  # bytes written after the last checkpoint's offset, in this file
        self._dirty = False  # written or rotated since the last checkpoint

    # -- the engine face ----------------------------------------------------------------------
    def checkpoint(self) -> Position | None:
        return self._checkpoint

    def begin(self, base: Position | None, known: bool) -> AuditLogSession:
        return AuditLogSession(self, self._checkpoint)

    def follow_schema(self, change: Change, position: Position, mode: str) -> list[str]:
        return []  # the DDL is a line of the log; there are no tables to change

    def note_ddl(self, position: Position, change: Change) -> None:
        pass

    def forget(self) -> None:
        pass

    def replayable(self, error: BaseException) -> bool:
        return False  # never reduced: there is nothing to replay

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    # -- files --------------------------------------------------------------------------------
    def _name(self, number: int) -> str:
        return f"audit-{number:06d}.jsonl"

    def _recover(self) -> tuple[Position | None, str, int]:
        """The checkpoint, with the files cut back to it."""
        try:
            data = json.loads((self.dir / CHECKPOINT).read_text())
        except FileNotFoundError:
            data = None
        self._epoch = None if data is None else data.get("epoch")
        if data is None:
            position, name, offset = None, self._name(1), 0
        else:
            position = Position.from_json(data["position"])
            name, offset = str(data["file"]), int(data["offset"])
        number = int(FILE.match(name).group(1))  # type: ignore[union-attr]
        for other in self.dir.glob("audit-*.jsonl"):
            found = FILE.match(other.name)
            if found and int(found.group(1)) > number:
                other.unlink()  # begun after the last checkpoint
        current = self.dir / name
        with current.open("a") as handle:
            handle.truncate(offset)
            os.fsync(handle.fileno())
        return position, name, offset

    def _open(self) -> IO[str]:
        if self._out is None:
            self._out = (self.dir / self._file).open("a", encoding="utf-8")
        return self._out

    def emit(self, line: str) -> None:
        data = line + "\n"
        self._open().write(data)
        self._pending += len(data.encode("utf-8"))
        self._dirty = True

    def rotate_if_full(self) -> None:
        """Begin the next file once this one is past the size; checked before each
        transaction, so a transaction's lines stay in one file."""
        if self._offset + self._pending < self.rotate_bytes:
            return
        if self._out is not None:
            self._out.close()
            self._out = None
        number = int(FILE.match(self._file).group(1)) + 1  # type: ignore[union-attr]
        self._file, self._offset, self._pending = self._name(number), 0, 0
        self._dirty = True

    def commit(self, position: Position, epoch: str | None) -> None:
        """The lines on disk first, then the checkpoint that names them (replaced whole);
        epoch None keeps the one stored (a skip)."""
        epoch = self._epoch if epoch is None else epoch
        out = self._open()
        out.flush()
        os.fsync(out.fileno())
        offset = out.tell()
        tmp = self.dir / (CHECKPOINT + ".tmp")
        with tmp.open("w") as handle:
            json.dump(
                {"position": position.to_json(), "file": self._file, "offset": offset,
                 "epoch": epoch},
                handle,
            )  # fmt: skip
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(self.dir / CHECKPOINT)
        _fsync_dir(self.dir)
        self._checkpoint, self._offset, self._pending = position, offset, 0
        self._dirty, self._epoch = False, epoch

    def cut_back(self) -> None:
        """Drop what was written after the checkpoint (a failed or aborted group)."""
        if self._out is not None:
            self._out.close()
            self._out = None
        if self._dirty:
            self._checkpoint, self._file, self._offset = self._recover()
        self._pending, self._dirty = 0, False


class AuditLogSession:
    """The lines of one group (or one transaction in parts), kept by the checkpoint that
    `finish` writes after them; dropped by `abort`."""

    def __init__(self, log: AuditLogEngine, base: Position | None) -> None:
        self.log, self.base = log, base
        self.span_from: Position | None = None
        self.new: Position | None = None
        self.epoch: str | None = None
        self._at: Position | None = None  # the transaction being written, its next line's n
        self._n = 0
        self._closing: float | None = None  # a streamed transaction's commit time, once known
        self._streamed = False

    def set_checkpoint(self, new: Position, count: int, epoch: str | None) -> None:
        self.new, self.epoch = new, epoch

    def plan(self, change: Change, position: Position) -> KeyPlan | None:
        return None  # a record keeps every change: never reduced

    def add(
        self,
        changes: Sequence[Change],
        position: Position,
        timestamp: float | None = None,
        streamed: bool = False,
    ) -> None:
        log = self.log
        if position != self._at:
            log.rotate_if_full()
            self._at, self._n = position, 0
        written = lines(
            log.origin,
            Transaction(position, timestamp or 0.0, tuple(changes)),
            kind_override="snapshot" if log.snapshot else None,
            first=self._n,
            commit_time=None if streamed else timestamp,
        )
        for line in written:
            log.emit(line)
        self._n += len(written)
        if streamed:
            self._streamed, self._closing = True, timestamp

    def record_skip(self, position: Position, reason: str) -> None:
        self.log.rotate_if_full()
        line = {"origin": self.log.origin, "position": str(position), "gtid": position.gtid,
                "commit_time": None, "n": 0, "kind": "skip", "reason": reason}  # fmt: skip
        self.log.emit(json.dumps(line, ensure_ascii=False))

    def flush(self) -> None:
        """Lines are written as they are added."""

    def finish(self, commit: bool) -> None:
        log = self.log
        if not commit or self.new is None:
            log.cut_back()
            return
        if self._streamed and self._at is not None:
            end = self._at
            closing = {"origin": log.origin, "position": str(end), "gtid": end.gtid,
                       "commit_time": _when(self._closing), "n": self._n,
                       "kind": "commit"}  # fmt: skip
            log.emit(json.dumps(closing))
        try:
            log.commit(self.new, self.epoch)
        except BaseException:
            log.cut_back()
            raise

    def abort(self) -> None:
        self.log.cut_back()
