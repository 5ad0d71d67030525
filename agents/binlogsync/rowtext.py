"""Rows as LOAD DATA's text: the form a seed chunk's rows travel in (docs/protocol.md).

A seed copies millions of rows. Read as values, each value cost Python work four times over:
the origin's reader built it and packed it, the hub checked it, the target unpacked it and
printed it again as LOAD DATA's text (bench/seed_forms_probe.py: 10.7 CPU-seconds of Python per
million rows as values, 3.2 as text). So the origin's server writes each row as
one line of LOAD DATA's default text (seed/chunks.py `text_sql`), the line travels as it is,
and a MariaDB target's server loads it as it is (engines/mariadb/loaddata.py). A target that
takes values (PostgreSQL, Redis, the audit log, a MariaDB table LOAD DATA cannot serve) reads
the rows here (`TextRows` parses them when first asked), into exactly the values the typed
form carries: each field goes through the converter the seed's typed reader uses for that
column type (codec.py), then through the codec's decoder; a whole column goes through `map`
where the result is the same (`_COLUMN_READERS`).

The text: one line per row, ending in a newline; fields separated by a tab; `\\N` is NULL; in a
text field a backslash, tab, newline, carriage return and NUL are written `\\\\`, `\\t`, `\\n`,
`\\r`, `\\0` (the only escapes allowed); the other fields never hold those bytes. Each column has
a form, which says how its field is written and read:

    int        integers and YEAR           decimal digits
    bit        BIT                         its value as decimal digits
    decimal    DECIMAL                     the server's exact text
    float32    FLOAT                       the float32 widened to a double, exact (`c + 0e0`)
    double     DOUBLE                      the server's text (exact: it round-trips)
    date, datetime, timestamp, time        the server's text (TIMESTAMP in UTC; zero dates too)
    text       CHAR, VARCHAR, TEXT, ENUM, JSON     utf-8, escaped
    set        SET                         its members, "a,b", escaped
    bytes      BINARY, VARBINARY, BLOB     hex digits (upper case)

`check` holds a body's text to exactly that grammar (one regular expression per column layout,
over the whole text, run by RE2: linear time whatever the text, 3.5× faster here than Python's
`re` on a seed chunk), and to utf-8: the hub refuses what a target would refuse, and a target's
LOAD DATA never meets a field its grammar does not allow (a hex field that is not hex would
load as NULL). The text is data only: no statement is built from it.
"""

from __future__ import annotations

import binascii
import datetime as dt
import functools
import re
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from typing import Any, overload

from pymysql.converters import convert_timedelta

from .codec import date_raw, datetime_raw, raw_value, shortest_float32, timestamp_raw
from .errors import ProtocolError

Row = tuple[Any, ...]

NULL = b"\\N"
# Each form's field, as a regular expression (NULL aside). Possessive (`*+`, `++`): nothing
# here needs to backtrack, and the hub checks a million rows' text in half a second.
_NUMBER = rb"-?+(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][-+]?+[0-9]++)?+"
_DATE = rb"[0-9]{4}+-[0-9]{2}+-[0-9]{2}+"
_CLOCK = rb"[0-9]{2,3}+:[0-9]{2}+:[0-9]{2}+(?:\.[0-9]{1,6}+)?+"
_ESCAPED = rb"[^\t\n\\]*+(?:\\[\\tnr0][^\t\n\\]*+)*+"
GRAMMAR = {
    "int": rb"-?+[0-9]++",
    "bit": rb"[0-9]++",
    "decimal": rb"-?+[0-9]++(?:\.[0-9]++)?+",
    "float32": _NUMBER,
    "double": _NUMBER,
    "date": _DATE,
    "datetime": _DATE + rb" " + _CLOCK,
    "timestamp": _DATE + rb" " + _CLOCK,
    "time": rb"-?+" + _CLOCK,
    "text": _ESCAPED,
    "set": _ESCAPED,
    "bytes": rb"(?:[0-9A-F]{2})*+",
}
FORMS = frozenset(GRAMMAR)
# The characters a text field escapes (in text, not bytes: a value, or an ENUM's member).
NEEDS_ESCAPE = re.compile("[\\\\\t\n\r\x00]")
_UNESCAPE = re.compile(rb"\\(.)", re.DOTALL)
_UNESCAPED = {b"\\": b"\\", b"t": b"\t", b"n": b"\n", b"r": b"\r", b"0": b"\x00"}


def _unescape(field: bytes) -> bytes:
    if b"\\" not in field:
        return field
    return _UNESCAPE.sub(lambda m: _UNESCAPED[m.group(1)], field)


def _text(field: bytes) -> str:
    return _unescape(field).decode("utf-8")


def _set(field: bytes) -> set[str]:
    text = _text(field)
    return set(text.split(",")) if text else set()


def _decoded(raw: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """The codec's value of a temporal field: the typed reader's converter, then the decoder."""

    def read(field: bytes) -> Any:
        return raw_value(raw(field))

    return read


# Each form's field (not NULL) as the value the typed form carries.
READERS: dict[str, Callable[[bytes], Any]] = {
    "int": int,
    "bit": int,
    "decimal": lambda f: Decimal(f.decode("ascii")),
    "float32": lambda f: shortest_float32(float(f)),
    "double": float,
    "date": _decoded(date_raw),
    "datetime": _decoded(datetime_raw),
    "timestamp": _decoded(timestamp_raw),
    "time": lambda f: convert_timedelta(f.decode("ascii")),
    "text": _text,
    "set": _set,
    "bytes": binascii.a2b_hex,
}


@functools.lru_cache(maxsize=256)
def _one_line(forms: tuple[str, ...]) -> re.Pattern[bytes]:
    """A line of this column layout (Python's `re`: says which line a refused text breaks)."""
    return re.compile(_line(forms))


def _line(forms: tuple[str, ...]) -> bytes:
    return rb"\t".join(rb"(?:\\N|" + GRAMMAR[f] + rb")" for f in forms)


# A possessive quantifier's mark: RE2 never backtracks, so it has none and needs none.
_POSSESSIVE = re.compile(rb"(?<=[*+?}])\+")


@functools.lru_cache(maxsize=256)
def _linear(forms: tuple[str, ...]) -> Any:
    """A whole text of lines of this column layout, for RE2: the same grammar without the
    possessive marks, each byte one character (Latin-1), so that any byte string is matched
    byte by byte as `re` matches it."""
    import re2  # here: the reconcile tasks that import this package never check a text

    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    whole = rb"(?:" + _POSSESSIVE.sub(b"", _line(forms)) + rb"\n)*"
    return re2.compile(whole, options)


def split(text: bytes) -> list[bytes]:
    """The lines of `text` (each ended by a newline), without their newlines."""
    if not text:
        return []
    if not text.endswith(b"\n"):
        raise ProtocolError("rows text must end with a newline")
    return text[:-1].split(b"\n")


def check(data: Any, width: int) -> None:
    """A change's rows in text form (`{"forms": [...], "text": bytes}`) for `width` columns:
    every line and field as the grammar says, utf-8 throughout."""
    if type(data) is not dict or set(data) != {"forms", "text"}:
        raise ProtocolError('rows in text form must be a map of "forms" and "text"')
    forms, text = data["forms"], data["text"]
    if (
        type(forms) is not list
        or len(forms) != width
        or not all(type(f) is str and f in FORMS for f in forms)
    ):
        raise ProtocolError(
            f"rows in text form need one known form per column ({width}); "
            f"the forms are {', '.join(sorted(FORMS))}"
        )
    if type(text) is not bytes:
        raise ProtocolError("rows text must be bytes")
    if _linear(tuple(forms)).fullmatch(text) is None:
        line = _one_line(tuple(forms))
        lines = split(text)
        bad = next((i for i, one in enumerate(lines) if not line.fullmatch(one)), len(lines))
        raise ProtocolError(
            f"line {bad + 1} of the rows text does not have {width} fields of the columns' "
            "forms, or does not end with a newline"
        )
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"rows text is not utf-8: {exc.reason}") from None


class TextRows(Sequence[Row]):
    """Rows in text form (checked), read into values when first asked for them; slices stay
    text. `text` and `hexed` are what LOAD DATA takes (engines/mariadb/loaddata.py)."""

    __slots__ = ("forms", "lines", "_rows")

    def __init__(self, lines: list[bytes], forms: tuple[str, ...]) -> None:
        self.lines = lines
        self.forms = forms
        self._rows: tuple[Row, ...] | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"forms": list(self.forms), "text": self.text}

    @property
    def text(self) -> bytes:
        return b"\n".join(self.lines) + b"\n" if self.lines else b""

    @property
    def hexed(self) -> list[bool]:
        return [f == "bytes" for f in self.forms]

    def rows(self) -> tuple[Row, ...]:
        if self._rows is None:
            self._rows = _read(self.lines, self.forms)
        return self._rows

    def __len__(self) -> int:
        return len(self.lines)

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> TextRows: ...
    def __getitem__(self, index: int | slice) -> Row | TextRows:
        if isinstance(index, slice):
            return TextRows(self.lines[index], self.forms)
        if self._rows is None:  # one row: read that line only
            return _read([self.lines[index]], self.forms)[0]
        return self._rows[index]

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TextRows):
            return self.lines == other.lines and self.forms == other.forms
        if isinstance(other, Sequence):
            return self.rows() == tuple(map(tuple, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TextRows({len(self.lines)} rows, forms={self.forms})"


# A whole column of a form read at once, through `map` in C, where that gives what READERS give
# value by value (forms whose reader is already a C function, such as `int`, need no entry): a
# temporal column whose texts are all calendar dates (anything else, such as
# a zero date, makes `fromisoformat` refuse it, and the column goes value by value), a text
# column without an escape.
_COLUMN_READERS: dict[str, Callable[[Sequence[bytes]], list[Any]]] = {
    "decimal": lambda c: list(map(Decimal, map(bytes.decode, c))),
    "date": lambda c: list(map(dt.date.fromisoformat, map(bytes.decode, c))),
    "datetime": lambda c: list(map(dt.datetime.fromisoformat, map(bytes.decode, c))),
    "timestamp": lambda c: list(map(dt.datetime.fromisoformat, map(bytes.decode, c))),
    "text": lambda c: list(map(bytes.decode, c)) if b"\\" not in b"".join(c) else [],
}


def _column(form: str, column: Sequence[bytes]) -> list[Any]:
    """One column's values (no NULL among them)."""
    fast = _COLUMN_READERS.get(form)
    if fast is not None:
        try:
            values = fast(column)
        except ValueError:
            values = []
        if len(values) == len(column):
            return values
    return list(map(READERS[form], column))


def _read(lines: Sequence[bytes], forms: Sequence[str]) -> tuple[Row, ...]:
    """The rows, column by column (`_column`), NULLs put back in their places. Lines that
    came over the network passed `check`, so each has one field per form."""
    width = len(forms)
    fields = b"\t".join(lines).split(b"\t") if lines else []
    if len(fields) != width * len(lines):
        raise ProtocolError(f"the rows text does not have {width} fields a line")
    columns = []
    try:
        for at, form in enumerate(forms):
            column = fields[at::width]
            if NULL not in column:
                columns.append(_column(form, column))
                continue
            present = [f for f in column if f != NULL]
            values = iter(_column(form, present))
            columns.append([None if f == NULL else next(values) for f in column])
    except (ValueError, ArithmeticError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"a field of the rows text cannot be read: {exc}") from exc
    return tuple(zip(*columns, strict=True)) if columns else tuple(() for _ in lines)
