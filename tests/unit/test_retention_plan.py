"""Binlog retention's plan without servers: which file a position needs, and why each file is
kept (ops/retention.py)."""

from __future__ import annotations

import pytest

from binlogsync.config import DatabaseSettings
from binlogsync.errors import RetentionRefused, UsageError
from binlogsync.ops.binlogfiles import BinlogFile
from binlogsync.ops.retention import Need, RetentionOptions, decide, needed_from
from binlogsync.position import Position

pytestmark = pytest.mark.unit

# binlog.000001 starts empty, .2 after 0-1-5, .3 after 0-1-9 and domain 1, .4 after more.
FILES = [
    BinlogFile("binlog.000001", 100, ""),
    BinlogFile("binlog.000002", 100, "0-1-5"),
    BinlogFile("binlog.000003", 100, "0-1-9,1-2-3"),
    BinlogFile("binlog.000004", 100, "0-1-12,1-2-3"),
]


@pytest.mark.parametrize(
    ("state", "index"),
    [
        ("", 0),  # nothing yet: from the very first file
        ("0-1-4", 0),
        ("0-1-5", 1),  # exactly at a file's start: that file, not the one before
        ("0-1-9", 1),  # domain 1 not reached: .3 starts after 1-2-3, so .2 holds it
        ("0-1-9,1-2-3", 2),
        ("0-1-11,1-2-3", 2),
        ("0-1-12,1-2-3", 3),
        ("0-1-99,1-2-50", 3),  # the current file
        ("0-1-12,1-2-3,7-9-1", 3),  # a domain the files do not know changes nothing
    ],
)
def test_a_gtid_position_needs_the_last_file_whose_start_it_contains(
    state: str, index: int
) -> None:
    assert needed_from(FILES, Position.of_state(state)) == index


def test_a_position_from_before_the_oldest_file_needs_purged_files() -> None:
    files = FILES[2:]
    assert needed_from(files, Position.of_state("0-1-7")) is None


def test_the_same_sequence_number_from_another_server_is_not_contained() -> None:
    # 0-3-5 is another history's 5th transaction: .2 (after 0-1-5) may not hold what it lacks.
    assert needed_from(FILES, Position.of_state("0-3-5")) == 0


def test_a_file_position_needs_its_own_file() -> None:
    assert needed_from(FILES, Position("binlog.000003", 1234)) == 2
    assert needed_from(FILES[1:], Position("binlog.000001", 4)) is None
    with pytest.raises(RetentionRefused, match="does not have"):
        needed_from(FILES, Position("binlog.000009", 4))


def test_gtid_positions_cannot_be_placed_on_files_without_states() -> None:
    files = [BinlogFile("binlog.000001", 1, None)]
    with pytest.raises(RetentionRefused, match="no GTID states"):
        needed_from(files, Position.of_state("0-1-1"))


def _plan(needs: list[Need], **kwargs: object) -> dict[str, tuple[str, tuple[str, ...]]]:
    options: dict[str, object] = {
        "keep_files": 1,
        "keep_hours": 0.0,
        "now": 10_000.0,
        "closed": {},
        "dry_run": False,
    }
    options.update(kwargs)
    return {d.name: (d.status, d.reasons) for d in decide(FILES, needs, **options)}  # type: ignore[arg-type]


def test_every_reason_is_given_and_only_the_older_files_go() -> None:
    hub = Need("hub head", Position.of_state("0-1-12,1-2-3"), "binlog.000004")
    target = Need("target t1", Position.of_state("0-1-10,1-2-3"), "binlog.000003")
    plan = _plan([hub, target])
    assert plan["binlog.000001"] == ("purged", ())
    assert plan["binlog.000002"] == ("purged", ())
    assert plan["binlog.000003"] == ("kept", ("target t1 0-1-10,1-2-3 is in it",))
    assert plan["binlog.000004"] == (
        "kept",
        ("the current file", "hub head 0-1-12,1-2-3 is in it", "target t1 needs it",
         "one of the newest 1"),
    )  # fmt: skip
    assert _plan([hub], dry_run=True)["binlog.000001"] == ("would purge", ())


def test_a_need_of_purged_files_keeps_every_file() -> None:
    replica = Need("replica r", Position.of_state("0-1-1"), None)
    plan = _plan([replica])
    assert all(status == "kept" for status, _ in plan.values())
    assert plan["binlog.000001"][1] == ("replica r 0-1-1 needs it and older, purged files",)


def test_keep_files_keeps_the_newest() -> None:
    hub = Need("hub head", Position.of_state("0-1-99,1-2-9"), "binlog.000004")
    plan = _plan([hub], keep_files=3)
    assert plan["binlog.000001"][0] == "purged"
    assert plan["binlog.000002"] == ("kept", ("one of the newest 3",))


def test_keep_hours_keeps_files_closed_recently_and_every_later_one() -> None:
    hub = Need("hub head", Position.of_state("0-1-99,1-2-9"), "binlog.000004")
    # .1 closed 3 h ago, .2 closed 1 h ago; .3's close time was not read (.2 was young).
    now = 100_000.0
    closed = {"binlog.000001": now - 3 * 3600, "binlog.000002": now - 3600}
    plan = _plan([hub], keep_hours=2.0, now=now, closed=closed)
    assert plan["binlog.000001"] == ("purged", ())
    assert plan["binlog.000002"] == ("kept", ("younger than 2 h",))
    assert plan["binlog.000003"] == ("kept", ("younger than 2 h",))
    assert "younger than 2 h" not in plan["binlog.000004"][1]  # the current file says so


@pytest.mark.parametrize(("files", "hours"), [(0, 1.0), (2, -1.0)])
def test_options_refuse_floors_that_would_purge_everything(files: int, hours: float) -> None:
    options = RetentionOptions("hub.toml", "o", DatabaseSettings(), keep_files=files,
                               keep_hours=hours)  # fmt: skip
    with pytest.raises(UsageError):
        options.check()


def test_a_detached_target_holds_no_binlog_and_an_unknown_one_refuses() -> None:
    from binlogsync.ops.retention import hub_positions

    head = Position("binlog.000009", 4).to_json()
    status = {
        "hub": "hub",
        "origins": [{"origin": "o", "head": head}],
        "targets": [
            {"target": "gone", "origin": "o", "applied": None, "detached": True},
            {"target": "t", "origin": "o", "applied": Position("binlog.000007", 4).to_json()},
        ],
    }
    assert [name for name, _ in hub_positions(status, "o", False)] == ["hub head", "target t"]
    status["targets"][0]["detached"] = False
    with pytest.raises(RetentionRefused, match="gone"):
        hub_positions(status, "o", False)
