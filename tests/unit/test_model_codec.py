"""Position, Change/Transaction and the value codec: round trips, order, malformed input."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import msgpack
import pytest

from binlogsync import codec
from binlogsync.errors import ProtocolError
from binlogsync.model import (
    Change,
    Part,
    Transaction,
    body_from_wire,
    check_body,
    coalesced,
)
from binlogsync.position import Position, file_number
from binlogsync.rowtext import TextRows
from binlogsync.tabledef import ColumnDef, TableDef

pytestmark = pytest.mark.unit


# -- Position ------------------------------------------------------------------------------


def test_position_order_is_file_number_then_offset() -> None:
    ordered = [
        Position("binlog.000009", 4),
        Position("binlog.000009", 1234),
        Position("binlog.000010", 4),  # 10 > 9 as a number, not as text
        Position("binlog.000010", 5),
        Position("binlog.100000", 4),
    ]
    assert sorted(reversed(ordered)) == ordered
    assert all(
        a < b and b > a and a <= b and not a >= b
        for a, b in zip(ordered, ordered[1:], strict=False)
    )
    assert [p.key for p in ordered] == sorted(p.key for p in ordered)


def test_position_equality_ignores_the_gtid() -> None:
    a = Position("binlog.000003", 100, "0-1-5")
    b = Position("binlog.000003", 100, None)
    assert a == b and hash(a) == hash(b) and not a < b
    assert a != Position("binlog.000003", 101, "0-1-5")
    assert Position("binlog.000003", 100) != ("binlog.000003", 100)


def test_position_key_packs_file_and_offset() -> None:
    assert Position("binlog.000002", 77).key == (2 << 40) | 77
    assert file_number("mysql-bin.000123") == 123
    with pytest.raises(ProtocolError):
        file_number("binlog")
    with pytest.raises(ProtocolError):  # another script's digits: int() would read 3
        file_number("binlog.٣")


@pytest.mark.parametrize("gtid", ["0-1-57", None])
def test_position_json_and_wire_round_trip(gtid: str | None) -> None:
    position = Position("binlog.000003", 1234, gtid)
    as_json = json.loads(json.dumps(position.to_json()))
    assert as_json == {"file": "binlog.000003", "offset": 1234, "gtid": gtid}
    assert Position.from_json(as_json).gtid == gtid
    assert Position.from_json(as_json) == position
    again = Position.from_wire(codec.unpack(codec.pack(position.to_wire())))
    assert (again.file, again.offset, again.gtid) == (position.file, position.offset, gtid)


def test_position_parse_and_str() -> None:
    assert Position.parse("binlog.000003:1234") == Position("binlog.000003", 1234)
    assert str(Position("binlog.000003", 1234, "0-1-5")) == "binlog.000003:1234 (0-1-5)"
    assert str(Position("binlog.000003", 1234)) == "binlog.000003:1234"
    for text in ("binlog.000003", "binlog.000003:", "binlog.000003:-1", "x:12", ":12"):
        with pytest.raises(ProtocolError):
            Position.parse(text)


@pytest.mark.parametrize(
    "data",
    [
        None,
        "binlog.000001:4",
        [],
        {"file": "binlog.000001"},
        {"file": "binlog.000001", "offset": "4"},
        {"file": "binlog.000001", "offset": -1},
        {"file": "binlog.000001", "offset": 4.0},
        {"file": 7, "offset": 4},
        {"file": "binlog", "offset": 4},
        {"file": "binlog.000001", "offset": 4, "gtid": 5},
    ],
)
def test_malformed_position_json(data: Any) -> None:
    with pytest.raises(ProtocolError):
        Position.from_json(data)


@pytest.mark.parametrize(
    "data",
    [None, [], ["binlog.000001", 4], ["binlog.000001", 4, None, 1], {"file": "x"}, "abc",
     ["binlog.000001", None, None], [b"binlog.000001", 4, None]],
)  # fmt: skip
def test_malformed_position_wire(data: Any) -> None:
    with pytest.raises(ProtocolError):
        Position.from_wire(data)


# -- Change / Transaction ------------------------------------------------------------------

ROW_A = (1, "a😀", Decimal("1.50"), None, b"\x00\xff", dt.datetime(2024, 1, 2, 3, 4, 5, 6))
ROW_B = (2, "", Decimal("-0.000001"), {"x", "z"}, b"", dt.date(1000, 1, 1))
COLUMNS = ("id", "name", "amount", "tags", "raw", "at")

CHANGES = [
    Change("insert", "shop", "t", COLUMNS, (), (ROW_A, ROW_B)),
    Change(
        "insert",
        "shop",
        "t",
        COLUMNS,
        (),
        TextRows(
            [
                b"1\ta\\t\t1.50\t\\N\t00FF\t2024-01-02 03:04:05.000006",
                b"2\t\t-0.000001\tx,z\t\t\\N",
            ],
            ("int", "text", "decimal", "set", "bytes", "datetime"),
        ),
    ),
    Change("update", "shop", "t", COLUMNS, (ROW_A,), (ROW_B,)),
    Change("delete", "shop", "t", COLUMNS, (ROW_A, ROW_B), ()),
    Change("truncate", "shop", "t"),
    Change("ddl", "shop", "", statement="CREATE TABLE `x` (id INT PRIMARY KEY) -- 😀"),
    Change(
        "ddl",
        "shop",
        "x",
        statement="CREATE TABLE `x` (id INT PRIMARY KEY)",
        definition=TableDef(
            "shop", "x", (ColumnDef("id", "int", nullable=False),), ("id",)
        ).to_wire(),
    ),
]


@pytest.mark.parametrize("change", CHANGES, ids=[c.kind for c in CHANGES])
def test_change_wire_round_trip(change: Change) -> None:
    again = Change.from_wire(codec.unpack(codec.pack(change.to_wire())))
    assert again == change
    for a, b in zip((*again.before, *again.after), (*change.before, *change.after), strict=True):
        assert [type(v) for v in a] == [type(v) for v in b]


def test_transaction_wire_round_trip_and_row_count() -> None:
    txn = Transaction(Position("binlog.000004", 999, "0-1-12"), 1700000000.25, tuple(CHANGES))
    again = Transaction.from_wire(codec.unpack(codec.pack(txn.to_wire())))
    assert again == txn
    assert again.position.gtid == "0-1-12" and again.timestamp == 1700000000.25
    assert txn.row_count == 2 + 2 + 1 + 2 + 1 + 1 + 1
    empty = Transaction(Position("binlog.000004", 1000), 1.0)
    assert Transaction.from_wire(codec.unpack(codec.pack(empty.to_wire()))) == empty
    assert Transaction.from_wire([["binlog.000001", 4, None], 5, []]).timestamp == 5.0


def test_renamed_keeps_everything_but_the_schema() -> None:
    renamed = CHANGES[1].renamed("shop_copy")
    assert renamed.schema == "shop_copy"
    assert renamed.to_wire()[2:] == CHANGES[1].to_wire()[2:]


def test_renamed_moves_a_definition_and_a_table_rename_in_the_same_schema() -> None:
    definition = TableDef(
        "shop", "t2", (ColumnDef("id", "int", nullable=False),), ("id",),
        table_renamed_from=("shop", "t"),
    ).to_wire()  # fmt: skip
    change = Change("ddl", "shop", "t2", statement="RENAME TABLE t TO t2", definition=definition)
    moved = Change.from_wire(codec.unpack(codec.pack(change.renamed("copy").to_wire())))
    assert moved.definition is not None
    assert moved.definition["schema"] == "copy"
    assert moved.definition["table_renamed_from"] == ["copy", "t"]


GOOD_CHANGE = ["insert", "s", "t", ["id"], [], [[1]], ""]
TEXT = {"forms": ["int", "text"], "text": b"1\ta\\tb\n2\t\\N\n"}


@pytest.mark.parametrize(
    "data",
    [
        None,
        "insert",
        GOOD_CHANGE[:6],
        [*GOOD_CHANGE, "extra"],
        ["upsert", *GOOD_CHANGE[1:]],
        [["insert"], *GOOD_CHANGE[1:]],
        ["insert", 1, "t", ["id"], [], [[1]], ""],
        ["insert", "s", None, ["id"], [], [[1]], ""],
        ["insert", "s", "t", ["id"], [], [[1]], None],
        ["insert", "s", "t", "id", [], [[1]], ""],
        ["insert", "s", "t", [1], [], [[1]], ""],
        ["insert", "s", "t", ["id"], [], [[1, 2]], ""],
        ["insert", "s", "t", ["id"], [], [(1,)], ""],
        ["insert", "s", "t", ["id"], None, [[1]], ""],
        ["insert", "s", "t", ["id"], [], [1], ""],
        ["update", "s", "t", ["id"], [[1]], [], ""],
        ["update", "s", "t", ["id"], [[1], [2]], [[3]], ""],
        # Rows in text form: only an insert's, one known form per column, every line and field
        # in its form's grammar, utf-8.
        ["insert", "s", "t", ["id", "v"], [], {**TEXT, "text": b"1\ta\n2\n"}, ""],
        ["insert", "s", "t", ["id", "v"], [], {**TEXT, "text": b"1\ta\t\n2\tb\n"}, ""],
        ["insert", "s", "t", ["id", "v"], [], {**TEXT, "text": b"1\ta"}, ""],
        ["insert", "s", "t", ["id", "v"], [], {**TEXT, "text": b"x\ta\n"}, ""],
        ["insert", "s", "t", ["id", "v"], [], {**TEXT, "text": b"1\ta\\xb\n"}, ""],
        ["insert", "s", "t", ["id", "v"], [], {**TEXT, "text": b"1\ta\\\n"}, ""],
        ["insert", "s", "t", ["id", "v"], [], {**TEXT, "text": b"1\t\xff\n"}, ""],
        ["insert", "s", "t", ["id", "v"], [], {**TEXT, "text": "1\ta\n"}, ""],
        ["insert", "s", "t", ["id", "v"], [], {**TEXT, "forms": ["int"]}, ""],
        ["insert", "s", "t", ["id", "v"], [], {**TEXT, "forms": ["int", "sql"]}, ""],
        ["insert", "s", "t", ["id", "v"], [], {**TEXT, "rows": 2}, ""],
        ["insert", "s", "t", ["id", "v"], [], {"text": TEXT["text"]}, ""],
        ["insert", "s", "t", ["id", "b"], [], {"forms": ["int", "bytes"], "text": b"1\tZZ\n"}, ""],
        ["insert", "s", "t", ["id", "b"], [], {"forms": ["int", "bytes"], "text": b"1\t0\n"}, ""],
        [
            "insert",
            "s",
            "t",
            ["id", "d"],
            [],
            {"forms": ["int", "date"], "text": b"1\t2024-1-1\n"},
            "",
        ],
        ["insert", "s", "t", ["id", "v"], [[1, "a"]], TEXT, ""],
        ["update", "s", "t", ["id", "v"], [], TEXT, ""],
        ["delete", "s", "t", ["id", "v"], [], TEXT, ""],
        ["ddl", "s", "t", [], [], [], "ALTER TABLE t ADD c INT", {"v": 1}],
        ["ddl", "s", "t", [], [], [], "ALTER TABLE t ADD c INT", [1, 2]],
        [*GOOD_CHANGE, {"v": 1, "schema": "s", "table": "t", "columns": [], "primary_key": []}],
        [
            "ddl",
            "s",
            "t",
            [],
            [],
            [],
            "ALTER TABLE t ADD c INT",
            {
                "v": 1,
                "schema": "s",
                "table": "t",
                "primary_key": ["id"],
                "columns": [{"name": "id", "type": "int); DROP TABLE t; --"}],
            },
        ],  # fmt: skip
    ],
)
def test_malformed_change(data: Any) -> None:
    with pytest.raises(ProtocolError):
        Change.from_wire(data)
    body = [["binlog.000001", 4, None], 1.0, [data]]
    with pytest.raises(ProtocolError):  # the hub refuses what a target would
        check_body(body)


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        [["binlog.000001", 4, None], 1.0],
        [["binlog.000001", 4, None], "now", []],
        [["binlog.000001", 4, None], None, []],
        [["binlog.000001", 4, None], 1.0, None],
        [["binlog.000001", 4, None], 1.0, [GOOD_CHANGE[:3]]],
        [["binlog.000001", -4, None], 1.0, []],
        [None, 1.0, []],
        {"position": None},
    ],
)
def test_malformed_transaction(data: Any) -> None:
    with pytest.raises(ProtocolError):
        Transaction.from_wire(data)


# -- codec ---------------------------------------------------------------------------------

VALUES = [
    None,
    True,
    False,
    0,
    -1,
    127,
    -(2**63),
    2**63 - 1,
    2**64 - 1,
    0.1,
    -1.7976931348623157e308,
    1.1,
    "",
    "plain",
    "😀 𝄞 Grüße",
    "\x00 nul inside",
    b"",
    b"\x00",
    bytes(range(256)),
    Decimal("0"),
    Decimal("1.50"),
    Decimal("-0.000000000000000000000000000001"),
    Decimal("99999999999999999999999999999999999.999999999999999999999999999999"),
    Decimal("-1E+5"),
    dt.datetime(1000, 1, 1),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2024, 2, 29, 12, 0, 0, 1),
    dt.date(2024, 2, 29),
    dt.date(1, 1, 1),
    dt.timedelta(0),
    dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
    -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
    dt.timedelta(microseconds=-1),
    set(),
    {"x"},
    {"a", "b", "😀"},
    [1, "two", None, [3, b"\x04"]],
    {"k": [Decimal("1.0"), dt.date(2000, 1, 1)]},
]


@pytest.mark.parametrize(
    "value", VALUES, ids=[f"{type(v).__name__}-{i}" for i, v in enumerate(VALUES)]
)
def test_codec_round_trip_keeps_value_and_type(value: Any) -> None:
    again = codec.unpack(codec.pack(value))
    assert again == value
    assert type(again) is type(value)
    if isinstance(value, Decimal):
        assert str(again) == str(value)  # digits and scale, not just the number


def test_codec_frozenset_becomes_set_and_aware_datetime_becomes_utc() -> None:
    assert codec.unpack(codec.pack(frozenset({"a"}))) == {"a"}
    aware = dt.datetime(2024, 1, 1, 5, 30, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30)))
    assert codec.unpack(codec.pack(aware)) == dt.datetime(2024, 1, 1, 0, 0)


def test_codec_refuses_to_encode_unknown_types() -> None:
    with pytest.raises(TypeError):
        codec.pack(object())


def _ext(code: int, payload: bytes) -> bytes:
    return msgpack.packb(msgpack.ExtType(code, payload))


MALFORMED = {
    "empty": b"",
    "garbage": b"\xc1",
    "truncated-array": b"\x93\x01\x02",
    "truncated-str": b"\xa5ab",
    "truncated-int": b"\xcf\x00\x00",
    "extra-data": msgpack.packb(1) + msgpack.packb(2),
    "truncated-pack": codec.pack([Decimal("1.5"), "x" * 40])[:-5],
    "unknown-ext": _ext(42, b"x"),
    "negative-ext": b"\xd4\xfb\x78",  # fixext1, code -5
    "decimal-not-a-number": _ext(1, b"one"),
    "decimal-not-utf8": _ext(1, b"\xff\xfe"),
    "datetime-garbage": _ext(2, b"yesterday"),
    "datetime-bad-day": _ext(2, b"2024-02-30T00:00:00"),
    "date-garbage": _ext(3, b"2024-13-01"),
    "time-not-msgpack": _ext(4, b"\xc1"),
    "time-not-an-int": _ext(4, msgpack.packb("1 hour")),
    "time-empty": _ext(4, b""),
    "time-a-float": _ext(4, msgpack.packb(1.5)),
    "set-not-a-list": _ext(5, msgpack.packb("x,y")),
    "set-of-ints": _ext(5, msgpack.packb([1, 2])),
    "set-truncated": _ext(5, msgpack.packb(["x", "y"])[:-1]),
    "map-with-int-keys": msgpack.packb({1: 2}),
    "invalid-utf8-str": b"\xa2\xff\xfe",
}


@pytest.mark.parametrize("data", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_bytes_raise_protocol_error_only(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        codec.unpack(data)


def test_msgpack_timestamp_extension_is_refused_in_rows() -> None:
    timestamp = b"\xd6\xff\x00\x00\x00\x01"  # fixext4, code -1: msgpack's, not one of ours
    change = codec.unpack(
        codec.pack(["insert", "s", "t", ["a"], [], [[1]], ""]).replace(
            b"\x91\x91\x01", b"\x91\x91" + timestamp
        )
    )
    with pytest.raises(ProtocolError, match="type binlogsync does not send"):
        Change.from_wire(change)


@pytest.mark.parametrize("offset", [True, 2**40])
def test_position_offset_must_be_a_real_binlog_offset(offset: Any) -> None:
    with pytest.raises(ProtocolError):
        Position.from_json({"file": "binlog.000001", "offset": offset})


def test_codec_refuses_oversized_payloads() -> None:
    data = codec.pack("x" * 2000)
    with pytest.raises(ProtocolError):
        codec.unpack(data, max_len=1000)
    assert codec.unpack(data) == "x" * 2000


def test_codec_refuses_non_bytes() -> None:
    with pytest.raises(ProtocolError):
        codec.unpack("not bytes")  # type: ignore[arg-type]


def test_garbage_never_raises_anything_but_protocol_error() -> None:
    import random

    rng = random.Random(1234)
    sample = codec.pack(Transaction(Position("binlog.000001", 4), 1.0, tuple(CHANGES)).to_wire())
    for _ in range(3000):
        data = bytearray(sample)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = data[: rng.randrange(1, len(data) + 1)]
        try:
            Transaction.from_wire(codec.unpack(bytes(data)))
        except ProtocolError:
            pass


# -- check_body: the hub's checks without building objects ----------------------------------

POS = ["binlog.000001", 4, None]
END = ["binlog.000002", 9, "0-1-9"]
MANY = [[n] for n in range(6)]  # more rows than the short loop takes: the C-level checks


def _tx(*changes: Any) -> list[Any]:
    return [POS, 1.0, list(changes)]


def _part(*changes: Any, number: Any = 2, last: Any = True, end: Any = END) -> list[Any]:
    return [POS, number, last, end, 1.0, list(changes)]


HOSTILE_BODIES = [
    *[_tx(c) for c in test_malformed_change.pytestmark[0].args[1]],  # type: ignore[attr-defined]
    *test_malformed_transaction.pytestmark[0].args[1],  # type: ignore[attr-defined]
    _tx(["insert", "s", "t", ["id"], [], [*MANY, [1, 2]], ""]),
    _tx(["insert", "s", "t", ["id"], [], [*MANY, (1,)], ""]),
    _tx(["insert", "s", "t", ["id"], [], [*MANY, 1], ""]),
    _tx(["insert", "s", "t", ["id"], [], [*MANY, [object()]], ""]),
    _tx(["insert", "s", "t", ["id"], [], [[object()]], ""]),
    _tx(["insert", "s", "t", ["id"], [], [[[1]]], ""]),
    _tx(["insert", "s", "t", ["id"], [], [[{"a": 1}]], ""]),
    _tx(["update", "s", "t", ["id"], MANY, [*MANY, [7]], ""]),
    _tx(GOOD_CHANGE, ["insert", "s", "t", ["id", "x"], [], [[1]], ""]),
    [POS, True, []],
    [POS, float("nan"), []],
    [POS, float("inf"), []],
    [POS, -1, []],
    [POS, 2.0**40, []],
    [["binlog.000001", True, None], 1.0, []],
    [["binlog.000001", 2**40, None], 1.0, []],
    [["binlog", 4, None], 1.0, []],
    [["binlog.999999999", 4, None], 1.0, []],
    [["binlog.000001", 4, "x" * 256], 1.0, []],
    [["binlog.000001", 4, 5], 1.0, []],
    [["binlog.000001", 4], 1.0, []],
    [("binlog.000001", 4, None, None), 1.0, []],
    _part(number=0),
    _part(number=2**31),
    _part(number=True),
    _part(number=2.0),
    _part(last=1),
    _part(last=False),
    _part(last=True, end=None),
    _part(end=["binlog", 1, None]),
    [None, 1, False, None, 0.0, []],
    [POS, 1, False, None, "0", []],
    [POS, 1, False, None, 0.0, None],
    _part(GOOD_CHANGE, ["insert", "s", "t", ["id"], [], [[1, 2]], ""]),
]
GOOD_BODIES = [
    _tx(),
    _tx(GOOD_CHANGE),
    _tx(["insert", "s", "t", ["id"], [], MANY, ""], ["delete", "a", "b", ["id"], MANY, [], ""]),
    _tx(["update", "s", "t", ["id"], MANY, MANY, ""], ["truncate", "s", "t", [], [], [], ""]),
    _tx(["ddl", "s", "", [], [], [], "CREATE TABLE x (id INT)"]),
    _tx(["insert", "s", "t", ["id", "v"], [], TEXT, ""]),
    _tx(["insert", "s", "t", ["id", "v"], [], {**TEXT, "text": b""}, ""]),
    [("binlog.000001", 4, None), 5, []],  # a tuple where msgpack gives lists: the long way
    _part(GOOD_CHANGE, number=1, last=False, end=None),
    _part(GOOD_CHANGE, ["insert", "a", "b", ["id"], [], MANY, ""]),
    _part(),
]


def _same_answer(data: Any) -> None:
    """check_body refuses exactly what body_from_wire refuses, and reports what it holds."""
    try:
        built = body_from_wire(data)
    except ProtocolError:
        with pytest.raises(ProtocolError):
            check_body(data)
        return
    checked = check_body(data)
    tables = tuple(sorted({(c.schema, c.table) for c in built.changes}))
    assert (checked.tables, checked.changes) == (tables, len(built.changes))
    if isinstance(built, Part):
        assert (checked.begin, checked.number) == (built.begin, built.number)
        assert (checked.end, checked.timestamp) == (built.end, built.timestamp)
        assert checked.begin is not None and checked.begin.gtid == built.begin.gtid
    else:
        assert (checked.end, checked.timestamp, checked.number) == (
            built.position,
            built.timestamp,
            0,
        )
        assert checked.end is not None and checked.end.gtid == built.position.gtid


@pytest.mark.parametrize("data", HOSTILE_BODIES)
def test_check_body_refuses_every_hostile_body(data: Any) -> None:
    with pytest.raises(ProtocolError):
        body_from_wire(data)
    with pytest.raises(ProtocolError):
        check_body(data)


@pytest.mark.parametrize("data", GOOD_BODIES)
def test_check_body_reports_what_the_body_holds(data: Any) -> None:
    _same_answer(data)


def _mutated(value: Any, rng: Any) -> Any:
    """`value` with one nested item replaced, dropped or duplicated."""
    if not isinstance(value, list) or not value or rng.random() < 0.2:
        return rng.choice(
            [None, True, 0, -1, 2**40, 1.5, float("nan"), "", "x", b"x", [], [1], {"k": 1},
             Decimal("1"), dt.date(2000, 1, 1), (1,), object(), ["binlog.000001", 4, None]]
        )  # fmt: skip
    copy = list(value)
    i = rng.randrange(len(copy))
    action = rng.random()
    if action < 0.7:
        copy[i] = _mutated(copy[i], rng)
    elif action < 0.85:
        del copy[i]
    else:
        copy.insert(i, copy[i])
    return copy


def test_check_body_and_body_from_wire_agree_on_mutated_bodies() -> None:
    import random

    rng = random.Random(77)
    seeds = [
        codec.unpack(codec.pack(Transaction(Position("binlog.000001", 4), 1.0, tuple(CHANGES)).to_wire())),
        codec.unpack(
            codec.pack(Part(Position("binlog.000001", 4), 3, True, tuple(CHANGES), Position("binlog.000002", 8), 2.0).to_wire())
        ),
        *GOOD_BODIES,
    ]  # fmt: skip
    for _ in range(6000):
        _same_answer(_mutated(rng.choice(seeds), rng))


def test_check_body_and_body_from_wire_agree_on_garbled_bytes() -> None:
    import random

    rng = random.Random(4321)
    sample = codec.pack(Transaction(Position("binlog.000001", 4), 1.0, tuple(CHANGES)).to_wire())
    for _ in range(3000):
        data = bytearray(sample)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            decoded = codec.unpack(bytes(data))
        except ProtocolError:
            continue
        _same_answer(decoded)


def _built(raw: bytes, tuples: bool) -> str:
    """What `body_from_wire` makes of `raw` decoded with lists or with tuples: its repr (a NaN
    is not equal to itself, its repr is), or the refusal."""
    try:
        return repr(body_from_wire(codec.unpack(raw, tuples=tuples)))
    except ProtocolError:
        return "refused"


def test_bodies_decoded_as_tuples_are_built_and_refused_as_lists_are() -> None:
    """Targets decode bodies with `unpack(tuples=True)`; the hub checks them as lists
    (`check_body`). The same bytes must give the same transaction or part, or the same
    refusal, either way: every mutated body above that msgpack can carry, and garbled bytes."""
    import random

    rng = random.Random(2026)
    seeds = [
        Transaction(Position("binlog.000001", 4), 1.0, tuple(CHANGES)).to_wire(),
        Part(Position("binlog.000001", 4), 3, True, tuple(CHANGES), Position("binlog.000002", 8), 2.0).to_wire(),
        *GOOD_BODIES,
    ]  # fmt: skip
    answers = set()
    for _ in range(6000):
        try:
            raw = codec.pack(_mutated(rng.choice(seeds), rng))
        except TypeError:  # object(): nothing msgpack carries
            continue
        answers.add(built := _built(raw, tuples=False))
        assert _built(raw, tuples=True) == built
    sample = codec.pack(Transaction(Position("binlog.000001", 4), 1.0, tuple(CHANGES)).to_wire())
    for _ in range(3000):
        data = bytearray(sample)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        assert _built(bytes(data), tuples=True) == _built(bytes(data), tuples=False)
    assert "refused" in answers and len(answers) > 100  # both verdicts were met, many times


def test_a_body_decoded_as_tuples_keeps_its_rows_without_a_copy() -> None:
    """The point of tuples: msgpack's row arrays become the change's rows as they are."""
    tx = Transaction(Position("binlog.000001", 4, "0-1-5", "gtid"), 1.0, tuple(CHANGES))
    data = codec.unpack(codec.pack(tx.to_wire()), tuples=True)
    built = body_from_wire(data)
    assert built == tx
    rows = [c for c in data[2] if c[0] in ("insert", "update")][0][5]
    assert [c.after for c in built.changes if c.kind in ("insert", "update")][0] is rows


def test_packing_rows_as_tuples_gives_the_same_bytes() -> None:
    """`to_wire(packing=True)` leaves rows as tuples for `pack` (no copy per row): the bytes
    must be exactly those of the lists `from_wire` reads back."""
    import datetime as dt
    from decimal import Decimal

    from binlogsync.codec import pack
    from binlogsync.model import Change, Part, Transaction
    from binlogsync.position import Position

    rows = tuple(
        (i, f"r{i}", Decimal("1.50"), dt.datetime(2024, 1, 1, 0, 0, i), None) for i in range(9)
    )
    cols = ("id", "s", "d", "t", "n")
    changes = (
        Change("insert", "s", "t", cols, (), rows),
        Change("update", "s", "t", cols, rows[:2], rows[2:4]),
        Change("delete", "s", "t", cols, rows[4:], ()),
    )
    tx = Transaction(Position("binlog.000001", 400), 1.7e9, changes)
    part = Part(
        Position("binlog.000001", 4), 2, True, changes, Position("binlog.000001", 400), 1.7e9
    )
    for item in (tx, part):
        assert pack(item.to_wire(packing=True)) == pack(item.to_wire())
    assert Transaction.from_wire(tx.to_wire()) == tx  # in memory: lists, as before


def test_coalesced_joins_runs_of_one_kind_to_one_table_and_keeps_the_order() -> None:
    """Capture makes one change per Rows event (~80 rows); the MariaDB engine builds LOAD DATA
    and multi-row statements only for changes of many rows, so it joins each run first."""
    cols = ("id", "v")

    def ins(table: str, *ids: int) -> Change:
        return Change("insert", "s", table, cols, (), tuple((i, f"v{i}") for i in ids))

    upd = Change("update", "s", "t", cols, ((1, "a"),), ((1, "b"),))
    ddl = Change("ddl", "s", "t", statement="ALTER TABLE t ADD c INT")
    changes = [ins("t", 1, 2), ins("t", 3), ins("u", 4), ins("u", 5), upd, upd, ddl, ins("t", 6)]
    joined = coalesced(changes)
    assert [(c.kind, c.table, c.row_count) for c in joined] == [
        ("insert", "t", 3),
        ("insert", "u", 2),
        ("update", "t", 2),
        ("ddl", "t", 1),
        ("insert", "t", 1),
    ]
    assert joined[0].after == ((1, "v1"), (2, "v2"), (3, "v3"))
    assert joined[2].before == ((1, "a"), (1, "a")) and joined[2].after == ((1, "b"), (1, "b"))
    other_columns = Change("insert", "s", "t", ("id", "w"), (), ((7, "x"),))
    assert len(coalesced([ins("t", 1), other_columns])) == 2
    assert coalesced([ins("t", 1)]) == [ins("t", 1)]


def test_coalesced_leaves_changes_of_few_rows_as_they_are() -> None:
    """Below `rows` row images in all, joining gains an engine nothing: the same list back."""
    cols = ("id", "v")
    small = [Change("insert", "s", "t", cols, (), ((i, "v"),)) for i in range(4)]
    assert coalesced(small, rows=256) is small
    assert len(coalesced(small, rows=4)) == 1
