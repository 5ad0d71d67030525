"""Live writes on a MariaDB server from a background thread: the load that tests (and the dev
harness) run beside what they check.

A test says what one turn writes, `step(cursor, rng, n)` (n: the turns completed before), and
the writer runs turns until it leaves its `with` block: each in its own transaction when
`transaction` is set (BEGIN … COMMIT), else in autocommit; `pause` seconds between turns give
a steady pace (a pace, never a wait for anything). `done` counts completed turns. An error
ends the thread and is kept in `error`; leaving the block raises it, unless the test expects
its server to go away (`expect_error`).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

from .sandbox import Server

Step = Callable[[Any, random.Random, int], None]


class Writer:
    def __init__(
        self,
        server: Server,
        db: str,
        step: Step,
        seed: int = 7,
        transaction: bool = False,
        pause: float = 0.0,
        expect_error: bool = False,
    ) -> None:
        self.server, self.db, self.step = server, db, step
        self.rng = random.Random(seed)
        self.transaction, self.pause, self.expect_error = transaction, pause, expect_error
        self.done = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"writer-{db}", daemon=True)

    def _run(self) -> None:
        try:
            with self.server.connect(self.db) as conn, conn.cursor() as cur:
                while not self.stopping.is_set():
                    if self.transaction:
                        cur.execute("BEGIN")
                    self.step(cur, self.rng, self.done)
                    if self.transaction:
                        cur.execute("COMMIT")
                    self.done += 1
                    if self.pause:
                        self.stopping.wait(self.pause)
        except BaseException as exc:  # noqa: BLE001 - kept for the test (`__exit__`)
            self.error = exc

    def more_than(self, n: int) -> bool:
        """Whether more than `n` turns are done; a writer that failed fails the caller."""
        assert self.error is None or self.expect_error, self.error
        return self.done > n

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the writer did not stop within 60 s"
        if kind is None and not self.expect_error:
            assert self.error is None, self.error
