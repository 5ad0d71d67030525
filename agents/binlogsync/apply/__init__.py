"""Target side: apply origin transactions exactly once.

statements.py   parameterized, merged SQL built from identifiers and the target's key
checkpoint.py   the binlogsync.checkpoint / binlogsync.skipped tables; explicit skips
applier.py      Applier: one target transaction per call, checkpoint included
"""

from .applier import Applier, failed_at
from .checkpoint import Skipped, list_skipped, skip

__all__ = ["Applier", "Skipped", "failed_at", "list_skipped", "skip"]
