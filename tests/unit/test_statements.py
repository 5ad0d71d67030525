"""Statements (engines/mariadb/statements.py) and identifier quoting (mysql.py): value conversion, merging and splitting rules."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from binlogsync.engines.mariadb.statements import (
    Layout,
    StatementBuilder,
    TableInfo,
    convert,
    convert_row,
    is_generated,
)
from binlogsync.errors import ApplyError, NoPrimaryKeyError, SchemaMismatchError
from binlogsync.model import Change
from binlogsync.mysql import ident, qualified, quote
from binlogsync.position import Position

pytestmark = pytest.mark.unit

T = TableInfo("shop", "items", ("id", "name", "qty"), ("id",))
LAYOUT = Layout.build(T, ("id", "name", "qty"))
COLS = ("id", "name", "qty")


def pos(i: int) -> Position:
    return Position("binlog.000001", 100 * i)


def insert(*rows: tuple[object, ...], table: str = "items") -> Change:
    return Change("insert", "shop", table, COLS, (), tuple(rows))


def delete(*rows: tuple[object, ...]) -> Change:
    return Change("delete", "shop", "items", COLS, tuple(rows), ())


def update(*pairs: tuple[tuple[object, ...], tuple[object, ...]]) -> Change:
    return Change(
        "update", "shop", "items", COLS, tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    )


def run(builder: StatementBuilder, *items: tuple[Change, Layout, Position]) -> list:
    out = []
    for change, layout, position in items:
        out += builder.add(change, layout, position)
    return out + builder.flush()


# -- identifiers -------------------------------------------------------------------------------


def test_quote_doubles_backticks_and_keeps_everything_else() -> None:
    assert quote("plain") == "`plain`"
    assert quote("we`ird") == "`we``ird`"
    assert quote("``") == "``````"
    assert quote("a b;DROP TABLE x") == "`a b;DROP TABLE x`"
    assert quote("ünï😀") == "`ünï😀`"


def test_ident_also_doubles_percent_for_parameter_binding() -> None:
    assert ident("50%off") == "`50%%off`"
    assert qualified("s%", "t`") == "`s%%`.`t```"
    # What the driver does with it: "%" formatting turns it back into the real name.
    assert (qualified("s%", "t`") + " %s") % ("'v'",) == "`s%`.`t``` 'v'"


@pytest.mark.parametrize("bad", ["", "a\x00b", "x" * 65])
def test_quote_refuses_empty_nul_and_overlong_names(bad: str) -> None:
    with pytest.raises(ApplyError):
        quote(bad)


def test_quote_accepts_64_characters() -> None:
    assert quote("x" * 64) == "`" + "x" * 64 + "`"


def test_generated_column_detection() -> None:
    assert is_generated("VIRTUAL GENERATED")
    assert is_generated("STORED GENERATED")
    assert is_generated("PERSISTENT")
    assert not is_generated("DEFAULT_GENERATED")
    assert not is_generated("auto_increment")
    assert not is_generated("")


# -- values ------------------------------------------------------------------------------------


def test_convert_passes_driver_types_unchanged() -> None:
    values = [
        Decimal("-1.000000000000000000000000000001"),
        b"\x00\xff",
        "😀",
        2**64 - 1,
        1.5,
        None,
    ]
    for value in values:
        assert convert(value) is value


def test_convert_dates_to_the_literal_the_driver_would_write() -> None:
    assert convert(dt.datetime(2024, 1, 2, 3, 4, 5, 6)) == "2024-01-02 03:04:05.000006"
    assert convert(dt.datetime(999, 1, 2)) == "0999-01-02 00:00:00"
    assert convert(dt.date(1000, 1, 1)) == "1000-01-01"


def test_convert_row_sizes_are_upper_bounds() -> None:
    row = (1, "ab'😀", b"\x00\xff", None, 1.5, Decimal("1.5"), dt.date(2024, 1, 1))
    values, size = convert_row(row, range(len(row)))
    assert values == [1, "ab'😀", b"\x00\xff", None, 1.5, Decimal("1.5"), "2024-01-01"]
    written = "(1,'ab\\'😀',X'00ff',NULL,1.5e0,1.5,'2024-01-01')"
    assert len(written.encode()) < size
    _, big = convert_row(("'" * 100,), [0])
    assert big >= 2 * 100 + 2


def test_convert_the_rest() -> None:
    assert convert({"b", "a", "c"}) == "a,b,c"
    assert convert(frozenset()) == ""
    assert convert(dt.timedelta(seconds=-1.5)) == "-00:00:01.500000"
    assert convert(-dt.timedelta(hours=838, minutes=59, seconds=59)) == "-838:59:59.000000"
    assert convert(dt.timedelta(days=1, microseconds=7)) == "24:00:00.000007"
    assert convert(True) == 1 and type(convert(True)) is int
    assert convert(bytearray(b"\x01")) == b"\x01"
    assert convert({"k": [1, None, "ü"]}) == '{"k":[1,null,"ü"]}'
    aware = dt.datetime(2024, 1, 1, 5, 30, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30)))
    assert convert(aware) == "2024-01-01 00:00:00"
    with pytest.raises(ApplyError):
        convert(object())


# -- layouts -----------------------------------------------------------------------------------


def test_layout_sql_shapes() -> None:
    assert LAYOUT.upsert_prefix == "INSERT INTO `shop`.`items` (`id`,`name`,`qty`) VALUES "
    assert LAYOUT.upsert_row == "(%s,%s,%s)"
    assert LAYOUT.upsert_suffix == (
        " ON DUPLICATE KEY UPDATE `id`=IF(`id`<=>VALUES(`id`),`id`,NULL),"
        "`name`=VALUES(`name`),`qty`=VALUES(`qty`)"
    )
    assert LAYOUT.delete_prefix == "DELETE FROM `shop`.`items` WHERE `id` IN ("


def test_layout_composite_key_uses_row_constructor_and_target_key_order() -> None:
    info = TableInfo("s", "t", ("a", "b", "v"), ("b", "a"))
    layout = Layout.build(info, ("a", "b", "v"))
    assert layout.key == (1, 0)
    assert layout.delete_prefix == "DELETE FROM `s`.`t` WHERE (`b`,`a`) IN ("
    assert layout.delete_row == "(%s,%s)"


def test_layout_guard_compares_the_whole_composite_key_before_any_assignment() -> None:
    layout = Layout.build(TableInfo("s", "t", ("a", "b", "v"), ("a", "b")), ("a", "b", "v"))
    assert layout.upsert_suffix == (
        " ON DUPLICATE KEY UPDATE `a`=IF(`a`<=>VALUES(`a`) AND `b`<=>VALUES(`b`),`a`,NULL),"
        "`v`=VALUES(`v`)"
    )


def test_layout_without_guard_replaces_like_gh_ost() -> None:
    layout = Layout.build(TableInfo("s", "t", ("a", "b"), ("a",)), ("a", "b"), guard=False)
    assert layout.upsert_suffix == " ON DUPLICATE KEY UPDATE `a`=VALUES(`a`),`b`=VALUES(`b`)"


def test_layout_matches_columns_case_insensitively_and_writes_target_spelling() -> None:
    info = TableInfo("s", "t", ("ID", "Name"), ("ID",))
    layout = Layout.build(info, ("id", "name"))
    assert layout.upsert_prefix == "INSERT INTO `s`.`t` (`ID`,`Name`) VALUES "


def test_layout_leaves_out_target_generated_columns() -> None:
    info = TableInfo("s", "t", ("id", "v", "g"), ("id",), frozenset({"g"}))
    layout = Layout.build(info, ("id", "v", "g"))
    assert layout.write == (0, 1)
    assert "`g`" not in layout.upsert_prefix


def test_layout_refuses_missing_columns_listing_them() -> None:
    with pytest.raises(SchemaMismatchError, match="lacks column\\(s\\) extra1, extra2"):
        Layout.build(T, ("id", "extra1", "name", "extra2"))


def test_layout_refuses_table_without_primary_key() -> None:
    with pytest.raises(NoPrimaryKeyError) as caught:
        Layout.build(TableInfo("s", "t", ("a",), ()), ("a",))
    assert "add a primary key on the target, or exclude the table from the route" in str(
        caught.value
    )


def test_layout_refuses_change_without_target_key_column() -> None:
    with pytest.raises(SchemaMismatchError, match="primary key column"):
        Layout.build(TableInfo("s", "t", ("id", "v"), ("id",)), ("v",))


# -- merging -----------------------------------------------------------------------------------


def test_adjacent_inserts_across_transactions_merge_into_one_statement() -> None:
    b = StatementBuilder()
    out = run(
        b,
        (insert((1, "a", 1)), LAYOUT, pos(1)),
        (insert((2, "b", 2), (3, "c", 3)), LAYOUT, pos(2)),
        (update(((3, "c", 3), (3, "c", 4))), LAYOUT, pos(3)),
    )
    assert len(out) == 1
    (st,) = out
    assert st.kind == "upsert" and st.rows == 4
    assert st.sql.count("(%s,%s,%s)") == 4
    assert st.params == [1, "a", 1, 2, "b", 2, 3, "c", 3, 3, "c", 4]
    assert (st.first, st.last) == (pos(1), pos(3))
    assert st.where == f"{pos(1)} … {pos(3)}"


def test_order_is_kept_across_statement_kinds() -> None:
    out = run(
        StatementBuilder(),
        (insert((1, "a", 1)), LAYOUT, pos(1)),
        (delete((1, "a", 1)), LAYOUT, pos(2)),
        (insert((1, "b", 3)), LAYOUT, pos(3)),
    )
    assert [(s.kind, s.params) for s in out] == [
        ("upsert", [1, "a", 1]),
        ("delete", [1]),
        ("upsert", [1, "b", 3]),
    ]


def test_different_tables_or_column_lists_do_not_merge() -> None:
    other = Layout.build(TableInfo("shop", "other", COLS, ("id",)), COLS)
    fewer = Layout.build(T, ("id", "name"))
    out = run(
        StatementBuilder(),
        (insert((1, "a", 1)), LAYOUT, pos(1)),
        (insert((2, "b", 2), table="other"), other, pos(1)),
        (Change("insert", "shop", "items", ("id", "name"), (), ((3, "c"),)), fewer, pos(2)),
        (insert((4, "d", 4)), LAYOUT, pos(3)),
    )
    assert [s.table for s in out] == ["items", "other", "items", "items"]
    assert [s.rows for s in out] == [1, 1, 1, 1]


def test_adjacent_deletes_merge_even_with_different_column_lists() -> None:
    fewer = Layout.build(T, ("id", "name"))
    out = run(
        StatementBuilder(),
        (delete((1, "a", 1)), LAYOUT, pos(1)),
        (Change("delete", "shop", "items", ("id", "name"), ((2, "b"),), ()), fewer, pos(2)),
    )
    assert len(out) == 1
    assert out[0].sql == "DELETE FROM `shop`.`items` WHERE `id` IN (%s,%s)"
    assert out[0].params == [1, 2]


def test_composite_key_delete_sql() -> None:
    layout = Layout.build(TableInfo("s", "t", ("a", "b", "v"), ("a", "b")), ("a", "b", "v"))
    out = run(
        StatementBuilder(),
        (
            Change("delete", "s", "t", ("a", "b", "v"), ((1, "x", 0), (2, "y", 0)), ()),
            layout,
            pos(1),
        ),
    )
    assert out[0].sql == "DELETE FROM `s`.`t` WHERE (`a`,`b`) IN ((%s,%s),(%s,%s))"
    assert out[0].params == [1, "x", 2, "y"]


def test_update_changing_the_key_deletes_the_old_key_first() -> None:
    out = run(
        StatementBuilder(),
        (
            update(
                ((1, "a", 1), (1, "a", 2)), ((5, "e", 5), (6, "e", 5)), ((7, "g", 7), (7, "h", 7))
            ),
            LAYOUT,
            pos(1),
        ),
    )
    assert [(s.kind, s.params) for s in out] == [
        ("upsert", [1, "a", 2]),
        ("delete", [5]),
        ("upsert", [6, "e", 5, 7, "h", 7]),
    ]


def test_truncate_is_a_transactional_delete_and_keeps_order() -> None:
    b = StatementBuilder()
    out = b.add(insert((1, "a", 1)), LAYOUT, pos(1))
    out += b.add(Change("truncate", "shop", "items"), LAYOUT, pos(2))
    out += b.add(insert((2, "b", 2)), LAYOUT, pos(3))
    out += b.flush()
    assert [(s.kind, s.sql.split(" VALUES")[0]) for s in out] == [
        ("upsert", "INSERT INTO `shop`.`items` (`id`,`name`,`qty`)"),
        ("truncate", "DELETE FROM `shop`.`items`"),
        ("upsert", "INSERT INTO `shop`.`items` (`id`,`name`,`qty`)"),
    ]


def test_ddl_has_no_statement() -> None:
    with pytest.raises(ApplyError):
        StatementBuilder().add(Change("ddl", "shop", "items", statement="DROP TABLE x"), LAYOUT)


# -- splitting ---------------------------------------------------------------------------------


def test_split_at_max_rows() -> None:
    rows = tuple((i, "n", i) for i in range(10))
    out = run(StatementBuilder(max_rows=4), (insert(*rows), LAYOUT, pos(1)))
    assert [s.rows for s in out] == [4, 4, 2]
    assert [p for s in out for p in s.params[::3]] == list(range(10))


def test_split_at_max_bytes_and_oversized_row_goes_alone() -> None:
    big = "x" * 1000
    rows = ((1, "a", 1), (2, big, 2), (3, "c", 3), (4, "d", 4))
    out = run(StatementBuilder(max_bytes=1500), (insert(*rows), LAYOUT, pos(1)))
    assert [s.params[0::3] for s in out] == [[1], [2], [3, 4]]
    for s in out[::2]:
        assert len(s.sql) + sum(len(str(p)) for p in s.params) < 1500


def test_bytes_are_estimated_by_hex_length() -> None:
    blob = b"\x00" * 400
    rows = tuple((i, blob, i) for i in range(5))
    out = run(StatementBuilder(max_bytes=2000), (insert(*rows), LAYOUT, pos(1)))
    assert [s.rows for s in out] == [2, 2, 1]  # ~800 hex characters per row


def test_statements_format_with_their_parameters() -> None:
    layout = Layout.build(TableInfo("we`ird", "50%off", ("id",), ("id",)), ("id",))
    (st,) = run(
        StatementBuilder(),
        (Change("insert", "we`ird", "50%off", ("id",), (), ((1,),)), layout, pos(1)),
    )
    assert st.sql % tuple(map(str, st.params)) == (
        "INSERT INTO `we``ird`.`50%off` (`id`) VALUES (1) "
        "ON DUPLICATE KEY UPDATE `id`=IF(`id`<=>VALUES(`id`),`id`,NULL)"
    )


def test_a_reduced_group_spans_every_statement() -> None:
    # The applier sets span_from for a reduced group: every statement carries all of it, so an
    # error names the group and is never taken for one transaction's (applier.py).
    builder = StatementBuilder(max_rows=2)
    builder.span_from = pos(1)
    out = run(
        builder,
        (insert((1, "a", 1), (2, "b", 2), (3, "c", 3)), LAYOUT, pos(9)),
        (Change("truncate", "shop", "items"), LAYOUT, pos(9)),
    )
    assert [(s.kind, s.rows, s.where) for s in out] == [
        ("upsert", 2, f"{pos(1)} … {pos(9)}"),
        ("upsert", 1, f"{pos(1)} … {pos(9)}"),
        ("truncate", 0, f"{pos(1)} … {pos(9)}"),
    ]


def test_layout_knows_other_unique_keys_and_foreign_keys() -> None:
    assert not LAYOUT.unique_keys and not LAYOUT.foreign_keys
    info = TableInfo("s", "t", ("id", "u"), ("id",), unique_keys=(("u",),), foreign_keys=True)
    layout = Layout.build(info, ("id", "u"))
    assert layout.unique_keys and layout.foreign_keys
