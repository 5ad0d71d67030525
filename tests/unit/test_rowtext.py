"""Rows as LOAD DATA's text (rowtext.py): read back into the typed form's values, escapes as
LOAD DATA reads them, slices that stay text."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pytest

from binlogsync.codec import shortest_float32
from binlogsync.errors import ProtocolError
from binlogsync.rowtext import TextRows, check, split
from binlogsync.zerodate import ZeroDate

pytestmark = pytest.mark.unit

FORMS = ("int", "text", "bytes", "decimal", "float32", "datetime", "date", "time", "set", "bit")
LINES = [
    b"1\ta\\\\b\\tc\\nd\\re\\0f\t00FF5C\t-1.50\t1.100000023841858\t2024-02-29 23:59:59.000001"
    b"\t0000-00-00\t-838:59:59.000000\ta,c\t4095",
    b"2\t\\\\N\t\t0\t-3.4028234663852886e38\t\\N\t2024-00-10\t00:00:00.5\t\t0",
    b"3\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N",
]


def test_fields_read_into_the_typed_forms_values() -> None:
    rows = TextRows(LINES, FORMS)
    assert list(rows) == [
        (
            1,
            "a\\b\tc\nd\re\x00f",
            b"\x00\xff\\",
            Decimal("-1.50"),
            1.1,
            dt.datetime(2024, 2, 29, 23, 59, 59, 1),
            ZeroDate.parse("date", "0000-00-00"),
            -dt.timedelta(hours=838, minutes=59, seconds=59),
            {"a", "c"},
            4095,
        ),
        (
            2,
            "\\N",  # an escaped backslash and N: text, not NULL
            b"",
            Decimal("0"),
            -3.4028234663852886e38,  # -FLT_MAX: its shortest form would pass FLT_MAX
            None,
            ZeroDate.parse("date", "2024-00-10"),
            dt.timedelta(microseconds=500000),
            set(),
            0,
        ),
        (3, *[None] * 9),
    ]
    assert [type(v) for v in rows[0]] == [
        int, str, bytes, Decimal, float, dt.datetime, ZeroDate, dt.timedelta, set, int
    ]  # fmt: skip


def test_a_slice_stays_text_and_one_row_reads_only_its_line() -> None:
    rows = TextRows(LINES, FORMS)
    part = rows[1:]
    assert isinstance(part, TextRows) and part.lines == LINES[1:] and part.forms == FORMS
    assert part.text == LINES[1] + b"\n" + LINES[2] + b"\n"
    assert rows[-1] == (3, *[None] * 9)
    assert rows._rows is None  # nothing else was read
    assert rows == list(rows) and rows.hexed == [f == "bytes" for f in FORMS]
    assert TextRows([], FORMS).text == b"" and len(TextRows([], FORMS)) == 0


def test_well_formed_text_passes_and_splits_into_its_lines() -> None:
    text = b"\n".join(LINES) + b"\n"
    check({"forms": list(FORMS), "text": text}, len(FORMS))
    assert split(text) == LINES


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"1\ta\n2\n", "line 2"),
        (b"1\ta\\\n", "line 1"),  # a lone backslash at the end of a field
        (b"1\ta\\Nb\n", "line 1"),  # \N inside a field: LOAD DATA's meaning is not ours
        (b"-\ta\n", "line 1"),
        (b"1\t\xc3\n", "utf-8"),
    ],
)
def test_check_names_what_is_wrong(text: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        check({"forms": ["int", "text"], "text": text}, 2)


def test_a_field_the_grammar_allows_but_no_value_has_is_a_protocol_error() -> None:
    rows = TextRows([b"1\t2024-13-01 00:00:00"], ("int", "datetime"))
    with pytest.raises(ProtocolError, match="month"):
        list(rows)


@pytest.mark.parametrize("value", [3.4028234663852886e38, -3.4028234663852886e38])
def test_the_largest_float32_stays_within_what_a_float_column_takes(value: float) -> None:
    """%.8g of FLT_MAX is 3.4028235e38, the same float32, but above FLT_MAX as a double: a
    server that reads it as a double refuses it for a FLOAT column (out of range), so the
    shortest form must not pass FLT_MAX."""
    got = shortest_float32(value)
    assert abs(got) <= 3.4028234663852886e38
    assert struct.pack("<f", got) == struct.pack("<f", value)
    assert shortest_float32(1.100000023841858) == 1.1  # shorter where it stays inside


def test_re2_accepts_exactly_the_texts_python_re_accepts() -> None:
    """`check` runs the grammar with RE2 (`_linear`: the possessive marks taken out, bytes as
    Latin-1); Python's `re` runs the possessive original. Over every form, and thousands of
    texts mutated byte by byte from valid ones, both say the same."""
    import random
    import re

    from binlogsync import rowtext

    every = tuple(rowtext.GRAMMAR)
    for forms in (FORMS, every):
        linear = rowtext._linear(forms)
        assert not rowtext._POSSESSIVE.search(linear.pattern)
        python = re.compile(rb"(?:" + rowtext._line(forms) + rb"\n)*+")
        valid = b"\n".join(LINES) + b"\n" if forms == FORMS else b""
        if forms == every:
            valid = b"\t".join([b"\\N"] * len(every)) + b"\n"
        assert linear.fullmatch(valid) and python.fullmatch(valid)
        alphabet = b"\t\n\\N0123456789-:. eE+AFaf,x\x00\xff\xc3"
        rnd = random.Random(7)
        agreed = {True: 0, False: 0}
        for _ in range(4000):
            text = bytearray(valid)
            for _ in range(rnd.randrange(1, 4)):
                at = rnd.randrange(len(text))
                what = rnd.random()
                if what < 0.4:
                    text[at] = rnd.choice(alphabet)
                elif what < 0.7:
                    text.insert(at, rnd.choice(alphabet))
                else:
                    del text[at]
            ok = linear.fullmatch(bytes(text)) is not None
            assert ok == (python.fullmatch(bytes(text)) is not None), bytes(text)
            agreed[ok] += 1
        assert agreed[True] > 50 and agreed[False] > 50  # both outcomes were tried
