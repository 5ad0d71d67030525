"""Work an applying thread may do while its target's server works on a statement.

A target agent draining a backlog alternates: it decodes a group (Python, the GIL), then waits
while the server runs the group's bulk statements. The server needs nothing more of a LOAD
DATA LOCAL statement once its rows are sent but the empty packet that ends them, so the thread
that sent them can decode the next group's bodies meanwhile and end the statement after: the
server's work and the agent's overlap on one thread, with no second thread taking the GIL
from the one that talks to the server (docs/performance-history.md has the two ways with threads
that lost). The decoding is work the next group needs anyway; only its end waits a little longer.

`set_work(fn, ready)` registers, for the calling thread, a function that does one small piece
of such work and says whether it did any, and one that says cheaply whether there is any now
(`available`: where there is none, a statement keeps its usual way). `run(nbytes)` does pieces
for about as long as the server should take over `nbytes` of rows: an estimate that follows
what the server took before (`done`): a statement whose end was answered at once (the server
had finished) lowers it, one still being worked on raises it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

_local = threading.local()
_FIRST_PER_BYTE = 20e-9  # seconds of the server's work per byte of rows, until measured
_AT_ONCE = 0.0005  # an answer within this after the end: the server had finished before
_LONGEST = 0.5  # never keep a server waiting longer than this for a statement's end


def set_work(work: Callable[[], bool] | None, ready: Callable[[], bool] | None = None) -> None:
    """Register (None: remove) the calling thread's idle work; `ready` says cheaply whether
    there is any to do now (None: always)."""
    _local.work = work
    _local.ready = ready
    _local.per_byte = _FIRST_PER_BYTE
    _local.idled = 0.0
    _local.ended = 0.0
    _local.nbytes = 0


def available() -> bool:
    """Whether the calling thread has idle work to do now."""
    if getattr(_local, "work", None) is None:
        return False
    ready = _local.ready
    return ready is None or bool(ready())


def run(nbytes: int) -> None:
    """Do idle work for about the time the server needs for `nbytes` of rows just sent."""
    work = getattr(_local, "work", None)
    if work is None:
        return
    start = time.monotonic()
    deadline = start + min(_LONGEST, nbytes * _local.per_byte)
    now = start
    while now < deadline:
        did = work()
        now = time.monotonic()  # after the last piece too: `done` measures from its end
        if not did:
            break
    _local.idled, _local.ended, _local.nbytes = now - start, now, nbytes


def done() -> None:
    """The statement `run` idled for has been answered: adjust the estimate."""
    if getattr(_local, "work", None) is None or not _local.nbytes:
        return
    waited = time.monotonic() - _local.ended
    if waited < _AT_ONCE:
        _local.per_byte *= 0.8  # the server was done before the work was: do less next time
    else:
        took = (_local.idled + waited) / _local.nbytes
        _local.per_byte = 0.5 * _local.per_byte + 0.5 * took
    _local.nbytes = 0
