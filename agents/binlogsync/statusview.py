"""`binlogsync status` for people: the hub's status map as aligned tables."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from .seed.progress import duration


def _pos(p: dict[str, Any] | None) -> str:
    if not p:
        return "-"
    if p.get("scheme") == "gtid":  # the GTID state first: it is what `skip` takes
        state = p.get("gtid") or "(empty GTID state)"
        return f"{state} ({p['file']}:{p['offset']})" if p.get("file") else state
    return f"{p['file']}:{p['offset']}" + (f" ({p['gtid']})" if p.get("gtid") else "")


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f} s ago"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _error(t: dict[str, Any]) -> str:
    if t.get("blocked"):
        return f"BLOCKED: {t['blocked']}"
    if not t["last_error"]:
        return "-"
    retry = f" (retry in {t['retry_in']:.0f} s)" if t.get("retry_in") is not None else ""
    return f"at {_pos(t['error_position'])}: {t['last_error']}{retry}"


def _service(service: dict[str, Any]) -> list[str]:
    """The binlog service: its files and GTID state, then one line per subscriber."""
    head = service.get("head") or {}
    lines = [
        f"binlog service on {service['bind']} (server_id {service['server_id']}): "
        f"{service['files']} file(s) from {service.get('first_file') or '-'}, at "
        f"{head.get('file', '-')}:{head.get('position', '-')}, GTID "
        f"{service.get('gtid_state') or '(none yet)'}, retain {service['retain_hours']} h"
    ]
    for origin in service.get("origins") or []:
        if origin.get("stalled"):
            lines.append(f"  {origin['origin']} (domain {origin['domain']}) STOPPED: "
                         f"{origin['stalled']}")  # fmt: skip
    subscribers = service.get("subscribers") or []
    if not subscribers:
        return [*lines, "  no subscribers"]
    return lines + _table(
        [["SUBSCRIBER", "SERVER_ID", "MODE", "POSITION", "LAST GTID", "LAG", "TLS"]]
        + [
            [
                s["address"],
                str(s["server_id"]),
                s["mode"],
                f"{s['file']}:{s['position']}",
                s.get("gtid") or "-",
                f"{s['lag_seconds']:.1f} s",
                s.get("tls") or "-",
            ]
            for s in subscribers
        ]
    )


def render(status: dict[str, Any]) -> str:
    now = status.get("time", time.time())
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    epoch = f", log epoch {status['epoch']}" if status.get("epoch") else ""
    lines = [
        f"hub {status['hub']} (binlogsync {status['version']}{epoch}), up "
        f"{status['uptime']:.0f} s, at {stamp}",
        "",
    ]
    lines += _table(
        [["HOST", "STATE", "ROLES", "LAST HEARD"]]
        + [
            [
                h["name"],
                "online" if h["online"] else "OFFLINE",
                ",".join(h["roles"]) or "-",
                _ago(h["seconds_since_seen"]),
            ]
            for h in status["hosts"]
        ]
    )
    lines.append("")
    lines += _table(
        [["ORIGIN", "CAPTURE", "HEAD (durable)", "STORED", "APPENDED", "SKIPS"]]
        + [
            [
                o["origin"],
                "HALTED" if o.get("halted") else "running",
                _pos(o["head"]),
                str(o["stored"]),
                str(o["appended"]),
                str(o.get("capture_skips", 0)),
            ]
            for o in status["origins"]
        ]
    )
    for o in status["origins"]:
        halted = o.get("halted")
        if halted:
            lines.append(f"  {o['origin']}: {halted['error']}")
        pending = o.get("skip_pending")
        if pending:
            to = pending["to"] if isinstance(pending["to"], str) else _pos(pending["to"])
            lines.append(
                f"  {o['origin']}: capture-skip {pending['id']} to {to} waits for the origin's "
                "agent"
            )
    lines.append("")
    lines += _table(
        [["TARGET", "ORIGIN", "APPLIED", "BACKLOG", "AGE", "LAST ERROR"]]
        + [
            [
                t["target"],
                t["origin"],
                _pos(t["applied"]),
                str(t["backlog"]),
                f"{t['backlog_age_seconds']:.1f} s",
                _error(t),
            ]
            for t in status["targets"]
        ]
    )
    service = status.get("binlog_service")
    if service:
        lines += ["", *_service(service)]
    seeds = status.get("seeds") or []
    if seeds:
        lines.append("")
        lines += _table(
            [["SEED", "TABLE", "ROWS", "OF ~", "ROWS/S", "STATE", "UPDATED"]]
            + [
                [
                    f"{r['origin']} -> {r['target']}",
                    r["table"],
                    f"{r['rows']:,}",
                    f"{r['total_rows']:,}",
                    f"{r['rows_per_second']:,.0f}",
                    "done" if r["done"] else f"ETA {duration(r['eta_seconds'])}",
                    _ago(r["seconds_since_update"]),
                ]
                for r in seeds
            ]
        )
    return "\n".join(lines)
