"""The hub's in-memory lag history (hub/history.py): one sample per interval per pair, an hour
at most, bounded whatever the caller does."""

from __future__ import annotations

import pytest

from binlogsync.hub.history import SAMPLES, LagHistory

pytestmark = pytest.mark.unit


def test_one_sample_per_interval_per_pair() -> None:
    h = LagHistory(interval=10, window=3600)
    assert h.record(1000.0, "t1", "o1", 0.5, 3)
    assert not h.record(1005.0, "t1", "o1", 9.0, 9)  # too soon: dropped
    assert h.record(1005.0, "t2", "o1", 1.0, 1)  # another pair has its own clock
    assert h.record(1010.0, "t1", "o1", -2.0, 0)  # a clock step back never gives a negative lag
    out = h.to_json(1010.0)
    assert out["interval"] == 10 and out["window"] == 3600
    assert out["pairs"] == [
        {"target": "t1", "origin": "o1", "samples": [[1000.0, 0.5, 3], [1010.0, 0.0, 0]]},
        {"target": "t2", "origin": "o1", "samples": [[1005.0, 1.0, 1]]},
    ]


def test_an_hour_at_most_and_bounded() -> None:
    h = LagHistory()
    for i in range(SAMPLES * 3):
        h.record(float(i * 10), "t1", "o1", float(i), i)
    samples = h.to_json(float(SAMPLES * 30))["pairs"][0]["samples"]
    assert len(samples) <= SAMPLES == 360
    assert samples[-1] == [float((SAMPLES * 3 - 1) * 10), float(SAMPLES * 3 - 1), SAMPLES * 3 - 1]
    # Older than the window before `now`: left out even while still in the ring.
    assert all(s[0] >= SAMPLES * 30 - 3600 for s in samples)
    assert h.to_json(1e9)["pairs"][0]["samples"] == []
