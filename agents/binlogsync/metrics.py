"""Prometheus metrics of an agent, served over HTTP on a loopback port when configured.

Each agent has its own registry (several agents can live in one test process).
"""

from __future__ import annotations

import errno
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, start_http_server

from .config import Metrics
from .errors import ConfigError


class Labelled:
    """A labelled counter's children, each looked up once: prometheus_client's `labels()`
    costs ~0.9 µs a call, and the hub counts a store and a delivery of every transaction.
    The label values come from configured names, so the children stay few."""

    def __init__(self, metric: Counter) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


class HubMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.appended = Counter(
            "binlogsync_hub_transactions_total",
            "Transactions stored, by origin",
            ["origin"],
            registry=r,
        )
        self.delivered = Counter(
            "binlogsync_hub_delivered_transactions_total",
            "Transactions sent to targets (including re-sends)",
            ["target", "origin"],
            registry=r,
        )
        self.appended_by, self.delivered_to = Labelled(self.appended), Labelled(self.delivered)
        self.backlog = Gauge(
            "binlogsync_backlog_transactions",
            "Stored transactions a target has not applied",
            ["target", "origin"],
            registry=r,
        )
        self.lag = Gauge(
            "binlogsync_lag_seconds",
            "Age of the oldest transaction a target has not applied",
            ["target", "origin"],
            registry=r,
        )
        self.online = Gauge(
            "binlogsync_host_online",
            "1 when the host's heartbeats arrive",
            ["host"],
            registry=r,
        )
        self.rejected = Counter(
            "binlogsync_rejected_messages_total",
            "Malformed or unauthorised messages dropped",
            registry=r,
        )
        self.halted = Gauge(
            "binlogsync_capture_halted",
            "1 while an origin's capture is stopped at something it must not pass alone",
            ["origin"],
            registry=r,
        )
        self.blocked = Gauge(
            "binlogsync_target_blocked",
            "1 while nothing can be delivered to a target (reseed needed, message too large)",
            ["target", "origin"],
            registry=r,
        )


HUB_LINK_STATES = (
    "connecting",
    "welcomed",
    "refused",
    "dropped",
    "handshake_failed",
    "silent",
    "rejected",
)


class ClientMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.captured = Counter(
            "binlogsync_captured_transactions_total",
            "Transactions read from the binlog",
            registry=r,
        )
        self.acknowledged = Counter(
            "binlogsync_acknowledged_transactions_total",
            "Captured transactions the hub stored durably",
            registry=r,
        )
        self.applied = Counter(
            "binlogsync_applied_transactions_total",
            "Transactions applied on the target",
            ["origin"],
            registry=r,
        )
        self.applied_from = Labelled(self.applied)
        self.apply_errors = Counter(
            "binlogsync_apply_errors_total",
            "Failed apply attempts",
            ["origin"],
            registry=r,
        )
        self.lag = Gauge(
            "binlogsync_apply_lag_seconds",
            "Age of the oldest change delivered and not applied yet (0 when caught up)",
            ["origin"],
            registry=r,
        )
        self.hub_online = Gauge(
            "binlogsync_hub_online",
            "1 while the hub answers",
            registry=r,
        )
        self.unanswered_hellos = Gauge(
            "binlogsync_hub_unanswered_hellos",
            "Heartbeat intervals of saying HELLO since the last WELCOME (growing: the hub is "
            "unreachable, refuses, or is silent)",
            registry=r,
        )
        self.hub_handshake_failures = Gauge(
            "binlogsync_hub_handshake_failures",
            "CURVE handshakes with the hub that failed since the link was last up (a key mismatch)",
            registry=r,
        )
        self.capture_halted = Gauge(
            "binlogsync_origin_capture_halted",
            "1 while this agent's capture (an origin's) is stopped at something it must not "
            "pass alone; the hub's binlogsync_capture_halted shows the same once it has heard",
            registry=r,
        )
        self.hub_link = Enum(
            "binlogsync_hub_link",
            "The link to the hub: welcomed, or why no WELCOME comes (connecting: nothing known "
            "yet; refused: nothing listens; dropped: a peer that is no ZeroMQ hub; "
            "handshake_failed: CURVE keys do not match; silent: connected, no answer; "
            "rejected: the hub answered HELLO with an error)",
            states=list(HUB_LINK_STATES),
            registry=r,
        )


def serve(settings: Metrics, registry: CollectorRegistry) -> object | None:
    """Start the HTTP endpoint; returns the server (call .shutdown()) or None when off."""
    if not settings.port:
        return None
    try:
        server, _thread = start_http_server(settings.port, addr=settings.host, registry=registry)
    except OSError as exc:
        # A start-up problem the user fixes in the config, not a crash with a traceback.
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"metrics.port {settings.port} on {settings.host} is in use",
                "choose a free port in [metrics] port (0 turns the endpoint off), "
                "or stop what listens there",
            ) from exc
        raise ConfigError(
            f"metrics.host/metrics.port {settings.host}:{settings.port} cannot be served: "
            f"{exc.strerror or exc}",
            "set [metrics] host to a local address and port to a free port you may bind",
        ) from exc
    return server
