"""The target role: apply what the hub delivers, one worker thread per origin.

A worker takes the deliveries queued for its origin, groups up to `group_transactions` of
them into one target transaction (Applier.apply), and reports APPLIED with the new checkpoint.
When a transaction cannot be applied, the worker reports FAILED, waits (back-off) and tries
again; it never skips one by itself. `binlogsync skip` moves the checkpoint past it, which
the next attempt sees. One origin's failure does not stop the others.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..apply import checkpoint
from ..apply.applier import Applier, failed_at
from ..config import TargetConfig
from ..errors import BinlogsyncError
from ..metrics import ClientMetrics
from ..model import Transaction
from ..position import Position
from ..runloop import Backoff

log = logging.getLogger("binlogsync.target")


@dataclass(frozen=True)
class Delivery:
    seq: int
    upto: Position
    transactions: list[Transaction]
    generation: int
    repair: bool = False  # source row images read at `upto`: applied alone, checkpoint := upto


@dataclass(frozen=True)
class Outcome:
    origin: str
    seq: int
    upto: Position | None  # new checkpoint when applied
    error: str = ""
    position: Position | None = None  # the transaction that failed
    retry_in: float = 0.0
    repair: bool = False


class ApplyWorker:
    def __init__(
        self,
        origin: str,
        config: TargetConfig,
        metrics: ClientMetrics,
        report: Callable[[Outcome], None],
    ) -> None:
        self.origin, self.config, self.metrics, self.report = origin, config, metrics, report
        self.queue: queue.Queue[Delivery] = queue.Queue()
        self.generation = 0
        self.held: Delivery | None = None  # a repair taken while grouping: applied next
        self.stopping = threading.Event()
        self.applier = Applier(config.database, origin)
        self.thread = threading.Thread(target=self._run, name=f"apply-{origin}", daemon=True)
        self.thread.start()

    def reset(self) -> None:
        """The link was re-established: the hub re-sends everything after our checkpoint."""
        self.generation += 1

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.applier.close()

    def _take(self) -> list[Delivery]:
        if self.held is not None:
            first, self.held = self.held, None
        else:
            try:
                first = self.queue.get(timeout=0.2)
            except queue.Empty:
                return []
        group, count = [first], len(first.transactions)
        while count < self.config.group_transactions and not first.repair:
            try:
                more = self.queue.get_nowait()
            except queue.Empty:
                break
            if more.repair:
                self.held = more
                break
            group.append(more)
            count += len(more.transactions)
        return [d for d in group if d.generation == self.generation]

    def _apply_before_failure(
        self, txs: list[Transaction], exc: BinlogsyncError
    ) -> Position | None:
        """Commit the transactions before the failing one, so that the checkpoint stands just
        before it: then `binlogsync skip` at its position skips exactly that one."""
        failing = failed_at(exc)
        if failing is None:
            return None
        before = [tx for tx in txs if tx.position < failing]
        if before:
            try:
                self.applier.apply(before)
            except BinlogsyncError as again:
                log.warning("could not apply the transactions before %s: %s", failing, again)
        return failing

    def _repair(self, delivery: Delivery) -> None:
        """A repair is tried once: a failure goes back to whoever asked for it."""
        try:
            checkpoint = self.applier.repair(delivery.transactions[0], delivery.upto)
        except BinlogsyncError as exc:
            self.report(Outcome(self.origin, delivery.seq, None, str(exc), None, 0.0, True))
            return
        log.info("repair applied for %s; checkpoint back at %s", self.origin, checkpoint)
        self.report(Outcome(self.origin, delivery.seq, checkpoint, repair=True))

    def _run(self) -> None:
        backoff = Backoff(self.config.retry_initial, self.config.retry_max)
        while not self.stopping.is_set():
            group = self._take()
            while group and not self.stopping.is_set():
                if group[-1].generation != self.generation:
                    break  # re-sent after a reconnect; the old copies are dropped
                if group[0].repair:
                    self._repair(group[0])
                    break
                txs = [tx for d in group for tx in d.transactions]
                try:
                    checkpoint = self.applier.apply(txs, group[-1].upto)
                except BinlogsyncError as exc:
                    failing = self._apply_before_failure(txs, exc)
                    delay = backoff.next()
                    self.metrics.apply_errors.labels(self.origin).inc()
                    self.report(Outcome(self.origin, group[-1].seq, None, str(exc), failing, delay))
                    self.stopping.wait(delay)
                    continue
                backoff.reset()
                self.metrics.applied.labels(self.origin).inc(len(txs))
                if txs:
                    self.metrics.lag.labels(self.origin).set(
                        max(0.0, time.time() - txs[-1].timestamp)
                    )
                self.report(Outcome(self.origin, group[-1].seq, checkpoint))
                break


class TargetRole:
    def __init__(
        self, config: TargetConfig, metrics: ClientMetrics, wake: Callable[[], None]
    ) -> None:
        self.config, self.metrics, self.wake = config, metrics, wake
        self.workers: dict[str, ApplyWorker] = {}
        self.outcomes: queue.Queue[Outcome] = queue.Queue()

    def _report(self, outcome: Outcome) -> None:
        self.outcomes.put(outcome)
        self.wake()

    def checkpoints(self) -> dict[str, dict[str, object]]:
        """Every origin's checkpoint on the target, for HELLO (the target DB is the truth)."""
        try:
            found = checkpoint.fetch_all(self.config.database)
        except BinlogsyncError as exc:
            log.warning("cannot read the checkpoints: %s", exc)
            return {}
        return {origin: c.position.to_json() for origin, c in found.items()}

    def deliver(
        self, origin: str, seq: int, upto: Position, txs: list[Transaction], repair: bool = False
    ) -> None:
        worker = self.workers.get(origin)
        if worker is None:
            worker = self.workers[origin] = ApplyWorker(
                origin, self.config, self.metrics, self._report
            )
        if repair and len(txs) != 1:
            log.warning("dropped a repair delivery of %d transactions (expected 1)", len(txs))
            return
        worker.queue.put(Delivery(seq, upto, txs, worker.generation, repair))

    def reset(self) -> None:
        for worker in self.workers.values():
            worker.reset()

    def drain(self) -> list[Outcome]:
        outcomes = []
        while True:
            try:
                outcomes.append(self.outcomes.get_nowait())
            except queue.Empty:
                return outcomes

    def close(self) -> None:
        for worker in self.workers.values():
            worker.stop()
