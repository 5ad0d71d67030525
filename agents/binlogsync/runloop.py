"""The one shape of every long-running piece: start, work until asked to stop, stop cleanly.

`stop_on_signals` turns SIGTERM and SIGINT into a set Event, so `kill PID` and Ctrl-C end an
agent the same way: the current step finishes, sockets and connections close, nothing is left
half-written (and what is half-done is safe anyway: see DESIGN.md).
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType


def stop_on_signals(stop: threading.Event) -> None:
    def handler(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("binlogsync").info("signal %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


class Backoff:
    """Exponential back-off between retries: initial, 2x, 4x … capped at `maximum`."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial, self.maximum = initial, maximum
        self.current = initial

    def next(self) -> float:
        delay = self.current
        self.current = min(self.current * 2, self.maximum)
        return delay

    def reset(self) -> None:
        self.current = self.initial
