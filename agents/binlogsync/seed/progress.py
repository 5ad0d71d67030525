"""The seed's progress bar: one line per table with rows, rows/s and the time left.

On a terminal the line is redrawn in place as chunks are confirmed; otherwise (a log, an
Airflow task) a line is printed every `every` seconds and when the table is done.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 24


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def line(name: str, rows: int, total: int, rate: float, done: bool) -> str:
    """`name  [#####.....]  rows/total rows  N rows/s  ETA m:ss` (total is an estimate)."""
    total = max(total, rows)
    share = 1.0 if done or not total else rows / total
    filled = int(share * WIDTH)
    bar = "#" * filled + "." * (WIDTH - filled)
    left = 0.0 if done else ((total - rows) / rate if rate > 0 else None)
    when = f"done in {duration(None if rate <= 0 else rows / rate)}" if done else "ETA "
    if not done:
        when += duration(left)
    return f"{name:<32} [{bar}] {rows:>12,}/{total:,} rows  {rate:>10,.0f} rows/s  {when}"


class Progress:
    def __init__(self, out: TextIO | None = None, every: float = 5.0, quiet: bool = False) -> None:
        self.out = out if out is not None else sys.stderr
        self.tty = self.out.isatty()
        self.every, self.quiet = every, quiet
        self.name, self.total, self.rows, self.base = "", 0, 0, 0
        self.started = self.shown = 0.0

    def start(self, name: str, rows: int, total: int) -> None:
        """A table starts (or resumes with `rows` already applied)."""
        self.name, self.total, self.rows, self.base = name, total, rows, rows
        self.started = self.shown = time.monotonic()
        self._show(False)

    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return (self.rows - self.base) / elapsed if elapsed > 0 else 0.0

    def applied(self, rows: int) -> None:
        self.rows = rows
        now = time.monotonic()
        if self.tty or now - self.shown >= self.every:
            self.shown = now
            self._show(False)

    def finish(self) -> None:
        self._show(True)

    def note(self, text: str) -> None:
        if not self.quiet:
            self.out.write(("\r\x1b[K" if self.tty else "") + text + "\n")
            self.out.flush()

    def _show(self, done: bool) -> None:
        if self.quiet:
            return
        text = line(self.name, self.rows, self.total, self.rate(), done)
        if self.tty:
            self.out.write("\r\x1b[K" + text + ("\n" if done else ""))
        else:
            self.out.write(text + "\n")
        self.out.flush()
