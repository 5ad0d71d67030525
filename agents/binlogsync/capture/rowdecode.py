"""Placeholder until the rows decoder lands: every table is left to the library."""

from __future__ import annotations

from typing import Any

from ..model import Row


class RowsDecoder:
    columns: tuple[str, ...] = ()

    @classmethod
    def of(cls, table: Any) -> RowsDecoder | None:
        return None

    def decode(
        self, event_type: int, data: bytes, start: int, end: int
    ) -> tuple[tuple[Row, ...], tuple[Row, ...]] | None:
        return None
