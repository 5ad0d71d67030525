"""Seed pieces without servers: the chunk map the hub checks, the progress line, key paging."""

from __future__ import annotations

import io
from typing import Any

import pytest

from binlogsync.config import DatabaseSettings
from binlogsync.errors import ProtocolError, UsageError
from binlogsync.reconcile.checksums import after_where
from binlogsync.seed.progress import Progress, duration, line
from binlogsync.seed.run import SeedOptions, _resume
from binlogsync.seed.tables import route_patterns
from binlogsync.transport.seedchunk import SeedChunk

GOOD = SeedChunk("run1", "db", "t", True, False, b"\x91\x05", 10, 10, 100, False, 1.7e9)


def test_a_seed_chunk_travels_unchanged() -> None:
    assert SeedChunk.from_wire(GOOD.to_wire()) == GOOD


@pytest.mark.parametrize(
    "field, value",
    [
        ("run", ""),
        ("run", 5),
        ("schema", ""),
        ("table", "x" * 65),
        ("first", 1),
        ("reset", None),
        ("last_key", "5"),
        ("last_key", b"k" * 70_000),
        ("rows", -1),
        ("rows", True),
        ("done_rows", 2**63),
        ("total_rows", 1.0),
        ("done", "yes"),
        ("started", True),
        ("started", -1),
    ],
)
def test_a_bad_seed_field_is_named(field: str, value: Any) -> None:
    wire = {**GOOD.to_wire(), field: value}
    with pytest.raises(ProtocolError, match=field):
        SeedChunk.from_wire(wire)


def test_a_seed_that_is_no_map_is_refused() -> None:
    with pytest.raises(ProtocolError, match="map"):
        SeedChunk.from_wire([1, 2])


def test_keyset_paging_is_strictly_after_the_last_key() -> None:
    assert after_where(["id"], None) == ("TRUE", [])
    sql, params = after_where(["id"], (5,))
    assert sql == "((`id` > %s))" and params == [5]
    sql, params = after_where(["a", "b"], (1, "x"))
    assert sql == "((`a` > %s) OR (`a` = %s AND `b` > %s))" and params == [1, 1, "x"]


def test_the_progress_line_shows_rows_rate_and_eta() -> None:
    text = line("db.t", 250_000, 1_000_000, 50_000.0, False)
    assert "250,000/1,000,000 rows" in text
    assert "50,000 rows/s" in text and "ETA 0:15" in text
    assert "[######" in text and "done" not in text
    done = line("db.t", 1_000_000, 900_000, 50_000.0, True)
    assert "1,000,000/1,000,000" in done and "done in 0:20" in done  # estimate was low
    assert duration(3725) == "1:02:05" and duration(None) == "?"


def test_progress_off_a_terminal_prints_lines_not_redraws() -> None:
    out = io.StringIO()
    progress = Progress(out, every=3600)
    progress.start("db.t", 0, 100)
    progress.applied(50)  # within `every`: not shown
    progress.finish()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in out.getvalue()
    assert "done in" in lines[-1]


def test_routes_name_the_patterns_for_one_target() -> None:
    routes = [
        {"origin": "o", "targets": ["a", "b"], "tables": ["shop.*"]},
        {"origin": "o", "targets": ["b"], "tables": ["crm.users"]},
        {"origin": "p", "targets": ["b"], "tables": ["*.*"]},
    ]
    assert route_patterns(routes, "o", "b") == ["shop.*", "crm.users"]
    assert route_patterns(routes, "o", "c") == []


def _options(**kw: Any) -> SeedOptions:
    return SeedOptions("c.toml", "o", "t", DatabaseSettings(), **kw)


def test_options_refuse_nonsense() -> None:
    with pytest.raises(UsageError):
        _options(chunk_rows=0)
    with pytest.raises(UsageError):
        _options(max_rows_per_second=-1)


class _T:
    def __init__(self, schema: str, table: str) -> None:
        self.schema, self.table = schema, table


def test_resume_takes_the_interrupted_run_and_a_finished_one_starts_over() -> None:
    tables = [_T("db", "a"), _T("db", "b")]
    rec = {
        ("db", "a"): {"run": "r1", "done": True, "updated": 1.0},
        ("db", "b"): {"run": "r1", "done": False, "updated": 2.0},
    }
    run, resume = _resume(_options(), tables, rec)  # type: ignore[arg-type]
    assert run == "r1" and set(resume) == {("db", "a"), ("db", "b")}
    run, resume = _resume(_options(restart=True), tables, rec)  # type: ignore[arg-type]
    assert run != "r1" and resume == {}
    finished = {k: {**v, "done": True} for k, v in rec.items()}
    run, resume = _resume(_options(), tables, finished)  # type: ignore[arg-type]
    assert run != "r1" and resume == {}


def test_parallel_must_be_from_1_to_64() -> None:
    for bad in (0, 65):
        with pytest.raises(UsageError, match="--parallel from 1 to 64"):
            _options(parallel=bad)
    assert _options(parallel=1).parallel == 1


def _chunk(**kw: Any) -> SeedChunk:
    base = dict(
        run="run1", schema="db", table="t", first=False, reset=False, last_key=b"\x91\x0a",
        rows=5, done_rows=10, total_rows=100, done=False, started=1.7e9,
        after=b"\x91\x05", chained=True, rewind=False,
    )  # fmt: skip
    base.update(kw)
    return SeedChunk(**base)  # type: ignore[arg-type]


def test_a_chained_chunk_travels_with_its_start_and_an_old_one_without() -> None:
    chunk = _chunk(rewind=True)
    assert SeedChunk.from_wire(chunk.to_wire()) == chunk
    assert "after" not in GOOD.to_wire() and SeedChunk.from_wire(GOOD.to_wire()) == GOOD
    with pytest.raises(ProtocolError, match="'after'"):
        SeedChunk.from_wire({**chunk.to_wire(), "after": 5})
    with pytest.raises(ProtocolError, match="'rewind'"):
        SeedChunk.from_wire({**chunk.to_wire(), "rewind": 1})


def test_the_hub_records_a_chunk_only_where_it_continues_the_record() -> None:
    import sqlite3

    from binlogsync.hub.seeds import SeedRecords

    records = SeedRecords(sqlite3.connect(":memory:", isolation_level=None))

    def where() -> tuple[int, str | None]:
        (row,) = records.status()
        return row["rows"], row["last_key"]

    first = _chunk(first=True, after=None, last_key=b"\x91\x05", done_rows=5)
    assert records.applied("o", "t", first, "0-1-1")
    # Chunk 3 applied while chunk 2 was lost: the record stays after chunk 1.
    third = _chunk(after=b"\x91\x0a", last_key=b"\x91\x0f", done_rows=15)
    assert not records.applied("o", "t", third, "0-1-3")
    assert where() == (5, "9105")
    # Chunk 2 continues the record; then chunk 3 does.
    assert records.applied("o", "t", _chunk(), "0-1-2")
    assert records.applied("o", "t", third, "0-1-3")
    assert where() == (15, "910f")
    # Another run's chunk does not continue this run's record; a rewind moves it back.
    assert not records.applied("o", "t", _chunk(run="run2", after=b"\x91\x0f"), "0-1-4")
    assert records.applied("o", "t", _chunk(rewind=True), "0-1-5")
    assert where() == (10, "910a")
    # A seed that sends no start is recorded as before.
    assert records.applied("o", "t", _chunk(after=None, chained=False, done_rows=99), "0-1-6")
    assert where() == (99, "910a")
