"""Test kit for the applier: one that records the statements it runs."""

from __future__ import annotations

from typing import Any

from binlogsync.apply import Applier
from binlogsync.engines.mariadb.statements import Statement


class Recording(Applier):
    """An applier that records the statements it runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statements: list[Statement] = []

    def _execute(self, cursor: Any, statement: Statement) -> None:
        self.statements.append(statement)
        super()._execute(cursor, statement)
