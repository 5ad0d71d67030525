"""What the Airflow page shows, as one map: the hub's status (hosts, per target and origin
the applied position, backlog, lag and last error, the binlog service's subscribers — the
numbers of `status --json`; the last hour of lag per target and origin — `status --json
--history`, hub/history.py) beside what the lifecycle jobs kept in the state folder
(state.py): the last reconciliation with its differing rows, the last retention run, the
latest timing run.

Built without Airflow, so it is tested and used the same from the CLI and the plugin. A hub
that does not answer is part of the picture (`hub_error`), not an exception: the page still
shows the jobs' results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BinlogsyncError
from ..hubcommands import fetch_status
from ..position import Position
from ..transport.admin import HubAccess
from . import state


def _position(value: Any) -> str | None:
    return None if value is None else str(Position.from_json(value))


def build(access: HubAccess, state_dir: Path, timeout: float = 5.0) -> dict[str, Any]:
    out = build_offline(state_dir)
    try:
        status = fetch_status(access, timeout, history=True)
    except BinlogsyncError as exc:
        out["hub_error"] = str(exc)
    else:
        out.update(from_status(status))
    return out


def build_offline(state_dir: Path) -> dict[str, Any]:
    """The jobs' results alone (when the hub cannot even be named)."""
    return {
        "hub": None,
        "hub_error": None,
        "hosts": [],
        "pairs": [],
        "subscribers": [],
        "binlog_service": None,
        "history": None,
        "reconcile": last_reconciles(state_dir),
        "retention": state.read(state_dir / state.RETENTION),
        "timing": latest_timing(state_dir),
    }


def from_status(status: dict[str, Any]) -> dict[str, Any]:
    hosts = [
        {
            "name": h["name"],
            "online": bool(h["online"]),
            "roles": h.get("roles", []),
            "last_seen": h.get("last_seen"),
            "seconds_since_seen": h.get("seconds_since_seen"),
        }
        for h in sorted(status.get("hosts", ()), key=lambda h: str(h["name"]))
    ]
    pairs = [
        {
            "target": t["target"],
            "origin": t["origin"],
            "applied": _position(t.get("applied")),
            "applied_at": t.get("applied_at"),
            "backlog": t.get("backlog", 0),
            "lag_seconds": t.get("backlog_age_seconds", 0.0),
            "last_error": t.get("last_error"),
            "blocked": t.get("blocked"),
            "detached": bool(t.get("detached")),
        }
        for t in status.get("targets", ())
    ]
    service = status.get("binlog_service")
    subscribers = [
        {
            "server_id": s["server_id"],
            "address": s["address"],
            "mode": s["mode"],
            "position": f"{s['file']}:{s['position']}",
            "gtid": s.get("gtid") or None,
            "lag_seconds": s.get("lag_seconds", 0.0),
        }
        for s in (service or {}).get("subscribers", ())
    ]
    summary = (
        {k: service.get(k) for k in ("bind", "server_id", "files", "gtid_state", "retain_hours")}
        if service
        else None
    )
    return {
        "hub": status.get("hub"),
        "time": status.get("time"),
        "hosts": hosts,
        "pairs": pairs,
        "subscribers": subscribers,
        "binlog_service": summary,
        # {interval, window, pairs: [{target, origin, samples: [[time, lag, backlog], ...]}]}
        "history": status.get("history") or None,
    }


def _last_reconcile_files(state_dir: Path) -> dict[str, Path]:
    """Each job's last-reconcile.json, by job name (its folder's name)."""
    found = sorted((state_dir / state.RECONCILE_DIR).glob("*/last-reconcile.json"))
    return {path.parent.name: path for path in found}


def reconcile_summary(state_dir: Path, job: str) -> Path | None:
    """The summary.json of `job`'s last reconciliation, or None. `job` is only looked up among
    the jobs found in the state folder, never joined into a path: a name such as `../x` finds
    nothing. The summary is the one in the run's output folder that the job itself recorded
    (`out` of its last-reconcile.json)."""
    path = _last_reconcile_files(state_dir).get(job)
    return _summary_of(state.read(path)) if path is not None else None


def _summary_of(data: Any) -> Path | None:
    """The summary.json in the output folder a last-reconcile.json records, if it exists."""
    if not isinstance(data, dict) or not isinstance(data.get("out"), str) or not data["out"]:
        return None
    summary = Path(data["out"]) / "summary.json"
    return summary if summary.is_file() else None


def last_reconciles(state_dir: Path) -> list[dict[str, Any]]:
    """The last reconciliation of every job, newest first, with its differing rows (the
    first ones the job read) and whether its report can be served."""
    found = []
    for job, path in _last_reconcile_files(state_dir).items():
        data = state.read(path)
        if not isinstance(data, dict):
            continue
        # The source position each table's comparison was pinned to (the last chunk's).
        pins = sorted(
            {
                str((t.get("source_positions") or {}).get("last"))
                for t in data.get("tables", ())
                if (t.get("source_positions") or {}).get("last")
            }
        )
        rows = [
            {k: r.get(k) for k in ("table", "target", "kind", "key", "columns")}
            for r in data.get("rows") or ()
            if isinstance(r, dict)
        ]
        found.append(
            {
                "job": job,
                "state": data.get("state"),
                "differing_rows": data.get("differing_rows", 0),
                "started_at": data.get("started_at"),
                "tables": len(data.get("tables", ())),
                "pins": pins,
                "out": data.get("out"),
                "rows": rows,
                "rows_total": data.get("rows_total", len(rows)),
                "report": _summary_of(data) is not None,
            }
        )
    return sorted(found, key=lambda r: str(r["started_at"]), reverse=True)


def latest_timing(state_dir: Path) -> dict[str, Any] | None:
    runs = sorted((state_dir / state.TIMING_DIR).glob("timing-*.json"))
    if not runs:
        return None
    data = state.read(runs[-1]) or {}
    png = runs[-1].with_suffix(".png")
    return {
        "run": runs[-1].stem,
        "png": png.name if png.exists() else None,
        "worst_ours_over_native": data.get("worst_ours_over_native"),
        "worst_lag_ms": data.get("worst_lag_ms"),
        "cells": data.get("cells", []),
    }
