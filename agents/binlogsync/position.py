"""Where a transaction ends in the origin's binary log.

A `Position` names the end of one committed transaction on one origin server: the binlog file,
the offset just past its commit event (where a reader resumes), and its GTID when the server has
one (MariaDB `domain-server-seq`).

Total order: binlog file number, then offset. One origin server writes its binlog strictly in
commit order, and a reader that resumes at `(file, offset)` reads exactly the transactions after
it, so this order is the order of replay. The GTID travels along for people and for
`MASTER_GTID_WAIT`-style checks; it is not used for ordering because a MariaDB server can hold
several GTID domains whose sequence numbers are not comparable to one another.

`key` packs the order into one 64-bit integer (file number << 40 | offset) so that SQLite and
the target's checkpoint table can compare positions with `<` and `>`. So that every key fits
a signed 64-bit integer, file numbers are below 2**23 (MariaDB's own limit is 999999 files
before it wraps to 7 digits) and offsets below 2**40; anything else is refused as malformed,
wherever it comes from.

JSON form: `{"file": "binlog.000003", "offset": 1234, "gtid": "0-1-57"}` (`gtid` may be null).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache, total_ordering

from .errors import ProtocolError

_FILE_NUMBER = re.compile(r"\.(\d+)$")
_OFFSET_BITS = 40
_FILE_NUMBER_LIMIT = 1 << 23
_MAX_FILE_NAME = 255


@lru_cache(maxsize=4096)  # a handful of file names, asked for on every comparison
def file_number(file: str) -> int:
    """The sequence number of a binlog file name: `binlog.000012` → 12."""
    match = _FILE_NUMBER.search(file) if len(file) <= _MAX_FILE_NAME else None
    if not match:
        raise ProtocolError(f"binlog file name {file[:80]!r} has no numeric suffix")
    number = int(match.group(1))
    if number >= _FILE_NUMBER_LIMIT:
        raise ProtocolError(
            f"binlog file number {number} in {file[:80]!r} is out of range "
            f"(below {_FILE_NUMBER_LIMIT})"
        )
    return number


@total_ordering
@dataclass(frozen=True, slots=True)
class Position:
    file: str
    offset: int
    gtid: str | None = None

    @property
    def key(self) -> int:
        return (file_number(self.file) << _OFFSET_BITS) | self.offset

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self.key < other.key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        base = f"{self.file}:{self.offset}"
        return f"{base} ({self.gtid})" if self.gtid else base

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "offset": self.offset, "gtid": self.gtid}

    @classmethod
    def from_json(cls, data: object) -> Position:
        if not isinstance(data, dict):
            raise ProtocolError(f"a position must be an object, not {type(data).__name__}")
        file, offset, gtid = data.get("file"), data.get("offset"), data.get("gtid")
        if (
            not isinstance(file, str)
            or not isinstance(offset, int)
            or isinstance(offset, bool)
            or not 0 <= offset < 1 << _OFFSET_BITS
        ):
            raise ProtocolError(f"malformed position {str(data)[:200]}")
        if gtid is not None and (not isinstance(gtid, str) or len(gtid) > 255):
            raise ProtocolError(f"malformed gtid in position {str(data)[:200]}")
        file_number(file)
        return cls(file, offset, gtid)

    def to_wire(self) -> list[object]:
        return [self.file, self.offset, self.gtid]

    @classmethod
    def from_wire(cls, data: object) -> Position:
        if not isinstance(data, list | tuple) or len(data) != 3:
            raise ProtocolError(f"malformed position {str(data)[:200]}")
        return cls.from_json({"file": data[0], "offset": data[1], "gtid": data[2]})

    @classmethod
    def parse(cls, text: str) -> Position:
        """Parse `binlog.000003:1234` as typed on the command line."""
        file, sep, offset = text.rpartition(":")
        if not sep or not offset.isdigit():
            raise ProtocolError(
                f"position {text!r} is not FILE:OFFSET", "write it like binlog.000003:1234"
            )
        return cls.from_json({"file": file, "offset": int(offset), "gtid": None})
