"""The hub's SQLite log: what it writes is what it wrote before, only cheaper."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from binlogsync.hub import log as hublog
from binlogsync.hub.log import Entry, HubLog
from binlogsync.position import Position

pytestmark = pytest.mark.unit

TABLES = (("sbtest", "sbtest1"),)


@pytest.mark.parametrize(
    "position",
    [
        Position("binlog.000001", 4),
        Position("binlog.000001", (1 << 40) - 1, "0-1-57"),
        Position('odd "name"\\é😀\x01.000007', 0, 'gtid "quoted"\\ü😀\n\x7f'),
    ],
)
def test_position_text_is_exactly_what_json_dumps_wrote(position: Position) -> None:
    assert hublog._text(position) == json.dumps(position.to_json())
    assert hublog._pos(hublog._text(position)).gtid == position.gtid


def _entries(first: int, count: int) -> list[Entry]:
    return [
        Entry(Position("binlog.000001", 100 + n, f"0-1-{n}"), 1.5, b"x" * 3000, tables=TABLES)
        for n in range(first, first + count)
    ]


def _page_size(directory: Path) -> int:
    db = sqlite3.connect(directory / "hub.sqlite3")
    try:
        return int(db.execute("PRAGMA page_size").fetchone()[0])
    finally:
        db.close()


def test_a_new_log_has_16k_pages_and_an_old_4k_log_is_read_and_appended_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    new, old = tmp_path / "new", tmp_path / "old"
    for directory, page in ((new, 16384), (old, 4096)):
        monkeypatch.setattr(hublog, "PAGE_SIZE", page)
        store = HubLog(directory)
        store.register("o1", Position("binlog.000001", 4))
        store.append("o1", _entries(1, 10))
        store.close()
    monkeypatch.undo()
    assert (_page_size(new), _page_size(old)) == (16384, 4096)
    read = {}
    for directory in (new, old):
        store = HubLog(directory)  # the 4 KiB log is opened by the new code, never rebuilt
        head, fresh = store.append("o1", _entries(5, 10))  # 5..10 are duplicates
        assert (head, fresh) == (Position("binlog.000001", 114), 4)
        read[directory] = [
            (e.position, e.position.gtid, e.timestamp, e.payload, e.tables)
            for e in store.read("o1", -1, 100)
        ]
        store.close()
    assert read[new] == read[old]
    assert [p for p, *_ in read[new]] == [Position("binlog.000001", 100 + n) for n in range(1, 15)]
    assert _page_size(old) == 4096
