"""Which Python codec turns a text column's values back into the origin's bytes.

Capture decoded each text value with the codec python-mysql-replication picks for the
column's collation (capture/rowdecode.py); encoding with the same codec gives the origin's
bytes back, so the choice is made here by the same two functions of that library, for the
same server kind (MariaDB: the service says so in its version).
"""

from __future__ import annotations

import codecs
from functools import lru_cache

from pymysqlreplication.row_event import RowsEvent, find_charset

BINARY = "binary"  # the values are bytes, written as they are
RAW = "raw"  # a character set Python has no codec for: capture kept the bytes


@lru_cache(maxsize=512)
def codec(collation: int | None) -> str:
    """The codec name for values of a column of this collation id, BINARY or RAW."""
    if collation is None:
        return "utf-8"
    name = find_charset(str(collation), dbms="mariadb")[0]
    if name == "binary":
        return BINARY
    encoding = str(RowsEvent.charset_to_encoding(name))
    try:
        codecs.lookup(encoding)
    except LookupError:
        return RAW
    return encoding
