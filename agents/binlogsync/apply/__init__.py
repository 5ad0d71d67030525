"""Target side: apply origin transactions exactly once.

core.py          Target: the one exactly-once core (which transactions are new, the checkpoint
                 compare-and-set, net-change apply with the unreduced replay, streamed parts,
                 schema following, skip, repair) over an engine adapter (engines/)
reduce.py        net-change reduction of a group of transactions per table and key
applier.py       Applier: the core over the MariaDB/MySQL adapter; `skip`
postgres.py      PostgresStore: the core over the PostgreSQL adapter
redisstore.py    RedisStore: the core over the Redis adapter
auditlog.py      AuditLogStore: the core over the audit-log adapter
store.py         open_store: the Target a [target] section describes
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engines.mariadb.checkpoint import Skipped, list_skipped
    from .applier import Applier, failed_at, skip

__all__ = ["Applier", "Skipped", "failed_at", "list_skipped", "skip"]

_FACE = {
    "Applier": ".applier",
    "failed_at": ".applier",
    "Skipped": "..engines.mariadb.checkpoint",
    "list_skipped": "..engines.mariadb.checkpoint",
    "skip": ".applier",
}


def __getattr__(name: str) -> Any:
    """The face, imported when first used: importing one module of the package (`apply.core`
    for a PostgreSQL target, say) does not pull in the MariaDB adapter and its driver."""
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_FACE[name], __name__), name)
    globals()[name] = value
    return value
