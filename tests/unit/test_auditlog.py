"""The audit-log target store (apply/auditlog.py) on real files: exact types, every line once
across replays, crash recovery that cuts back to the checkpoint, rotation, transactions in
parts, and the refusal to rewind."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest

from binlogsync.apply.auditlog import AuditLogStore, checkpoints
from binlogsync.errors import ApplyError
from binlogsync.model import Change, Part, Transaction
from binlogsync.position import Position
from binlogsync.zerodate import ZeroDate

pytestmark = pytest.mark.unit


def pos(seq: int) -> Position:
    return Position("binlog.000001", 100 + seq, f"0-1-{seq}", scheme="gtid")


def tx(seq: int, *rows: tuple[int, str]) -> Transaction:
    change = Change("insert", "shop", "t", ("id", "note"), after=tuple(rows))
    return Transaction(pos(seq), 1_700_000_000.0 + seq, (change,))


def read(root: Path, origin: str = "db1") -> list[dict]:  # type: ignore[type-arg]
    out = []
    for file in sorted((root / origin).glob("audit-*.jsonl")):
        out += [json.loads(line) for line in file.read_text().splitlines()]
    return out


def test_every_value_keeps_its_exact_type(tmp_path: Path) -> None:
    store = AuditLogStore(tmp_path, "db1", 1 << 20)
    row = (Decimal("12345678901234567890.123456789012345678901234567890"), b"\x00\xff",
           dt.datetime(2026, 1, 2, 3, 4, 5, 600), dt.date(1000, 1, 1),
           dt.timedelta(hours=-838, minutes=-59, seconds=-59), {"a", "b"}, None, 0.1,
           18446744073709551615, "✓ 𝄞")  # fmt: skip
    columns = ("d", "b", "ts", "day", "t", "s", "n", "f", "u", "txt")
    change = Change("update", "shop", "t", columns, before=(row,), after=(row,))
    store.apply([Transaction(pos(1), 1_700_000_000.5, (change,))])
    [line] = read(tmp_path)
    assert line["kind"] == "update" and line["table"] == "shop.t" and line["gtid"] == "0-1-1"
    assert line["commit_time"] == "2023-11-14T22:13:20.500000+00:00"
    after = line["after"]
    assert after["d"] == "12345678901234567890.123456789012345678901234567890"
    assert after["b"] == "AP8=" and after["ts"] == "2026-01-02T03:04:05.000600"
    assert after["day"] == "1000-01-01" and after["t"] == "-838:59:59.000000"
    assert after["s"] == ["a", "b"] and after["n"] is None and after["f"] == 0.1
    assert after["u"] == 18446744073709551615 and after["txt"] == "✓ 𝄞"
    assert line["types"] == {"d": "decimal", "b": "bytes", "ts": "datetime", "day": "date",
                             "t": "time", "s": "set"}  # fmt: skip
    assert line["before"] == after
    store.close()


def test_a_replay_writes_nothing_twice_and_a_crash_is_cut_back(tmp_path: Path) -> None:
    store = AuditLogStore(tmp_path, "db1", 1 << 20)
    assert store.apply([tx(1, (1, "a")), tx(2, (2, "b"), (3, "c"))]) == pos(2)
    assert store.apply([tx(1, (1, "a")), tx(2, (2, "b"), (3, "c")), tx(3, (4, "d"))]) == pos(3)
    assert [line["after"]["id"] for line in read(tmp_path)] == [1, 2, 3, 4]
    assert [line["n"] for line in read(tmp_path)] == [0, 0, 1, 0]
    store.close()
    # A crash after lines were written but before the checkpoint moved: they are cut off.
    current = tmp_path / "db1" / "audit-000001.jsonl"
    with current.open("a") as handle:
        handle.write('{"half": "a line of a group that never committ')
    (tmp_path / "db1" / "audit-000002.jsonl").write_text("begun after the checkpoint\n")
    again = AuditLogStore(tmp_path, "db1", 1 << 20)
    assert again.checkpoint() == pos(3)
    assert [line["after"]["id"] for line in read(tmp_path)] == [1, 2, 3, 4]
    assert not (tmp_path / "db1" / "audit-000002.jsonl").exists()
    assert checkpoints(tmp_path)["db1"]["gtid"] == "0-1-3"
    again.close()


def test_files_rotate_at_the_size_and_recovery_keeps_them(tmp_path: Path) -> None:
    store = AuditLogStore(tmp_path, "db1", 200)
    for seq in range(1, 11):
        store.apply([tx(seq, (seq, "x" * 50))])
    files = sorted((tmp_path / "db1").glob("audit-*.jsonl"))
    assert len(files) >= 3
    store.close()
    AuditLogStore(tmp_path, "db1", 200).close()
    assert [line["after"]["id"] for line in read(tmp_path)] == list(range(1, 11))


def test_a_transaction_in_parts_commits_with_its_last_part(tmp_path: Path) -> None:
    store = AuditLogStore(tmp_path, "db1", 1 << 20)
    store.apply([tx(1, (1, "a"))])
    change = Change("insert", "shop", "t", ("id", "note"), after=((10, "p"), (11, "p")))
    first = Part(pos(5), 1, False, (change,))
    assert store.apply_part(first, pos(5)) is None
    store.abort_stream()  # the link broke: its parts come again from part 1
    assert [line["after"]["id"] for line in read(tmp_path)] == [1]
    assert store.apply_part(first, pos(5)) is None
    last = Part(pos(5), 2, True, (change,), pos(5), 1_700_000_005.0)
    assert store.apply_part(last, pos(5)) == pos(5)
    lines = read(tmp_path)
    assert [line.get("after", {}) and line["after"]["id"] for line in lines[1:5]] == [
        10,
        11,
        10,
        11,
    ]
    assert [line["n"] for line in lines[1:]] == [0, 1, 2, 3, 4]
    assert lines[-1]["kind"] == "commit" and lines[-1]["commit_time"].startswith("2023-11-14")
    assert all(line["commit_time"] is None for line in lines[1:5])
    # Delivered again after the commit: skipped whole.
    assert store.apply_part(first, pos(5)) is None and store.apply_part(last, pos(5)) == pos(5)
    assert len(read(tmp_path)) == len(lines)
    store.close()


def test_a_seed_starts_an_empty_log_and_a_repair_is_refused(tmp_path: Path) -> None:
    store = AuditLogStore(tmp_path, "db1", 1 << 20)
    rows = Change("insert", "shop", "t", ("id", "note"), after=((1, "a"), (2, "b")))
    assert store.repair(Transaction(pos(7), 0.0, (rows,)), pos(7), seed=True) == pos(7)
    assert [line["kind"] for line in read(tmp_path)] == ["snapshot", "snapshot"]
    with pytest.raises(ApplyError, match="is a record"):
        store.repair(Transaction(pos(8), 0.0, (rows,)), pos(8), seed=True)
    store.close()


def test_a_large_group_rotates_within_itself(tmp_path: Path) -> None:
    # A catch-up delivers hundreds of transactions in one group: the files must still rotate.
    store = AuditLogStore(tmp_path, "db1", 300)
    store.apply([tx(seq, (seq, "y" * 60)) for seq in range(1, 41)])
    files = sorted((tmp_path / "db1").glob("audit-*.jsonl"))
    assert len(files) >= 5
    assert all(f.stat().st_size < 300 + 400 for f in files)  # at most one line past the size
    store.close()
    # A crash before the next checkpoint: recovery keeps what the checkpoint names.
    again = AuditLogStore(tmp_path, "db1", 300)
    assert [line["after"]["id"] for line in read(tmp_path)] == list(range(1, 41))
    again.close()


def test_zero_dates_are_the_servers_text_with_their_type_named(tmp_path: Path) -> None:
    store = AuditLogStore(tmp_path, "db1", 1 << 20)
    row = (ZeroDate("date", 2024, 0, 10), ZeroDate("datetime", fsp=6), ZeroDate("timestamp"))
    change = Change("insert", "shop", "t", ("d", "dtm", "ts"), after=(row,))
    store.apply([Transaction(pos(1), 1_700_000_000.0, (change,))])
    [line] = read(tmp_path)
    assert line["after"] == {"d": "2024-00-10", "dtm": "0000-00-00 00:00:00.000000",
                             "ts": "0000-00-00 00:00:00"}  # fmt: skip
    assert line["types"] == {"d": "zero_date", "dtm": "zero_datetime", "ts": "zero_timestamp"}
    store.close()
