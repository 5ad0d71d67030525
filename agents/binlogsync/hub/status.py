"""What `binlogsync status` shows: the hub's view of hosts, origins and targets, as one map
(STATUS_REPLY, `status --json`; statusview.py renders it for people)."""

from __future__ import annotations

import time
from typing import Any

from .. import __version__
from .delivery import Delivery
from .hosts import Hosts
from .log import HubLog
from .origins import Origins


def build(
    name: str,
    started: float,
    store: HubLog,
    hosts: Hosts,
    origins: Origins,
    delivery: Delivery,
    detail: bool = False,
) -> dict[str, Any]:
    """The status map; `detail` adds what costs a scan of each backlog (its bytes)."""
    now = time.time()
    host_rows = [
        {
            "name": h.name,
            "online": h.online,
            "roles": list(h.roles),
            "last_seen": h.last_seen,
            "seconds_since_seen": None if h.last_seen is None else round(now - h.last_seen, 3),
        }
        for h in hosts.values()
    ]
    origin_rows = []
    for origin in origins.names:
        known = store.heads.get(origin)
        skips = store.capture_skips(origin)
        pending = origins.skips.get(origin)
        origin_rows.append(
            {
                "origin": origin,
                "head": known.head.to_json() if known else None,
                "head_time": known.head_ts if known else None,
                "floor": known.floor.to_json() if known and known.floor else None,
                "stored": store.log_rows(origin),
                "appended": known.appended if known else 0,
                "halted": origins.halted.get(origin),
                "capture_skips": len(skips),
                "last_capture_skip": skips[-1] if skips else None,
                "skip_pending": (
                    {
                        "id": pending.id,
                        "to": pending.to.to_json() if pending.to else "current",
                        "reason": pending.reason,
                    }
                    if pending
                    else None
                ),
            }
        )
    target_rows = []
    for (target, origin), c in sorted(delivery.cursors.items()):
        count, oldest = store.backlog(origin, c.applied_key)
        target_rows.append(
            {
                "target": target,
                "origin": origin,
                "applied": c.applied.to_json() if c.applied else None,
                "applied_at": c.applied_at,
                "epoch": c.epoch,
                "backlog": count,
                "backlog_age_seconds": round(now - oldest, 3) if oldest else 0.0,
                "in_flight": len(c.inflight),
                "last_error": c.last_error or None,
                "error_position": c.error_position.to_json() if c.error_position else None,
                "error_at": c.error_at,
                "retry_in": c.retry_in,
                "blocked": c.blocked or None,
                "detached": c.blocked_by == "detached",
            }
        )
        if detail:
            target_rows[-1]["backlog_bytes"] = store.backlog_bytes(origin, c.applied_key)
    return {
        "hub": name,
        "epoch": store.epoch,
        "version": __version__,
        "time": now,
        "uptime": round(now - started, 3),
        "hosts": host_rows,
        "origins": origin_rows,
        "targets": target_rows,
        "seeds": delivery.repairs.seeds.status(),
        "routes": [
            {
                "origin": r.origin,
                "targets": list(r.targets),
                "tables": list(r.tables.patterns),
                "rename": dict(r.rename),
            }
            for r in delivery.router.routes
        ],
    }
