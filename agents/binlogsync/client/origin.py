"""The origin role: read the binlog in a thread and ship whole transactions to the hub.

The binlog is the outbox: nothing is copied locally. The reader thread sends each committed
transaction's bytes over an inproc socket to the agent's loop, which packs them into BATCH
messages, at most `window` unacknowledged at once. After a reconnect the thread is restarted
from the position the hub says it holds durably; what was in flight is simply read again and
the hub drops the duplicates.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

import zmq

from ..capture.positions import current_position, earliest_position
from ..capture.preflight import check_origin
from ..capture.reader import BinlogReader
from ..codec import pack
from ..config import OriginConfig
from ..errors import BinlogsyncError
from ..metrics import ClientMetrics
from ..model import Transaction
from ..position import Position
from ..runloop import Backoff
from ..transport import frames
from ..transport.link import HubLink

log = logging.getLogger("binlogsync.origin")

WINDOW = 8  # unacknowledged BATCH messages
_OUTBOX_MAX = 20_000  # captured transactions waiting to be shipped


class OriginRole:
    def __init__(
        self, name: str, config: OriginConfig, context: zmq.Context, metrics: ClientMetrics
    ) -> None:
        self.name, self.config, self.context, self.metrics = name, config, context, metrics
        # The reader thread appends to `outbox` and rings the doorbell only when the loop has
        # said (`armed`) that it found the outbox empty and will sleep: one socket message per
        # wake-up instead of one per transaction.
        self.outbox: deque[tuple[Position, bytes]] = deque()
        self.armed = False
        self.room = threading.Event()
        self.endpoint = f"inproc://capture-{id(self)}"
        self.pull = context.socket(zmq.PULL)
        self.pull.linger = 0
        self.pull.bind(self.endpoint)
        self.thread: threading.Thread | None = None
        self.reader: BinlogReader | None = None
        self.stopping = threading.Event()
        self.fatal: BinlogsyncError | None = None
        self.acked: Position | None = None
        self.inflight: deque[tuple[int, Position, int]] = deque()  # seq, last, count
        self.next_seq = 1

    # -- start and stop the reader thread ------------------------------------------------------
    def start_position(self) -> Position | None:
        """Where a never-seen origin starts (sent in HELLO; the hub keeps the first one)."""
        try:
            db = self.config.database
            return current_position(db) if self.config.start == "current" else earliest_position(db)
        except BinlogsyncError as exc:
            log.warning("cannot read the origin's binlog position yet: %s", exc)
            return None

    def start(self, resume: Position) -> None:
        self.stop()
        self.acked = resume
        self.inflight.clear()
        self.stopping.clear()
        self.thread = threading.Thread(
            target=self._read, args=(resume,), name="capture", daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.reader is not None:
            self.reader.stop()
        self.room.set()  # a thread waiting for room in the outbox sees `stopping`
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        # What the thread captured but we never shipped is dropped: it is read again after
        # the restart, from the position the hub acknowledged.
        self.outbox.clear()
        self._silence_doorbell()

    def close(self) -> None:
        self.stop()
        self.pull.close(linger=0)

    def _read(self, resume: Position) -> None:
        push = self.context.socket(zmq.PUSH)
        push.linger = 0
        push.connect(self.endpoint)
        backoff = Backoff(0.5, 10.0)
        position = resume
        first = True
        try:
            while not self.stopping.is_set():
                try:
                    if first:
                        check_origin(
                            self.config.database, self.config.server_id, self.config.tables, resume
                        )
                        first = False
                    self.reader = BinlogReader(
                        self.config.database,
                        self.config.server_id,
                        position,
                        self.config.tables,
                        part_rows=1 << 62,  # parts travel once the hub stores them (next commit)
                        part_bytes=1 << 62,
                    )
                    for tx in self.reader.transactions():
                        assert isinstance(tx, Transaction)
                        while len(self.outbox) >= _OUTBOX_MAX and not self.stopping.is_set():
                            self.room.clear()  # the window is closed; wait for the loop
                            self.room.wait(0.2)
                        self.outbox.append((tx.position, pack(tx.to_wire())))
                        if self.armed:
                            self.armed = False
                            try:
                                push.send(b"", zmq.NOBLOCK)
                            except zmq.Again:
                                pass  # a ring is already waiting
                        position = tx.position
                        self.metrics.captured.inc()
                        if self.stopping.is_set():
                            break
                    backoff.reset()
                except BinlogsyncError as exc:
                    if not exc.retryable:
                        log.error("capture stopped: %s", exc)
                        self.fatal = exc
                        return
                    delay = backoff.next()
                    log.warning("capture interrupted (%s); retrying in %.1f s", exc, delay)
                    self.stopping.wait(delay)
                finally:
                    if self.reader is not None:
                        self.reader.close()
                        self.reader = None
        finally:
            push.close(linger=0)

    # -- shipping ----------------------------------------------------------------------------
    def can_send(self) -> bool:
        return self.thread is not None and len(self.inflight) < WINDOW

    def _silence_doorbell(self) -> None:
        while True:
            try:
                self.pull.recv(zmq.NOBLOCK)
            except zmq.Again:
                return

    def ship(self, link: HubLink) -> int:
        """Send what the reader has produced, as BATCH messages within the window."""
        self._silence_doorbell()
        shipped = 0
        while self.can_send():
            if not self.outbox:
                # Arm first, then look again: a transaction appended in between is either
                # seen now or rings the doorbell.
                self.armed = True
                if not self.outbox:
                    break
            bodies: list[bytes] = []
            last: Position | None = None
            while self.outbox and len(bodies) < self.config.batch_transactions:
                last, body = self.outbox.popleft()
                bodies.append(body)
            assert last is not None
            seq = self.next_seq
            self.next_seq += 1
            link.send(frames.BATCH, {"origin": self.name, "seq": seq}, bodies)
            self.inflight.append((seq, last, len(bodies)))
            shipped += len(bodies)
        if len(self.outbox) < _OUTBOX_MAX:
            self.room.set()
        return shipped

    def acknowledged(self, seq: int, upto: Position) -> None:
        count = 0
        while self.inflight and self.inflight[0][0] <= seq:
            count += self.inflight.popleft()[2]
        if self.acked is None or upto > self.acked:
            self.acked = upto
        self.metrics.acknowledged.inc(count)
