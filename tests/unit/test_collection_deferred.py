"""runloop.collection_deferred across threads: a target runs one apply worker per origin,
each unit of work with the collector off; the collector is the process's, so it must stay off
until the last overlapping unit ends, and come back on after it."""

from __future__ import annotations

import gc
import threading

import pytest

from binlogsync.runloop import collection_deferred

pytestmark = pytest.mark.unit


def test_the_collector_stays_off_until_the_last_overlapping_unit_ends() -> None:
    assert gc.isenabled()
    first_inside, second_inside = threading.Event(), threading.Event()
    first_done, second_done = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def second_worker() -> None:
        first_inside.wait(10)
        with collection_deferred():
            second_inside.set()
            first_done.wait(10)  # the first unit ends while this one still runs
            seen["after the first ended"] = gc.isenabled()
        second_done.set()

    thread = threading.Thread(target=second_worker)
    thread.start()
    with collection_deferred():
        first_inside.set()
        assert second_inside.wait(10)
        assert not gc.isenabled()
    first_done.set()
    assert second_done.wait(10)
    thread.join(10)
    assert seen == {"after the first ended": False}
    assert gc.isenabled()


def test_a_collector_off_before_stays_off() -> None:
    gc.disable()
    try:
        with collection_deferred():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_comes_back_after_a_failing_unit() -> None:
    with pytest.raises(RuntimeError), collection_deferred():
        raise RuntimeError("the group failed")
    assert gc.isenabled()
