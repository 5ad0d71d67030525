"""metrics.Labelled: a labelled counter's children, each looked up once."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter

from binlogsync.metrics import Labelled

pytestmark = pytest.mark.unit


def test_a_labelled_child_is_looked_up_once_and_counts() -> None:
    registry = CollectorRegistry()
    counter = Counter("things", "things counted", ["target", "origin"], registry=registry)
    by_pair = Labelled(counter)
    by_pair("t1", "o1").inc(2)
    by_pair("t1", "o1").inc(3)
    by_pair("t2", "o1").inc()
    assert by_pair("t1", "o1") is by_pair("t1", "o1")
    sample = registry.get_sample_value
    assert sample("things_total", {"target": "t1", "origin": "o1"}) == 5
    assert sample("things_total", {"target": "t2", "origin": "o1"}) == 1
