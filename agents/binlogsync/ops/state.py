"""The state folder: what the lifecycle jobs keep for the Airflow page (and for people).

    last-retention.json               the last binlog_retention run, per origin
    last-outbox.json                  the last outbox report
    reconcile/<JOB>/last-reconcile.json   the last reconciliation of each job (reconcile_run.py)
    timing/timing-<UTC>.json|png      every paper_timing run (timing.py); the newest is shown

Files are replaced atomically, so a reader never sees half of one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RETENTION = "last-retention.json"
OUTBOX = "last-outbox.json"
RECONCILE_DIR = "reconcile"
TIMING_DIR = "timing"


def keep(state: Path, name: str, data: Any) -> Path:
    state.mkdir(parents=True, exist_ok=True)
    path = state / name
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)
    return path


def read(path: Path) -> Any | None:
    """The JSON at `path`, or None when there is none yet (or it cannot be read)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
