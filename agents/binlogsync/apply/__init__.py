"""Target side: apply origin transactions exactly once.

statements.py    parameterized, merged SQL built from identifiers and the target's key
reduce.py        net-change reduction of a group of transactions per table and key
pipeline.py      runs one target transaction's statements, building the next meanwhile
targettables.py  the target's table definitions, the origin's DDL, dropped columns
failures.py      driver errors told as our errors, with origin, transaction, table and fix
checkpoint.py    the binlogsync.checkpoint / binlogsync.skipped tables; explicit skips
applier.py       Applier: one target transaction per call (or per streamed transaction)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .applier import Applier, failed_at
    from .checkpoint import Skipped, list_skipped, skip

__all__ = ["Applier", "Skipped", "failed_at", "list_skipped", "skip"]

_FACE = {
    "Applier": "applier",
    "failed_at": "applier",
    "Skipped": "checkpoint",
    "list_skipped": "checkpoint",
    "skip": "checkpoint",
}


def __getattr__(name: str) -> Any:
    """The face, imported when first used: importing `apply.statements` or `apply.checkpoint`
    alone (reconciliation's Spark executors do) must not pull in the applier, whose schema
    following reads DDL with the capture side's parser (python-mysql-replication)."""
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_FACE[name]}", __name__), name)
    globals()[name] = value
    return value
