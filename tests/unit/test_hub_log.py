"""The hub's SQLite log: what it writes is what it wrote before, only cheaper."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from binlogsync.errors import ConfigError, ProtocolError
from binlogsync.hub import log as hublog
from binlogsync.hub.log import Entry, HubLog, StagedPart
from binlogsync.position import Position

pytestmark = pytest.mark.unit

TABLES = (("sbtest", "sbtest1"),)


@pytest.mark.parametrize(
    "position",
    [
        Position("binlog.000001", 4),
        Position("binlog.000001", (1 << 40) - 1, "0-1-57"),
        Position('odd "name"\\é😀\x01.000007', 0, 'gtid "quoted"\\ü😀\n\x7f'),
        Position.of_state("0-1-100,1-2-7", 'odd "name"\\é😀\x01.000007', 1234),
        Position.of_state(""),
    ],
)
def test_position_text_is_exactly_what_json_dumps_wrote(position: Position) -> None:
    assert hublog._text(position) == json.dumps(position.to_json())
    assert hublog._pos(hublog._text(position)).gtid == position.gtid


@pytest.mark.parametrize(
    "text",
    [
        '{"file": "binlog.000003", "offset": 1234, "gtid": "0-1-57", "scheme": "gtid"}',
        '{"file": "", "offset": 0, "gtid": "", "scheme": "gtid"}',
        '{"file": "binlog.000003", "offset": 4, "gtid": "0-1-5,1-2-7", "scheme": "gtid"}',
        '{"file": "b\\u00e9.000003", "offset": 4, "gtid": "0-1-5", "scheme": "gtid"}',
        '{"file": "binlog.000003", "offset": 1099511627776, "gtid": "0-1-5", "scheme": "gtid"}',
        '{"file": "binlog.000003", "offset": 4, "gtid": "0-1-x", "scheme": "gtid"}',
        '{"file": "binlog.000003", "offset": 4, "gtid": "4294967296-1-1", "scheme": "gtid"}',
        '{"file": "' + "b" * 256 + '", "offset": 4, "gtid": "0-1-5", "scheme": "gtid"}',
        '{"file": "binlog.000003", "offset": 4, "gtid": "0-1-5"}',
        '{"file": "binlog.000003", "offset": 4, "gtid": null}',
    ],
)
def test_a_stored_position_read_the_short_way_is_what_json_reads(text: str) -> None:
    """`_pos` skips the JSON parser for what `_text` writes of a GTID position: the same
    position, or the same refusal, as `Position.from_json(json.loads(text))`."""
    try:
        expected: object = Position.from_json(json.loads(text))
    except ProtocolError:
        expected = "refused"
    try:
        got: object = hublog._pos(text)
    except ProtocolError:
        got = "refused"
    assert got == expected
    if isinstance(got, Position) and isinstance(expected, Position):
        assert (got.file, got.offset, got.gtid, got.scheme) == (
            expected.file,
            expected.offset,
            expected.gtid,
            expected.scheme,
        )


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


def test_a_log_of_format_2_is_read_and_marked_3_so_older_versions_refuse_it(
    tmp_path: Path,
) -> None:
    """Format 2 held file positions only, read the same; once this version may have stored GTID
    positions, a binlogsync that would read them as file positions must refuse the log."""
    store = HubLog(tmp_path)
    store.register("o", Position("binlog.000001", 4))
    store.append("o", _entries(1, 3))
    store.close()
    db = sqlite3.connect(tmp_path / "hub.sqlite3")
    with db:
        db.execute("UPDATE meta SET value='2' WHERE key='format'")
    db.close()
    again = HubLog(tmp_path)
    head = again.head("o")
    assert head is not None and not head.by_gtid and head == _entries(3, 1)[0].position
    [(form,)] = again.db.execute("SELECT value FROM meta WHERE key='format'").fetchall()
    assert form == "3"
    # The crossing: GTID positions after the file ones, in order.
    crossed = Entry(Position.of_state("0-1-4", "binlog.000001", 200), 2.0, b"y", tables=TABLES)
    assert again.append("o", [crossed]) == (crossed.position, 1)
    assert [e.position for e in again.read("o", -1, 10)][-1].by_gtid
    again.close()
    db = sqlite3.connect(tmp_path / "hub.sqlite3")
    with db:
        db.execute("UPDATE meta SET value='9' WHERE key='format'")
    db.close()
    with pytest.raises(ConfigError, match="has format 9, this hub writes 3"):
        HubLog(tmp_path)


def _stored_part(store: HubLog, begin_key: int, number: int) -> bytes | None:
    """The part as SQLite holds it (None: not there), behind the kept copies' back."""
    row = store.db.execute(
        "SELECT payload FROM parts WHERE origin='o1' AND begin_key=? AND number=?",
        (begin_key, number),
    ).fetchone()
    return None if row is None else bytes(row[0])


def _parts(begin: Position, payloads: list[bytes], end: Position | None) -> list[StagedPart]:
    last = len(payloads)
    return [
        StagedPart(begin.key, n, p, end if n == last else None, 1.0, TABLES)
        for n, p in enumerate(payloads, 1)
    ]


def test_parts_read_back_are_what_the_log_holds_through_every_change(tmp_path: Path) -> None:
    """Delivery reads a part just stored from memory (`part`); whatever changes the stored
    parts (a transaction started over, compaction, a restart, a capture-skip) changes what
    `part` answers the same way: it never answers a part the log no longer holds."""
    store = HubLog(tmp_path)
    try:
        first, second, end = (Position.of_state(f"0-1-{n}") for n in (1, 2, 3))
        store.register("o1", first)
        store.append("o1", _parts(second, [b"a1", b"a2", b"a3"], None))
        for n, payload in enumerate([b"a1", b"a2", b"a3"], 1):
            assert store.part("o1", second.key, n) == (payload, TABLES)
            assert _stored_part(store, second.key, n) == payload
        # The origin's agent restarted and sends the transaction again, cut otherwise.
        store.append("o1", _parts(second, [b"b1", b"b2"], None))
        assert store.part("o1", second.key, 1) == (b"b1", TABLES)
        with pytest.raises(LookupError):
            store.part("o1", second.key, 3)
        store.append("o1", [StagedPart(second.key, 3, b"b3", end, 1.0, TABLES)])
        assert [store.part("o1", second.key, n)[0] for n in (1, 2, 3)] == [b"b1", b"b2", b"b3"]
        # Compaction deletes some parts: none of them is answered any more.
        store.compact("o1", end, parts=2)
        for n in (1, 2, 3):
            stored = _stored_part(store, second.key, n)
            if stored is None:
                with pytest.raises(LookupError):
                    store.part("o1", second.key, n)
            else:
                assert store.part("o1", second.key, n)[0] == stored
        # Parts of the next transaction, then a restart of the origin's log: all gone.
        third = Position.of_state("0-1-4")
        store.append("o1", _parts(third, [b"c1"], None))
        assert store.part("o1", third.key, 1)[0] == b"c1"
        store.restart("o1", third)
        with pytest.raises(LookupError):
            store.part("o1", third.key, 1)
    finally:
        store.close()


def test_a_capture_skip_drops_the_parts_it_skips(tmp_path: Path) -> None:
    store = HubLog(tmp_path)
    try:
        first, second = Position.of_state("0-1-1"), Position.of_state("0-1-2")
        store.register("o1", first)
        store.append("o1", _parts(second, [b"a1"], None))
        assert store.part("o1", second.key, 1)[0] == b"a1"
        store.move_head("o1", Position.of_state("0-1-9"), "test")
        assert _stored_part(store, second.key, 1) is None
        with pytest.raises(LookupError):
            store.part("o1", second.key, 1)
    finally:
        store.close()


def test_the_parts_kept_in_memory_are_bounded(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(hublog, "RECENT_PART_BYTES", 2500)
    store = HubLog(tmp_path)
    try:
        first, second = Position.of_state("0-1-1"), Position.of_state("0-1-2")
        store.register("o1", first)
        store.append("o1", _parts(second, [bytes([n]) * 1000 for n in range(1, 6)], None))
        assert store._recent_bytes <= 2500 and len(store._recent) == 2
        for n in range(1, 6):  # the older ones from SQLite, the same bytes
            assert store.part("o1", second.key, n)[0] == bytes([n]) * 1000
    finally:
        store.close()
