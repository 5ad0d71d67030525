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
