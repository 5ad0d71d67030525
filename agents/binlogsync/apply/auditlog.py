"""The audit-log target (`[target] kind = "auditlog"`): every change as one JSON line, exactly
once, in order, surviving kill -9.

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
log: its rows are written as `snapshot` lines at the seed's position.
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
from ..model import Change, Part, Transaction
from ..position import Position, comparable
from ..zerodate import ZeroDate

FILE = re.compile(r"^audit-(\d{6})\.jsonl$")
CHECKPOINT = "checkpoint.json"


def _time(value: dt.timedelta) -> str:
    sign = "-" if value < dt.timedelta(0) else ""
    micros = abs(value) // dt.timedelta(microseconds=1)
    seconds, micro = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    return f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}.{micro:06d}"


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
        return _time(value), "time"
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


class AuditLogStore:
    """The target store of one origin's audit log (see the module's docstring)."""

    def __init__(self, path: Path, origin: str, rotate_bytes: int, epoch: str | None = None):
        self.origin = origin
        self.epoch = epoch
        self.rotate_bytes = rotate_bytes
        self.dir = path / origin
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
        # The transaction being streamed in parts: its end, the next part, the offset it began
        # at (-1: applied already, its parts are skipped) and the next line number.
        self._stream: tuple[Position, int, int, int] | None = None

    # -- the store protocol -------------------------------------------------------------------
    def checkpoint(self) -> Position | None:
        self.abort_stream()
        return self._checkpoint

    def apply(
        self, transactions: Sequence[Transaction], upto: Position | None = None
    ) -> Position | None:
        self.abort_stream()
        base = self._checkpoint
        if transactions and not comparable(base, transactions[-1].position):
            raise ApplyError(
                f"{self.origin}'s positions went back from GTIDs to binlog files",
                "reseed the audit log into a new folder",
            )
        last = -1 if base is None else base.key
        new = base
        try:
            for tx in transactions:
                if tx.position.key <= last:
                    continue
                self._rotate_if_full()
                for line in lines(self.origin, tx):
                    self._emit(line)
                last, new = tx.position.key, tx.position
            if upto is not None and (new is None or upto.key > new.key):
                new = upto
            if new is not None and (base is None or new.key > base.key):
                self._commit(new)
        except BaseException:
            self._cut_back()
            raise
        return self._checkpoint

    def apply_part(self, part: Part, end: Position) -> Position | None:
        if part.number == 1:
            self.abort_stream()
            if self._checkpoint is not None and end.key <= self._checkpoint.key:
                self._stream = (end, 1, -1, 0)  # applied already: skip its parts
            else:
                self._rotate_if_full()
                self._stream = (end, 1, self._offset, 0)
        stream = self._stream
        if stream is None or stream[0] != end or stream[1] != part.number:
            from ..engines.base import StaleStream

            raise StaleStream(f"part {part.number} of {end} does not continue the stream")
        if stream[2] < 0:
            self._stream = (end, part.number + 1, -1, 0)
            return self._skip_done() if part.last else None
        try:
            tx = Transaction(end, part.timestamp, part.changes)
            written = lines(self.origin, tx, first=stream[3], commit_time=None)
            for line in written:
                self._emit(line)
            self._stream = (end, part.number + 1, stream[2], stream[3] + len(written))
            if part.last:
                closing = {"origin": self.origin, "position": str(end), "gtid": end.gtid,
                           "commit_time": _when(part.timestamp), "n": stream[3] + len(written),
                           "kind": "commit"}  # fmt: skip
                self._emit(json.dumps(closing))
                self._stream = None
                self._commit(end)
                return end
        except BaseException:
            self.abort_stream()
            raise
        return None

    def _skip_done(self) -> Position | None:
        self._stream = None
        return self._checkpoint

    def abort_stream(self) -> None:
        if self._stream is not None:
            self._stream = None
            self._cut_back()

    def repair(
        self, transaction: Transaction, snapshot: Position, seed: bool = False, reset: bool = False
    ) -> Position:
        if not seed or self._checkpoint is not None:
            raise ApplyError(
                f"the audit log of {self.origin} is a record and is not repaired or reseeded "
                "in place",
                "start a new audit log (a new target.path) and seed it",
            )
        rows = Transaction(snapshot, transaction.timestamp,
                           tuple(c for c in transaction.changes if c.kind != "ddl"))  # fmt: skip
        try:
            for line in lines(self.origin, rows, kind_override="snapshot"):
                self._emit(line)
            self._commit(snapshot)
        except BaseException:
            self._cut_back()
            raise
        return snapshot

    def close(self) -> None:
        self.abort_stream()
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

    def _emit(self, line: str) -> None:
        data = line + "\n"
        self._open().write(data)
        self._pending += len(data.encode("utf-8"))

    def _rotate_if_full(self) -> None:
        """Begin the next file once this one is past the size; checked before each
        transaction, so a transaction's lines stay in one file."""
        if self._offset + self._pending < self.rotate_bytes:
            return
        if self._out is not None:
            self._out.close()
            self._out = None
        number = int(FILE.match(self._file).group(1)) + 1  # type: ignore[union-attr]
        self._file, self._offset, self._pending = self._name(number), 0, 0

    def _commit(self, position: Position) -> None:
        out = self._open()
        out.flush()
        os.fsync(out.fileno())
        offset = out.tell()
        tmp = self.dir / (CHECKPOINT + ".tmp")
        with tmp.open("w") as handle:
            json.dump(
                {"position": position.to_json(), "file": self._file, "offset": offset,
                 "epoch": self.epoch},
                handle,
            )  # fmt: skip
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(self.dir / CHECKPOINT)
        _fsync_dir(self.dir)
        self._checkpoint, self._offset, self._pending = position, offset, 0

    def _cut_back(self) -> None:
        """Drop what was written after the checkpoint (a failed or aborted group)."""
        if self._out is not None:
            self._out.close()
            self._out = None
        self._checkpoint, self._file, self._offset = self._recover()
        self._pending = 0
