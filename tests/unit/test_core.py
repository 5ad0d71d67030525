"""The exactly-once core (apply/core.py) over the smallest engine there is: a dict. It shows that
a new kind of target is one adapter, and pins the core's rules without any server: which
transactions of a group are new, where the checkpoint goes (upto, a repair, a seed, a reset, a
skip), parts held for an engine that does not stream, and a failure that rolls a group back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from binlogsync.apply.core import Target
from binlogsync.engines.base import KeyPlan, StaleStream
from binlogsync.errors import ApplyError
from binlogsync.model import Change, Part, Transaction
from binlogsync.position import Position

pytestmark = pytest.mark.unit


def pos(seq: int) -> Position:
    return Position("binlog.000001", seq, f"0-1-{seq}", scheme="gtid")


def row(seq: int, value: int) -> Transaction:
    return Transaction(pos(seq), float(seq), (Change("insert", "s", "t", ("id", "v"),
                                                     after=((seq, value),)),))  # fmt: skip


class DictEngine:
    """A target that is a dict: rows by (table, id), the checkpoint, and the skips."""

    kind = "dict"

    def __init__(self, streams: bool = False) -> None:
        self.streams = streams
        self.rows: dict[tuple[str, Any], Any] = {}
        self.stored: Position | None = None
        self.skips: list[tuple[Position, str]] = []
        self.commits = 0

    def checkpoint(self) -> Position | None:
        return self.stored

    def begin(self, base: Position | None, known: bool) -> DictSession:
        return DictSession(self)

    def follow_schema(self, change: Change, position: Position, mode: str) -> list[str]:
        return []

    def note_ddl(self, position: Position, change: Change) -> None:
        pass

    def forget(self) -> None:
        pass

    def replayable(self, error: BaseException) -> bool:
        return True

    def close(self) -> None:
        pass


class DictSession:
    def __init__(self, engine: DictEngine) -> None:
        self.engine, self.base = engine, engine.stored
        self.span_from: Position | None = None
        self.rows = dict(engine.rows)
        self.new: Position | None = None
        self.skips: list[tuple[Position, str]] = []

    def set_checkpoint(self, new: Position, count: int, epoch: str | None) -> None:
        self.new = new

    def plan(self, change: Change, position: Position) -> KeyPlan | None:
        return None

    def add(
        self,
        changes: Sequence[Change],
        position: Position,
        timestamp: float | None = None,
        streamed: bool = False,
    ) -> None:
        for change in changes:
            for after in change.after:
                if after[1] < 0:
                    error = ApplyError(f"v < 0 refused at {position}")
                    error.position = position
                    raise error
                self.rows[(change.table, after[0])] = after[1]

    def record_skip(self, position: Position, reason: str) -> None:
        self.skips.append((position, reason))

    def flush(self) -> None:
        pass

    def finish(self, commit: bool) -> None:
        if commit and self.new is not None:
            engine = self.engine
            engine.rows, engine.stored = self.rows, self.new
            engine.skips += self.skips
            engine.commits += 1

    def abort(self) -> None:
        pass


def target(streams: bool = False) -> tuple[Target, DictEngine]:
    engine = DictEngine(streams)
    return Target(engine, "o", reduce=False), engine


def test_only_new_transactions_apply_and_upto_moves_the_checkpoint() -> None:
    core, engine = target()
    assert core.apply([row(1, 10), row(2, 20)]) == pos(2)
    engine.rows[("t", 1)] = 99  # a replay of 1 must not write it again
    assert core.apply([row(1, 10), row(2, 20), row(3, 30)]) == pos(3)
    assert engine.rows == {("t", 1): 99, ("t", 2): 20, ("t", 3): 30}
    assert core.apply([row(2, 20)], upto=pos(5)) == pos(5)
    commits = engine.commits
    assert core.apply([row(4, 40)]) == pos(5) and engine.commits == commits  # nothing moved


def test_a_failing_transaction_rolls_the_group_back_and_is_named() -> None:
    core, engine = target()
    with pytest.raises(ApplyError) as caught:
        core.apply([row(1, 10), row(2, -1), row(3, 30)])
    assert caught.value.position == pos(2)
    assert engine.rows == {} and engine.stored is None


def test_repair_seed_and_reset_checkpoints() -> None:
    core, engine = target()
    with pytest.raises(ApplyError, match="needs a checkpoint"):
        core.repair(row(4, 40), pos(4))
    assert core.repair(row(4, 40), pos(4), seed=True) == pos(4)  # a seed starts a target
    core.apply([row(9, 90)])
    assert core.repair(row(4, 41), pos(4)) == pos(4)  # back to the snapshot: 5..9 come again
    assert core.repair(row(6, 60), pos(6)) == pos(4)  # never forward past what is applied
    assert core.repair(row(6, 60), pos(6), seed=True, reset=True) == pos(6)  # a reseed
    assert engine.rows[("t", 4)] == 41


def test_parts_are_held_until_the_last_and_a_gap_is_refused() -> None:
    core, engine = target(streams=False)
    a = Change("insert", "s", "t", ("id", "v"), after=((1, 1),))
    b = Change("insert", "s", "t", ("id", "v"), after=((2, 2),))
    assert core.apply_part(Part(pos(1), 1, False, (a,)), pos(7)) is None
    assert engine.rows == {}
    with pytest.raises(StaleStream):
        core.apply_part(Part(pos(1), 3, True, (b,), pos(7), 5.0), pos(7))
    assert core.apply_part(Part(pos(1), 1, False, (a,)), pos(7)) is None
    assert core.apply_part(Part(pos(1), 2, True, (b,), pos(7), 5.0), pos(7)) == pos(7)
    assert engine.rows == {("t", 1): 1, ("t", 2): 2}


def test_skip_moves_past_one_transaction_with_a_record() -> None:
    core, engine = target()
    core.apply([row(1, 10)])
    with pytest.raises(ApplyError, match="reason"):
        core.skip(pos(2), " ")
    with pytest.raises(ApplyError, match="already applied"):
        core.skip(pos(1), "again")
    file_position = Position("binlog.000001", 5)
    with pytest.raises(ApplyError, match="binlog file position"):
        core.skip(file_position, "wrong scheme")
    assert core.skip(pos(2), "v < 0 is refused here") == pos(2)
    assert engine.skips == [(pos(2), "v < 0 is refused here")]
    assert core.apply([row(2, -1), row(3, 30)]) == pos(3)  # 2 is skipped, 3 applies
    assert engine.rows == {("t", 1): 10, ("t", 3): 30}
