"""`frozen.maker`: the short constructor builds what the dataclass's own `__init__` builds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from binlogsync.frozen import maker
from binlogsync.model import Change, Transaction
from binlogsync.position import Position

pytestmark = pytest.mark.unit


def test_made_objects_equal_constructed_ones_and_stay_frozen() -> None:
    position = maker(Position)("binlog.000002", 4, "0-1-9", "gtid")
    assert position == Position("binlog.000002", 4, "0-1-9", "gtid")
    assert (position.file, position.offset, position.gtid, position.scheme) == (
        "binlog.000002",
        4,
        "0-1-9",
        "gtid",
    )
    change = maker(Change)("insert", "s", "t", ("id",), (), ((1,),), "", None)
    assert change == Change("insert", "s", "t", ("id",), (), ((1,),))
    tx = maker(Transaction)(position, 1.5, (change,))
    assert tx == Transaction(position, 1.5, (change,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        tx.timestamp = 2.0  # type: ignore[misc]


def test_a_class_that_needs_its_init_is_refused() -> None:
    @dataclass(frozen=True, slots=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            assert self.n >= 0

    @dataclass(frozen=True)
    class Unslotted:
        n: int

    for cls in (Checked, Unslotted):
        with pytest.raises(TypeError):
            maker(cls)


def test_a_field_init_does_not_take_gets_its_default() -> None:
    @dataclass(frozen=True, slots=True)
    class Cached:
        n: int
        seen: int = dataclasses.field(default=-1, init=False, compare=False)

    made = maker(Cached)(3)
    assert (made.n, made.seen) == (3, -1)
    assert made == Cached(3)

    @dataclass(frozen=True, slots=True)
    class Unset:
        n: int
        later: int = dataclasses.field(init=False)

    with pytest.raises(TypeError):
        maker(Unset)


def test_a_position_keeps_its_key_once_asked() -> None:
    made = maker(Position)("binlog.000002", 4, "0-1-9", "gtid")
    built = Position("binlog.000003", 7)
    for position in (made, built):
        assert position._key == -1
        key = position.key
        assert position._key == key
    assert made.key == Position("other", 0, "0-1-9", "gtid").key
    assert built.key == (3 << 40) | 7
    assert dataclasses.replace(built, offset=8).key == (3 << 40) | 8
    assert "_key" not in repr(built)
