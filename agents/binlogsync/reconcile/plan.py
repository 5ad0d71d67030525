"""A reconciliation's plan on the driver: the state the driver keeps per source table
(`TableState`). job.py makes and follows it, report.py and repair.py read it; the run's
options are settings.py's `Options`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import schema
from .chunks import Chunk
from .taskdata import TableSpec


@dataclass
class TableState:
    """One source table as the driver plans and follows it."""

    index: int
    name: str
    spec: TableSpec | None = None
    pairs: dict[int, schema.TablePair] = field(default_factory=dict)
    errors: dict[int | None, str] = field(default_factory=dict)  # target index (None: all)
    chunks: list[Chunk] = field(default_factory=list)
    mode: str = "full"  # "since-last" when only changed keys are compared
    notes: list[str] = field(default_factory=list)
