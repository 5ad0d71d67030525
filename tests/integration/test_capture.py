"""Capture against a real MariaDB: golden files, type fidelity, rotation, resume, stop.

Golden files (tests/integration/golden/NAME.sql → NAME.expected): the SQL before the line
`-- capture` sets up, the SQL after it is captured; `-- tables: a, b` sets the table filter
(default `shop.*`). Each test's database is renamed `shop` in the rendering. Regenerate with
BINLOGSYNC_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import struct
import threading
import time
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from binlogsync import codec
from binlogsync.capture.positions import current_position, earliest_position
from binlogsync.capture.reader import BinlogReader
from binlogsync.capture.values import _fix_negative_time
from binlogsync.config import DatabaseSettings
from binlogsync.ddl import dml_tables, dropped_columns, parse_statement
from binlogsync.errors import CaptureHalted, PreflightError, UnreachableError
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync.tables import TableFilter
from binlogsync.zerodate import ZeroDate
from binlogsync_dev.sandbox import Sandbox, Server, free_port

GOLDEN = Path(__file__).parent / "golden"
WRITE_TZ = "+05:30"
_reader_ids = itertools.count(7000)

integration = pytest.mark.integration
unit = pytest.mark.unit


# -- helpers -------------------------------------------------------------------------------


def settings(server: Server) -> DatabaseSettings:
    return DatabaseSettings(server.host, server.port, server.user, server.password)


def connect(server: Server, database: str | None = None, tz: str = WRITE_TZ) -> Any:
    conn = server.connect(database)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = %s", (tz,))
    return conn


def run_sql(server: Server, database: str, statements: Iterable[str]) -> None:
    with connect(server, database) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def make_db(server: Server, dbname: str) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")


def capture(
    server: Server,
    start: Position,
    end: Position,
    tables: TableFilter,
    *,
    timeout: float = 60.0,
    cache: bool = True,
    fast: bool = True,
    counts: dict[str, int] | None = None,
) -> list[Transaction]:
    """Every transaction after `start` up to the last one before `end` (current_position).

    `end` may be the start of a fresh binlog file (after a rotation), so the last transaction
    is recognised by its GTID, which current_position reads from @@gtid_binlog_pos.
    """
    if end <= start:
        return []
    assert end.gtid, "the sandbox servers write GTIDs"
    reader = BinlogReader(
        settings(server),
        next(_reader_ids),
        start,
        tables,
        heartbeat=0.2,
        cache_table_maps=cache,
        fast_events=fast,
    )
    watchdog = threading.Timer(timeout, reader.stop)
    watchdog.start()
    out: list[Transaction] = []
    try:
        for txn in reader.transactions():
            out.append(txn)
            if txn.position.gtid == end.gtid or txn.position >= end:
                break
    finally:
        watchdog.cancel()
        reader.close()
    if counts is not None and reader.source is not None:
        counts["events"] = reader.source.fast_events
        counts["rows_events"] = reader.source.fast_rows_events
    last = out[-1].position if out else None
    assert last is not None and last.gtid == end.gtid, f"capture stopped at {last}, not {end}"
    return out


def render_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, dt.datetime):
        return f"'{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"'{value.isoformat()}'"
    if isinstance(value, dt.timedelta):
        micros = value // dt.timedelta(microseconds=1)
        sign, micros = ("-" if micros < 0 else ""), abs(micros)
        seconds, frac = divmod(micros, 1_000_000)
        text = f"{sign}{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        return f"'{text}.{frac:06d}'" if frac else f"'{text}'"
    if isinstance(value, set | frozenset):
        return "{" + ",".join(render_value(v) for v in sorted(value)) + "}"
    if isinstance(value, ZeroDate):
        return f"{value.kind}'{value.text}'"
    raise TypeError(f"no rendering for {type(value).__name__}")


def render_row(row: tuple[Any, ...]) -> str:
    return "(" + ",".join(render_value(v) for v in row) + ")"


def render_change(change: Change) -> str:
    name = f"{change.schema}.{change.table}" if change.table else change.schema
    if change.kind == "truncate":
        return f"truncate {name}"
    if change.kind == "ddl":
        return f"ddl {name}: {change.statement}"
    head = f"{change.kind} {name} [{','.join(change.columns)}]"
    if change.kind == "update":
        pairs = [
            f"{render_row(b)} -> {render_row(a)}"
            for b, a in zip(change.before, change.after, strict=True)
        ]
        return f"{head} " + " | ".join(pairs)
    rows = change.after if change.kind == "insert" else change.before
    return f"{head} " + " ".join(render_row(r) for r in rows)


def render(transactions: list[Transaction], dbname: str) -> str:
    lines = []
    for txn in transactions:
        lines.append("transaction" if txn.changes else "transaction (empty)")
        lines.extend(f"  {render_change(c)}" for c in txn.changes)
    return "\n".join(lines).replace(dbname, "shop") + "\n"


def load_case(path: Path) -> tuple[list[str], list[str], tuple[str, ...]]:
    setup: list[str] = []
    body: list[str] = []
    tables: tuple[str, ...] = ("shop.*",)
    target, pending = setup, ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped == "-- capture":
            target = body
            continue
        if stripped.startswith("-- tables:"):
            tables = tuple(t.strip() for t in stripped.split(":", 1)[1].split(","))
            continue
        if stripped.startswith("--") or not stripped:
            continue
        pending = f"{pending} {line}".strip()
        if pending.endswith(";"):
            target.append(pending[:-1])
            pending = ""
    assert not pending, f"{path.name}: statement without ';': {pending}"
    return setup, body, tables


# -- golden files --------------------------------------------------------------------------


@integration
@pytest.mark.parametrize("case", sorted(p.stem for p in GOLDEN.glob("*.sql")))
def test_golden(origin: Server, dbname: str, case: str) -> None:
    setup, body, patterns = load_case(GOLDEN / f"{case}.sql")
    make_db(origin, dbname)
    run_sql(origin, dbname, setup)
    db = settings(origin)
    start = current_position(db)
    run_sql(origin, dbname, body)
    end = current_position(db)
    tables = TableFilter(tuple(p.replace("shop", dbname, 1) for p in patterns))
    got = render(capture(origin, start, end, tables), dbname)
    expected_file = GOLDEN / f"{case}.expected"
    if os.environ.get("BINLOGSYNC_UPDATE_GOLDEN"):
        expected_file.write_text(got)
    assert got == expected_file.read_text()


# -- type fidelity -------------------------------------------------------------------------

TYPES_TABLE = """
CREATE TABLE types (
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED,
  bi BIGINT, biu BIGINT UNSIGNED,
  d DECIMAL(65,30), d0 DECIMAL(10,0), f FLOAT, db DOUBLE,
  dte DATE, t6 TIME(6), t3 TIME(3), t1 TIME(1), t0 TIME, dt6 DATETIME(6), dt0 DATETIME,
  ts6 TIMESTAMP(6) NULL, yr YEAR,
  c CHAR(10) CHARACTER SET utf8mb4, vc VARCHAR(300) CHARACTER SET utf8mb4,
  tx TEXT CHARACTER SET utf8mb4, lt LONGTEXT CHARACTER SET latin1,
  bn BINARY(4), vb VARBINARY(10), bl BLOB,
  j JSON, e ENUM('a','b','😀'), s SET('x','y','z'), b1 BIT(1), b64 BIT(64),
  nn VARCHAR(5) NOT NULL DEFAULT ''
) DEFAULT CHARSET=utf8mb4
"""

TYPES_ROWS = [
    # extremes, high side
    "(1, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295,"
    " 9223372036854775807, 18446744073709551615,"
    " 99999999999999999999999999999999999.999999999999999999999999999999, 9999999999,"
    " 3.40282e38, 1.7976931348623157e308,"
    " '9999-12-31', '838:59:59.999999', '838:59:59.999', '838:59:59.9', '838:59:59',"
    " '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59',"
    " '2038-01-19 08:44:07.999999', 2155,"
    " '😀é', '𝄞 clef 😀 and more', 'text 😀\\n\\t\\\\ end', 'Grüße Ç',"
    " 0x00FF, 0x00FF00, 0xFF0000FF,"
    " '{\"k\": \"😀\", \"n\": [1, 2.5, null, true]}', '😀', 'x,z', b'1',"
    " b'1111111111111111111111111111111111111111111111111111111111111111', 'v')",
    # extremes, low side, negative times with fractions
    "(2, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0,"
    " -9223372036854775808, 0,"
    " -99999999999999999999999999999999999.999999999999999999999999999999, -9999999999,"
    " -1.17549e-38, -2.2250738585072014e-308,"
    " '1000-01-01', '-838:59:59.999999', '-838:59:59.999', '-838:59:59.9', '-838:59:59',"
    " '1000-01-01 00:00:00.000000', '1000-01-01 00:00:00',"
    " '1970-01-01 05:30:01.000001', 1901,"
    " '', '', '', '',"
    " 0x00, '', '',"
    " '[]', 'a', '', b'0', b'0', '')",
    # small fractions, values around zero, YEAR 0000, float32 that SELECT shows rounded
    "(3, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,"
    " -0.000000000000000000000000000001, 0,"
    " 16777217, 0.1,"
    " '2024-02-29', '-00:00:00.000001', '-00:00:00.001', '-00:00:00.5', '-00:00:01',"
    " '2024-02-29 12:34:56.000001', '2024-02-29 12:34:56',"
    " '2024-02-29 12:34:56.5', 0,"
    " 'a ', 'trailing  ', ' ', 'x',"
    " 0xFFFFFFFF, 0xFF, 0x000102FDFEFF,"
    " '\"just a string\"', 'b', 'y', b'1', 0x8000000000000001, 'n')",
    # NULL in every nullable column
    "(4" + ", NULL" * 35 + ", DEFAULT)",
]


def _select(server: Server, database: str) -> list[tuple[Any, ...]]:
    """The rows as PyMySQL reads them, normalised to capture's representations."""
    with connect(server, database, tz="+00:00") as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM types LIMIT 0")
        names = [d[0] for d in cur.description]
        # FLOAT as DOUBLE: SELECT f prints 6 significant digits (16777216 reads as 16777200).
        select = ", ".join(f"CAST(`{n}` AS DOUBLE)" if n == "f" else f"`{n}`" for n in names)
        cur.execute(f"SELECT {select} FROM types ORDER BY id")
        rows = cur.fetchall()
    out = []
    for row in rows:
        values = dict(zip(names, row, strict=True))
        if values["s"] is not None:  # PyMySQL reads SET as 'x,z'
            values["s"] = set(values["s"].split(",")) if values["s"] else set()
        for bit in ("b1", "b64"):  # PyMySQL reads BIT as big-endian bytes
            if values[bit] is not None:
                values[bit] = int.from_bytes(values[bit], "big")
        out.append(tuple(values.values()))
    return out


def _same(captured: Any, selected: Any, column: str) -> bool:
    if column == "f" and captured is not None and selected is not None:
        return struct.pack("<f", captured) == struct.pack("<f", selected)
    return type(captured) is type(selected) and captured == selected


@integration
def test_every_type_is_captured_as_select_reads_it(origin: Server, dbname: str) -> None:
    make_db(origin, dbname)
    run_sql(origin, dbname, [TYPES_TABLE])
    db = settings(origin)
    start = current_position(db)
    run_sql(origin, dbname, [f"INSERT INTO types VALUES {row}" for row in TYPES_ROWS])
    run_sql(origin, dbname, ["UPDATE types SET nn = CONCAT(nn, '+')", "DELETE FROM types"])
    end = current_position(db)
    # Read back with time_zone +00:00 after re-inserting what was deleted (for SELECT).
    run_sql(origin, dbname, [f"INSERT INTO types VALUES {row}" for row in TYPES_ROWS])
    selected = _select(origin, dbname)

    txns = capture(origin, start, end, TableFilter((f"{dbname}.types",)))
    inserts = [c for t in txns for c in t.changes if c.kind == "insert"]
    (update,) = [c for t in txns for c in t.changes if c.kind == "update"]
    (delete,) = [c for t in txns for c in t.changes if c.kind == "delete"]
    captured = [row for c in inserts for row in c.after]
    assert len(captured) == len(selected) == len(TYPES_ROWS)
    columns = inserts[0].columns
    mismatches = [
        (row_sel[0], col, cap, sel)
        for row_cap, row_sel in zip(captured, selected, strict=True)
        for col, cap, sel in zip(columns, row_cap, row_sel, strict=True)
        if not _same(cap, sel, col)
    ]
    assert mismatches == []
    # The before images of UPDATE and DELETE decode the same way.
    assert list(update.before) == captured
    assert list(delete.before) == [r[:-1] + (r[-1] + "+",) for r in captured]
    # A few facts spelled out, so a failure names the quirk.
    by_id = {row[0]: dict(zip(columns, row, strict=True)) for row in captured}
    assert by_id[1]["biu"] == 2**64 - 1 and by_id[2]["bi"] == -(2**63)
    assert by_id[2]["t6"] == -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999)
    assert by_id[3]["t1"] == dt.timedelta(microseconds=-500000)
    assert by_id[3]["yr"] == 0
    assert by_id[1]["ts6"] == dt.datetime(2038, 1, 19, 3, 14, 7, 999999)  # UTC, not +05:30
    assert by_id[3]["f"] == 16777216.0 and by_id[1]["f"] == 3.40282e38
    assert by_id[1]["bn"] == b"\x00\xff\x00\x00" and by_id[2]["bn"] == b"\x00" * 4
    assert by_id[2]["vb"] == b"" and by_id[2]["bl"] == b""
    assert by_id[3]["s"] == {"y"} and by_id[2]["s"] == set() and by_id[4]["s"] is None
    assert by_id[2]["c"] == "" and by_id[4]["c"] is None and by_id[4]["nn"] == ""
    assert by_id[1]["b64"] == 2**64 - 1 and by_id[3]["b64"] == 2**63 + 1
    assert by_id[1]["j"] == '{"k": "😀", "n": [1, 2.5, null, true]}'
    # Every value survives the wire codec unchanged, with its type.
    for txn in txns:
        again = Transaction.from_wire(codec.unpack(codec.pack(txn.to_wire())))
        assert again == txn
        for change_a, change_b in zip(again.changes, txn.changes, strict=True):
            for row_a, row_b in zip(
                change_a.after + change_a.before, change_b.after + change_b.before, strict=True
            ):
                assert [type(v) for v in row_a] == [type(v) for v in row_b]


ZERO_TABLE = (
    "CREATE TABLE z (id INT PRIMARY KEY, d DATE, dt0 DATETIME, dt6 DATETIME(6), "
    "ts0 TIMESTAMP NULL, ts6 TIMESTAMP(6) NULL)"
)
ZERO_ROWS = [
    "(1, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00',"
    " '0000-00-00 00:00:00')",
    "(2, '2024-00-10', '2024-05-00 10:11:12', '2024-00-00 23:59:59.999999', NULL,"
    " '1970-01-01 05:30:01')",
    "(3, '2004-04-31', '2004-02-30 01:02:03', '0000-01-01 00:00:00.000001', '2024-02-29 12:00:00',"
    " NULL)",
    "(4, '0000-01-01', '2024-02-29 00:00:00', '2003-02-29 00:00:00.5', '0000-00-00 00:00:00',"
    " '0000-00-00 00:00:00')",
]


def _texts(server: Server, database: str, table: str, columns: list[str]) -> list[list[Any]]:
    """The rows' date columns as the server's text (NULL as None), in UTC."""
    select = ", ".join(f"CAST(`{c}` AS CHAR)" for c in columns)
    with connect(server, database, tz="+00:00") as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {select} FROM `{table}` ORDER BY id")
        return [list(row) for row in cur.fetchall()]


def _as_text(value: Any, fsp: int) -> Any:
    if isinstance(value, ZeroDate):
        return value.text
    if isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ", timespec="microseconds")
        return text[: 20 + fsp] if fsp else text[:19]
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


@integration
@pytest.mark.parametrize("fast", [True, False], ids=["rowdecode", "library"])
def test_zero_partial_and_invalid_dates_are_captured_as_select_reads_them(
    origin: Server, dbname: str, fast: bool
) -> None:
    """Not NULL, not 1970-01-01: the server's own value, on both paths (the library's loses
    these dates; reader.py decodes such an event again with rowdecode.py)."""
    make_db(origin, dbname)
    run_sql(origin, dbname, [ZERO_TABLE])
    db = settings(origin)
    start = current_position(db)
    write = ["SET SESSION sql_mode = 'ALLOW_INVALID_DATES'"]
    run_sql(origin, dbname, [*write, *(f"INSERT INTO z VALUES {row}" for row in ZERO_ROWS)])
    run_sql(origin, dbname, [*write, "UPDATE z SET id = id + 10", "DELETE FROM z"])
    end = current_position(db)
    run_sql(origin, dbname, [*write, *(f"INSERT INTO z VALUES {row}" for row in ZERO_ROWS)])
    columns = ["d", "dt0", "dt6", "ts0", "ts6"]
    fsps = [0, 0, 6, 0, 6]
    selected = _texts(origin, dbname, "z", columns)
    zero = "0000-00-00 00:00:00"
    assert selected[0] == ["0000-00-00", zero, f"{zero}.000000", zero, f"{zero}.000000"]

    txns = capture(origin, start, end, TableFilter((f"{dbname}.z",)), fast=fast)
    changes = [c for t in txns for c in t.changes]
    inserted = [row for c in changes if c.kind == "insert" for row in c.after]
    (update,) = [c for c in changes if c.kind == "update"]
    (delete,) = [c for c in changes if c.kind == "delete"]
    got = [[_as_text(v, f) for v, f in zip(row[1:], fsps, strict=True)] for row in inserted]
    assert got == selected
    assert (
        [r[1:] for r in update.before] == [r[1:] for r in update.after] == [r[1:] for r in inserted]
    )
    assert [r[1:] for r in delete.before] == [r[1:] for r in inserted]
    kept = [v for row in inserted for v in row if isinstance(v, ZeroDate)]
    assert {z.kind for z in kept} == {"date", "datetime", "timestamp"}
    assert ZeroDate("timestamp", fsp=6) in inserted[0]
    for txn in txns:  # and through the wire codec, unchanged
        assert Transaction.from_wire(codec.unpack(codec.pack(txn.to_wire()))) == txn


@integration
def test_a_zero_date_the_library_alone_reads_halts_capture(origin: Server, dbname: str) -> None:
    """A pre-5.6 DATETIME (here MariaDB's, mysql56_temporal_format=OFF) is left to the
    library, which cannot keep a zero date: capture halts with the table and column named
    instead of sending NULL. Its zero TIMESTAMP is kept (1970-01-01 is no TIMESTAMP value)."""
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL mysql56_temporal_format = OFF")
        try:
            cur.execute(f"CREATE DATABASE `{dbname}`")
            cur.execute(
                f"CREATE TABLE `{dbname}`.old (id INT PRIMARY KEY, d DATETIME, ts TIMESTAMP NULL)"
            )
        finally:
            cur.execute("SET GLOBAL mysql56_temporal_format = ON")
    db = settings(origin)
    start = current_position(db)
    run_sql(
        origin,
        dbname,
        [
            "SET SESSION sql_mode = ''",
            "INSERT INTO old VALUES (1, '2024-03-01 10:00:00', '0000-00-00 00:00:00')",
            "INSERT INTO old VALUES (2, '0000-00-00 00:00:00', NULL)",
        ],
    )
    reader = BinlogReader(
        settings(origin), next(_reader_ids), start, TableFilter((f"{dbname}.old",)), heartbeat=0.2
    )
    watchdog = threading.Timer(30, reader.stop)
    watchdog.start()
    got: list[Transaction] = []
    try:
        with pytest.raises(CaptureHalted) as info:
            for txn in reader.transactions():
                got.append(txn)  # type: ignore[arg-type]
    finally:
        watchdog.cancel()
        reader.close()
    first = [row for t in got for c in t.changes for row in c.after]
    assert first == [(1, dt.datetime(2024, 3, 1, 10), ZeroDate("timestamp"))]
    assert f"{dbname}.old.d holds a date that is no calendar date" in info.value.message
    assert "ALTER TABLE … FORCE" in info.value.fix


@unit
@pytest.mark.parametrize(
    ("library", "stored"),
    [
        # what python-mysql-replication returns → the stored TIME value
        ("-838:59:58.000001", "-838:59:58.999999"),
        ("-0:00:00.990000", "-0:00:00.010000"),
        ("-0:00:00.500000", "-0:00:00.500000"),
        ("-0:00:01", "-0:00:01"),
        ("12:00:00.250000", "12:00:00.250000"),
    ],
)
def test_negative_time_correction(library: str, stored: str) -> None:
    def parse(text: str) -> dt.timedelta:
        sign = -1 if text.startswith("-") else 1
        h, m, s = text.lstrip("-").split(":")
        return sign * dt.timedelta(hours=int(h), minutes=int(m), seconds=float(s))

    assert _fix_negative_time(parse(library)) == parse(stored)


# -- shapes of transactions ----------------------------------------------------------------


@integration
def test_composite_primary_key_update(origin: Server, dbname: str) -> None:
    make_db(origin, dbname)
    run_sql(
        origin,
        dbname,
        [
            "CREATE TABLE ol (order_id INT, line VARCHAR(8), qty INT, PRIMARY KEY (order_id, line))",
            "INSERT INTO ol VALUES (1, 'a', 1), (1, 'b', 2), (2, 'a', 3)",
        ],
    )
    db = settings(origin)
    start = current_position(db)
    run_sql(
        origin,
        dbname,
        ["UPDATE ol SET line = CONCAT(line, 'z'), qty = qty * 10 WHERE order_id = 1"],
    )
    end = current_position(db)
    (txn,) = capture(origin, start, end, TableFilter((f"{dbname}.ol",)))
    (change,) = txn.changes
    assert change.kind == "update" and change.columns == ("order_id", "line", "qty")
    assert change.before == ((1, "a", 1), (1, "b", 2))
    assert change.after == ((1, "az", 10), (1, "bz", 20))


@integration
def test_five_thousand_rows_in_one_statement_are_one_transaction(
    origin: Server, dbname: str
) -> None:
    make_db(origin, dbname)
    run_sql(origin, dbname, ["CREATE TABLE big (id INT PRIMARY KEY, pad VARCHAR(40))"])
    db = settings(origin)
    start = current_position(db)
    values = ", ".join(f"({i}, 'row {i:05d} padding padding')" for i in range(5000))
    run_sql(origin, dbname, [f"INSERT INTO big VALUES {values}"])
    end = current_position(db)
    (txn,) = capture(origin, start, end, TableFilter((f"{dbname}.*",)))
    assert all(c.kind == "insert" and c.table == "big" for c in txn.changes)
    ids = [row[0] for c in txn.changes for row in c.after]
    assert ids == list(range(5000))
    assert txn.row_count == 5000
    # Bigger than max_binlog_size (64K): a transaction never spans two files; the server
    # rotates after it, and the transaction ends in the file its GTID event is in.
    events = _binlog_events(origin, txn.position.file)
    assert [row[4] for row in events if row[2] == "Xid"][-1] == txn.position.offset


def _binlog_events(server: Server, file: str) -> list[tuple[Any, ...]]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{file}'")
        return list(cur.fetchall())


@integration
def test_rotation_and_resume_from_mid_stream(origin: Server, dbname: str) -> None:
    make_db(origin, dbname)
    run_sql(origin, dbname, ["CREATE TABLE r (id INT PRIMARY KEY, pad VARCHAR(200))"])
    db = settings(origin)
    start = current_position(db)
    run_sql(origin, dbname, [f"INSERT INTO r VALUES ({i}, '{'p' * 200}')" for i in range(700)])
    end = current_position(db)
    tables = TableFilter((f"{dbname}.r",))
    everything = capture(origin, start, end, tables)
    assert [c.after[0][0] for t in everything for c in t.changes] == list(range(700))
    positions = [t.position for t in everything]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    files = sorted({p.file for p in positions})
    assert len(files) >= 3, "max_binlog_size=64K should have rotated the binlog"

    # Every position is exactly where the server says the transaction's XID event ends,
    # and its GTID is the one the server wrote for it.
    for file in files:
        events = _binlog_events(origin, file)
        ends = {row[4]: row for row in events}
        gtids = [row[5].split()[-1] for row in events if row[2] == "Gtid"]
        for txn in (t for t in everything if t.position.file == file):
            assert ends[txn.position.offset][2] == "Xid"
            assert txn.position.gtid in gtids

    # Resume mid-file, and at the last transaction of a file (the next is in the next file).
    mid = len(everything) // 2
    last_of_first_file = max(i for i, t in enumerate(everything) if t.position.file == files[0])
    for k in (mid, last_of_first_file):
        resumed = capture(origin, everything[k].position, end, tables)
        assert [t.to_wire() for t in resumed] == [t.to_wire() for t in everything[k + 1 :]]


@integration
def test_table_map_cache_follows_alter_table(origin: Server, dbname: str) -> None:
    make_db(origin, dbname)
    run_sql(origin, dbname, ["CREATE TABLE a (id INT PRIMARY KEY, x INT)"])
    db = settings(origin)
    start = current_position(db)
    run_sql(
        origin,
        dbname,
        [
            *(f"INSERT INTO a VALUES ({i}, {i})" for i in range(20)),
            "ALTER TABLE a ADD COLUMN y VARCHAR(5) DEFAULT 'new', MODIFY x BIGINT",
            *(f"INSERT INTO a (id, x) VALUES ({i}, {i})" for i in range(20, 40)),
            "ALTER TABLE a DROP COLUMN x",
            "INSERT INTO a VALUES (40, 'last')",
        ],
    )
    end = current_position(db)
    tables = TableFilter((f"{dbname}.a",))
    cached = capture(origin, start, end, tables)
    plain = capture(origin, start, end, tables, cache=False)
    assert [t.to_wire() for t in cached] == [t.to_wire() for t in plain]
    inserts = [c for t in cached for c in t.changes if c.kind == "insert"]
    assert inserts[0].columns == ("id", "x") and inserts[0].after == ((0, 0),)
    assert inserts[20].columns == ("id", "x", "y") and inserts[20].after == ((20, 20, "new"),)
    assert inserts[-1].columns == ("id", "y") and inserts[-1].after == ((40, "last"),)


@integration
def test_events_read_here_equal_the_librarys(origin: Server, dbname: str) -> None:
    """events.py reads GTID, XID and Rows events itself; the library reads every event when
    fast_events is off. Both must yield the same transactions, quirks and all."""
    make_db(origin, dbname)
    run_sql(
        origin,
        dbname,
        [
            TYPES_TABLE,
            "CREATE TABLE sb (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120), pad CHAR(60))",
            "CREATE TABLE other (id INT PRIMARY KEY, v VARCHAR(10))",
        ],
    )
    db = settings(origin)
    start = current_position(db)
    statements = [f"INSERT INTO types VALUES {row}" for row in TYPES_ROWS]
    statements += [f"INSERT INTO sb VALUES ({i}, {i * 7}, 'c{i}', 'p{i}')" for i in range(40)]
    statements += [
        "BEGIN",
        "UPDATE sb SET k = k + 1 WHERE id < 20",
        "UPDATE sb SET c = 'changed' WHERE id = 3",
        "DELETE FROM sb WHERE id = 4",
        "INSERT INTO sb VALUES (4, 1, 'again', 'p')",
        "INSERT INTO other VALUES (1, 'not routed')",
        "COMMIT",
        "UPDATE types SET nn = CONCAT(nn, '+')",
        "ALTER TABLE sb ADD COLUMN extra INT NULL",
        "UPDATE sb SET extra = id WHERE id < 5",
        "DELETE FROM types",
        "DELETE FROM sb WHERE id >= 30",
    ]
    run_sql(origin, dbname, statements)
    end = current_position(db)
    routed = TableFilter((f"{dbname}.types", f"{dbname}.sb"))
    counts: dict[str, int] = {}
    here = capture(origin, start, end, routed, counts=counts)
    library = capture(origin, start, end, routed, fast=False)
    assert [t.to_wire() for t in here] == [t.to_wire() for t in library]
    assert repr(here) == repr(library)  # the same types too (Decimal digits, bytes, …)
    assert counts["events"] > 0
    assert counts["rows_events"] >= 40  # the sb inserts at least, decoded by rowdecode.py


@integration
def test_a_row_over_16_mib_spans_packets_and_is_read_whole(origin: Server, dbname: str) -> None:
    """A binlog event over 16 MiB comes as several protocol packets; events.py joins them."""
    make_db(origin, dbname)
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.max_allowed_packet")
        (saved,) = cur.fetchone()
        cur.execute("SET GLOBAL max_allowed_packet = 64 * 1024 * 1024")
    try:
        run_sql(origin, dbname, ["CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB)"])
        db = settings(origin)
        start = current_position(db)
        size = 20 * 1024 * 1024
        run_sql(origin, dbname, [f"INSERT INTO big VALUES (1, REPEAT('z', {size}))"])
        end = current_position(db)
    finally:
        with origin.connect() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL max_allowed_packet = %s", (saved,))
    reader = BinlogReader(
        settings(origin), next(_reader_ids), start, TableFilter((f"{dbname}.big",)),
        part_bytes=64 * 1024 * 1024,
    )  # fmt: skip
    try:
        txn = next(iter(reader.transactions()))
    finally:
        reader.close()
    assert isinstance(txn, Transaction) and txn.position.gtid == end.gtid
    assert reader.source is not None and reader.source.fast_rows_events == 1
    (change,) = txn.changes
    assert change.after == ((1, b"z" * size),)


@integration
def test_table_map_cache_is_used(origin: Server, dbname: str) -> None:
    make_db(origin, dbname)
    run_sql(origin, dbname, ["CREATE TABLE c (id INT PRIMARY KEY)"])
    db = settings(origin)
    start = current_position(db)
    run_sql(origin, dbname, [f"INSERT INTO c VALUES ({i})" for i in range(50)])
    end = current_position(db)
    reader = BinlogReader(db, next(_reader_ids), start, TableFilter((f"{dbname}.c",)))
    try:
        for txn in reader.transactions():
            if txn.position >= end:
                break
    finally:
        reader.close()
    assert reader.table_map_hits >= 48  # the first one per file is parsed


@integration
@pytest.mark.parametrize("marker", ["checkpoint", "lane"])
def test_own_marker_writes_come_through_empty(sandbox: Sandbox, dbname: str, marker: str) -> None:
    """A transaction that writes our applier's checkpoint row, or a seed lane's row
    (engines/mariadb/checkpoint.py), is ours: it travels without changes."""
    # A private server: the binlogsync schema on the shared ones belongs to the applier tests.
    server = sandbox.start("capture-loop", 31)
    try:
        make_db(server, dbname)
        run_sql(
            server,
            dbname,
            [
                "CREATE DATABASE IF NOT EXISTS binlogsync",
                f"CREATE TABLE IF NOT EXISTS binlogsync.{marker} "
                "(origin VARCHAR(64) PRIMARY KEY, position BIGINT NOT NULL)",
                "CREATE TABLE t (id INT PRIMARY KEY)",
            ],
        )
        db = settings(server)
        start = current_position(db)
        run_sql(
            server,
            dbname,
            [
                "BEGIN",
                f"REPLACE INTO binlogsync.{marker} VALUES ('o1', 42)",
                "INSERT INTO t VALUES (1)",
                "COMMIT",
                "INSERT INTO t VALUES (2)",
                "BEGIN",
                "INSERT INTO t VALUES (3)",
                f"REPLACE INTO binlogsync.{marker} VALUES ('o1', 43)",
                "COMMIT",
            ],
        )
        end = current_position(db)
        got = capture(server, start, end, TableFilter(("*.*",)))
        assert [[c.after for c in tx.changes] for tx in got] == [[], [((2,),)], []]
    finally:
        sandbox.stop("capture-loop")


# -- control: stop, errors, positions ------------------------------------------------------


@integration
def test_stop_from_another_thread_returns_promptly(origin: Server, dbname: str) -> None:
    make_db(origin, dbname)
    run_sql(origin, dbname, ["CREATE TABLE s (id INT PRIMARY KEY)"])
    db = settings(origin)
    start = current_position(db)
    run_sql(origin, dbname, ["INSERT INTO s VALUES (1)"])
    heartbeat = 0.5
    reader = BinlogReader(
        db, next(_reader_ids), start, TableFilter((f"{dbname}.s",)), heartbeat=heartbeat
    )
    seen = threading.Event()
    finished = threading.Event()
    got: list[Transaction] = []

    def consume() -> None:
        for txn in reader.transactions():
            got.append(txn)
            seen.set()
        finished.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    assert seen.wait(30), "the first transaction never arrived"
    # The stream is now idle: only heartbeats arrive.
    stopped_at = time.monotonic()
    reader.stop()
    assert finished.wait(heartbeat * 4 + 2), "transactions() did not return after stop()"
    elapsed = time.monotonic() - stopped_at
    thread.join(5)
    reader.close()
    assert elapsed < heartbeat * 2 + 1
    assert [c.after for t in got for c in t.changes] == [((1,),)]


@integration
def test_positions(origin: Server) -> None:
    db = settings(origin)
    first = earliest_position(db)
    now = current_position(db)
    # MariaDB: GTID positions. The oldest is the GTID state where the oldest binlog starts.
    assert first.by_gtid and now.by_gtid and first.offset == 4
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        oldest_file = cur.fetchall()[0][0]
        cur.execute("SELECT BINLOG_GTID_POS(%s, 4)", (oldest_file,))
        assert first.gtid == cur.fetchone()[0] and first.file == oldest_file
    assert first < now
    with origin.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, offset = cur.fetchone()[:2]
        cur.execute("SELECT @@gtid_binlog_pos")
        (gtid,) = cur.fetchone()
    assert (now.file, now.offset) == (file, offset)
    assert now.gtid == gtid and now.key == Position.of_state(gtid).key


@integration
def test_unreachable_server() -> None:
    db = DatabaseSettings("127.0.0.1", free_port())
    reader = BinlogReader(db, next(_reader_ids), Position("binlog.000001", 4), TableFilter())
    with pytest.raises(UnreachableError, match=f"127.0.0.1:{db.port}"):
        next(reader.transactions())
    with pytest.raises(UnreachableError, match="running"):
        current_position(db)
    with pytest.raises(UnreachableError):
        earliest_position(db)


@integration
def test_reading_from_a_missing_binlog_file_says_reseed(origin: Server) -> None:
    reader = BinlogReader(
        settings(origin), next(_reader_ids), Position("binlog.999999", 4), TableFilter()
    )
    with pytest.raises(PreflightError, match="reseed"):
        next(reader.transactions())


@integration
def test_wrong_password_is_not_retryable(origin: Server) -> None:
    db = DatabaseSettings(origin.host, origin.port, "nobody_here", "wrong")
    with pytest.raises(PreflightError, match="access denied") as info:
        current_position(db)
    assert not info.value.retryable


# -- statements ----------------------------------------------------------------------------


@unit
@pytest.mark.parametrize(
    ("sql", "kind", "tables", "schema"),
    [
        ("BEGIN", "control", (), None),
        ("COMMIT", "control", (), None),
        ("XA COMMIT 'x'", "control", (), None),
        ("TRUNCATE TABLE t", "truncate", (("d", "t"),), None),
        ("truncate `o``dd`.`x y`", "truncate", (("o`dd", "x y"),), None),
        ("CREATE TABLE IF NOT EXISTS s.t (id INT)", "ddl", (("s", "t"),), None),
        ("create or replace table `t` like u", "ddl", (("d", "t"),), None),
        ("/* hi */ ALTER ONLINE TABLE t ADD x INT", "ddl", (("d", "t"),), None),
        ("ALTER TABLE t RENAME TO s.u", "ddl", (("d", "t"), ("s", "u")), None),
        ("ALTER TABLE t RENAME COLUMN a TO b", "ddl", (("d", "t"),), None),
        (
            "DROP TABLE IF EXISTS `a`,`s`.`b` /* generated by server */",
            "ddl",
            (("d", "a"), ("s", "b")),
            None,
        ),
        (
            "RENAME TABLE a TO b, s.c TO s.d",
            "ddl",
            (("d", "a"), ("d", "b"), ("s", "c"), ("s", "d")),
            None,
        ),
        ("CREATE UNIQUE INDEX i ON t (a)", "ddl", (("d", "t"),), None),
        ("DROP INDEX i ON s.t", "ddl", (("s", "t"),), None),
        ("CREATE DATABASE shop2", "ddl", (), "shop2"),
        ("CREATE VIEW v AS SELECT 1", "ddl", (), "d"),
        ("/*!40000 ALTER TABLE `t` DISABLE KEYS */", "ddl", (("d", "t"),), None),
        ("GRANT SELECT ON d.* TO u", "ignore", (), None),
        ("CREATE USER 'u'@'%'", "ignore", (), None),
        ("DROP ROLE r", "ignore", (), None),
        ("RENAME USER a TO b", "ignore", (), None),
        ("OPTIMIZE TABLE t", "ignore", (), None),
        ("INSERT INTO t VALUES (1)", "dml", (), None),
    ],
)
def test_parse_statement(
    sql: str, kind: str, tables: tuple[tuple[str, str], ...], schema: str | None
) -> None:
    statement = parse_statement(sql, "d")
    assert statement.kind == kind
    assert statement.tables == tables
    if schema is not None:
        assert statement.schema == schema


@unit
@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        ("INSERT INTO t VALUES (11, 'row', REPEAT('b', 3))", [("d", "t")]),
        ("INSERT IGNORE INTO `s`.`t` SELECT * FROM u", [("s", "t"), ("d", "u")]),
        ("REPLACE LOW_PRIORITY INTO t (a) VALUES (1)", [("d", "t")]),
        (
            "UPDATE LOW_PRIORITY IGNORE t JOIN s.u ON t.id = u.id SET t.a = 1",
            [("d", "t"), ("s", "u")],
        ),
        ("DELETE QUICK FROM t WHERE id = 4", [("d", "t")]),
        ("LOAD DATA INFILE 'f' INTO TABLE t", [("d", "t")]),
        ("CALL p(1)", []),
    ],
)
def test_dml_tables_names_where_tables_go(sql: str, tables: list[tuple[str, str]]) -> None:
    """For the halt message: with a route like `d.*`, names_in's safe superset holds every
    word of the statement (d.INSERT, d.11, …) and once hid the real table from the message."""
    assert dml_tables(sql, "d") == tables


@unit
@pytest.mark.parametrize(
    ("sql", "columns"),
    [
        ("ALTER TABLE c DROP COLUMN gone", ["gone"]),
        ("ALTER ONLINE TABLE s.c DROP a, DROP COLUMN IF EXISTS `b`, ADD d INT", ["a", "b"]),
        ("ALTER TABLE t DROP `key`", ["key"]),
        ("ALTER TABLE t ALTER COLUMN c DROP DEFAULT", []),
        ("ALTER TABLE t DROP INDEX i, DROP PRIMARY KEY, DROP FOREIGN KEY f", []),
        ("ALTER TABLE t ADD CONSTRAINT x CHECK (a > 0), DROP CONSTRAINT y, DROP CHECK z", []),
        ("ALTER TABLE t COMMENT 'drop x'", []),
        ("DROP TABLE t", []),
    ],
)
def test_dropped_columns(sql: str, columns: list[str]) -> None:
    assert dropped_columns(sql) == columns


@unit
def test_parse_statement_without_default_schema() -> None:
    assert parse_statement("CREATE TABLE t (id INT)", "").tables == ()
    assert parse_statement("CREATE TABLE s.t (id INT)", "").tables == (("s", "t"),)


# -- assembly paths the MariaDB sandbox does not produce -----------------------------------


def _query(sql: str, log_pos: int, schema: bytes = b"d") -> Any:
    packet = type("Packet", (), {"log_pos": log_pos, "event_size": 20})()
    fields = {"schema": schema, "query": sql, "packet": packet, "timestamp": 7, "event_size": 1}
    return type("Query", (), fields)()


@unit
def test_query_rollback_discards_and_commit_ends_a_group() -> None:
    reader = BinlogReader(
        DatabaseSettings(), 1, Position("binlog.000003", 4), TableFilter(), describe_tables=False
    )
    # MySQL style: BEGIN … COMMIT as Query events, rows in between.
    group, done = reader._on_query(_query("BEGIN", 100), None)
    assert group is not None and group.needs_commit and done is None
    group.changes.append(Change("insert", "d", "t", ("id",), (), ((1,),)))
    group, done = reader._on_query(_query("ROLLBACK", 200), group)
    assert group is None and done is None  # nothing leaves
    group, _ = reader._on_query(_query("BEGIN", 300), None)
    assert group is not None
    group.changes.append(Change("insert", "d", "t", ("id",), (), ((2,),)))
    group, _ = reader._on_query(_query("ROLLBACK TO SAVEPOINT s", 350), group)
    assert group is not None  # a partial rollback keeps the transaction open
    group, done = reader._on_query(_query("COMMIT", 400), group)
    assert group is None and done is not None
    assert done.position == Position("binlog.000003", 400)
    assert [c.after for c in done.changes] == [((2,),)]
    # A DDL statement without BEGIN is a transaction of its own.
    group, done = reader._on_query(_query("DROP TABLE `t`", 500), None)
    assert group is None and done is not None
    assert [(c.kind, c.table) for c in done.changes] == [("ddl", "t")]
