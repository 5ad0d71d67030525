"""The target role: apply what the hub delivers, one worker thread per origin.

A worker (`ApplyWorker`, a RunLoop) takes the deliveries queued for its origin, groups up to
`group_transactions` of them (and GROUP_BYTES of their bodies) into one target transaction
(Applier.apply), and reports APPLIED with the new checkpoint. When a transaction cannot be
applied, the worker reports FAILED, waits (back-off) and tries again; it never skips one by
itself. A repair or seed chunk that arrives meanwhile is applied before the next attempt (it
may bring what the failing one lacks: a table, a Redis target's table definition).
`binlogsync skip` moves the checkpoint past it, which the next attempt sees. One origin's
failure does not stop the others.

A transaction that arrives in parts (one part per delivery) is streamed into one target
transaction (Applier.apply_part); each part is acknowledged so the hub may send the next, and
the checkpoint moves with the last. If it fails half-way, nothing of it was kept and the parts
are gone from memory, so the worker asks the hub to send them again (FAILED `resend`) after
its back-off.

A seed's later chunks, on a MariaDB/MySQL target, are applied side by side on
`seed_connections` more connections (`_side_by_side`, Target.repair_in_lane), each still one
target transaction; the answers go back in order.

Deliveries are decoded on the worker, not on the agent's loop, and each names the position it
continues from (`after`): one that does not continue what the worker has — left over from
before a re-send — is dropped, so nothing is ever applied across a gap.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import queue
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from .. import idle
from ..apply.core import Target, failed_at
from ..apply.store import open_store, require
from ..codec import unpack
from ..config import TargetConfig
from ..engines.base import StaleStream
from ..engines.mariadb import checkpoint
from ..errors import BinlogsyncError, ProtocolError
from ..metrics import ClientMetrics
from ..model import ROW_KINDS, Part, Transaction, body_from_wire
from ..position import Position
from ..runloop import Backoff, CollectionPause, RunLoop

log = logging.getLogger("binlogsync.target")


@dataclass(frozen=True)
class Delivery:
    seq: int
    upto: Position | None  # None only for a part of a transaction whose end is not known yet
    after: Position | None
    bodies: tuple[bytes, ...]
    generation: int
    part: int = 0  # > 0: this delivery is that part of the transaction ending at `upto`
    repair: bool = False  # source row images read at `upto`: applied alone, checkpoint := upto
    ts: float | None = None  # commit time of its oldest transaction
    seed: bool = False  # a repair that is a seed's chunk (a target with no checkpoint takes it)
    reset: bool = False  # a seed's first chunk of a whole reseed: checkpoint := upto, even ahead

    @property
    def at(self) -> Position:
        """`upto`, of a delivery that has one (all but a part that came before its end)."""
        assert self.upto is not None
        return self.upto


_RESEND_AFTER = 5.0  # seconds without a usable delivery after dropping one
# A group stops taking deliveries once their bodies reach this (so at most this plus one
# DELIVER_BYTES): decoded, a group takes about 3.7 times its bytes in Python objects, and a
# group of wide rows must not take a target agent's memory where 4,000 of sysbench's
# transactions (1.3 kB each, 5.1 MiB) stay well under it.
GROUP_BYTES = 16 * 1024 * 1024
# Seconds the lanes' connections stay open after a seed's last chunk: a seed's chunks come
# back to back, and one origin's idle lanes should not hold the target's connections for ever.
LANES_IDLE = 60.0


def _lower(a: Position | None, b: Position) -> Position:
    """The lower of two checkpoints (None: none yet)."""
    return b if a is None or b.key < a.key else a


@dataclass(frozen=True)
class Outcome:
    origin: str
    seq: int
    upto: Position | None  # new checkpoint when applied
    error: str = ""
    position: Position | None = None  # the transaction that failed
    retry_in: float = 0.0
    repair: bool = False
    done: bool = True  # False: a part was applied, the checkpoint has not moved yet
    resend: bool = False  # the hub must send again from the checkpoint
    generation: int = 0  # of the delivery it answers; an older one is not reported


class ApplyWorker(RunLoop):
    def __init__(
        self,
        origin: str,
        config: TargetConfig,
        metrics: ClientMetrics,
        report: Callable[[Outcome], None],
        max_message_bytes: int,
        epoch: str | None,
        generation: int,
    ) -> None:
        super().__init__()
        self.name = f"apply-{origin}"
        self.origin, self.config, self.metrics, self.report = origin, config, metrics, report
        self.max_message_bytes = max_message_bytes
        self.queue: queue.Queue[Delivery] = queue.Queue()
        self.generation = generation
        self.held: Delivery | None = None  # taken while grouping, applied next
        self.expect: Position | None = None  # deliveries must continue from here (None: any)
        self._expect_generation = generation
        self.pending_since: float | None = None  # commit time of the oldest unapplied change
        self.applier = open_store(config, origin, epoch)
        # More appliers of this origin, each its own connection and thread, for a seed's chunks
        # side by side (`_side_by_side`); made when a seed first needs them.
        self.lanes: list[Target] = []
        self._lane_pool: ThreadPoolExecutor | None = None
        self._lanes_used_at = 0.0
        self.backoff = Backoff(config.retry_initial, config.retry_max)
        self.failures = 0
        # When this worker first dropped a delivery it could not use (not continuing what it
        # has) since the last one it used; see _resend_if_stuck.
        self.dropped_at: float | None = None
        self.failing_since: float | None = None
        # Bodies decoded ahead while the target's server worked (`_decode_ahead`): by the
        # delivery's id, the delivery (kept, so the id stays its), its bodies' bytes and what
        # is decoded of it.
        self._ahead: dict[int, tuple[Delivery, int, list[Transaction | Part]]] = {}
        metrics.lag.labels(origin).set_function(self.lag)

    def lag(self) -> float:
        """Seconds since the origin committed the oldest change not applied here yet."""
        since = self.pending_since
        if since is None:
            try:
                since = self.queue.queue[0].ts if self.queue.queue else None
            except IndexError:
                since = None
        return max(0.0, time.time() - since) if since else 0.0

    def reset(self, epoch: str | None, generation: int) -> None:
        """The link was re-established: the hub re-sends everything after our checkpoint."""
        self.generation = generation
        self.applier.epoch = epoch
        for lane in self.lanes:
            lane.epoch = epoch

    def close(self, timeout: float = 10.0) -> None:
        """Stop and wait up to `timeout`. A worker still inside the database then (a lock
        wait, a hung server) keeps its connection: closing it from here would wait for that
        call to end, and the applier is not thread-safe. Its transaction is rolled back when
        the connection goes with the process."""
        self.stop()
        if not self.join(timeout):
            log.warning(
                "the apply worker of %s did not stop within %.1f s (busy in the target "
                "database); leaving it",
                self.origin,
                timeout,
            )
            return
        if self._lane_pool is not None:
            self._lane_pool.shutdown()
        for lane in self.lanes:
            lane.close()
        self.applier.close()

    # -- taking deliveries ---------------------------------------------------------------------
    def _accept(self, delivery: Delivery) -> bool:
        """Does `delivery` continue what this worker has (or will have once its group lands)?"""
        if delivery.generation != self.generation:
            return False  # from before a reconnect: the hub sends it again
        if self._expect_generation != delivery.generation:
            # After a reconnect the hub starts from the checkpoint the target reported.
            self._expect_generation, self.expect = delivery.generation, None
        after, expect = delivery.after, self.expect
        if delivery.repair or after is None or expect is None or after.key <= expect.key:
            if not delivery.part and not delivery.repair:
                if expect is None or delivery.at.key > expect.key:
                    self.expect = delivery.at
            return True
        log.debug(
            "dropped a delivery of %s after %s: it does not continue %s", self.origin, after, expect
        )
        self._dropped()
        return False

    def _next(self, timeout: float) -> Delivery | None:
        if self.held is not None:
            held, self.held = self.held, None
            return held
        while True:
            try:
                delivery = self.queue.get(timeout=timeout)
            except queue.Empty:
                return None
            if self._accept(delivery):
                return delivery
            timeout = 0.0

    def _take(self) -> list[Delivery]:
        first = self._next(0.2)
        if first is None:
            return []
        group, count, size = [first], len(first.bodies), sum(map(len, first.bodies))
        if first.part or first.repair:
            return group
        while not self._group_full(count, size):
            more = self._next(0.0)
            if more is None:
                break
            if more.part or more.repair:
                self.held = more
                break
            group.append(more)
            count += len(more.bodies)
            size += sum(map(len, more.bodies))
        return group

    def _back_off(self, delay: float) -> None:
        """Wait `delay` seconds before the next attempt, less when asked to stop or when a
        repair arrives (it goes before the next attempt: `_apply`). What the failed attempt
        left in cycles (an exception's frames) is collected first: collection is deferred
        while a group runs (`run`), and a group may fail for hours."""
        gc.collect()
        deadline = time.monotonic() + delay
        while not self.stop_event.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline or self._repair_queued():
                return

    def _current_repair(self, delivery: Delivery | None) -> bool:
        return delivery is not None and delivery.repair and delivery.generation == self.generation

    def _repair_queued(self) -> bool:
        if self._current_repair(self.held):
            return True
        with self.queue.mutex:
            return any(self._current_repair(d) for d in self.queue.queue)

    def _repair_waiting(self) -> Delivery | None:
        """Take the first repair held or queued for this worker (of the current link), if any."""
        held = self.held
        if self._current_repair(held):
            self.held = None
            return held
        with self.queue.mutex:
            queued: Delivery
            for queued in self.queue.queue:
                if self._current_repair(queued):
                    self.queue.queue.remove(queued)
                    return queued
        return None

    def _group_full(self, count: int, size: int) -> bool:
        """Whether a group of `count` transactions and `size` bytes of bodies takes no more."""
        return count >= self.config.group_transactions or size >= GROUP_BYTES

    def _decode(self, delivery: Delivery) -> list[Transaction | Part]:
        limit = self.max_message_bytes
        ahead = self._ahead.pop(id(delivery), None)
        done = ahead[2] if ahead is not None and ahead[0] is delivery else []
        rest = delivery.bodies[len(done) :]
        return done + [body_from_wire(unpack(b, limit, tuples=True)) for b in rest]

    def _whole(self, delivery: Delivery) -> bool:
        """Whether `delivery` carries whole transactions of this generation: the ones decoded
        ahead (the parts of a large transaction are not: theirs is the worker thread's way,
        each part's LOAD DATA beside the decoding of the next)."""
        return not (delivery.part or delivery.repair) and delivery.generation == self.generation

    def _next_is_whole(self) -> bool:
        try:
            return self._whole(self.queue.queue[0])
        except IndexError:
            return False

    _AHEAD_BODIES = 64  # bodies decoded per piece of idle work (about 0.7 ms of sysbench's)

    def _decode_ahead(self) -> bool:
        """One piece of idle work (idle.py): decode a few bodies of the whole
        transactions queued for the next group, as far as that group would take them. False
        when there is nothing more to decode."""
        limit, count, size = self.max_message_bytes, 0, 0
        with self.queue.mutex:
            queued = list(self.queue.queue)
        if len(self._ahead) > len(queued):  # some left the queue without a turn (dropped)
            live = set(map(id, queued))
            self._ahead = {k: v for k, v in self._ahead.items() if k in live}
        for delivery in queued:
            if not self._whole(delivery) or self._group_full(count, size):
                return False
            ahead = self._ahead.get(id(delivery))
            if ahead is None or ahead[0] is not delivery:
                ahead = (delivery, sum(map(len, delivery.bodies)), [])  # its size, once
                self._ahead[id(delivery)] = ahead
            count += len(delivery.bodies)
            size += ahead[1]
            done = ahead[2]
            if len(done) == len(delivery.bodies):
                continue
            try:
                for body in delivery.bodies[len(done) : len(done) + self._AHEAD_BODIES]:
                    done.append(body_from_wire(unpack(body, limit, tuples=True)))
            except ProtocolError:
                return False  # its own turn decodes it again and says so
            return True
        return False

    # -- the loop ------------------------------------------------------------------------------
    # How long collection stays deferred across groups that follow one another (`run`).
    DEFER_ACROSS_GROUPS_S = 1.0

    def run(self) -> int:
        """Apply groups until stopped, collection deferred while a group runs and across
        groups while more are queued, up to DEFER_ACROSS_GROUPS_S at a time
        (`runloop.CollectionPause`)."""
        idle.set_work(self._decode_ahead, self._next_is_whole)
        pause = CollectionPause(self.DEFER_ACROSS_GROUPS_S)
        try:
            while not self.stopping:
                self._close_idle_lanes()
                group = self._take()
                if not group:
                    pause.end()
                    self.pending_since = None
                    self._resend_if_stuck()
                    continue
                self.dropped_at = None
                self.pending_since = min((d.ts for d in group if d.ts), default=None)
                generation = self.generation
                with pause.unit(lambda: not self.queue.empty()):
                    try:
                        if group[0].repair:
                            self._repairs(group[0])
                        elif group[0].part:
                            self._part(group[0])
                        else:
                            self._apply(group, generation)
                    except ProtocolError as exc:
                        log.warning("dropped a malformed delivery of %s: %s", self.origin, exc)
                        self._failed(group[-1], exc, None, resend=True)
        finally:
            pause.end()
        return 0

    def _apply(self, group: list[Delivery], generation: int) -> None:
        txs: list[Transaction] = []
        for delivery in group:
            for item in self._decode(delivery):
                if not isinstance(item, Transaction):
                    raise ProtocolError("a part in a delivery of whole transactions")
                txs.append(item)
        while not self.stopping and self.generation == generation:
            try:
                checkpoint_now = self.applier.apply(txs, group[-1].upto)
            except BinlogsyncError as exc:
                failing = self._apply_before_failure(txs, exc)
                self._failed(group[-1], exc, failing)
                waiting = self._repair_waiting()
                if waiting is not None:
                    # A repair or seed chunk came while this group fails: it may bring what
                    # the group lacks (a table, a Redis target's definition), so it goes
                    # first, then the group is tried again.
                    self._repair(waiting, self._repair_body(waiting))
                continue
            self._succeeded(len(txs))
            self.report(Outcome(self.origin, group[-1].seq, checkpoint_now, generation=generation))
            return

    def _part(self, delivery: Delivery) -> None:
        items = self._decode(delivery)
        if len(items) != 1 or not isinstance(items[0], Part) or items[0].number != delivery.part:
            raise ProtocolError("a part delivery carries exactly that one part")
        part = items[0]
        if part.last and (delivery.upto is None or part.end != delivery.upto):
            raise ProtocolError("the last part's DELIVER names another end than the part")
        digest = hashlib.sha256(delivery.bodies[0]).digest()  # SHA-NI: 0.6 ms a MB here
        try:
            checkpoint_now = self.applier.apply_part(part, delivery.upto, digest)
        except StaleStream:
            log.debug("dropped part %d of %s: a re-send is coming", part.number, part.begin)
            self._dropped()
            return
        except BinlogsyncError as exc:
            self._failed(delivery, exc, failed_at(exc) or delivery.upto, resend=True)
            return
        if part.last:
            self.expect = delivery.upto
            self._succeeded(1)
            self.report(
                Outcome(self.origin, delivery.seq, checkpoint_now, generation=delivery.generation)
            )
        else:
            self.report(
                Outcome(self.origin, delivery.seq, None, done=False, generation=delivery.generation)
            )

    def _failed(
        self,
        delivery: Delivery,
        exc: BinlogsyncError,
        failing: Position | None,
        resend: bool = False,
    ) -> None:
        delay = self.backoff.next()
        self.failures += 1
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        self.metrics.apply_errors.labels(self.origin).inc()
        self.report(
            Outcome(
                self.origin,
                delivery.seq,
                None,
                str(exc),
                failing,
                delay,
                generation=delivery.generation,
            )
        )
        self._back_off(delay)
        if resend:
            # Everything queued meanwhile may belong to the part that failed: take only what
            # continues from the checkpoint, which the hub now sends again.
            self.expect = self.applier_checkpoint()
            self.held = None
            self.report(
                Outcome(
                    self.origin,
                    delivery.seq,
                    None,
                    str(exc),
                    failing,
                    delay,
                    resend=True,
                    generation=delivery.generation,
                )
            )

    def _dropped(self) -> None:
        if self.dropped_at is None:
            self.dropped_at = time.monotonic()

    def _resend_if_stuck(self) -> None:
        """Deliveries were dropped and nothing usable came since: the hub may be waiting for
        answers to exactly those (its window full) while this worker waits for the rest — both
        for ever. Ask it to send again from the checkpoint."""
        if self.dropped_at is None or time.monotonic() - self.dropped_at < _RESEND_AFTER:
            return
        self.dropped_at = None
        self.expect, self.held = self.applier_checkpoint(), None
        log.warning(
            "apply of %s: deliveries that did not continue what was applied were dropped and "
            "nothing else came for %.0f s; asking the hub to send again from the checkpoint",
            self.origin,
            _RESEND_AFTER,
        )
        self.report(
            Outcome(
                self.origin,
                0,
                None,
                "deliveries did not continue the checkpoint; sent again",
                self.expect,
                resend=True,
                generation=self.generation,
            )
        )

    def applier_checkpoint(self) -> Position | None:
        try:
            return self.applier.checkpoint()
        except BinlogsyncError:
            return self.expect

    def _succeeded(self, count: int) -> None:
        if self.failures:
            took = time.monotonic() - (self.failing_since or time.monotonic())
            log.info(
                "apply of %s recovered after %d failed attempt(s) in %.1f s",
                self.origin,
                self.failures,
                took,
            )
        self.failures, self.failing_since = 0, None
        self.backoff.reset()
        self.metrics.applied_from(self.origin).inc(count)

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

    def _repairs(self, first: Delivery) -> None:
        """A repair alone, or, on a target whose engine has lanes, a seed's chunks side by side
        (`_side_by_side`) for as long as they come."""
        tx = self._repair_body(first)
        if self._lane_ready(first, tx):
            self._side_by_side(first, tx)
        else:
            self._repair(first, tx)

    def _repair_body(self, delivery: Delivery) -> Transaction:
        txs = self._decode(delivery)
        if len(txs) != 1 or not isinstance(txs[0], Transaction):
            raise ProtocolError("a repair carries exactly one transaction")
        return txs[0]

    def _lane_ready(self, delivery: Delivery, tx: Transaction) -> bool:
        """A seed chunk of rows only (its table's first chunk, with the definition and the
        TRUNCATE, goes alone), to a target whose engine has lanes."""
        return (
            self.config.seed_connections > 1
            and self.applier.lanes
            and self._current_repair(delivery)
            and delivery.seed
            and not delivery.reset
            and all(c.kind in ROW_KINDS for c in tx.changes)
        )

    def _side_by_side(self, first: Delivery, tx: Transaction) -> None:
        """Seed chunks applied at once, one per lane: `seed_connections` more appliers of this
        origin, each its own connection and thread (Target.repair_in_lane). A free lane takes
        the next chunk as soon as it is queued; anything else that comes (a stream delivery, a
        plain repair) waits until every lane is done, so it stays in order.

        Each chunk is one target transaction, as alone. Answers go out in the chunks' order,
        each once its chunk and every one before it committed, with the lowest checkpoint any
        lane has returned so far: that is the checkpoint as it stands (the chunks only move it
        down, min(); the last to commit saw the others'), never above it. A chunk that fails
        in a lane (a lock wait or deadlock between lanes, a lost connection) stops the taking;
        once the lanes are idle it is applied again alone, and only an error there goes back
        to the hub."""
        count = self.config.seed_connections
        while len(self.lanes) < count:
            self.lanes.append(open_store(self.config, self.origin, self.applier.epoch))
        if self._lane_pool is None:
            self._lane_pool = ThreadPoolExecutor(count, thread_name_prefix=f"lane-{self.origin}")
        try:
            self._lanes_run(self._lane_pool, (first, tx))
        finally:
            self._lanes_used_at = time.monotonic()

    def _lanes_run(self, pool: ThreadPoolExecutor, first: tuple[Delivery, Transaction]) -> None:
        free = list(range(len(self.lanes)))
        in_flight: deque[tuple[Delivery, Transaction, int, Future[Position]]] = deque()
        lowest: Position | None = None
        taking: tuple[Delivery, Transaction] | None = first
        while taking is not None or in_flight:
            if taking is not None and free:
                delivery, chunk = taking
                lane = free.pop(0)
                future = pool.submit(self.lanes[lane].repair_in_lane, chunk, delivery.at, lane + 1)
                in_flight.append((delivery, chunk, lane, future))
                taking = None
            can_take = bool(free) and self.held is None and not self.stopping
            if can_take:
                taking = self._next_chunk(0.002 if in_flight else 0.0)
                if taking is not None:
                    continue
            if in_flight:
                wait([in_flight[0][3]], 0.005 if can_take else None)
            while in_flight and in_flight[0][3].done():
                delivery, chunk, lane, future = in_flight.popleft()
                free.append(lane)
                try:
                    applied = future.result()
                except BinlogsyncError as exc:
                    # Later chunks may be in flight still: they finish first, then this one
                    # goes alone, and all are answered in order (`_drain`).
                    self._drain(in_flight, (delivery, chunk, exc), lowest)
                    return
                lowest = _lower(lowest, applied)
                self.applier.checkpoint_moved()
                self._answer_repair(delivery, lowest, lowest)

    def _close_idle_lanes(self) -> None:
        if self.lanes and time.monotonic() - self._lanes_used_at > LANES_IDLE:
            for lane in self.lanes:
                lane.close()
            self.lanes.clear()  # the next seed opens them again
            log.info("closed the seed lanes of %s (idle)", self.origin)

    def _next_chunk(self, timeout: float) -> tuple[Delivery, Transaction] | None:
        """The next queued delivery if it is a seed chunk a lane takes; anything else is held
        for the loop, after the lanes."""
        more = self._next(timeout)
        if more is None:
            return None
        try:
            chunk = self._repair_body(more) if more.repair else None
        except ProtocolError:
            chunk = None  # reported in its own turn
        if chunk is None or not self._lane_ready(more, chunk):
            self.held = more
            return None
        return more, chunk

    def _drain(
        self,
        in_flight: deque[tuple[Delivery, Transaction, int, Future[Position]]],
        failed: tuple[Delivery, Transaction, BinlogsyncError],
        lowest: Position | None,
    ) -> None:
        """After a lane's chunk failed: wait for the others, then apply it and every later one
        that failed alone, and answer all in order."""
        wait([f for *_, f in in_flight])
        tried: list[tuple[Delivery, Transaction, Position | BinlogsyncError]] = [failed]
        for delivery, chunk, _, future in in_flight:
            try:
                tried.append((delivery, chunk, future.result()))
            except BinlogsyncError as exc:
                tried.append((delivery, chunk, exc))
        in_flight.clear()
        self.applier.checkpoint_moved()
        outcomes: list[Position | BinlogsyncError] = []
        for delivery, chunk, outcome in tried:
            if isinstance(outcome, BinlogsyncError):
                log.info(
                    "seed chunk of %s at %s failed beside others (%s); applying it alone",
                    self.origin, delivery.upto, outcome,
                )  # fmt: skip
                try:
                    outcome = self.applier.repair(chunk, delivery.at, seed=True)
                except BinlogsyncError as exc:
                    outcome = exc
            outcomes.append(outcome)
        for outcome in outcomes:
            if isinstance(outcome, Position):
                lowest = _lower(lowest, outcome)
        for (delivery, _, _), outcome in zip(tried, outcomes, strict=True):
            self._answer_repair(delivery, lowest, outcome)

    def _repair(self, delivery: Delivery, tx: Transaction) -> None:
        """A repair is tried once: a failure goes back to whoever asked for it."""
        try:
            checkpoint_now = self.applier.repair(
                tx, delivery.at, seed=delivery.seed, reset=delivery.reset
            )
        except BinlogsyncError as exc:
            self._answer_repair(delivery, None, exc)
            return
        self._answer_repair(delivery, checkpoint_now, checkpoint_now)

    def _answer_repair(
        self,
        delivery: Delivery,
        checkpoint_now: Position | None,
        outcome: Position | BinlogsyncError,
    ) -> None:
        if isinstance(outcome, BinlogsyncError):
            self.report(
                Outcome(
                    self.origin,
                    delivery.seq,
                    None,
                    str(outcome),
                    None,
                    0.0,
                    True,
                    generation=delivery.generation,
                )
            )
            return
        self.expect = checkpoint_now
        log.info("repair applied for %s; checkpoint back at %s", self.origin, checkpoint_now)
        self.report(
            Outcome(
                self.origin,
                delivery.seq,
                checkpoint_now,
                repair=True,
                generation=delivery.generation,
            )
        )


class TargetRole:
    def __init__(
        self,
        config: TargetConfig,
        metrics: ClientMetrics,
        wake: Callable[[], None],
        max_message_bytes: int,
    ) -> None:
        self.config, self.metrics, self.wake = config, metrics, wake
        self.max_message_bytes = max_message_bytes
        self.workers: dict[str, ApplyWorker] = {}
        self.outcomes: queue.Queue[Outcome] = queue.Queue()
        self.epoch: str | None = None
        self._generation = 0

    def _report(self, outcome: Outcome) -> None:
        self.outcomes.put(outcome)
        self.wake()

    @property
    def generation(self) -> int:
        return self._generation

    def checkpoints(self) -> dict[str, dict[str, object]]:
        """Every origin's checkpoint on the target, for HELLO (the target DB is the truth).

        Blocks on the target database (call it off the agent's loop); raises
        UnreachableError when it cannot be read, so that no HELLO claims "nothing applied"."""
        if self.config.kind == "auditlog":
            from ..apply.auditlog import checkpoints

            assert self.config.path is not None
            return checkpoints(self.config.path)
        require(self.config.kind)
        if self.config.kind == "postgresql":
            from ..engines.postgresql import checkpoints as pg_checkpoints

            return pg_checkpoints(
                self.config.url, self.config.database.password, self.config.database.tls
            )
        if self.config.kind == "redis":
            from ..apply.redisstore import checkpoints as redis_checkpoints

            return redis_checkpoints(
                self.config.url, self.config.database.password, self.config.database.tls
            )
        found = checkpoint.fetch_all(self.config.database)
        return {origin: c.to_json() for origin, c in found.items()}

    def deliver(self, origin: str, header: dict[str, Any], bodies: tuple[bytes, ...]) -> None:
        worker = self.workers.get(origin)
        if worker is None:
            worker = self.workers[origin] = ApplyWorker(
                origin,
                self.config,
                self.metrics,
                self._report,
                self.max_message_bytes,
                self.epoch,
                self._generation,
            )
            worker.start()
        part = header.get("part")
        repair = header.get("repair") is True
        if (repair or part) and len(bodies) != 1:
            log.warning("dropped a delivery of %d bodies (a part or repair has one)", len(bodies))
            return
        if header["upto"] is None and (repair or not part):
            log.warning("dropped a delivery without upto (only a part may come before its end)")
            return
        ts = header.get("ts")
        worker.queue.put(
            Delivery(
                header["seq"],
                header["upto"],
                header["after"],
                bodies,
                worker.generation,
                int(part) if isinstance(part, int) else 0,
                repair,
                float(ts) if isinstance(ts, int | float) else None,
                repair and header.get("seed") is True,
                repair and header.get("reset") is True,
            )
        )

    def reset(self, epoch: str | None) -> None:
        self.epoch = epoch
        self._generation += 1
        for worker in self.workers.values():
            worker.reset(epoch, self._generation)

    def drain(self) -> list[Outcome]:
        outcomes = []
        while True:
            try:
                outcomes.append(self.outcomes.get_nowait())
            except queue.Empty:
                return outcomes

    def close(self, timeout: float = 10.0) -> None:
        """Stop every worker, waiting at most `timeout` in all (not per worker)."""
        for worker in self.workers.values():
            worker.stop()
        deadline = time.monotonic() + timeout
        for worker in self.workers.values():
            worker.close(max(0.0, deadline - time.monotonic()))
