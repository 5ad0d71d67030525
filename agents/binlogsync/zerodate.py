"""Dates that Python's `datetime` cannot hold, kept exactly as the server stores them.

MySQL and MariaDB store, and return from SELECT, DATE / DATETIME / TIMESTAMP values that are
no calendar date: the zero date `0000-00-00` (and the zero TIMESTAMP), dates with a zero part
(`2024-00-10`, `2024-05-00`, written without NO_ZERO_IN_DATE), a year 0000, and, under
ALLOW_INVALID_DATES, a day past its month's end (`2004-04-31`). Legacy schemas are full of the
first kind. A `ZeroDate` holds such a value by its parts, so that it travels and lands as what it
is instead of as NULL or 1970-01-01.

Parts rather than only the text: the parts are checked once (a value from the network must be
one a server could have stored, and never a real date, which travels as `date`/`datetime`: one
value, one form), they compare and hash by value (a zero date may be part of a primary key),
and `kind` tells a target what the origin column was (a PostgreSQL target maps a zero DATE and a
zero TIMESTAMP to different things). `text` is the server's exact text, with the column's
fraction digits, as SELECT returns it: what MySQL targets bind, what Redis and audit logs store,
and what reconcile compares (the server's text on both sides).

Its wire form (codec.py, extension type 6) is `"<kind>:<text>"`, e.g.
`"datetime:0000-00-00 00:00:00.000000"`.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Literal

ZeroDateKind = Literal["date", "datetime", "timestamp"]
KINDS: tuple[ZeroDateKind, ...] = ("date", "datetime", "timestamp")

_TEXT = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})(?: (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?)?", re.ASCII
)


@dataclass(frozen=True, slots=True)
class ZeroDate:
    """A zero, partial or invalid DATE / DATETIME / TIMESTAMP value (module doc).

    `fsp` is the column's fraction digits (0-6); `microsecond` the fraction in microseconds.
    Building one with parts out of the server's ranges, or with parts that make a real date,
    raises ValueError.
    """

    kind: ZeroDateKind
    year: int = 0
    month: int = 0
    day: int = 0
    hour: int = 0
    minute: int = 0
    second: int = 0
    microsecond: int = 0
    fsp: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"a zero date's kind is one of {', '.join(KINDS)}, not {self.kind!r}")
        parts = (self.year, self.month, self.day, self.hour, self.minute, self.second)
        if any(type(p) is not int for p in (*parts, self.microsecond, self.fsp)):
            raise ValueError("a zero date's parts are integers")
        if not (
            0 <= self.year <= 9999
            and 0 <= self.month <= 12
            and 0 <= self.day <= 31
            and 0 <= self.hour <= 23
            and 0 <= self.minute <= 59
            and 0 <= self.second <= 59
            and 0 <= self.fsp <= 6
            and 0 <= self.microsecond <= 999_999
        ):
            raise ValueError(f"{self.text!r} is outside the ranges of a MySQL date")
        if self.microsecond % 10 ** (6 - self.fsp):
            raise ValueError(f"a fraction of {self.microsecond} µs has more than {self.fsp} digits")
        if self.kind == "date" and (self.hour or self.minute or self.second or self.fsp):
            raise ValueError("a zero DATE has no time of day")
        if self.kind == "timestamp" and any((*parts, self.microsecond)):
            raise ValueError("a TIMESTAMP's only value that is no date is the zero timestamp")
        if self.year and self.month and self.day:
            try:
                dt.date(self.year, self.month, self.day)
            except ValueError:
                pass  # a day past its month's end (ALLOW_INVALID_DATES)
            else:
                raise ValueError(f"{self.text!r} is a real date: it travels as a date")

    @property
    def text(self) -> str:
        """The server's text of the value, as SELECT returns it."""
        date = f"{self.year:04d}-{self.month:02d}-{self.day:02d}"
        if self.kind == "date":
            return date
        clock = f"{date} {self.hour:02d}:{self.minute:02d}:{self.second:02d}"
        if not self.fsp:
            return clock
        return f"{clock}.{self.microsecond // 10 ** (6 - self.fsp):0{self.fsp}d}"

    def __str__(self) -> str:  # so that PyMySQL binds one as its text (a seed's paging key)
        return self.text

    @classmethod
    def parse(cls, kind: str, text: str) -> ZeroDate:
        """The value of the server's `text` for a column of `kind`; ValueError when the text
        is not one (malformed, out of range, or a real date)."""
        match = _TEXT.fullmatch(text)
        if match is None:
            raise ValueError(f"{text[:40]!r} is not a MySQL date text")
        year, month, day, hour, minute, second, fraction = match.groups()
        if (kind == "date") != (hour is None):
            raise ValueError(f"{text!r} is no text of a {kind} column")
        fraction = fraction or ""
        return cls(
            kind,  # type: ignore[arg-type]  # checked by __post_init__
            int(year),
            int(month),
            int(day),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            int(fraction.ljust(6, "0")) if fraction else 0,
            len(fraction),
        )


def is_zero_date_text(text: str) -> bool:
    """Whether the server's text of a DATE/DATETIME/TIMESTAMP value is no calendar date (a
    zero year, month or day, or a day past its month's end)."""
    match = _TEXT.fullmatch(text)
    if match is None:
        return False
    year, month, day = int(match[1]), int(match[2]), int(match[3])
    if not (year and month and day):
        return True
    try:
        dt.date(year, month, day)
    except ValueError:
        return True
    return False
