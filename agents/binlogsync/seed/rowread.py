"""A query's rows read straight off PyMySQL's socket: the seed's hot loop.

PyMySQL reads a text-protocol row through a packet object and a method call per column; for the
millions of rows of a seed that was most of the seed's time. Here the packets are read from the
connection's buffered socket file, and each row is cut by a function written for the result's
column layout (no per-column loop or dispatch), converting each value exactly as PyMySQL does:
with its own per-column (encoding, converter) list, made when it read the result's column
definitions (`query(unbuffered=True)`), except that integers, floats, DECIMALs and dates skip
the text decode (their converters take the bytes). Errors, sequence numbers and lost connections
are handled as PyMySQL handles them. The private parts used are checked by `check_library` and
pinned in pyproject.toml (PyMySQL 1.1–1.2); tests/integration/test_seed_rowread.py holds the
reader to PyMySQL's for every column type.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn

import pymysql
from pymysql.protocol import MysqlPacket

from ..codec import RAW_CONVERSIONS
from ..errors import BinlogsyncError

_MAX_PACKET = 0xFFFFFF
_BYTES_OK = (int, float)  # int(b"12") and float(b"1.5") read bytes as they read text


def check_library() -> None:
    """The private parts of PyMySQL read here exist (a PyMySQL outside the pins may differ)."""
    conn = pymysql.connections.Connection
    result = pymysql.connections.MySQLResult
    missing = [
        f"{owner.__name__}.{name}"
        for owner, name in (
            (conn, "_read_bytes"),
            (conn, "_force_close"),
            (conn, "query"),
            (result, "init_unbuffered_query"),
            (result, "_get_descriptions"),
        )
        if not hasattr(owner, name)
    ]
    if missing:
        raise BinlogsyncError(
            f"this PyMySQL ({pymysql.__version__}) lacks {', '.join(missing)}, which the seed's "
            "row reader uses",
            "install the PyMySQL version pyproject.toml pins",
        )


def _columns(converters: list[tuple[str | None, Any]]) -> list[tuple[str | None, Any]]:
    out: list[tuple[str | None, Any]] = []
    for encoding, converter in converters:
        if encoding == "ascii" and converter in _BYTES_OK:
            out.append((None, converter))
        elif encoding == "ascii" and converter in RAW_CONVERSIONS:
            out.append((None, RAW_CONVERSIONS[converter]))
        else:
            out.append((encoding, converter))
    return out


_LENGTH = """    n = data[pos]
    pos += 1
    if n >= 251:
        if n == 251:
            n = -1
        elif n == 252:
            n = data[pos] | data[pos + 1] << 8
            pos += 2
        elif n == 253:
            n = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
            pos += 3
        else:
            n = int.from_bytes(data[pos : pos + 8], "little")
            pos += 8
"""


@functools.lru_cache(maxsize=256)
def _row_reader(columns: tuple[tuple[str | None, Any], ...]) -> Callable[[bytes], tuple[Any, ...]]:
    """A function that cuts one row of this column layout, written out column by column (no
    loop, no per-column dispatch): the same steps as the loop in PyMySQL's reader."""
    names: dict[str, Any] = {}
    lines = ["def read_row(data):", "    pos = 0"]
    for i, (encoding, converter) in enumerate(columns):
        value = "data[pos : pos + n]"
        if encoding is not None:
            value = f"{value}.decode({encoding!r})"
        if converter is not None:
            names[f"c{i}"] = converter
            value = f"c{i}({value})"
        lines.append(_LENGTH)
        lines.append(f"    if n < 0:\n        v{i} = None\n    else:\n        v{i} = {value}")
        lines.append("        pos += n")
    lines.append(f"    return ({', '.join(f'v{i}' for i in range(len(columns)))},)")
    exec("\n".join(lines), names)  # noqa: S102 - our own text, from the column layout only
    reader: Callable[[bytes], tuple[Any, ...]] = names["read_row"]
    return reader


def fetch_all(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    """Run `sql` (parameters already bound) on `conn` and return its rows."""
    conn.query(sql, unbuffered=True)
    result = conn._result
    if result is None or not result.unbuffered_active:
        return []
    read_row = _row_reader(tuple(_columns(result.converters)))
    if conn._current_timeout != conn._read_timeout:  # as PyMySQL's _read_packet does
        conn._sock.settimeout(conn._read_timeout)
        conn._current_timeout = conn._read_timeout
    read = conn._rfile.read
    rows: list[tuple[Any, ...]] = []
    append = rows.append
    seq = conn._next_seq_id
    try:
        while True:
            header = read(4)
            if len(header) < 4:
                _lost(conn, None)
            if header[3] != seq:
                _out_of_sequence(conn, header[3], seq)
            seq = (seq + 1) & 0xFF
            length = header[0] | header[1] << 8 | header[2] << 16
            data = read(length)
            if len(data) < length:
                _lost(conn, None)
            if length == _MAX_PACKET:
                conn._next_seq_id = seq
                data += _rest(conn)
                seq = conn._next_seq_id
            first = data[0]
            if first == 0xFE and length < 9:  # EOF: the rows are done
                result.unbuffered_active = False
                result.connection = None
                return rows
            if first == 0xFF:
                result.unbuffered_active = False
                conn._next_seq_id = seq
                MysqlPacket(data, conn.encoding).raise_for_error()
            append(read_row(data))
    except OSError as exc:
        _lost(conn, exc)
    finally:
        conn._next_seq_id = seq


def _rest(conn: Any) -> bytes:
    """The continuation packets of a payload of 16 MiB or more."""
    parts = []
    while True:
        header = conn._read_bytes(4)
        if header[3] != conn._next_seq_id:
            _out_of_sequence(conn, header[3], conn._next_seq_id)
        conn._next_seq_id = (conn._next_seq_id + 1) & 0xFF
        length = header[0] | header[1] << 8 | header[2] << 16
        parts.append(conn._read_bytes(length))
        if length < _MAX_PACKET:
            return b"".join(parts)


def _lost(conn: Any, cause: OSError | None) -> NoReturn:
    conn._force_close()
    raise pymysql.err.OperationalError(
        2013, f"Lost connection to MySQL server during query ({cause or 'short read'})"
    ) from cause


def _out_of_sequence(conn: Any, got: int, expected: int) -> NoReturn:
    conn._force_close()
    if got == 0:  # MariaDB sends its shutdown error with sequence number 0
        raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
    raise pymysql.err.InternalError(f"Packet sequence number wrong - got {got} expected {expected}")
