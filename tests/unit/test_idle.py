"""idle.py: idle work done for about the server's time, and the estimate following what
the server took (on a fake clock)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from binlogsync import idle

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    monkeypatch.setattr(idle.time, "monotonic", fake)
    yield fake
    idle.set_work(None)


def test_without_work_nothing_is_done_and_nothing_waits(clock: Clock) -> None:
    idle.set_work(None)
    assert not idle.available()
    idle.run(10**9)
    idle.done()
    assert clock.now == 100.0


def test_work_is_done_in_pieces_for_about_the_servers_time(clock: Clock) -> None:
    pieces: list[float] = []

    def piece() -> bool:
        pieces.append(clock.now)
        clock.now += 0.001  # a millisecond a piece
        return True

    idle.set_work(piece)
    assert idle.available()
    idle.run(500_000)  # 500 kB at the first estimate, 20 ns a byte: 10 ms
    assert len(pieces) == 10
    # The server answers 5 ms after the end: it needed 15 ms, and the estimate moves there.
    clock.now += 0.005
    idle.done()
    idle.run(500_000)
    assert len(pieces) == 10 + 13  # (20 + 30) / 2 ns a byte: 12.5 ms, so 13 pieces


def test_an_answer_at_once_lowers_the_estimate_and_no_work_ends_at_once(clock: Clock) -> None:
    left = [3]

    def piece() -> bool:
        clock.now += 0.001
        left[0] -= 1
        return left[0] > 0

    idle.set_work(piece)
    idle.run(10**9)  # capped at half a second, but the work runs out after three pieces
    assert clock.now == pytest.approx(100.003)
    idle.done()  # answered at once: the server had finished first
    left[0] = 10**6
    start = clock.now
    idle.run(500_000)
    assert clock.now - start == pytest.approx(0.008)  # 16 ns a byte now: 8 ms


def test_a_server_is_never_kept_waiting_past_the_bound(clock: Clock) -> None:
    def piece() -> bool:
        clock.now += 0.01
        return True

    idle.set_work(piece)
    start = clock.now
    idle.run(10**12)
    assert clock.now - start == pytest.approx(idle._LONGEST)


def test_work_is_available_only_when_there_is_some_now(clock: Clock) -> None:
    queued: list[int] = []
    idle.set_work(lambda: False, lambda: bool(queued))
    assert not idle.available()  # nothing queued: a statement keeps its usual way
    queued.append(1)
    assert idle.available()
