"""`binlogsync status` for people: the hub's status map as aligned tables."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any


def _pos(p: dict[str, Any] | None) -> str:
    if not p:
        return "-"
    return f"{p['file']}:{p['offset']}" + (f" ({p['gtid']})" if p.get("gtid") else "")


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f} s ago"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def render(status: dict[str, Any]) -> str:
    now = status.get("time", time.time())
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [
        f"hub {status['hub']} (binlogsync {status['version']}), up {status['uptime']:.0f} s"
        f", at {stamp}",
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
        [["ORIGIN", "HEAD (durable)", "STORED", "APPENDED"]]
        + [
            [o["origin"], _pos(o["head"]), str(o["stored"]), str(o["appended"])]
            for o in status["origins"]
        ]
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
                (
                    f"at {_pos(t['error_position'])}: {t['last_error']} (retry in {t['retry_in']:.0f} s)"
                    if t["last_error"]
                    else "-"
                ),
            ]
            for t in status["targets"]
        ]
    )
    return "\n".join(lines)
