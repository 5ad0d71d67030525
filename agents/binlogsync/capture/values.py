"""Column values as python-mysql-replication decodes them, corrected to what SELECT returns.

Each correction was verified against MariaDB 10.11 (tests/integration/test_capture.py):

- Negative TIME(n) with a non-zero fraction: the library decodes the integer and fractional
  parts as two separate two's-complement numbers; `-838:59:58.999999` came out as
  `-838:59:58.000001`. Corrected in `_fix_negative_time`.
- YEAR `0000` came out as 1900 (it adds 1900 to the stored byte 0): corrected to 0.
- BINARY(n) came out without its trailing 0x00 padding (the binlog strips it, SELECT returns
  it): padded back to n bytes.
- An empty BINARY/VARBINARY/BLOB value came out as the str '' (the library decodes with the
  codec name 'binary', which raises LookupError and keeps bytes, except for b'' where Python
  skips the codec lookup): corrected to b''.
- An empty SET value came out as None: corrected to set() (NULL stays None).
- BIT came out as a string of '0'/'1': converted to int.
- FLOAT came out as the float32 widened to a double (1.1 -> 1.100000023841858): replaced by the
  shortest decimal that is the same float32 (1.1); the stored bits do not change.
- MySQL binary JSON comes out as dict/list with bytes keys and strings: turned into JSON text.
  (MariaDB's JSON is LONGTEXT and arrives as str already.)

- The zero TIMESTAMP came out as 1970-01-01 00:00:00: a `ZeroDate` (zerodate.py). That
  moment UTC is not a TIMESTAMP a server stores (its range starts a second later), so the
  correction cannot take a real value for a zero one.

Lost, not corrected: a zero or partial DATE / DATETIME (`0000-00-00`, `2024-00-10`) or an
invalid one (`2004-04-31`, ALLOW_INVALID_DATES) comes out as None, like NULL, and its parts are
gone. Such a value is marked `LOST` (the library says why a value is None: "out of date range"
and the like), and reader.py decodes the event again with rowdecode.py, which keeps it.

`TableShape` turns the library's row dicts of one parsed table into our row tuples, applying
only the corrections its column types need.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from pymysqlreplication.constants import FIELD_TYPE

from ..codec import shortest_float32
from ..errors import PreflightError
from ..model import Row
from ..zerodate import ZeroDate

_EPOCH = datetime(1970, 1, 1)
# Why the library returned None for a date it could not make a `datetime` of (its NONE_SOURCE).
_LOST_SOURCES = frozenset({"out of date range", "out of datetime range", "out of datetime2 range"})
_DATES = (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE, FIELD_TYPE.DATETIME, FIELD_TYPE.DATETIME2)


class _Lost:
    """The type of `LOST`."""

    def __repr__(self) -> str:
        return "LOST"


LOST: Final = _Lost()  # a date the library could not read: see the module doc


def _fix_year(value: Any) -> Any:
    return 0 if value == 1900 else value  # YEAR's range is 1901-2155 plus 0000


def _fix_negative_time(value: Any) -> Any:
    # The library returns -(H + 1 - f) for a stored -(H + f), 0 < f < 1 (see module doc).
    if not isinstance(value, timedelta) or value >= timedelta(0):
        return value
    micros = -(value // timedelta(microseconds=1))
    seconds, fraction = divmod(micros, 1_000_000)
    if fraction == 0:
        return value
    return -timedelta(seconds=seconds, microseconds=1_000_000 - fraction)


def _fix_bit(value: Any) -> Any:
    return int(value, 2) if isinstance(value, str) else value


def _fix_empty_binary(value: Any) -> Any:
    return b"" if value == "" else value


def _padder(length: int) -> Callable[[Any], Any]:
    def pad(value: Any) -> Any:
        if value == "":
            value = b""
        if isinstance(value, bytes) and len(value) < length:
            return value.ljust(length, b"\x00")
        return value

    return pad


def _json_plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_json_plain(k): _json_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_plain(v) for v in value]
    return value


def _fix_json(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(_json_plain(value), ensure_ascii=False, default=str)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _zero_timestamp(fsp: int) -> Callable[[Any], Any]:
    zero = ZeroDate("timestamp", fsp=fsp)

    def fix(value: Any) -> Any:
        return zero if value == _EPOCH else value

    return fix


def _column_fixer(column: Any) -> Callable[[Any], Any] | None:
    kind = column.type
    if kind in (FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2):
        fsp = int(getattr(column, "fsp", 0) or 0) if kind == FIELD_TYPE.TIMESTAMP2 else 0
        return _zero_timestamp(fsp)
    if kind == FIELD_TYPE.FLOAT:
        return shortest_float32
    if kind == FIELD_TYPE.YEAR:
        return _fix_year
    if kind == FIELD_TYPE.TIME2 and getattr(column, "fsp", 0):
        return _fix_negative_time
    if kind == FIELD_TYPE.BIT:
        return _fix_bit
    if kind == FIELD_TYPE.JSON:
        return _fix_json
    if getattr(column, "character_set_name", None) == "binary":
        if kind == FIELD_TYPE.STRING:
            return _padder(column.max_length)
        if kind in (FIELD_TYPE.VARCHAR, FIELD_TYPE.BLOB):
            return _fix_empty_binary
    return None


@dataclass(frozen=True, slots=True)
class TableShape:
    """How to turn the library's row dicts of one parsed table into our row tuples."""

    columns: tuple[str, ...]
    fixers: tuple[tuple[int, Callable[[Any], Any]], ...]
    sets: tuple[tuple[int, str], ...]
    dates: tuple[tuple[int, str], ...] = ()  # DATE and DATETIME columns: a value may be LOST

    @classmethod
    def of(cls, table: Any) -> TableShape:
        fixers, sets, dates = [], [], []
        for i, column in enumerate(table.columns):
            if not column.name:
                raise PreflightError(
                    f"the binlog has no column names for {table.schema}.{table.table}",
                    "set binlog_row_metadata=FULL on the origin (my.cnf) and restart; "
                    "events written before that cannot be captured",
                )
            fixer = _column_fixer(column)
            if fixer is not None:
                fixers.append((i, fixer))
            if column.type == FIELD_TYPE.SET:
                sets.append((i, column.name))
            if column.type in _DATES:
                dates.append((i, column.name))
        columns = tuple(c.name for c in table.columns)
        return cls(columns, tuple(fixers), tuple(sets), tuple(dates))

    def row(self, values: dict[str, Any], none_sources: dict[str, str]) -> Row:
        if not self.fixers and not self.sets and not self.dates:
            return tuple(values.values())
        out = list(values.values())
        for i, fixer in self.fixers:
            if out[i] is not None:
                out[i] = fixer(out[i])
        for i, name in self.sets:
            if out[i] is None and none_sources.get(name) == "empty set":
                out[i] = set()
        for i, name in self.dates:
            if out[i] is None and none_sources.get(name) in _LOST_SOURCES:
                out[i] = LOST
        return tuple(out)
