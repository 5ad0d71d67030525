"""GTID positions: their order (the sum of sequence numbers, above every file position), their
forms (JSON, wire, command line), containment, and malformed states refused."""

from __future__ import annotations

import pytest

from binlogsync import codec
from binlogsync.errors import ProtocolError
from binlogsync.hub.log import _pos, _text
from binlogsync.model import _position
from binlogsync.position import (
    GTID_BASE,
    Position,
    _gtid_key,
    comparable,
    missing_from,
    parse_state,
)

pytestmark = pytest.mark.unit


def test_a_gtid_position_is_the_state_and_orders_by_the_sum_of_sequence_numbers() -> None:
    # Along one server's binlog each transaction raises one domain's seq: the sum rises.
    states = ["", "0-1-1", "0-1-2", "0-1-2,1-2-1", "0-1-3,1-2-1", "0-2-4,1-2-1", "0-2-4,1-2-9"]
    positions = [Position.of_state(s, "binlog.000001", 4 + i) for i, s in enumerate(states)]
    assert positions == sorted(positions, key=lambda p: p.key)
    assert [p.key - GTID_BASE for p in positions] == [0, 1, 2, 3, 4, 5, 13]
    # The same state on another server (another file and offset) is the same position.
    elsewhere = Position.of_state("0-1-3,1-2-1", "mariadb-bin.000042", 999)
    assert elsewhere == positions[4] and hash(elsewhere) == hash(positions[4])
    assert elsewhere.state == {0: (1, 3), 1: (2, 1)}


def test_every_gtid_position_sorts_after_every_file_position() -> None:
    last_file = Position("binlog.4194303", (1 << 40) - 1)  # the largest file position
    assert last_file.key < GTID_BASE <= Position.of_state("").key
    assert comparable(last_file, Position.of_state("0-1-1"))  # file → GTID: the crossing
    assert not comparable(Position.of_state("0-1-1"), last_file)  # GTID → file: refused
    assert comparable(None, last_file) and comparable(Position.of_state(""), None)
    with pytest.raises(ProtocolError, match="out of range"):
        Position.from_json({"file": "binlog.4194304", "offset": 4, "gtid": None})


def test_forms_round_trip_and_old_forms_read_as_file_positions() -> None:
    position = Position.of_state("0-1-100,1-2-7", "binlog.000003", 1234)
    assert position.to_json() == {
        "file": "binlog.000003",
        "offset": 1234,
        "gtid": "0-1-100,1-2-7",
        "scheme": "gtid",
    }
    assert Position.from_json(position.to_json()) == position
    wire = codec.unpack(codec.pack(position.to_wire()))
    assert _position(wire) == position and _position(wire).by_gtid
    assert _pos(_text(position)) == position and _pos(_text(position)).by_gtid
    # What binlogsync before GTID positions stored: a file position, whatever its gtid says.
    old = Position.from_json({"file": "binlog.000003", "offset": 1234, "gtid": "0-1-100"})
    assert not old.by_gtid and old.key == (3 << 40) | 1234
    assert _position(["binlog.000003", 1234, "0-1-100"]) == old
    assert str(position) == "0-1-100,1-2-7 (binlog.000003:1234)"
    assert str(Position.of_state("")) == "(empty GTID state)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-1-100", Position.of_state("0-1-100")),
        ("0-1-100,1-2-7", Position.of_state("0-1-100,1-2-7")),
        ("0-1-100 (binlog.000003:1234)", Position.of_state("0-1-100")),  # as status shows it
        ("binlog.000003:1234", Position("binlog.000003", 1234)),
    ],
)
def test_the_command_line_takes_a_gtid_state_or_file_offset(text: str, expected: Position) -> None:
    parsed = Position.parse(text)
    assert parsed == expected and parsed.scheme == expected.scheme


@pytest.mark.parametrize(
    "data",
    [
        {"file": "", "offset": 0, "gtid": None, "scheme": "gtid"},
        {"file": "", "offset": 0, "gtid": "0-1", "scheme": "gtid"},
        {"file": "", "offset": 0, "gtid": "0-1-2,0-1-3", "scheme": "gtid"},  # domain twice
        {"file": "", "offset": 0, "gtid": "0-1-99999999999999999999", "scheme": "gtid"},
        {"file": "", "offset": 0, "gtid": "4294967296-1-2", "scheme": "gtid"},
        {"file": "", "offset": 0, "gtid": "0-1-1;DROP", "scheme": "gtid"},
        # Unicode digits: int() reads "٣" as 3, so "0-1-٣" passed as "0-1-3" under another text
        {"file": "", "offset": 0, "gtid": "0-1-٣", "scheme": "gtid"},
        {"file": "", "offset": 0, "gtid": "0-1-5,١-2-7", "scheme": "gtid"},
        {
            "file": "",
            "offset": 0,
            "gtid": ",".join(f"{d}-1-1" for d in range(60)),
            "scheme": "gtid",
        },
        {"file": "binlog.000001", "offset": 4, "gtid": None, "scheme": "lsn"},
    ],
)
def test_malformed_gtid_positions_are_refused(data: dict[str, object]) -> None:
    with pytest.raises(ProtocolError):
        Position.from_json(data)
    if "gtid" in data and data.get("scheme") == "gtid":
        with pytest.raises(ProtocolError):
            Position.from_wire([data["file"], data["offset"], data["gtid"], "gtid"])


def test_missing_from_says_which_gtids_a_server_lacks() -> None:
    assert missing_from("0-1-100,1-2-7", "0-1-100") == []
    assert missing_from("0-2-120", "0-1-100") == []  # later transactions of a promoted replica
    assert missing_from("0-1-99", "0-1-100") == ["0-1-100"]  # behind: async replication lost it
    assert missing_from("0-2-100", "0-1-100") == ["0-1-100"]  # the same seq by another server
    assert missing_from("0-1-100", "0-1-100,1-2-7") == ["1-2-7"]  # a domain it never saw
    assert missing_from("", "") == [] and parse_state("") == {}
    # With @@gtid_binlog_state: a promoted replica has the old primary's GTIDs up to ours …
    assert missing_from("0-2-120", "0-1-100", "0-1-110,0-2-120") == []
    # … a server that went past our seq on another history never had ours.
    assert missing_from("0-2-120", "0-1-100", "0-1-90,0-2-120") == ["0-1-100"]
    assert missing_from("0-2-120", "0-1-100", "0-2-120") == ["0-1-100"]


def test_status_shows_the_gtid_state_first() -> None:
    from binlogsync.statusview import _pos as shown

    gtid = Position.of_state("0-1-100", "binlog.000003", 1234).to_json()
    assert shown(gtid) == "0-1-100 (binlog.000003:1234)"
    assert Position.parse(shown(gtid)) == Position.of_state("0-1-100")  # what skip takes
    assert shown(Position("binlog.000003", 1234, "0-1-5").to_json()) == "binlog.000003:1234 (0-1-5)"


@pytest.mark.parametrize(
    "state",
    [
        "0-1-1",
        "00-01-0100",
        "4294967295-4294967295-1",
        "4294967296-1-1",
        "0-4294967296-1",
        f"0-1-{GTID_BASE - 1}",
        f"0-1-{GTID_BASE}",
        f"0-1-{(1 << 64) - 1}",
        f"0-1-{1 << 64}",
        "0-1-123456789012345678901",
        " 0-1-5",
        "0-1-5\n",
        "0-1-٣",
        "٣-1-5",
        "0-١-5",
        "00000000001-1-5",
        "0-1-5-6",
        "0--5",
        "0-1-+5",
        "0-1-5 ",
        "0-1-5,1-2-7",
        "0-1-5,0-2-7",
        "",
        "0-1",
        "-1-1-1",
    ],
)
def test_a_one_domain_state_taken_the_short_way_gets_the_long_ways_answer(state: str) -> None:
    """`_gtid_key`'s short way for one domain: the same key, or the same refusal, as summing
    what `parse_state` reads."""
    try:
        expected: int | str = GTID_BASE + sum(seq for _, seq in parse_state(state).values())
        if expected >= GTID_BASE << 1:
            expected = "refused"
    except ProtocolError:
        expected = "refused"
    try:
        got: int | str = _gtid_key(state)
    except ProtocolError:
        got = "refused"
    assert got == expected
