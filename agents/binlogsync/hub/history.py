"""The last hour of lag, kept in memory for the Airflow page's chart: per target and origin,
one sample every INTERVAL seconds (time, lag in seconds, backlog in transactions), at most
WINDOW seconds of them. Bounded by design: SAMPLES per pair, and pairs come from the routes.
Nothing is stored: a restarted hub starts a new hour.

The hub records from the numbers it already computes each second for its gauges; a STATUS
with `history: true` adds `history()` to the status map (`binlogsync status --json
--history`).
"""

from __future__ import annotations

from collections import deque
from typing import Any

INTERVAL = 10.0  # seconds between two samples of a pair
WINDOW = 3600.0  # seconds kept
SAMPLES = int(WINDOW / INTERVAL)


class LagHistory:
    def __init__(self, interval: float = INTERVAL, window: float = WINDOW) -> None:
        self.interval = interval
        self.window = window
        self._samples: dict[tuple[str, str], deque[tuple[float, float, int]]] = {}

    def record(self, now: float, target: str, origin: str, lag: float, backlog: int) -> bool:
        """Keep this sample unless the pair's last one is younger than `interval`; True when
        kept."""
        samples = self._samples.get((target, origin))
        if samples is None:
            samples = self._samples[(target, origin)] = deque(
                maxlen=max(1, int(self.window / self.interval))
            )
        elif now - samples[-1][0] < self.interval:
            return False
        samples.append((round(now, 3), round(max(0.0, lag), 3), int(backlog)))
        return True

    def to_json(self, now: float) -> dict[str, Any]:
        """The samples of the last `window` seconds before `now`, per pair, oldest first."""
        since = now - self.window
        return {
            "interval": self.interval,
            "window": self.window,
            "pairs": [
                {
                    "target": target,
                    "origin": origin,
                    "samples": [list(s) for s in samples if s[0] >= since],
                }
                for (target, origin), samples in sorted(self._samples.items())
            ],
        }
