"""Origin side: check the server (preflight.py), find positions (positions.py), read the binlog
into transactions (reader.py, with values.py for column values, tablemap.py for the Table_map
cache and ddl.py for Query events)."""

from .positions import current_position, earliest_position
from .preflight import check_origin
from .reader import BinlogReader

__all__ = ["BinlogReader", "check_origin", "current_position", "earliest_position"]
