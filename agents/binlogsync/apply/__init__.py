"""Target side: apply origin transactions exactly once.

statements.py    parameterized, merged SQL built from identifiers and the target's key
reduce.py        net-change reduction of a group of transactions per table and key
pipeline.py      runs one target transaction's statements, building the next meanwhile
targettables.py  the target's table definitions, the origin's DDL, dropped columns
failures.py      driver errors told as our errors, with origin, transaction, table and fix
checkpoint.py    the binlogsync.checkpoint / binlogsync.skipped tables; explicit skips
applier.py       Applier: one target transaction per call (or per streamed transaction)
"""

from .applier import Applier, failed_at
from .checkpoint import Skipped, list_skipped, skip

__all__ = ["Applier", "Skipped", "failed_at", "list_skipped", "skip"]
