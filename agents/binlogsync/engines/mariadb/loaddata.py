"""Large upserts as `LOAD DATA LOCAL INFILE … REPLACE`, fed from memory: the server reads
tab-separated fields faster than it parses a multi-row INSERT … ON DUPLICATE KEY UPDATE
(1,000,000 rows here: 3.9 s against 6.3 s for new rows, 7.2 s against 9.9 s for updates).

When (statements.py decides): a change of `BULK_ROWS` rows or more that inserts rows or
updates them without changing their key, into a table where REPLACE means what the upsert
means (`Layout.replaceable`: no other unique key, foreign key, trigger or BIT column, and every
column written), on a session that takes backslash escapes, of a MariaDB server with
`local_infile` on. Everything else keeps the upsert. MariaDB's strict mode refuses an
out-of-range or too long value in LOAD DATA LOCAL as it refuses it in an INSERT
(tests/integration/test_load_data.py), so the errors are the same too. MySQL makes such a
value a warning under LOCAL and loads it cut, so MySQL targets keep the upsert.

The fields: LOAD DATA's defaults (tab between fields, newline after a row, backslash escapes:
`\\\\`, `\\t`, `\\n`, `\\r`, `\\0`; `\\N` is NULL), in utf8mb4; bytes go as hex into a user
variable and `SET col = UNHEX(@var)`, so no byte of a BLOB passes through a character set.
Values are first converted as for the upsert (`literals.convert`), and what the upsert would
hand to the driver's own escape (NaN, infinity) raises `NotBulk`: the caller builds that
change as upserts.

From memory: the server answers LOAD DATA LOCAL by naming the file it wants, and PyMySQL then
opens that name. `install()` replaces PyMySQL's sender (`connections._send_local_file`, a
private function: pyproject.toml pins PyMySQL to 1.2.x) with one that, on a connection `mark`ed
as an apply connection, sends only the bytes this module put on it, and only for the name it
put in the statement. Any other name, such as a server asking for a file of the agent's host,
is refused, and no file is ever read. Connections not marked (anyone else's in the same
process) keep PyMySQL's own sender.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, cast

from pymysql import connections, err
from pymysql.constants import ER

from ... import idle
from ...rowtext import NEEDS_ESCAPE, TextRows
from .literals import _PASS, NotBulk, convert, plain_texts

NULL = "\\N"
_ESCAPE = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\x00": "\\0"})
_PACKET = 1 << 20  # bytes per packet of data, at most (and below max_allowed_packet)
_names = itertools.count(1)
# On a marked connection: None, or (name, data, packet size) of the statement running on it
_ATTRIBUTE = "_binlogsync_load"
_pymysql_sender = connections._send_local_file


def field(value: Any) -> str:
    """One value as a LOAD DATA field (not bytes: those go as hex, see `column`)."""
    if type(value) not in _PASS:
        value = convert(value)
    kind = type(value)
    if kind is str:
        return str(value.translate(_ESCAPE))
    if kind is int:
        return str(value)
    if value is None:
        return NULL
    if kind is Decimal and value.is_finite():
        return format(value, "f")
    if kind is float and math.isfinite(value):
        return repr(value)
    raise NotBulk(kind.__name__)


def column(values: Sequence[Any]) -> tuple[list[str], bool]:
    """One column's values as fields, and whether they are hex (a column of bytes)."""
    kinds = set(map(type, values))
    if kinds == {int}:
        return list(map(str, values)), False
    if kinds == {str}:
        if NEEDS_ESCAPE.search("".join(values)) is None:
            return list(values), False
        return [v.translate(_ESCAPE) for v in values], False
    if bytes in kinds:
        if not kinds <= {bytes, type(None)}:
            raise NotBulk("bytes beside other types in one column")
        return [NULL if v is None else v.hex() for v in values], True
    texts = plain_texts(values, kinds)
    if texts is not None:
        if type(None) not in kinds:
            return cast("list[str]", texts), False
        return [NULL if t is None else t for t in texts], False
    return list(map(field, values)), False


def rows(image: Sequence[Sequence[Any]], indices: Sequence[int]) -> tuple[bytes, list[bool]]:
    """The rows' values at `indices` as LOAD DATA's text, and which of those are hex. Rows
    that came as this text (a seed's, rowtext.py) go as they came when every column is
    written in its place."""
    if isinstance(image, TextRows) and list(indices) == list(range(len(image.forms))):
        return image.text, image.hexed
    columns = list(zip(*image, strict=True))
    made = [column(columns[i]) for i in indices]
    lines = map("\t".join, zip(*(fields for fields, _ in made), strict=True))
    try:
        data = ("\n".join(lines) + "\n").encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: the upsert's error says it better
        raise NotBulk("a value that is not valid text") from exc
    return data, [hexed for _, hexed in made]


def statement(target: str, names: Sequence[str], hexed: Sequence[bool]) -> tuple[str, str]:
    """The LOAD DATA statement into `target` (quoted, `%` not doubled) of columns `names`,
    and the file name it asks for (a fresh one each time)."""
    name = f"binlogsync-load-{next(_names)}"
    listed = [f"@bls{i}" if h else n for i, (n, h) in enumerate(zip(names, hexed, strict=True))]
    sql = (
        f"LOAD DATA LOCAL INFILE '{name}' REPLACE INTO TABLE {target} "
        f"CHARACTER SET utf8mb4 ({','.join(listed)})"
    )
    unhex = [f"{n}=UNHEX(@bls{i})" for i, (n, h) in enumerate(zip(names, hexed, strict=True)) if h]
    if unhex:
        sql += " SET " + ",".join(unhex)
    return sql, name


def execute(cursor: Any, sql: str, name: str, data: bytes, packet: int) -> None:
    """Run `sql` (a `statement`) with `data` as the file it names, sent in packets of at most
    `packet` bytes."""
    connection = cursor.connection
    setattr(connection, _ATTRIBUTE, (name, data, max(1024, min(packet, _PACKET))))
    try:
        cursor.execute(sql)
        idle.done()
    finally:
        setattr(connection, _ATTRIBUTE, None)


def _send_from_memory(filename: str | bytes, conn: Any) -> None:
    """PyMySQL's `_send_local_file`, for LOAD DATA LOCAL: the bytes `execute` offered for
    this name, or a refusal (the caller then tells the server the file is empty, and the
    server's own error follows)."""
    if not hasattr(conn, _ATTRIBUTE):
        _pymysql_sender(filename, conn)  # not an apply connection: PyMySQL's own way
        return
    if isinstance(filename, bytes):  # as the server's packet carries it
        filename = filename.decode("utf-8", "replace")
    offered = getattr(conn, _ATTRIBUTE)
    if offered is None or offered[0] != filename:
        raise err.OperationalError(
            ER.FILE_NOT_FOUND,
            f"the server asked for the local file {filename!r}, which binlogsync did not "
            "offer: only the rows of its own LOAD DATA statements are sent",
        )
    _, data, packet = offered
    view = memoryview(data)
    for start in range(0, len(view), packet):
        conn.write_packet(view[start : start + packet])
    idle.run(len(data))  # the server works on the rows; PyMySQL ends them when this returns


def mark(connection: Any) -> None:
    """Make `connection` an apply connection: LOAD DATA LOCAL sends it only what `execute`
    offers."""
    setattr(connection, _ATTRIBUTE, None)


def install() -> None:
    """Send LOAD DATA LOCAL's data from memory (see the module): idempotent."""
    connections._send_local_file = _send_from_memory
