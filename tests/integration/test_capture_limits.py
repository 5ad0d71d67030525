"""Capture at its limits, against a real MariaDB: what halts it (statement-based DML, partial
row images, tables without column names), transactions too large to travel whole (parts), our
own applier's transactions, and stopping in the middle of either.

Every test runs on one private server of this module: the GLOBAL binlog variables some tests
change (and restore in `finally`) must never reach the session's shared servers, and the
`binlogsync` schema written here belongs to nobody else. Its max_binlog_size is large, so that
SHOW MASTER STATUS right after a transaction is that transaction's end (rotation is covered by
test_capture.py, and here by one explicit FLUSH BINARY LOGS).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from binlogsync.capture.positions import current_position
from binlogsync.capture.reader import BinlogReader, _Group
from binlogsync.capture.tablemap import check_library
from binlogsync.config import DatabaseSettings
from binlogsync.engines.mariadb import checkpoint
from binlogsync.errors import CaptureHalted
from binlogsync.model import Part, Transaction
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync_dev.sandbox import Sandbox, Server

pytestmark = pytest.mark.integration

WRITE_TZ = "+05:30"
BIG = 25_000
_reader_ids = itertools.count(7100)
Item = Transaction | Part


# -- the server and helpers ----------------------------------------------------------------


@pytest.fixture(scope="module")
def server(sandbox: Sandbox) -> Iterator[Server]:
    name = "capture-limits"
    started = sandbox.start(name, 71, "--max-binlog-size=1G")
    try:
        yield started
    finally:
        sandbox.stop(name)


def settings(server: Server) -> DatabaseSettings:
    return DatabaseSettings(server.host, server.port, server.user, server.password)


def run_sql(
    server: Server, database: str | None, statements: Iterable[str], **connect: Any
) -> None:
    """The statements in order on one new connection (so SET SESSION applies to the rest)."""
    with server.connect(database, **connect) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = %s", (WRITE_TZ,))
        for statement in statements:
            cur.execute(statement)


def make_db(server: Server, dbname: str, *tables: str) -> None:
    run_sql(server, None, [f"CREATE DATABASE `{dbname}`"])
    run_sql(server, dbname, tables)


def now(server: Server) -> Position:
    position = current_position(settings(server))
    assert position.gtid, "the private server writes one GTID domain"
    return position


def end_of(item: Item) -> Position | None:
    return item.position if isinstance(item, Transaction) else item.end


def reader_for(server: Server, start: Position, tables: TableFilter, **kw: Any) -> BinlogReader:
    return BinlogReader(settings(server), next(_reader_ids), start, tables, heartbeat=0.2, **kw)


def read(
    server: Server, start: Position, end: Position, tables: TableFilter, **kw: Any
) -> list[Item]:
    """Everything the reader yields from `start` up to the transaction whose GTID `end` has."""
    reader = reader_for(server, start, tables, **kw)
    watchdog = threading.Timer(30, reader.stop)
    watchdog.start()
    got: list[Item] = []
    try:
        for item in reader.transactions():
            got.append(item)
            last = end_of(item)
            if last is not None and last.gtid == end.gtid:
                break
    finally:
        watchdog.cancel()
        reader.close()
    assert got and end_of(got[-1]) == end, f"the reader stopped at {got[-1:]}, not at {end}"
    return got


def read_until_halt(
    server: Server, start: Position, tables: TableFilter, **kw: Any
) -> tuple[list[Item], CaptureHalted]:
    """What the reader yields from `start` until it raises CaptureHalted (which it must)."""
    reader = reader_for(server, start, tables, **kw)
    watchdog = threading.Timer(20, reader.stop)
    watchdog.start()
    got: list[Item] = []
    try:
        with pytest.raises(CaptureHalted) as info:
            for item in reader.transactions():
                got.append(item)
    finally:
        watchdog.cancel()
        reader.close()
    return got, info.value


def _events(server: Server, since: Position) -> list[tuple[Any, ...]]:
    """SHOW BINLOG EVENTS of `since`'s file from `since` on."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{since.file}' FROM {since.offset}")
        return list(cur.fetchall())


def event_at(server: Server, since: Position, kind: str, text: str) -> str:
    """`file:offset` of the first `kind` event after `since` whose Info contains `text`."""
    for file, pos, event_type, _server_id, _end, info in _events(server, since):
        if event_type == kind and text in info:
            return f"{file}:{pos}"
    raise AssertionError(f"no {kind} event with {text!r} after {since}")


def _where(position: Position) -> str:
    return f"{position.file}:{position.offset}"


def ids(items: Iterable[Item], image: str = "after") -> list[int]:
    return [row[0] for item in items for c in item.changes for row in getattr(c, image)]


def data_file(tmp_path: Path, *values: int) -> Path:
    """A file for LOAD DATA: one integer per line."""
    path = tmp_path / "rows.tsv"
    path.write_text("".join(f"{v}\n" for v in values))
    return path


def set_global(server: Server, variable: str, value: str) -> None:
    run_sql(server, None, [f"SET GLOBAL {variable} = '{value}'"])


# -- statement-based DML -------------------------------------------------------------------


def _assert_statement_halt(
    server: Server, dbname: str, first: Transaction, halt: CaptureHalted, before: Position
) -> None:
    after_offending = halt.end
    assert halt.position == first.position and halt.position.gtid == first.position.gtid
    assert halt.at == event_at(server, before, "Query", "INSERT INTO t1 VALUES (2, 'stmt')")
    assert f"{dbname}.t1" in halt.message and "binlog_format" in str(halt)
    assert after_offending is not None
    to = after_offending.gtid if after_offending.by_gtid else after_offending.file
    assert f"--to {to}" in halt.fix  # capture-skip --to: a GTID state on MariaDB


def test_statement_dml_on_a_routed_table_halts_after_reading_its_transaction(
    server: Server, dbname: str
) -> None:
    make_db(server, dbname, "CREATE TABLE t1 (id INT PRIMARY KEY, v VARCHAR(10))")
    start = now(server)
    run_sql(server, dbname, ["INSERT INTO t1 VALUES (1, 'row')"])
    before = now(server)
    run_sql(
        server,
        dbname,
        ["SET SESSION binlog_format = 'STATEMENT'", "INSERT INTO t1 VALUES (2, 'stmt')"],
    )
    offending_end = now(server)
    run_sql(server, dbname, ["INSERT INTO t1 VALUES (3, 'row')"])  # never yielded

    got, halt = read_until_halt(server, start, TableFilter((f"{dbname}.t1",)))
    (first,) = got
    assert isinstance(first, Transaction) and first.position == before
    assert ids(got) == [1]
    assert halt.end == offending_end and halt.end is not None
    assert halt.end.gtid == offending_end.gtid
    _assert_statement_halt(server, dbname, first, halt, before)


def test_global_statement_format_halts_for_new_connections(server: Server, dbname: str) -> None:
    """The issue's scenario: binlog_format changed globally at run time, a new client writes."""
    make_db(server, dbname, "CREATE TABLE t1 (id INT PRIMARY KEY, v VARCHAR(10))")
    start = now(server)
    run_sql(server, dbname, ["INSERT INTO t1 VALUES (1, 'row')"])
    before = now(server)
    try:
        set_global(server, "binlog_format", "STATEMENT")
        run_sql(server, dbname, ["INSERT INTO t1 VALUES (2, 'stmt')"])  # a new connection
        offending_end = now(server)
    finally:
        set_global(server, "binlog_format", "ROW")
    run_sql(server, dbname, ["INSERT INTO t1 VALUES (3, 'row')"])

    got, halt = read_until_halt(server, start, TableFilter((f"{dbname}.t1",)))
    assert [type(i) for i in got] == [Transaction] and ids(got) == [1]
    assert isinstance(got[0], Transaction) and got[0].position == before
    assert halt.end == offending_end and halt.end is not None
    assert halt.end.gtid == offending_end.gtid
    _assert_statement_halt(server, dbname, got[0], halt, before)


def test_statement_dml_on_a_table_not_routed_is_ignored(
    server: Server, dbname: str, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    make_db(
        server,
        dbname,
        "CREATE TABLE t1 (id INT PRIMARY KEY)",
        "CREATE TABLE other (id INT PRIMARY KEY)",
    )
    start = now(server)
    run_sql(server, dbname, ["INSERT INTO t1 VALUES (1)"])
    run_sql(
        server,
        dbname,
        [
            "SET SESSION binlog_format = 'STATEMENT'",
            "INSERT INTO other VALUES (1)",
            f"UPDATE `{dbname}`.other SET id = id + 1",
            f"LOAD DATA LOCAL INFILE '{data_file(tmp_path, 10, 11)}' INTO TABLE other",
        ],
        local_infile=True,
    )
    run_sql(server, dbname, ["INSERT INTO t1 VALUES (2)", "INSERT INTO t1 VALUES (3)"])
    end = now(server)

    with caplog.at_level(logging.WARNING, logger="binlogsync.capture.reader"):
        got = read(server, start, end, TableFilter((f"{dbname}.t1",)))
    assert all(isinstance(i, Transaction) for i in got)
    assert [ids([i]) for i in got] == [[1], [], [], [], [2], [3]]
    ignored = [r.getMessage() for r in caplog.records if "touches no routed table" in r.message]
    assert len(ignored) == 3 and "INSERT INTO other" in ignored[0]
    assert "LOAD DATA" in ignored[2] and "`other`" in ignored[2]


def test_statement_load_data_into_a_routed_table_halts(
    server: Server, dbname: str, tmp_path: Path
) -> None:
    """LOAD DATA is logged as Begin_load_query + Execute_load_query, not as a Query event."""
    make_db(server, dbname, "CREATE TABLE t1 (id INT PRIMARY KEY)")
    start = now(server)
    run_sql(
        server,
        dbname,
        [
            "SET SESSION binlog_format = 'STATEMENT'",
            f"LOAD DATA LOCAL INFILE '{data_file(tmp_path, 1, 2)}' INTO TABLE t1",
        ],
        local_infile=True,
    )
    loaded = now(server)
    run_sql(server, dbname, ["INSERT INTO t1 VALUES (3)"])

    got, halt = read_until_halt(server, start, TableFilter((f"{dbname}.t1",)))
    assert got == [] and halt.position == start and halt.end == loaded
    assert halt.at == event_at(server, start, "Execute_load_query", "LOAD DATA")
    assert f"{dbname}.t1" in halt.message and "LOAD DATA" in halt.message
    assert "binlog_format" in str(halt)


# -- partial row images --------------------------------------------------------------------


def test_minimal_row_image_halts_update_and_delete(server: Server, dbname: str) -> None:
    make_db(
        server,
        dbname,
        "CREATE TABLE t1 (id INT PRIMARY KEY, a INT, b VARCHAR(10))",
        "INSERT INTO t1 VALUES (1, 1, 'x'), (2, 2, 'y')",
    )
    tables = TableFilter((f"{dbname}.t1",))
    start = now(server)
    run_sql(
        server,
        dbname,
        [
            "SET SESSION binlog_row_image = 'MINIMAL'",
            "UPDATE t1 SET a = 10 WHERE id = 1",
            "DELETE FROM t1 WHERE id = 2",
        ],
    )
    end = now(server)

    got, halt = read_until_halt(server, start, tables)
    assert got == [] and halt.position == start
    assert "partial" in halt.message and "binlog_row_image" in str(halt)
    assert f"{dbname}.t1" in halt.message
    assert halt.at == event_at(server, start, "Update_rows_v1", "")
    # Moved past it on purpose (what capture-skip does), the DELETE halts too.
    assert halt.end is not None
    got, halt2 = read_until_halt(server, halt.end, tables)
    assert got == [] and halt2.position == halt.end and halt2.end == end
    assert "partial" in halt2.message and "binlog_row_image" in str(halt2)
    assert halt2.at == event_at(server, halt.end, "Delete_rows_v1", "")


def test_noblob_row_image_halts_only_where_a_blob_is_left_out(server: Server, dbname: str) -> None:
    make_db(
        server,
        dbname,
        "CREATE TABLE with_blob (id INT PRIMARY KEY, n INT, doc TEXT, raw BLOB)",
        "CREATE TABLE no_blob (id INT PRIMARY KEY, n INT, s VARCHAR(10))",
        "INSERT INTO with_blob VALUES (1, 1, 'text', 'bytes')",
        "INSERT INTO no_blob VALUES (1, 1, 'a'), (2, 2, 'b')",
    )
    start = now(server)
    run_sql(
        server,
        dbname,
        [
            "SET SESSION binlog_row_image = 'NOBLOB'",
            "INSERT INTO no_blob VALUES (3, 3, 'c')",
            "UPDATE no_blob SET n = n * 10",
            "DELETE FROM no_blob WHERE id = 2",
        ],
    )
    images_full = now(server)
    run_sql(
        server,
        dbname,
        [
            "SET SESSION binlog_row_image = 'NOBLOB'",
            "INSERT INTO with_blob VALUES (2, 2, 'new', 'raw')",  # an insert logs every column
            "UPDATE with_blob SET n = 3 WHERE id = 1",  # the blobs did not change: left out
        ],
    )
    blob_left_out = now(server)

    # Without blob columns NOBLOB images are full: captured as usual.
    got = read(server, start, images_full, TableFilter((f"{dbname}.no_blob",)))
    changes = [c for i in got for c in i.changes]
    assert [c.kind for c in changes] == ["insert", "update", "delete"]
    assert changes[0].after == ((3, 3, "c"),)
    assert changes[1].before == ((1, 1, "a"), (2, 2, "b"), (3, 3, "c"))
    assert changes[1].after == ((1, 10, "a"), (2, 20, "b"), (3, 30, "c"))
    assert changes[2].before == ((2, 20, "b"),)

    got, halt = read_until_halt(server, images_full, TableFilter((f"{dbname}.*",)))
    assert [c.after for i in got for c in i.changes] == [((2, 2, "new", b"raw"),)]
    assert halt.position == end_of(got[0]) and halt.end == blob_left_out
    assert f"{dbname}.with_blob" in halt.message and "binlog_row_image" in str(halt)


# -- column names --------------------------------------------------------------------------


def test_table_map_without_column_names_halts(server: Server, dbname: str) -> None:
    make_db(
        server,
        dbname,
        "CREATE TABLE t1 (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE other (id INT PRIMARY KEY)",
    )
    start = now(server)
    run_sql(server, dbname, ["INSERT INTO t1 VALUES (1, 1)"])
    first = now(server)
    try:  # binlog_row_metadata is dynamic (and global only) on MariaDB 10.11
        set_global(server, "binlog_row_metadata", "MINIMAL")
        run_sql(server, dbname, ["INSERT INTO other VALUES (1)"])  # not routed: no halt
        after_other = now(server)
        run_sql(server, dbname, ["INSERT INTO t1 VALUES (2, 2)"])
        nameless = now(server)
    finally:
        set_global(server, "binlog_row_metadata", "FULL")

    got, halt = read_until_halt(server, start, TableFilter((f"{dbname}.t1",)))
    assert [ids([i]) for i in got] == [[1], []]
    assert end_of(got[0]) == first and halt.position == end_of(got[1]) == after_other
    assert halt.at == event_at(server, after_other, "Write_rows_v1", "")
    assert halt.end == nameless and halt.end is not None and halt.end.gtid == nameless.gtid
    assert f"{dbname}.t1" in halt.message and "binlog_row_metadata" in str(halt)


# -- parts ---------------------------------------------------------------------------------


def _big_table(server: Server, dbname: str) -> None:
    make_db(
        server,
        dbname,
        "CREATE TABLE big (id INT PRIMARY KEY, pad VARCHAR(40))",
        "CREATE TABLE small (id INT PRIMARY KEY)",
    )


def _parts_of_one(items: list[Item]) -> list[Part]:
    parts = [i for i in items if isinstance(i, Part)]
    assert parts, "no parts"
    assert [p.number for p in parts] == list(range(1, len(parts) + 1))
    assert {p.begin for p in parts} == {parts[0].begin}
    assert [p.last for p in parts] == [False] * (len(parts) - 1) + [True]
    assert all(p.end is None for p in parts[:-1])
    return parts


def test_a_big_insert_comes_as_numbered_parts(server: Server, dbname: str) -> None:
    _big_table(server, dbname)
    start = now(server)
    run_sql(server, dbname, ["INSERT INTO small VALUES (1)"])
    before_big = now(server)
    run_sql(
        server,
        dbname,
        [f"INSERT INTO big SELECT seq, CONCAT('row ', seq) FROM seq_1_to_{BIG}"],
    )
    big_end = now(server)
    run_sql(server, dbname, ["INSERT INTO small VALUES (2)"])
    end = now(server)

    got = read(server, start, end, TableFilter((f"{dbname}.*",)), part_rows=10_000)
    assert [type(i).__name__ for i in got] == ["Transaction", "Part", "Part", "Part", "Transaction"]
    parts = _parts_of_one(got)
    # By GTID, a transaction's parts begin at the state before it (its begin key is the
    # previous transaction's end key, below its own end's).
    assert parts[0].begin.by_gtid and parts[0].begin.gtid == before_big.gtid and big_end.gtid
    assert parts[0].begin.key < big_end.key
    assert _where(parts[0].begin) == event_at(server, before_big, "Gtid", big_end.gtid)
    assert parts[-1].end == big_end and parts[-1].end is not None
    assert parts[-1].end.gtid == big_end.gtid and parts[-1].timestamp > 0
    assert all(p.row_count >= 10_000 for p in parts[:-1])
    assert sum(p.row_count for p in parts) == BIG
    assert ids(parts) == list(range(1, BIG + 1))
    assert parts[0].changes[0].after[0] == (1, "row 1")
    assert ids(got[:1]) == [1] and ids(got[-1:]) == [2]


def test_part_bytes_cuts_wide_rows(server: Server, dbname: str) -> None:
    make_db(server, dbname, "CREATE TABLE wide (id INT PRIMARY KEY, pad VARCHAR(2000))")
    start = now(server)
    run_sql(server, dbname, ["INSERT INTO wide SELECT seq, REPEAT('w', 1500) FROM seq_1_to_400"])
    end = now(server)
    got = read(server, start, end, TableFilter((f"{dbname}.wide",)), part_bytes=64 * 1024)
    parts = _parts_of_one(got)
    assert len(got) == len(parts) >= 5  # ~600 KB of row events in parts of ~64 KiB
    assert all(p.row_count < 400 for p in parts)
    assert ids(parts) == list(range(1, 401))
    assert parts[-1].end == end


def test_big_update_and_delete_come_as_parts(server: Server, dbname: str) -> None:
    _big_table(server, dbname)
    run_sql(server, dbname, [f"INSERT INTO big SELECT seq, 'x' FROM seq_1_to_{BIG}"])
    start = now(server)
    run_sql(server, dbname, ["UPDATE big SET pad = CONCAT(pad, '!')"])
    updated = now(server)
    run_sql(server, dbname, ["DELETE FROM big"])
    end = now(server)

    got = read(server, start, end, TableFilter((f"{dbname}.big",)), part_rows=10_000)
    split = next(n for n, i in enumerate(got, 1) if end_of(i) == updated)
    update, delete = _parts_of_one(got[:split]), _parts_of_one(got[split:])
    assert len(update) == len(delete) == 3 and len(got) == 6
    assert update[-1].end == updated and delete[-1].end == end
    assert update[0].begin != delete[0].begin
    assert {c.kind for p in update for c in p.changes} == {"update"}
    assert ids(update, "before") == ids(update, "after") == list(range(1, BIG + 1))
    assert {row[1] for p in update for c in p.changes for row in c.after} == {"x!"}
    assert {c.kind for p in delete for c in p.changes} == {"delete"}
    assert ids(delete, "before") == list(range(1, BIG + 1))


def test_parts_are_the_same_when_read_again(server: Server, dbname: str) -> None:
    """The hub de-duplicates parts by (begin, number): a new reader must cut them the same."""
    _big_table(server, dbname)
    run_sql(server, dbname, ["INSERT INTO small VALUES (1)"])
    acknowledged = now(server)
    run_sql(server, None, ["FLUSH BINARY LOGS"])  # the big one starts in the next file
    before_big = now(server)
    run_sql(server, dbname, [f"INSERT INTO big SELECT seq, 'p' FROM seq_1_to_{BIG}"])
    end = now(server)
    tables = TableFilter((f"{dbname}.*",))

    first = read(server, acknowledged, end, tables, part_rows=10_000)
    again = read(server, acknowledged, end, tables, part_rows=10_000)
    from_next_file = read(server, before_big, end, tables, part_rows=10_000)
    parts = _parts_of_one(first)
    assert len(parts) == len(first) == 3
    assert before_big.file != acknowledged.file and end.gtid
    assert _where(parts[0].begin) == event_at(server, before_big, "Gtid", end.gtid)
    assert [p.to_wire() for p in again] == [p.to_wire() for p in first]
    assert [p.to_wire() for p in from_next_file] == [p.to_wire() for p in first]
    assert [(p.begin, p.number) for p in again] == [(p.begin, p.number) for p in first]


# -- our own applier's transactions --------------------------------------------------------


def test_a_big_transaction_of_our_applier_comes_whole_and_empty(
    server: Server, dbname: str
) -> None:
    make_db(server, dbname, "CREATE TABLE t (id INT PRIMARY KEY)")
    with server.connect() as conn:
        checkpoint.ensure_schema(conn)
    start = now(server)
    with server.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        checkpoint.write(cur, f"o_{dbname}", Position("binlog.000009", 1234, "0-9-9"), 1)
        cur.execute(f"INSERT INTO t SELECT seq FROM seq_1_to_{BIG}")
        cur.execute("COMMIT")
    applied = now(server)
    run_sql(server, dbname, ["INSERT INTO t VALUES (0)"])
    end = now(server)

    got = read(server, start, end, TableFilter(("*.*",)), part_rows=10_000)
    assert [type(i) for i in got] == [Transaction, Transaction]
    assert got[0].changes == () and end_of(got[0]) == applied
    assert ids(got[1:]) == [0]


# -- the library and stopping --------------------------------------------------------------


def test_check_library_accepts_the_installed_versions() -> None:
    check_library()


class _Consumer:
    """Iterates a reader in its own thread; pauses after an item that `pause_on` accepts,
    until `release` is set."""

    def __init__(self, reader: BinlogReader, pause_on: Any = None) -> None:
        self.reader, self.pause_on = reader, pause_on
        self.got: list[Item] = []
        self.errors: list[BaseException] = []
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for item in self.reader.transactions():
                self.got.append(item)
                if self.pause_on is not None and self.pause_on(item):
                    self.release.wait(10)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self.errors.append(exc)

    def stop_and_time(self) -> float:
        """reader.stop() from this (another) thread, then let it go on; seconds to return."""
        self.reader.stop()
        stopped = time.monotonic()
        self.release.set()
        self.thread.join(5)
        assert not self.thread.is_alive(), "transactions() did not return after stop()"
        return time.monotonic() - stopped


def test_stop_in_the_middle_of_a_parted_transaction(server: Server, dbname: str) -> None:
    _big_table(server, dbname)
    start = now(server)
    run_sql(server, dbname, [f"INSERT INTO big SELECT seq, 'x' FROM seq_1_to_{BIG}"])
    reader = reader_for(server, start, TableFilter((f"{dbname}.big",)), part_rows=10_000)
    consumer = _Consumer(reader, pause_on=lambda item: isinstance(item, Part))
    try:
        deadline = time.monotonic() + 30
        while not (consumer.got or consumer.errors):  # poll for the first part
            assert time.monotonic() < deadline, "the first part never came"
            time.sleep(0.005)
        assert consumer.stop_and_time() < 1.0
    finally:
        consumer.release.set()
        reader.close()
    assert consumer.errors == []
    assert [(type(i), getattr(i, "number", None)) for i in consumer.got] == [(Part, 1)]


class _PausingReader(BinlogReader):
    """Pauses right after it decided to halt a group, until the test releases it."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.halting = threading.Event()
        self.release = threading.Event()

    def _halt(self, group: _Group, event: Any, message: str, fix: str) -> None:
        super()._halt(group, event, message, fix)
        self.halting.set()
        self.release.wait(10)


def test_stop_in_the_middle_of_a_halted_group(server: Server, dbname: str) -> None:
    make_db(
        server,
        dbname,
        "CREATE TABLE t1 (id INT PRIMARY KEY, a INT)",
        "INSERT INTO t1 SELECT seq, seq FROM seq_1_to_5000",
    )
    tables = TableFilter((f"{dbname}.t1",))
    start = now(server)
    run_sql(server, dbname, ["SET SESSION binlog_row_image = 'MINIMAL'", "UPDATE t1 SET a = -a"])
    rows_events = [e for e in _events(server, start) if e[2].startswith("Update_rows")]
    assert len(rows_events) > 1, "the halted group must go on after its first Rows event"
    reader = _PausingReader(settings(server), next(_reader_ids), start, tables, heartbeat=0.2)
    consumer = _Consumer(reader)
    try:
        assert reader.halting.wait(30), "the reader never halted the group"
        consumer.release = reader.release  # let go only after stop()
        assert consumer.stop_and_time() < 1.0
    finally:
        reader.release.set()
        reader.close()
    assert consumer.got == [] and consumer.errors == []  # stopped, not halted
    _got, halt = read_until_halt(server, start, tables)  # the next reader halts there again
    assert halt.at == f"{rows_events[0][0]}:{rows_events[0][1]}"
