"""The net-change reducer on its own, against an in-memory model of the target.

The model applies changes as the applier's statements do (statements.py): an insert or update
is an upsert of the after image by primary key, a key-changing update deletes the old key
first, a delete removes the key, a truncate empties the table; an upsert whose unique value is
held by another row fails (the guard of the upsert). Every valid origin history of a few
operations on a few keys is generated exhaustively, applied unreduced and reduced, and the two
results must be equal.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from binlogsync.apply.reduce import NotReducible, Reducer, reduce_changes
from binlogsync.model import Change

pytestmark = pytest.mark.unit

S, T = "s", "t"
COLS = ("k", "u", "v")  # primary key k, unique u (when the plan says so), payload v
KEYS = (1, 2, 3)
UNIQUES = (1, 2, 3)

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Plan:
    key: tuple[int, ...] = (0,)
    unique_keys: bool = False


class Clash(Exception):
    """An upsert met another row holding its unique value."""


class Model:
    """A target table as the applier's statements treat it."""

    def __init__(
        self, rows: dict[Any, Row], key: tuple[int, ...] = (0,), unique: int | None = None
    ):
        self.rows = dict(rows)
        self.key = key
        self.unique = unique

    def k(self, row: Row) -> Any:
        return row[self.key[0]] if len(self.key) == 1 else tuple(row[i] for i in self.key)

    def upsert(self, row: Row) -> None:
        k = self.k(row)
        if self.unique is not None:
            for other, held in self.rows.items():
                if other != k and held[self.unique] == row[self.unique]:
                    raise Clash(f"{row} clashes with {held}")
        self.rows[k] = row

    def apply(self, changes: list[Change]) -> dict[Any, Row]:
        for c in changes:
            if c.kind == "truncate":
                self.rows.clear()
            elif c.kind == "insert":
                for row in c.after:
                    self.upsert(row)
            elif c.kind == "update":
                for before, after in zip(c.before, c.after, strict=True):
                    if self.k(before) != self.k(after):
                        self.rows.pop(self.k(before), None)
                    self.upsert(after)
            elif c.kind == "delete":
                for row in c.before:
                    self.rows.pop(self.k(row), None)
        return self.rows


def ins(*rows: Row, table: str = T) -> Change:
    return Change("insert", S, table, COLS, (), rows)


def upd(*pairs: tuple[Row, Row], table: str = T) -> Change:
    return Change("update", S, table, COLS, tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))


def dele(*rows: Row, table: str = T) -> Change:
    return Change("delete", S, table, COLS, rows, ())


def histories(
    state: dict[int, Row],
    length: int,
    unique: bool,
    counter: list[int],
    keys: tuple[int, ...] = KEYS,
) -> Iterator[list[Change]]:
    """Every valid origin history of `length` single-row operations from `state`: insert of an
    absent key, update of the payload, of the unique value (to a free one) or of the key (to
    an absent one), delete. Values of v are fresh so every image is distinct."""
    if length == 0:
        yield []
        return
    held = {row[1] for row in state.values()}
    free_u = [u for u in UNIQUES if u not in held] if unique else list(UNIQUES)

    def fresh() -> int:
        counter[0] += 1
        return counter[0]

    steps: list[tuple[Change, dict[int, Row]]] = []
    for k in keys:
        row = state.get(k)
        if row is None:
            for u in free_u[:2]:
                new = (k, u, fresh())
                steps.append((ins(new), {**state, k: new}))
            continue
        new = (k, row[1], fresh())
        steps.append((upd((row, new)), {**state, k: new}))
        for u in free_u[:2]:
            new = (k, u, row[2])
            steps.append((upd((row, new)), {**state, k: new}))
        for j in keys:
            if j not in state:
                new = (j, row[1], fresh())
                rest = {x: r for x, r in state.items() if x != k}
                steps.append((upd((row, new)), {**rest, j: new}))
        steps.append((dele(row), {x: r for x, r in state.items() if x != k}))
    for change, after in steps:
        for rest in histories(after, length - 1, unique, counter, keys):
            yield [change, *rest]


def starts(keys: tuple[int, ...] = KEYS) -> Iterator[dict[int, Row]]:
    """Every subset of `keys` present, with distinct unique values."""
    for mask in range(1 << len(keys)):
        yield {k: (k, k, -k) for i, k in enumerate(keys) if mask >> i & 1}


def check(start: dict[int, Row], history: list[Change], plan: Plan, unique: bool) -> None:
    index = 1 if unique else None
    expected = Model(start, unique=index).apply(history)
    reduced = reduce_changes(history, lambda c: plan)
    got = Model(start, unique=index).apply(reduced)
    assert got == expected, (start, history, reduced)
    # Net change: one delete and one upsert change at most, each key at most once in each.
    assert len(reduced) <= 2
    for change in reduced:
        keys = [r[0] for r in change.before or change.after]
        assert len(keys) == len(set(keys))


# Up to 4 operations on 3 keys; 5 operations on 2 keys (5 on 3 keys are 1.4 million histories).
SIZES = [(1, KEYS), (2, KEYS), (3, KEYS), (4, KEYS), (5, KEYS[:2])]


@pytest.mark.parametrize(("length", "keys"), SIZES)
def test_every_short_history_reduces_to_the_same_table(length: int, keys: tuple[int, ...]) -> None:
    count = 0
    for start in starts(keys):
        for history in histories(start, length, False, [0], keys):
            check(start, history, Plan(), unique=False)
            count += 1
    assert count > 10 ** (length - 1)


@pytest.mark.parametrize(("length", "keys"), SIZES)
def test_every_short_history_with_a_unique_key_reduces_without_clashing(
    length: int, keys: tuple[int, ...]
) -> None:
    # u is unique on the target: swaps of unique values between rows inside the group (through
    # a free value, as the origin must do them) apply, because every touched row is deleted
    # before the final images go in.
    count = 0
    for start in starts(keys):
        for history in histories(start, length, True, [0], keys):
            check(start, history, Plan(unique_keys=True), unique=True)
            count += 1
    assert count > 10 ** (length - 1)


def test_a_swap_of_unique_values_needs_the_delete_first() -> None:
    start = {1: (1, 1, 0), 2: (2, 2, 0)}
    a, b = start[1], start[2]
    history = [
        upd((a, (1, 3, 0))),
        upd((b, (2, 1, 0))),
        upd(((1, 3, 0), (1, 2, 0))),
    ]
    expected = {1: (1, 2, 0), 2: (2, 1, 0)}
    assert Model(start, unique=1).apply(history) == expected
    # Upserting the final images over the old ones clashes; the plan for a unique key does not.
    plain = reduce_changes(history, lambda c: Plan())
    with pytest.raises(Clash):
        Model(start, unique=1).apply(plain)
    safe = reduce_changes(history, lambda c: Plan(unique_keys=True))
    assert [c.kind for c in safe] == ["delete", "insert"]
    assert Model(start, unique=1).apply(safe) == expected


def test_the_workload_of_the_issue_reduces_to_two_statements_per_table() -> None:
    # sysbench oltp_write_only: update k, update c, delete, re-insert, on random rows of 4 tables.
    rng = random.Random(7)
    tables = {f"sbtest{i}": {k: (k, k, 0) for k in range(1, 201)} for i in range(1, 5)}
    start = {name: dict(rows) for name, rows in tables.items()}
    history: list[Change] = []
    for n in range(2000):
        for op in range(4):
            name = f"sbtest{rng.randint(1, 4)}"
            rows = tables[name]
            k = rng.randint(1, 200)
            old = rows[k]
            if op < 2:
                new = (k, old[1] + 1, n) if op == 0 else (k, old[1], -n)
                history.append(upd((old, new), table=name))
                rows[k] = new
            elif op == 2:
                history.append(dele(old, table=name))
                history.append(ins((k, old[1], n), table=name))
                rows[k] = (k, old[1], n)
    reduced = reduce_changes(history, lambda c: Plan())
    assert sorted((c.table, c.kind) for c in reduced) == sorted(
        (f"sbtest{i}", "insert") for i in range(1, 5)
    )
    for name, rows in tables.items():
        model = Model(start[name])
        assert model.apply([c for c in history if c.table == name]) == rows
        assert Model(start[name]).apply([c for c in reduced if c.table == name]) == rows


def test_insert_then_delete_still_deletes() -> None:
    # A row the target holds already (after a repair rewound the checkpoint) must go.
    history = [ins((1, 1, 1)), dele((1, 1, 1))]
    reduced = reduce_changes(history, lambda c: Plan())
    assert [(c.kind, c.before) for c in reduced] == [("delete", ((1, 1, 1),))]
    assert Model({1: (1, 1, 0)}).apply(reduced) == {}


def test_multi_row_changes_composite_keys_and_barriers_random() -> None:
    rng = random.Random(11)
    cols = ("a", "b", "v")
    plan = Plan(key=(0, 1))
    for _ in range(300):
        state: dict[tuple[int, int], Row] = {}
        keys = [(a, b) for a in (1, 2) for b in (1, 2)]
        for key in keys:
            if rng.random() < 0.5:
                state[key] = (*key, 0)
        start = dict(state)
        history: list[Change] = []
        for n in range(rng.randint(1, 12)):
            roll = rng.random()
            if roll < 0.05:
                history.append(Change("truncate", S, T))
                state.clear()
                continue
            present = list(state)
            absent = [k for k in keys if k not in state]
            if roll < 0.35 and absent:
                picked = rng.sample(absent, rng.randint(1, len(absent)))
                rows = tuple((*k, n) for k in picked)
                history.append(Change("insert", S, T, cols, (), rows))
                state.update({r[:2]: r for r in rows})
            elif roll < 0.55 and present:
                picked = rng.sample(present, rng.randint(1, len(present)))
                history.append(Change("delete", S, T, cols, tuple(state.pop(k) for k in picked)))
            elif present:
                # One statement moving some rows onto free keys, one after the other.
                pairs = []
                for k in rng.sample(present, rng.randint(1, len(present))):
                    free = [x for x in keys if x not in state]
                    target = rng.choice([k, *free])
                    old = state.pop(k)
                    new = (*target, n)
                    state[target] = new
                    pairs.append((old, new))
                history.append(
                    Change(
                        "update",
                        S,
                        T,
                        cols,
                        tuple(p[0] for p in pairs),
                        tuple(p[1] for p in pairs),
                    )
                )
        expected = Model(start, key=(0, 1)).apply(history)
        assert expected == state
        reduced = reduce_changes(history, lambda c: plan)
        assert Model(start, key=(0, 1)).apply(reduced) == expected


def test_what_the_reducer_refuses() -> None:
    # Different column lists for one table in one group: the last image would not stand for
    # the columns only an earlier one wrote.
    reducer = Reducer()
    reducer.add(ins((1, 1, 1)), Plan())
    with pytest.raises(NotReducible):
        reducer.add(Change("insert", S, T, ("k", "u"), (), ((1, 2),)), Plan())
    # A table the caller cannot reduce (no key, foreign keys): plan says None.
    with pytest.raises(NotReducible):
        reduce_changes([ins((1, 1, 1))], lambda c: None)
    # A key value that cannot be compared (a SET column decodes to a set).
    with pytest.raises(NotReducible):
        Reducer().add(ins(({"x"}, 1, 1)), Plan())
    # DDL and TRUNCATE are barriers that keep their place.
    ddl = Change("ddl", S, T, statement="ALTER TABLE t ADD COLUMN w INT")
    out = reduce_changes(
        [ins((1, 1, 1)), upd(((1, 1, 1), (1, 1, 2))), ddl, dele((1, 1, 2))], lambda c: Plan()
    )
    assert [c.kind for c in out] == ["insert", "ddl", "delete"]
    assert out[0].after == ((1, 1, 2),)
