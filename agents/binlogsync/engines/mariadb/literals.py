"""SQL literals for many rows at once, column by column, without a Python call per value where
a column allows it: the bulk half of `statements.py` for the parts of large transactions.

`pipeline.bind` turns a statement's parameters into the literals the driver's `mogrify` writes,
one value at a time. For a change of many rows the same text is made here a column at a time:
a column of plain ints is `map(str, …)`, a column of strings none of which needs escaping is
one format call per value through `map`, a column of bytes `bytes.hex` through `map`; rows are
then joined by C-level `str.join`. Any other column goes value by value through `literal`,
which writes what `bind` writes for the same converted value. Whatever `bind` would hand to the
driver's own escape (a NaN or infinite float or Decimal, a subclass of a plain type) raises
`NotBulk`, and the caller builds that change the ordinary way. The text is therefore the very
text `bind` makes, which the unit tests compare value for value.

Only for sessions without NO_BACKSLASH_ESCAPES (the escapes below are backslash escapes), as
`bind` itself. `convert` (a column value as a driver parameter) lives here too: statements.py
uses it for the row-by-row way.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Sequence
from decimal import Decimal
from itertools import repeat
from operator import attrgetter
from typing import Any, cast

from pymysql import converters

from ...errors import ApplyError
from ...model import time_text
from ...zerodate import ZeroDate

_TABLE = converters._escape_table  # what the driver's escape_string translates with
# Every character that _TABLE changes: NUL, LF, CR, Ctrl-Z, double and single quote, backslash.
_SPECIAL = re.compile("[\x00\n\r\x1a\"'\\\\]")
_QUOTED = "'{}'".format
_HEX = "X'{}'".format


_PASS = frozenset({int, str, float, Decimal, bytes, type(None)})


def convert(value: Any) -> Any:
    """A column value as a driver parameter.

    Decimal, bytes, str, int, float and None pass unchanged. datetime and date become their
    ISO text ('YYYY-MM-DD HH:MM:SS.ffffff'), the very literal the driver would write for them,
    at a quarter of its cost; TIMESTAMPs arrive as naive UTC and the session time zone is
    +00:00, and an aware datetime is converted to UTC first. timedelta (TIME) becomes
    '[-]HH:MM:SS.ffffff'; a SET becomes its sorted members joined by ','; BIT arrives as int;
    bool becomes 0/1; a JSON document decoded to dict/list is dumped back to JSON text. A zero,
    partial or invalid date (zerodate.py) becomes the server's text ('0000-00-00 00:00:00'),
    which the apply session's sql_mode lets in (applier.py).
    """
    kind = type(value)
    if kind in _PASS:
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if kind is ZeroDate:
        return value.text
    if kind is bool:
        return int(value)
    if isinstance(value, dt.timedelta):
        return time_text(value)
    if isinstance(value, set | frozenset):
        return ",".join(sorted(value))
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, int | str | float | Decimal | bytes):  # subclasses (IntEnum, …)
        return value
    raise ApplyError(f"cannot apply a value of type {kind.__name__}: {value!r:.80}")


_TZINFO = attrgetter("tzinfo")
_NONE = type(None)


def plain_texts(values: Sequence[Any], kinds: set[type]) -> list[str | None] | None:
    """The text `convert` makes of each value (None for a NULL) of a column whose values
    (`kinds`: their types) are all finite Decimals, all naive datetimes or all dates, NULLs
    beside them allowed; else None. Made through `map` in C, not value by value: a seed's rows
    carry millions of them. The text holds nothing any escape changes (digits, '.', '-', ':',
    ' ')."""
    present: Sequence[Any] = values
    if _NONE in kinds:
        kinds = kinds - {_NONE}
        present = [v for v in values if v is not None]
    if len(kinds) != 1:
        return None
    (kind,) = kinds
    made: list[str]
    if kind is Decimal:
        if not all(map(Decimal.is_finite, present)):
            return None
        # str() is format(v, "f") unless it chose an exponent, which it writes with an "E".
        made = list(map(str, present))
        if "E" in "".join(made):
            made = list(map(format, present, repeat("f")))
    elif kind is dt.datetime:
        if any(map(_TZINFO, present)):
            return None
        made = list(map(dt.datetime.isoformat, present, repeat(" ")))
    elif kind is dt.date:
        made = list(map(dt.date.isoformat, present))
    else:
        return None
    if present is values:
        return cast("list[str | None]", made)
    texts = iter(made)
    return [None if v is None else next(texts) for v in values]


class NotBulk(Exception):
    """A value that only the driver's own escape writes: build the change the ordinary way."""


def literal(value: Any) -> str:
    """One column value as `bind` writes it after `convert`."""
    if type(value) not in _PASS:
        value = convert(value)
    kind = type(value)
    if kind is str:
        return "'" + str(value.translate(_TABLE)) + "'"
    if kind is int:
        return str(value)
    if value is None:
        return "NULL"
    if kind is bytes:
        return "X'" + str(value.hex()) + "'"
    if kind is Decimal and value.is_finite():
        return format(value, "f")
    if kind is float and math.isfinite(value):
        text = repr(value)
        return text if "e" in text else text + "e0"
    raise NotBulk(kind.__name__)


def column(values: Sequence[Any]) -> list[str]:
    """The literals of one column's values, in order."""
    kinds = set(map(type, values))
    if kinds == {int}:
        return list(map(str, values))
    if kinds == {str}:
        if _SPECIAL.search("".join(values)) is None:
            return list(map(_QUOTED, values))
    elif kinds == {bytes}:
        return list(map(_HEX, map(bytes.hex, values)))
    elif kinds == {type(None)}:
        return ["NULL"] * len(values)
    else:
        texts = plain_texts(values, kinds)
        if texts is not None:
            # a number goes unquoted, as `literal` writes it
            quote = str if kinds - {_NONE} == {Decimal} else _QUOTED
            return ["NULL" if t is None else quote(t) for t in texts]
    return list(map(literal, values))


def rows(image: Sequence[Sequence[Any]], indices: Sequence[int]) -> list[str]:
    """Each row's values at `indices` as literals joined by commas (without parentheses)."""
    if not image:
        return []
    columns = list(zip(*image, strict=True))
    texts = [column(columns[i]) for i in indices]
    return list(map(",".join, zip(*texts, strict=True)))
