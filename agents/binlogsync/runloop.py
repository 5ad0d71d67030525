"""The one shape of every long-running piece: start, work until asked to stop, stop cleanly.

As Maxwell's RunLoopProcess: a `RunLoop` subclass implements `run()` (set up, then loop until
`stopping`, then clean up in `finally`). `start()` runs it on a thread of its own, or a program
calls `run()` on its main thread; `stop()` asks it to end from anywhere (a signal handler
too) and never blocks; `join(timeout)` waits for the thread. An exception that ends `run()` on
its thread is kept in `error` and logged, never lost.

`stop_on_signals` turns SIGTERM and SIGINT into `stop()`, so `kill PID` and Ctrl-C end an
agent the same way: the current step finishes, sockets and connections close, nothing is left
half-written (and what is half-done is safe anyway: see DESIGN.md).
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from types import FrameType

log = logging.getLogger("binlogsync")


class RunLoop:
    """Subclasses implement `run()`; see the module doc."""

    name = "runloop"

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.result: int | None = None
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    def run(self) -> int:
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self.result = self.run()
        except BaseException as exc:  # noqa: BLE001 - kept for whoever joins
            self.error = exc
            log.error("%s ended: %s", self.name, exc, exc_info=not hasattr(exc, "fix"))

    def stop(self) -> None:
        self.stop_event.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when it has ended."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def stop_on_signals(stop: Callable[[], None]) -> None:
    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def settle_heap() -> None:
    """Set aside everything start-up made (modules, configuration, connections) from the
    garbage collector's scans, as a long-running program should once it is ready: CPython's
    full collection walks every live container, and a target draining a backlog holds
    thousands of decoded transactions at a time, which start such collections over and over.
    Measured on drains of 57-65k sysbench transactions: the target agent's collector took
    0.49-0.59 s of its 2.8-3.1 s of CPU before, 0.22 s after. Start-up's own garbage is not
    collected first: a target agent's start leaves about ten unreachable objects, and the full
    collection that would free them walks all ~30,000 (28 ms on a 2-vCPU EPYC guest, a tenth
    of the agent's start)."""
    gc.freeze()


@contextmanager
def collection_deferred() -> Iterator[None]:
    """No automatic garbage collection while one unit of work runs (a target's group of
    transactions or part of a large one, a turn of the hub). The unit's objects (decoded
    transactions, rows) live until it ends and are then freed by reference counting;
    collections meanwhile would only walk them again and again (a target spent 14 % of its
    CPU in the collector on a 1M-row transaction, and 8 % draining a backlog). Cycles made
    meanwhile wait for the next collection.

    The collector is the process's, and units on several threads overlap (a target's apply
    worker per origin): it is off from the first of them until the last one ends, not back on
    when the first ends while others still run."""
    global _deferring, _enabled_before
    with _deferring_lock:
        if _deferring == 0:
            _enabled_before = gc.isenabled()
            gc.disable()
        _deferring += 1
    try:
        yield
    finally:
        with _deferring_lock:
            _deferring -= 1
            if _deferring == 0 and _enabled_before:
                gc.enable()


_deferring = 0  # units running now with collection deferred
_enabled_before = True  # whether the collector was on when the first of them began
_deferring_lock = threading.Lock()


class CollectionPause:
    """`collection_deferred` held across units of work that follow one another, at most
    `most` seconds at a time: a draining target's next group, decoded ahead while the server
    worked, is alive when a group ends, so re-enabling the collector there set off a
    collection that walked it, once per group. One per thread that runs units."""

    def __init__(self, most: float) -> None:
        self.most = most
        self._held = ExitStack()
        self._since: float | None = None

    @contextmanager
    def unit(self, more: Callable[[], bool]) -> Iterator[None]:
        """One unit with collection deferred; still deferred after it while `more()` says
        another unit is waiting and the pause is younger than `most`."""
        if self._since is None:
            self._held.enter_context(collection_deferred())
            self._since = time.monotonic()
        try:
            yield
        finally:
            if not more() or time.monotonic() - self._since >= self.most:
                self.end()

    def end(self) -> None:
        """Collection back on (as far as this pause is concerned)."""
        self._held.close()
        self._since = None


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
