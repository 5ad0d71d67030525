"""The helpers every non-MySQL store shares (apply/store.py): which transactions of a group
are new and where the checkpoint goes, a repair's checkpoint, and parts held until the last."""

from __future__ import annotations

import pytest

from binlogsync.apply.applier import StaleStream
from binlogsync.apply.store import HeldParts, plan_group, repair_checkpoint
from binlogsync.errors import ApplyError
from binlogsync.model import Change, Part, Transaction
from binlogsync.position import Position

pytestmark = pytest.mark.unit


def pos(seq: int) -> Position:
    return Position("binlog.000001", seq, f"0-1-{seq}", scheme="gtid")


def tx(seq: int) -> Transaction:
    return Transaction(pos(seq), 0.0, ())


def test_plan_group_skips_what_is_applied_and_moves_to_upto() -> None:
    assert plan_group("o", pos(2), [tx(1), tx(2), tx(3)], None) == ([tx(3)], pos(3))
    assert plan_group("o", pos(3), [tx(1)], pos(5)) == ([], pos(5))
    assert plan_group("o", pos(3), [tx(2)], None) is None
    assert plan_group("o", pos(9), [tx(1)], None, force=pos(1)) == ([tx(1)], pos(1))


def test_repair_checkpoint() -> None:
    assert repair_checkpoint("o", pos(9), pos(4), False, False) == pos(4)
    assert repair_checkpoint("o", pos(3), pos(4), False, False) == pos(3)
    assert repair_checkpoint("o", pos(3), pos(4), False, True) == pos(4)
    assert repair_checkpoint("o", None, pos(4), True, False) == pos(4)
    with pytest.raises(ApplyError, match="needs a checkpoint"):
        repair_checkpoint("o", None, pos(4), False, False)


def test_parts_are_held_until_the_last_and_a_gap_is_refused() -> None:
    held = HeldParts()
    a = Change("insert", "s", "t", ("id",), after=((1,),))
    b = Change("insert", "s", "t", ("id",), after=((2,),))
    assert held.add(Part(pos(1), 1, False, (a,)), pos(7)) is None
    whole = held.add(Part(pos(1), 2, True, (b,), pos(7), 5.0), pos(7))
    assert whole == Transaction(pos(7), 5.0, (a, b))
    with pytest.raises(StaleStream):
        held.add(Part(pos(1), 2, True, (b,), pos(7), 5.0), pos(7))
