"""The seed's chunk readers: read a chunk and pack it for the hub, here or in reader processes.

A `Task` names one chunk of a table: a key range found before (`after < key <= upto`, see
chunks.bound), or the next `limit` rows after a key. Reading it (`read`) opens a snapshot,
reads the rows, and packs them as the REPAIR bodies the seed sends (a chunk larger than
`chunk_bytes` in pieces), so that all of a chunk's work — the server's, cutting the rows,
packing — happens where it is read.

`Readers` takes tasks and gives back their results in the order they were given, whatever
order they finish in: the driver (run.py) sends a table's chunks in key order, which keeps
the hub's record of a table (its last key) a point below which everything is applied.

    InlineReaders    --parallel 1: each task is read when its result is taken (no process)
    ProcessReaders   --parallel N: N reader processes, each with its own connection to the
                     origin, each reading the task it was given; Python's own work (cutting
                     rows, packing) runs on N cores instead of one

A reader process ends when its pipe to the seed closes, so a seed killed with kill -9 leaves
none behind.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import pymysql

from ..codec import pack, text_conversions
from ..config import DatabaseSettings
from ..errors import BinlogsyncError
from ..model import Change, Transaction
from ..position import Position
from ..reconcile.connections import close, connect
from ..rowtext import TextRows
from . import chunks
from .tables import SeedTable

Key = chunks.Key


@dataclass(frozen=True, slots=True)
class Task:
    number: int  # running number: results come back in this order
    table: SeedTable
    after: Key | None
    upto: Key | None  # a key range's end; None: the next `limit` rows
    limit: int
    first: bool  # the table's first chunk: its body also re-creates and empties the table
    chunk_bytes: int


@dataclass(frozen=True, slots=True)
class Piece:
    body: bytes  # a packed transaction at the chunk's snapshot
    rows: int
    last_key: Key | None  # after this piece, the table is read up to here


@dataclass(frozen=True, slots=True)
class Read:
    task: Task
    snapshot: Position
    pieces: list[Piece]
    rows: int
    next_after: Key | None  # where the table's next chunk starts
    ends_table: bool  # the last chunk of the table (fewer than `limit` rows after a key)


def read(conn: Any, task: Task) -> Read:
    """Read one task's chunk on `conn` (made with the codec's text conversions) and pack it."""
    table = task.table
    chunk = chunks.read(conn, table, task.after, task.limit, task.upto)
    ranged = task.upto is not None
    next_after = task.upto if ranged else (chunk.last_key or task.after)
    pieces = _pack(table, chunk.snapshot, chunk.rows, task.first, task.chunk_bytes, next_after)
    ends = not ranged and len(chunk.rows) < task.limit
    return Read(task, chunk.snapshot, pieces, len(chunk.rows), next_after, ends)


def _pack(
    table: SeedTable,
    snapshot: Position,
    rows: list[tuple[Any, ...]] | TextRows,
    first: bool,
    chunk_bytes: int,
    end: Key | None,
) -> list[Piece]:
    """The chunk's bodies: one, or pieces of at most `chunk_bytes` (an empty chunk still goes
    as one: a table's first chunk empties the target's table)."""
    out: list[Piece] = []
    pending = [rows]
    while pending:
        part = pending.pop(0)
        changes = changes_of(table, part, first and not out)
        body: bytes = pack(Transaction(snapshot, time.time(), tuple(changes)).to_wire(packing=True))
        if len(body) > chunk_bytes and len(part) > 1:
            half = len(part) // 2
            pending[:0] = [part[:half], part[half:]]
            continue
        last = end if not pending else chunks.key_of(table, part[-1])
        out.append(Piece(body, len(part), last))
    return out


def changes_of(
    table: SeedTable, rows: list[tuple[Any, ...]] | TextRows, first: bool
) -> list[Change]:
    changes = []
    if first:
        changes.append(
            Change(
                "ddl",
                table.schema,
                table.table,
                statement=f"CREATE TABLE {table.name} /* binlogsync seed: the origin's "
                "definition */",
                definition=table.definition.to_wire(),
            )
        )
        changes.append(Change("truncate", table.schema, table.table))
    if rows:
        image = rows if isinstance(rows, TextRows) else tuple(rows)
        changes.append(Change("insert", table.schema, table.table, table.columns, (), image))
    return changes


class InlineReaders:
    """One reader, in this process: a task is read when its result is taken."""

    def __init__(self, source: DatabaseSettings) -> None:
        self.conn = connect(source, "origin", conv=text_conversions())
        self.tasks: deque[Task] = deque()

    @property
    def outstanding(self) -> int:
        return len(self.tasks)

    def submit(self, task: Task) -> None:
        self.tasks.append(task)

    def take(self) -> Read:
        return read(self.conn, self.tasks.popleft())

    def drop(self) -> None:
        self.tasks.clear()

    def close(self) -> None:
        close(self.conn)


class ReaderFailed(BinlogsyncError):
    """A reader process stopped on something other than a database error."""


class ProcessReaders:
    """`count` reader processes; results are taken in the order the tasks were submitted."""

    def __init__(self, source: DatabaseSettings, count: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # no copy of this process's sockets
        self.pipes: list[Connection] = []
        self.procs: list[Any] = []
        for _ in range(count):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(theirs, source), daemon=True)
            proc.start()
            theirs.close()
            self.pipes.append(mine)
            self.procs.append(proc)
        self.waiting: deque[Task] = deque()  # submitted, not given to a reader yet
        self.busy: dict[int, int] = {}  # reader index → number of the task it reads
        self.done: dict[int, Read] = {}  # results that came before their turn
        self.order: deque[int] = deque()  # numbers of the tasks to take, in order
        self.dropped: set[int] = set()  # numbers whose results are thrown away

    @property
    def outstanding(self) -> int:
        return len(self.order)

    def submit(self, task: Task) -> None:
        self.waiting.append(task)
        self.order.append(task.number)
        self._dispatch()

    def _dispatch(self) -> None:
        for index, pipe in enumerate(self.pipes):
            if not self.waiting:
                return
            if index not in self.busy:
                task = self.waiting.popleft()
                pipe.send(task)
                self.busy[index] = task.number

    def take(self) -> Read:
        wanted = self.order[0]
        while wanted not in self.done:
            if not self.busy:
                raise ReaderFailed("a seed task was lost by its reader")
            for pipe in wait(self.pipes):
                self._receive(self.pipes.index(pipe))  # type: ignore[arg-type]
            self._dispatch()
        self.order.popleft()
        return self.done.pop(wanted)

    def _receive(self, index: int) -> None:
        try:
            kind, value = self.pipes[index].recv()
        except EOFError:
            raise ReaderFailed("a seed reader process ended unexpectedly") from None
        number = self.busy.pop(index)
        if number in self.dropped:
            self.dropped.discard(number)
            return
        if kind == "error":
            raise value
        self.done[number] = value

    def drop(self) -> None:
        """Forget every task not taken yet (a reader busy with one finishes it unheard)."""
        self.dropped.update(self.busy.values())
        self.waiting.clear()
        self.done.clear()
        self.order.clear()

    def close(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(None)
            except OSError:
                pass
            pipe.close()
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()


Readers = InlineReaders | ProcessReaders


def open_readers(source: DatabaseSettings, count: int) -> Readers:
    return InlineReaders(source) if count <= 1 else ProcessReaders(source, count)


def _serve(pipe: Connection, source: DatabaseSettings) -> None:
    """A reader process: read each task sent, answer ("ok", Read) or ("error", exception),
    until None or the seed's end of the pipe closes."""
    conn = None
    try:
        while True:
            try:
                task = pipe.recv()
            except (EOFError, OSError):
                return
            if task is None:
                return
            try:
                if conn is None:
                    conn = connect(source, "origin", conv=text_conversions())
                pipe.send(("ok", read(conn, task)))
            except pymysql.err.MySQLError as exc:  # picklable: the seed says what failed
                pipe.send(("error", exc))
                close(conn)
                conn = None
            except Exception as exc:  # told to the seed, which stops with it
                pipe.send(("error", ReaderFailed(f"a seed reader failed: {exc!r}")))
    except (BrokenPipeError, EOFError):
        return
    finally:
        if conn is not None:
            close(conn)
