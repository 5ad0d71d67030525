"""Where a transaction ends in the origin's binary log.

A `Position` names the end of one committed transaction on one origin. It has one of two
schemes, and the two are never confused:

`gtid` (MariaDB, always: every MariaDB transaction has a GTID). The position is the origin's
whole GTID state *after* the transaction, one `domain-server-seq` per replication domain, as
`@@gtid_binlog_pos` writes it (`"0-1-100,1-2-7"`; `""` before the first transaction). This
names the same point on every server that holds the same transactions, so it survives a
failover to a replica (`log_slave_updates=ON`), and a reader resumes there by GTID. Order:
along any one server's binlog, each transaction raises exactly one domain's sequence number,
so the SUM of the per-domain sequence numbers strictly increases; that sum is the key. Two
states are compared per domain where it matters (`contains`: the failover check). `file` and
`offset` are where the transaction ended on the server that was read then, for people and
debugging only: they are not identity and never compared.

`file` (servers without MariaDB GTIDs: MySQL). Binlog file number, then offset: one server
writes its binlog strictly in commit order, and a reader resuming at `(file, offset)` reads
exactly the transactions after it. `gtid` is then the transaction's own GTID if known, for
people only.

`key` packs the order into one integer below 2**63 that SQLite (the hub's log) and the
target's checkpoint table compare with `<` and `>`: file positions are `file number << 40 |
offset` (file numbers below 2**22, offsets below 2**40), GTID positions are `2**62 + sum of
sequence numbers` (sums below 2**62). Every GTID position therefore sorts after every file
position: an origin's log or checkpoint that was kept in the file scheme by an older version
moves to the GTID scheme exactly once, at a point converted on the same server
(`BINLOG_GTID_POS`), and then only goes on in that scheme; the way back (a GTID checkpoint and
a file position) is refused wherever it could happen (`comparable`), never misread.

JSON form: `{"file": "binlog.000003", "offset": 1234, "gtid": "0-1-57"}` for the file scheme
(`gtid` may be null), plus `"scheme": "gtid"` for a GTID position. Wire form (msgpack):
`[file, offset, gtid]`, or `[file, offset, state, "gtid"]`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache, total_ordering

from .errors import ProtocolError
from .frozen import maker

_FILE_NUMBER = re.compile(r"\.(\d+)$", re.ASCII)
_OFFSET_BITS = 40
_FILE_NUMBER_LIMIT = 1 << 22
_MAX_FILE_NAME = 255
GTID_BASE = 1 << 62  # every GTID position's key is above every file position's
MAX_STATE = 255  # characters of a GTID state (the checkpoint table's column)
# ASCII digits only (as in _FILE_NUMBER): `\d` alone also matches other scripts' digits,
# which int() reads as numbers ("0-1-٣" passed as "0-1-3" under another text); no server
# writes them.
_GTID = re.compile(r"^(\d{1,10})-(\d{1,10})-(\d{1,20})$", re.ASCII)
GTID_STATE = re.compile(r"^\d+-\d+-\d+(,\d+-\d+-\d+)*$", re.ASCII)
_U32 = 1 << 32

GtidState = dict[int, tuple[int, int]]  # domain → (server id, sequence number)


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


def parse_state(text: str) -> GtidState:
    """`"0-1-100,1-2-7"` → {0: (1, 100), 1: (2, 7)}; ProtocolError when malformed (a domain
    named twice, numbers out of range)."""
    state: GtidState = {}
    if len(text) > MAX_STATE:
        raise ProtocolError(f"GTID state {text[:80]!r}… is longer than {MAX_STATE} characters")
    for item in text.split(",") if text.strip() else ():
        match = _GTID.match(item.strip())
        if not match:
            raise ProtocolError(f"malformed GTID {item[:80]!r} in state {text[:200]!r}")
        domain, server, seq = (int(g) for g in match.groups())
        if domain >= 1 << 32 or server >= 1 << 32 or seq >= 1 << 64 or domain in state:
            raise ProtocolError(f"malformed GTID {item[:80]!r} in state {text[:200]!r}")
        state[domain] = (server, seq)
    return state


def state_text(state: GtidState) -> str:
    """The canonical text of a state: domains in order, as @@gtid_binlog_pos writes it."""
    return ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(state.items()))


def _gtid_key(text: str) -> int:
    """A GTID state's key: the sum of its sequence numbers, above every file position's.

    A state of one domain that `parse_state` reads as it is (ASCII digits, no blanks, the
    lengths its pattern allows) is taken the short way once its numbers are in range:
    split, no regular expression, no dict and no cache (each transaction's state is new,
    so a cache only missed: 0.85 µs a key with one, 0.40 without). Anything else goes the
    long way."""
    domain, _, rest = text.partition("-")
    server, _, seq = rest.partition("-")
    if (
        text.isascii()
        and len(domain) <= 10
        and len(server) <= 10
        and len(seq) <= 20
        and domain.isdigit()
        and server.isdigit()
        and seq.isdigit()
        and int(domain) < _U32
        and int(server) < _U32
    ):
        number = int(seq)
        if number < GTID_BASE:
            return GTID_BASE + number
    return _state_key(text)


@lru_cache(maxsize=4096)
def _state_key(text: str) -> int:
    total = sum(seq for _server, seq in parse_state(text).values())
    if total >= GTID_BASE:
        raise ProtocolError(f"GTID state {text[:200]!r}: sequence numbers too large")
    return GTID_BASE + total


def missing_from(have: str, need: str, written: str | None = None) -> list[str]:
    """The GTIDs of state `need` that a server whose @@gtid_binlog_pos is `have` lacks, as
    far as its states tell: a domain it has not reached, the same sequence number written by
    another server, or — with `written`, its @@gtid_binlog_state (the last sequence number
    of every domain and server in its binlog) — no GTID of our server at or above ours in
    that domain (it went past our sequence number on another history). [] when `have`
    contains `need`.

    A history that diverged and later passed through the same server again is caught by
    the server itself when capture connects by GTID (strict mode: error 1236)."""
    mine, theirs = parse_state(have), parse_state(need)
    lasts: set[tuple[int, int]] | None = None
    by_server: dict[tuple[int, int], int] = {}
    if written is not None:
        for item in written.split(",") if written.strip() else ():
            domain, server, seq = (int(p) for p in item.strip().split("-"))
            by_server[(domain, server)] = max(seq, by_server.get((domain, server), 0))
        lasts = set(by_server)
    lacking = []
    for domain, (server, seq) in sorted(theirs.items()):
        got = mine.get(domain)
        if got is None or got[1] < seq or (got[1] == seq and got[0] != server):
            lacking.append(f"{domain}-{server}-{seq}")
        elif lasts is not None and by_server.get((domain, server), -1) < seq:
            lacking.append(f"{domain}-{server}-{seq}")
    return lacking


@total_ordering
@dataclass(frozen=True, slots=True)
class Position:
    file: str
    offset: int
    gtid: str | None = None
    scheme: str = "file"  # "file" | "gtid" (see the module doc)
    # `key`, once asked (-1 before): the hub asks a position's key a dozen times on its way
    # through (a saturated hub spent 9 % of its time in `key`, `bench fleet`)
    _key: int = field(default=-1, init=False, repr=False, compare=False)

    @property
    def by_gtid(self) -> bool:
        return self.scheme == "gtid"

    @property
    def key(self) -> int:
        key = self._key
        if key < 0:
            if self.scheme == "gtid":
                key = _gtid_key(self.gtid or "")
            else:
                key = (file_number(self.file) << _OFFSET_BITS) | self.offset
            object.__setattr__(self, "_key", key)
        return key

    @property
    def state(self) -> GtidState:
        """The GTID state of a GTID position ({} for a file position)."""
        return parse_state(self.gtid or "") if self.scheme == "gtid" else {}

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
        if self.scheme == "gtid":
            state = self.gtid or "(empty GTID state)"
            return f"{state} ({base})" if self.file else state
        return f"{base} ({self.gtid})" if self.gtid else base

    def to_json(self) -> dict[str, object]:
        if self.scheme == "gtid":
            return {"file": self.file, "offset": self.offset, "gtid": self.gtid, "scheme": "gtid"}
        return {"file": self.file, "offset": self.offset, "gtid": self.gtid}

    @classmethod
    def from_json(cls, data: object) -> Position:
        if not isinstance(data, dict):
            raise ProtocolError(f"a position must be an object, not {type(data).__name__}")
        file, offset, gtid = data.get("file"), data.get("offset"), data.get("gtid")
        scheme = data.get("scheme", "file")
        if (
            not isinstance(file, str)
            or not isinstance(offset, int)
            or isinstance(offset, bool)
            or not 0 <= offset < 1 << _OFFSET_BITS
            or scheme not in ("file", "gtid")
        ):
            raise ProtocolError(f"malformed position {str(data)[:200]}")
        if gtid is not None and (not isinstance(gtid, str) or len(gtid) > MAX_STATE):
            raise ProtocolError(f"malformed gtid in position {str(data)[:200]}")
        if scheme == "gtid":
            position = None if gtid is None else gtid_position(file, offset, gtid)
            if position is None:
                raise ProtocolError(f"malformed GTID position {str(data)[:200]}")
            return position
        file_number(file)
        return cls(file, offset, gtid)

    def to_wire(self) -> list[object]:
        if self.scheme == "gtid":
            return [self.file, self.offset, self.gtid, "gtid"]
        return [self.file, self.offset, self.gtid]

    @classmethod
    def from_wire(cls, data: object) -> Position:
        if isinstance(data, list | tuple) and len(data) == 4 and data[3] == "gtid":
            return cls.from_json(
                {"file": data[0], "offset": data[1], "gtid": data[2], "scheme": "gtid"}
            )
        if not isinstance(data, list | tuple) or len(data) != 3:
            raise ProtocolError(f"malformed position {str(data)[:200]}")
        return cls.from_json({"file": data[0], "offset": data[1], "gtid": data[2]})

    @classmethod
    def of_state(cls, state: str, file: str = "", offset: int = 0) -> Position:
        """A GTID position (checked); `file`/`offset` only say where it was read."""
        return cls.from_json({"file": file, "offset": offset, "gtid": state, "scheme": "gtid"})

    @classmethod
    def parse(cls, text: str) -> Position:
        """Parse a position as typed on the command line: a GTID state (`0-1-100` or
        `0-1-100,1-2-7`, as `binlogsync status` shows it; a trailing `(file:offset)` is
        ignored) or `binlog.000003:1234` for an origin without GTIDs."""
        state = text.strip().split(" (", 1)[0].strip()
        if GTID_STATE.match(state):
            return cls.of_state(state)
        file, sep, offset = text.rpartition(":")
        if not sep or not offset.isdigit():
            raise ProtocolError(
                f"position {text!r} is neither a GTID state nor FILE:OFFSET",
                "write a GTID state like 0-1-100 (MariaDB) or binlog.000003:1234",
            )
        return cls.from_json({"file": file, "offset": int(offset), "gtid": None})


# Position(file, offset, gtid, scheme) without the frozen __init__ (frozen.py), for values
# checked already: what the wire carried, and where capture is in the binlog.
make_position = maker(Position)


def gtid_position(file: str, offset: int, state: str) -> Position | None:
    """A GTID position of a str, an int and a str, built through its slots; its key is
    computed (the state's checks: ProtocolError) and kept. None: the file name or the offset
    is out of range. `from_json` ends here; the hot paths come here directly, past the JSON
    (a target reads a position per transaction off the wire, model.py; the hub one per stored
    entry, hub/log.py) and fall back on `from_json` for its error."""
    if len(file) > _MAX_FILE_NAME or not 0 <= offset < 1 << _OFFSET_BITS:
        return None
    position = make_position(file, offset, state, "gtid")
    position.key  # noqa: B018 - the state's checks, and the key every hop asks again
    return position


def comparable(a: Position | None, b: Position | None) -> bool:
    """False when `a` is a GTID position and `b` a file one: the only pair whose key order
    would be wrong (the way back from the GTID scheme). Either way round is fine otherwise."""
    return not (a is not None and b is not None and a.by_gtid and not b.by_gtid)
