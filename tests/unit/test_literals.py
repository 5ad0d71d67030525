"""Bulk statements (engines/mariadb/literals.py and StatementBuilder's bulk path): the text is
exactly what binding the parameters one by one (pipeline.bind) gives, for every value type."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import pytest

from binlogsync.engines.mariadb import literals, loaddata
from binlogsync.engines.mariadb.pipeline import bind
from binlogsync.engines.mariadb.statements import BULK_ROWS, Layout, StatementBuilder, TableInfo
from binlogsync.model import Change
from binlogsync.position import Position
from binlogsync.zerodate import ZeroDate

pytestmark = pytest.mark.unit


class _Conn:
    """What `bind` reads of a connection: backslash escapes on, no driver escape needed."""

    server_status = 0

    def escape(self, value: Any) -> str:
        raise AssertionError(f"bind handed {value!r} to the driver")


CONN = _Conn()
POS = Position("binlog.000001", 4)

SPECIALS = ["", "plain", "it's", 'say "hi"', "back\\slash", "nul\x00byte", "line\nbreak",
            "cr\rhere", "ctrl\x1az", "ünïcødé", "emoji 🐬", "%s %% %(x)s", "`tick`"]  # fmt: skip
VALUES: list[Any] = [
    0, -1, 2**63 - 1, 2**64 - 1, -(2**63), None, b"", b"\x00\xff'\\", "x" * 300,
    Decimal("0.00"), Decimal("-12345678901234567890.123456789"), Decimal("1E+3"),
    1.5, -0.0, 1e300, 3.4028234663852886e38, float(2**53),
    dt.datetime(2026, 1, 2, 3, 4, 5, 678901), dt.datetime(1000, 1, 1),
    dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    dt.date(2026, 2, 28), dt.timedelta(hours=-838, minutes=-59, seconds=-59),
    dt.timedelta(microseconds=1), {"b", "a"}, frozenset(), True, False,
    ZeroDate.parse("datetime", "0000-00-00 00:00:00"), ZeroDate.parse("date", "2026-02-31"),
    {"k": [1, "ü", None]}, [1, 2], *SPECIALS,
]  # fmt: skip


def bound(values: list[Any]) -> list[str]:
    builder = StatementBuilder(max_rows=len(values) + 1, max_bytes=1 << 30)
    layout = Layout.build(TableInfo("s", "t", ("v",), ("v",)), ("v",))
    rows = tuple((v,) for v in values)
    out = builder.add(Change("insert", "s", "t", ("v",), (), rows), layout, POS) + builder.flush()
    (statement,) = out
    text = bind(CONN, statement.sql, statement.params)
    body = text[text.index("VALUES (") + 8 : text.index(") ON DUPLICATE")]
    return body.split("),(")


@pytest.mark.parametrize(
    "value", VALUES, ids=[f"{i}-{type(v).__name__}" for i, v in enumerate(VALUES)]
)
def test_a_literal_is_what_bind_writes(value: Any) -> None:
    assert literals.literal(value) == bound([value, 7])[0]


def test_columns_of_one_type_take_the_fast_way_and_write_the_same_text() -> None:
    for values in (
        list(range(-5, 500)),
        ["plain", "ünï", "emoji 🐬", ""] * 100,
        SPECIALS * 30,
        [b"", b"\x00'", b"abc"] * 100,
        [None] * 300,
        VALUES * 5,
        [Decimal("1.50"), Decimal("-0"), Decimal("0.000001"), Decimal("12345678901234567890.1")],
        [Decimal("0E-8"), Decimal("1E+3"), None, Decimal("0.0000001")] * 50,
        [dt.datetime(2026, 1, 2, 3, 4, 5, 678901), dt.datetime(1000, 1, 1), None] * 50,
        [dt.date(2026, 2, 28), None, dt.date(1, 1, 1)] * 50,
    ):
        assert literals.column(values) == [literals.literal(v) for v in values]
        assert literals.column(values) == bound(values)
        if bytes not in set(map(type, values)):  # bytes go to LOAD DATA as hex
            try:
                one_by_one = [loaddata.field(v) for v in values]
            except literals.NotBulk:
                continue
            assert loaddata.column(values) == (one_by_one, False)


def test_plain_texts_take_columns_of_decimals_datetimes_and_dates_only() -> None:
    aware = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    for values in (
        [Decimal("1.5"), Decimal("NaN")],  # the driver's escape writes NaN
        [dt.datetime(2026, 1, 2), aware],  # converted to UTC first: value by value
        [Decimal("1.5"), 2],
        [dt.datetime(2026, 1, 2), dt.date(2026, 1, 2)],
        ["text"],
    ):
        assert literals.plain_texts(values, set(map(type, values))) is None
    mixed = [Decimal("1E+3"), None, Decimal("-2.50")]
    assert literals.plain_texts(mixed, set(map(type, mixed))) == ["1000", None, "-2.50"]


def test_values_only_the_driver_escapes_are_not_bulk() -> None:
    for value in (float("nan"), float("inf"), Decimal("NaN"), Decimal("-Infinity")):
        with pytest.raises(literals.NotBulk):
            literals.column([1, value])


COLS = ("id", "name", "blob", "at")
T = TableInfo("s", "we%ird", COLS, ("id",))


def table_rows(n: int, seed: int = 1) -> list[tuple[Any, ...]]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        name = rnd.choice(SPECIALS) if i % 7 == 0 else f"row {i}"
        blob = None if i % 5 == 0 else rnd.randbytes(rnd.randint(0, 20))
        at = dt.datetime(2026, 1, 1) + dt.timedelta(seconds=i) if i % 3 else None
        out.append((i, name, blob, at))
    return out


def texts(statements: list[Any]) -> list[str]:
    return [bind(CONN, s.sql, s.params) for s in statements]


@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
@pytest.mark.parametrize("layout_key", [("id",), ("id", "name")])
def test_bulk_statements_equal_bound_row_by_row_statements(
    kind: str, layout_key: tuple[str, ...]
) -> None:
    info = TableInfo("s", "we%ird", COLS, layout_key)
    layout = Layout.build(info, COLS)
    rows = tuple(table_rows(BULK_ROWS * 3 + 17))
    if kind == "insert":
        change = Change("insert", "s", "we%ird", COLS, (), rows)
    elif kind == "update":
        after = tuple((r[0], r[1], b"new", r[3]) for r in rows)
        change = Change("update", "s", "we%ird", COLS, rows, after)
    else:
        change = Change("delete", "s", "we%ird", COLS, rows, ())
    small = Change("insert", "s", "we%ird", COLS, (), rows[:50])  # left open, then filled up
    if kind == "delete":
        small = Change("delete", "s", "we%ird", COLS, rows[-50:], ())
    slow = StatementBuilder(max_rows=300, max_bytes=1 << 30)
    fast = StatementBuilder(max_rows=300, max_bytes=1 << 30, bulk=True)
    want = slow.add(small, layout, POS) + slow.add(change, layout, POS) + slow.flush()
    got = fast.add(small, layout, POS) + fast.add(change, layout, POS) + fast.flush()
    # 50 + 250 rows, then a bulk statement of 300, then the last 235 row by row
    assert [s.params is None for s in got] == [False, True, False]
    assert [(s.kind, s.rows, s.first, s.last) for s in got] == [
        (s.kind, s.rows, s.first, s.last) for s in want
    ]
    assert texts(got) == texts(want)
    assert "`we%ird`" in got[1].sql  # final text: the `%` is no longer doubled


def test_a_key_changing_update_and_small_changes_stay_row_by_row() -> None:
    layout = Layout.build(T, COLS)
    rows = tuple(table_rows(BULK_ROWS + 1))
    moved = tuple((r[0] + 1_000_000, *r[1:]) for r in rows)
    builder = StatementBuilder(bulk=True)
    out = builder.add(Change("update", "s", "we%ird", COLS, rows, moved), layout, POS)
    out += builder.add(Change("insert", "s", "we%ird", COLS, (), rows[:10]), layout, POS)
    out += builder.flush()
    assert out and all(s.params is not None for s in out)


def test_bulk_keeps_order_with_what_was_built_before() -> None:
    layout = Layout.build(T, COLS)
    rows = tuple(table_rows(BULK_ROWS))
    builder = StatementBuilder(max_rows=100, bulk=True)
    out = builder.add(Change("delete", "s", "we%ird", COLS, rows[:3], ()), layout, POS)
    out += builder.add(Change("insert", "s", "we%ird", COLS, (), rows), layout, POS)
    out += builder.flush()
    assert [(s.kind, s.rows, s.params is None) for s in out] == [
        ("delete", 3, False),
        ("upsert", 100, True),
        ("upsert", 100, True),
        ("upsert", BULK_ROWS - 200, False),
    ]


def test_bulk_splits_at_max_bytes_and_a_large_row_goes_alone() -> None:
    layout = Layout.build(T, COLS)
    rows = [list(r) for r in table_rows(BULK_ROWS * 2)]
    rows[10][1] = "y" * 5000
    rows[20][1] = "ü" * 100  # not ASCII: counted at 4 bytes a character
    change = Change("insert", "s", "we%ird", COLS, (), tuple(map(tuple, rows)))
    builder = StatementBuilder(max_rows=2 * BULK_ROWS, max_bytes=4000, bulk=True)
    out = builder.add(change, layout, POS)
    assert sum(s.rows for s in out) == len(rows)
    assert all(s.params is None for s in out)
    for s in out:
        size = len(s.sql) if s.sql.isascii() else 4 * len(s.sql)
        assert size <= 4000 or s.rows == 1
    assert any(s.rows == 1 and "y" * 5000 in s.sql for s in out)
