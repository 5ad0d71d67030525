"""The outbox report from a status map: which limits raise which alerts."""

from __future__ import annotations

from typing import Any

from binlogsync.ops.outbox import Limits, build

STATUS: dict[str, Any] = {
    "hub": "hub",
    "hosts": [
        {"name": "o", "online": True, "roles": ["origin"], "seconds_since_seen": 0.2},
        {"name": "t", "online": False, "roles": ["target"], "seconds_since_seen": 900.0},
        {"name": "n", "online": False, "roles": [], "seconds_since_seen": None},
    ],
    "targets": [
        {"target": "t", "origin": "o", "backlog": 120, "backlog_bytes": 5000,
         "backlog_age_seconds": 90.0, "applied": None, "last_error": "", "blocked": None},
        {"target": "u", "origin": "o", "backlog": 1, "backlog_bytes": 10,
         "backlog_age_seconds": 1.0, "applied": None, "last_error": "no table db.x",
         "error_position": None, "retry_in": 4.0, "blocked": None},
    ],
}  # fmt: skip


def test_no_limits_only_stuck_targets_alert() -> None:
    report = build(STATUS, Limits(None, None, None, None))
    assert report.alerts == ["o -> u is stuck: no table db.x; the agent retries in 4 s"]
    assert [h["offline_seconds"] for h in report.hosts] == [None, 900.0, None]


def test_each_limit_names_what_passed_it() -> None:
    report = build(
        STATUS, Limits(max_offline=600, max_age=60, max_bytes=1000, max_transactions=100)
    )
    text = "\n".join(report.alerts)
    assert "host t has been offline for 15 min (limit 600 s)" in text
    assert "host n has been offline for never heard" in text  # never heard counts as offline
    assert "o -> t: the oldest waiting transaction is 90 s old (limit 60 s)" in text
    assert "o -> t: 5,000 bytes wait on the hub (limit 1,000)" in text
    assert "o -> t: 120 transactions wait (limit 100)" in text
    assert "o -> u is stuck" in text and len(report.alerts) == 6
    assert "OFFLINE for 15 min" in report.render()
