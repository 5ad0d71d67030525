"""Origin side: preflight checks and the binlog reader that yields committed transactions."""

from .preflight import check_origin
from .reader import BinlogReader, current_position, earliest_position

__all__ = ["BinlogReader", "check_origin", "current_position", "earliest_position"]
