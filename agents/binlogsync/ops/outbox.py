"""The paper's outbox, as an operations report: who is offline, what waits for whom, what is
stuck, read from the hub (STATUS with backlog bytes) and held against configured limits.

    hosts     every host the hub knows: online or offline, and for how long
    backlog   per target and origin: transactions, bytes and age of the oldest one waiting
    stuck     targets whose apply fails (the error and where), or that the hub blocks
              (`reseed needed`, a message too large)

A target past `detach_age` or `detach_bytes` is detached (DETACH: the hub stops holding its
changes, so its log stays bounded), and a detached target that is online again is reseeded
(`binlogsync seed` of every table, given the origin's database), after which it streams again.

An alert is raised (`OutboxAlert`, naming every host and limit passed) when a host has been
offline longer than `max_offline`, a backlog is older than `max_age` or larger than
`max_bytes` / `max_transactions`, or a target is stuck: so a scheduler that runs this (the
`outbox_retries` DAG, cron) fails the run with the reason and its own alerting fires. Apply
errors need no retry from here: the target's agent retries by itself (with backoff), so a fix
on the target is picked up without a restart; the report says when the next retry is due.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import DatabaseSettings
from ..errors import BinlogsyncError
from ..hubcommands import detach, fetch_status
from ..transport.admin import HubAccess


class OutboxAlert(BinlogsyncError):
    """A host or a backlog passed a configured limit, or a target is stuck."""


@dataclass(frozen=True)
class Limits:
    max_offline: float | None = 600.0  # seconds a host may be unheard
    max_age: float | None = 3600.0  # seconds the oldest waiting transaction may wait
    max_bytes: int | None = None  # stored bytes a target's backlog may hold
    max_transactions: int | None = None
    # Past these the target is detached (the hub stops holding its changes) and must be
    # reseeded; None: never.
    detach_age: float | None = None
    detach_bytes: int | None = None


@dataclass
class OutboxReport:
    hub: str
    hosts: list[dict[str, Any]] = field(default_factory=list)
    backlogs: list[dict[str, Any]] = field(default_factory=list)
    stuck: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    detached: list[dict[str, Any]] = field(default_factory=list)  # by this run
    reseeded: list[dict[str, Any]] = field(default_factory=list)  # by this run

    def to_json(self) -> dict[str, Any]:
        return {
            "hub": self.hub,
            "hosts": self.hosts,
            "backlogs": self.backlogs,
            "stuck": self.stuck,
            "alerts": self.alerts,
            "detached": self.detached,
            "reseeded": self.reseeded,
        }

    def render(self) -> str:
        lines = [f"outbox of hub {self.hub}"]
        for h in self.hosts:
            state = "online" if h["online"] else f"OFFLINE for {_age(h['offline_seconds'])}"
            lines.append(f"  host {h['name']}: {state}")
        for b in self.backlogs:
            lines.append(
                f"  {b['origin']} -> {b['target']}: {b['transactions']:,} transactions, "
                f"{b['bytes']:,} bytes waiting, oldest {_age(b['age_seconds'])}"
            )
        for s in self.stuck:
            lines.append(f"  STUCK {s['origin']} -> {s['target']}: {s['reason']}")
        lines += [
            f"  DETACHED {d['origin']} -> {d['target']}: {d['reason']}" for d in self.detached
        ]
        lines += [
            f"  RESEEDED {r['origin']} -> {r['target']}: {r['rows']:,} rows in {r['seconds']:.1f} s"
            for r in self.reseeded
        ]
        lines += [f"  ALERT {a}" for a in self.alerts] or ["  no alerts"]
        return "\n".join(lines)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never heard"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def build(status: dict[str, Any], limits: Limits) -> OutboxReport:
    """The report (with its alerts) for one STATUS map fetched with detail."""
    report = OutboxReport(str(status["hub"]))
    for host in status["hosts"]:
        unheard = host.get("seconds_since_seen")
        row = {
            "name": host["name"],
            "online": bool(host["online"]),
            "roles": host.get("roles", []),
            "offline_seconds": None if host["online"] else unheard,
        }
        report.hosts.append(row)
        if (
            not host["online"]
            and limits.max_offline is not None
            and (unheard is None or unheard > limits.max_offline)
        ):
            report.alerts.append(
                f"host {host['name']} has been offline for {_age(unheard)} (limit "
                f"{limits.max_offline:.0f} s): start its agent, or check its network and keys"
            )
    for t in status["targets"]:
        backlog = {
            "target": t["target"],
            "origin": t["origin"],
            "detached": bool(t.get("detached")),
            "transactions": int(t["backlog"]),
            "bytes": int(t.get("backlog_bytes", 0)),
            "age_seconds": float(t["backlog_age_seconds"]),
            "applied": t["applied"],
        }
        report.backlogs.append(backlog)
        pair = f"{t['origin']} -> {t['target']}"
        if limits.max_age is not None and backlog["age_seconds"] > limits.max_age:
            report.alerts.append(
                f"{pair}: the oldest waiting transaction is {_age(backlog['age_seconds'])} old "
                f"(limit {limits.max_age:.0f} s)"
            )
        if limits.max_bytes is not None and backlog["bytes"] > limits.max_bytes:
            report.alerts.append(
                f"{pair}: {backlog['bytes']:,} bytes wait on the hub (limit {limits.max_bytes:,})"
            )
        if (
            limits.max_transactions is not None
            and backlog["transactions"] > limits.max_transactions
        ):
            report.alerts.append(
                f"{pair}: {backlog['transactions']:,} transactions wait (limit "
                f"{limits.max_transactions:,})"
            )
        reason = t.get("blocked") or t.get("last_error")
        if reason:
            retry = t.get("retry_in")
            stuck = {
                "target": t["target"],
                "origin": t["origin"],
                "reason": str(reason),
                "blocked": bool(t.get("blocked")),
                "position": t.get("error_position"),
                "retry_in": retry,
            }
            report.stuck.append(stuck)
            then = f"; the agent retries in {retry:.0f} s" if retry is not None else ""
            report.alerts.append(f"{pair} is stuck: {reason}{then}")
    return report


def run(
    config_path: HubAccess,
    limits: Limits,
    timeout: float = 10.0,
    sources: dict[str, DatabaseSettings] | None = None,
) -> OutboxReport:
    """Fetch the hub's status (with backlog bytes) and build the report; detach the targets
    past the detach limits; with `sources` (origin → its database), reseed every detached
    target that is online again. The caller decides whether alerts fail it (`raise_alerts`)."""
    status = fetch_status(config_path, timeout, detail=True)
    report = build(status, limits)
    for b in report.backlogs:
        why = _detach_reason(b, limits)
        if why and not b["detached"]:
            detach(config_path, b["origin"], b["target"], why)
            report.detached.append({"origin": b["origin"], "target": b["target"], "reason": why})
            report.alerts.append(f"{b['origin']} -> {b['target']} detached: {why}")
    if sources:
        online = {h["name"] for h in report.hosts if h["online"]}
        for b in report.backlogs:
            detached = b["detached"] or any(
                d["target"] == b["target"] and d["origin"] == b["origin"] for d in report.detached
            )
            if detached and b["target"] in online and b["origin"] in sources:
                report.reseeded.append(_reseed(config_path, b["origin"], b["target"], sources))
        if report.reseeded:  # the alerts of what was reseeded are answered
            done = {(r["origin"], r["target"]) for r in report.reseeded}
            report.alerts = [
                a for a in report.alerts if not any(a.startswith(f"{o} -> {t}") for o, t in done)
            ]
    return report


def _detach_reason(backlog: dict[str, Any], limits: Limits) -> str:
    if limits.detach_age is not None and backlog["age_seconds"] > limits.detach_age:
        return (
            f"its oldest waiting transaction was {_age(backlog['age_seconds'])} old (detach "
            f"limit {limits.detach_age:.0f} s)"
        )
    if limits.detach_bytes is not None and backlog["bytes"] > limits.detach_bytes:
        return f"{backlog['bytes']:,} bytes waited for it (detach limit {limits.detach_bytes:,})"
    return ""


def _reseed(
    config_path: HubAccess, origin: str, target: str, sources: dict[str, DatabaseSettings]
) -> dict[str, Any]:
    from ..seed.run import SeedOptions, seed

    done = seed(SeedOptions(config_path, origin, target, sources[origin], restart=True))
    data = done.to_json()
    return {
        "origin": origin,
        "target": target,
        "rows": data["rows"],
        "seconds": data["seconds"],
        "tables": len(data["tables"]),
    }


def raise_alerts(report: OutboxReport) -> None:
    if report.alerts:
        raise OutboxAlert(
            f"{len(report.alerts)} outbox alert(s) on hub {report.hub}: "
            + "; ".join(report.alerts),
            "see `binlogsync outbox` for the whole report",
        )
