"""The origin role: read the binlog in a thread and ship whole transactions to the hub.

The binlog is the outbox: nothing is copied locally. A capture thread (`Capture`, a RunLoop)
reads transactions, and parts of large ones, packs them and puts them in a bounded in-memory
queue; the agent's loop packs them into BATCH messages, at most WINDOW unacknowledged at once.
Only full BATCHes are pipelined: while one is unacknowledged, a partial one waits for the ACK
(Nagle's rule), so under a steady OLTP load each BATCH carries what arrived during a round trip
to the hub instead of one transaction — a round trip of latency at most, and a quiet stream
(nothing in flight) ships at once.
After a reconnect the capture restarts from the position the hub says it holds durably; what
was in flight is simply read again and the hub drops the duplicates. A restart never blocks
the agent's loop: each run has a generation, and what an old run still produces is dropped.
The new run's thread does wait for the old one's to end before it connects (at most
PREVIOUS_WAIT): both read the binlog with one server_id, so the server lets only one of them
stay, and python-mysql-replication reconnects a dropped stream by itself. The two used to
take turns throwing each other out, and the new one halted on MySQL error 4052 ("A slave
with the same server_uuid/server_id as this slave has connected").

Capture halts — it does not skip — at what it must not pass by itself (CaptureHalted from the
reader, a part too large for a message, a position the binlog no longer has). The role keeps
the halt and reports it (HALTED, and in every HELLO) until the hub moves capture on
(`binlogsync capture-skip`, which makes the agent say HELLO and resume elsewhere). Other
errors (the origin server unreachable, a setting fixed meanwhile) are retried with back-off.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..capture.failover import choose
from ..capture.positions import current_position, earliest_position, gtid_at
from ..capture.preflight import check_origin
from ..capture.reader import BinlogReader
from ..codec import pack
from ..config import OriginConfig
from ..errors import BinlogsyncError, CaptureHalted, PreflightError
from ..frozen import maker
from ..metrics import ClientMetrics
from ..model import Part, Transaction
from ..position import Position
from ..runloop import Backoff, RunLoop
from ..transport import frames
from ..transport.limits import FRAME_ROOM
from ..transport.link import HubLink

log = logging.getLogger("binlogsync.origin")

WINDOW = 8  # unacknowledged BATCH messages
# A stopped reader's thread ends at its next event or heartbeat (1 s), at once when its
# socket is shut (BinlogReader.stop); past its read timeout (10 s) and a connect (5 s) at worst.
PREVIOUS_WAIT = 20.0
BATCH_BYTES = 4 * 1024 * 1024  # bodies per BATCH (one larger body still goes alone)
_OUTBOX_ITEMS = 20_000  # captured items waiting to be shipped …
_OUTBOX_BYTES = 32 * 1024 * 1024  # … and their bytes: the reader waits beyond either


@dataclass(frozen=True, slots=True)
class Captured:
    generation: int
    last: Position | None  # the transaction's position; None for a part before the last
    body: bytes
    # (schema, table, Table_map body) in force from this item on: new to this run or
    # changed by DDL (BATCH `maps`, for the hub's binlog service)
    maps: tuple[tuple[str, str, bytes], ...] = ()


_make_captured = maker(Captured)  # one per transaction captured (frozen.py)


class Capture(RunLoop):
    """One run of the binlog reader from `resume`, on its own thread."""

    name = "capture"

    def __init__(
        self, role: OriginRole, resume: Position, generation: int, previous: Capture | None
    ) -> None:
        super().__init__()
        self.role, self.resume, self.generation = role, resume, generation
        self.previous = previous  # the run before, stopped: its reader must be gone first
        self.reader: BinlogReader | None = None

    def stop(self) -> None:
        super().stop()
        reader = self.reader
        if reader is not None:
            reader.stop()

    def run(self) -> int:
        role, config = self.role, self.role.config
        # With candidates, a lost primary is checked for again soon: a promoted replica is
        # taken as soon as it qualifies (failover.py).
        backoff = Backoff(0.5, 5.0 if config.candidates else 30.0)
        position = self.resume
        checked = False
        limit = role.max_message_bytes - FRAME_ROOM
        if not self._previous_ended():
            return 0
        while not self.stopping:
            try:
                if not checked:
                    position = self._by_gtid(position)
                    if config.candidates:
                        role.database = choose(config.servers, role.database, position)
                    check_origin(role.database, config.server_id, config.tables, position)
                    checked = True
                    role.clear_halt(self.generation)
                self.reader = BinlogReader(
                    role.database,
                    config.server_id,
                    position,
                    config.tables,
                    part_rows=config.part_rows,
                    part_bytes=config.part_bytes,
                )
                if self.stopping:
                    return 0
                for item in self.reader.transactions():
                    body = pack(item.to_wire(packing=True))
                    if len(body) > limit:
                        raise _too_large(item, len(body), role.max_message_bytes, position)
                    last = item.position if isinstance(item, Transaction) else item.end
                    maps = tuple(self.reader.take_maps())
                    if not role.put(_make_captured(self.generation, last, body, maps), self):
                        return 0
                    if last is not None:
                        position = last
                        role.metrics.captured.inc()
                backoff.reset()
            except CaptureHalted as exc:
                role.halt(exc, self.generation)
                return 1
            except BinlogsyncError as exc:
                if self.stopping:
                    return 0
                delay = backoff.next()
                if isinstance(exc, PreflightError):
                    role.halt(exc, self.generation, retry_in=delay)
                else:
                    log.warning("capture interrupted (%s); retrying in %.1f s", exc, delay)
                self.stop_event.wait(delay)
                checked = False
            finally:
                if self.reader is not None:
                    self.reader.close()
                    self.reader = None
        return 0

    def _previous_ended(self) -> bool:
        """Wait for the run before this one to end (module doc); False: this one was stopped."""
        previous, self.previous = self.previous, None
        if previous is None:
            return True
        deadline = time.monotonic() + PREVIOUS_WAIT
        while not previous.join(0.05):
            if self.stopping:
                return False
            if time.monotonic() > deadline:
                log.warning(
                    "the previous capture run has not ended after %.0f s; starting anyway",
                    PREVIOUS_WAIT,
                )
                break
        return not self.stopping

    def _by_gtid(self, position: Position) -> Position:
        """A binlog file position on a server with MariaDB GTIDs (stored by an older version)
        becomes the GTID state there, converted on that server (positions.gtid_at: checked,
        or refused with what to do); capture then goes on by GTID. The hub's log and the
        targets' checkpoints cross over at that point (position.py)."""
        if position.by_gtid:
            return position
        converted = gtid_at(self.role.database, position)
        if converted is None:
            return position  # no MariaDB GTIDs: file positions it is
        log.warning(
            "the resume position %s is in binlog-file form (stored by an older version); on "
            "%s it is the GTID state %s, and capture continues by GTID from there",
            position,
            self.role.database,
            converted.gtid or "(empty)",
        )
        return converted


def _too_large(
    item: Transaction | Part, size: int, limit: int, position: Position
) -> CaptureHalted:
    where = item.position if isinstance(item, Transaction) else item.begin
    return CaptureHalted(
        f"capture stopped at {where}: one row event of that transaction packs to {size} bytes, "
        f"over max_message_bytes ({limit})",
        "raise max_message_bytes on the hub and on every client (it must exceed the largest "
        "row), then restart the agents",
        position=position,
        at=str(where),
    )


class OriginRole:
    def __init__(
        self,
        name: str,
        config: OriginConfig,
        metrics: ClientMetrics,
        wake: Callable[[], None],
        max_message_bytes: int,
    ) -> None:
        self.name, self.config, self.metrics, self.wake = name, config, metrics, wake
        self.database = config.database  # the server capture reads now (failover.py)
        self.max_message_bytes = max_message_bytes
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self.outbox: deque[Captured] = deque()
        self.outbox_bytes = 0
        self.generation = 0
        self.capture: Capture | None = None
        self.resume: Position | None = None
        self.acked: Position | None = None
        self.inflight: deque[tuple[int, int]] = deque()  # seq, items
        self.next_seq = 1
        self.first_seq = 1  # ACKs below this answer batches of an earlier run
        self.halted: dict[str, Any] | None = None
        self.halt_sent = True  # the hub knows the current halt state (halted or not)
        self.shipped: Position | None = None  # the last transaction shipped in this run
        self.stalled = False  # a BATCH could not be sent: nothing more until a restart

    # -- HELLO ---------------------------------------------------------------------------------
    def positions(self) -> tuple[Position | None, Position | None, Position | None]:
        """(start, oldest, current) binlog positions for HELLO: where a never-seen origin
        starts (origin.start), the oldest the binlog still has, and where it ends now. Blocks
        on the origin (call it off the agent's loop); None where it cannot be read now."""
        db = self.database
        try:
            current = current_position(db)
            oldest = earliest_position(db)
        except BinlogsyncError as exc:
            log.warning("cannot read the origin's binlog positions yet: %s", exc)
            return None, None, None
        start = current if self.config.start == "current" else oldest
        return start, oldest, current

    # -- the capture thread --------------------------------------------------------------------
    def start(self, resume: Position) -> None:
        """(Re)start capture after `resume`; never waits here for the previous run to end
        (its successor's thread does, module doc)."""
        previous = self.capture
        self.stop()
        with self._lock:
            self.generation += 1
            self.outbox.clear()
            self.outbox_bytes = 0
            self.halt_sent = self.halted is None
            self.halted = None
            self.resume = self.acked = self.shipped = resume
            self.stalled = False
            self.inflight.clear()
            self.first_seq = self.next_seq
            self.capture = Capture(self, resume, self.generation, previous)
        self.capture.start()

    def stop(self) -> None:
        capture, self.capture = self.capture, None
        if capture is not None:
            capture.stop()
            with self._room:
                self._room.notify_all()

    def close(self, timeout: float = 10.0) -> None:
        capture = self.capture
        self.stop()
        if capture is not None and not capture.join(timeout):
            log.warning("the capture thread did not stop within %.0f s", timeout)

    def put(self, item: Captured, capture: Capture) -> bool:
        """Queue a captured item, waiting for room; False when this run was stopped."""
        with self._room:
            while (
                len(self.outbox) >= _OUTBOX_ITEMS or self.outbox_bytes >= _OUTBOX_BYTES
            ) and not capture.stopping:
                self._room.wait(0.5)
            if capture.stopping or item.generation != self.generation:
                return False
            self.outbox.append(item)
            self.outbox_bytes += len(item.body)
            # With a BATCH in flight its ACK wakes the loop, which then ships (see ship()).
            size = len(item.body)
            wake = (len(self.outbox) == 1 and not self.inflight) or (
                len(self.outbox) == self.config.batch_transactions
                or self.outbox_bytes - size < BATCH_BYTES <= self.outbox_bytes
            )
        if wake:
            self.wake()
        return True

    def halt(self, error: BinlogsyncError, generation: int, retry_in: float | None = None) -> None:
        """Capture cannot go on by itself: keep the reason for status (HALTED, HELLO)."""
        if generation != self.generation:
            return
        text = str(error)
        if not text.startswith("capture stopped"):  # CaptureHalted says so already
            text = f"capture stopped: {text}"
        info: dict[str, Any] = {
            "error": text[: frames.MAX_STRING],
            "position": getattr(error, "position", None) or self.acked,
            "at": getattr(error, "at", "") or "",
            "end": getattr(error, "end", None),
        }
        if retry_in is not None:
            info["error"] += f" (retrying in {retry_in:.0f} s)"
        with self._lock:
            changed = self.halted is None or self.halted["error"] != info["error"]
            self.halted, self.halt_sent = info, self.halt_sent and not changed
        if changed:
            log.error("%s", error)
        self.wake()

    def clear_halt(self, generation: int) -> None:
        """Capture got going again (a setting was fixed): the hub hears that the halt is over."""
        with self._lock:
            if generation == self.generation and self.halted is not None:
                self.halted, self.halt_sent = None, False
                log.info("capture runs again")

    def halt_header(self) -> dict[str, Any] | None:
        with self._lock:
            if self.halted is None:
                return None
            info = dict(self.halted)
        return {
            **info,
            "position": info["position"].to_json() if info["position"] else None,
            "end": info["end"].to_json() if info["end"] else None,
        }

    # -- shipping ------------------------------------------------------------------------------
    def ship(self, link: HubLink) -> int:
        """Send what capture has produced as BATCH messages within the window; report a halt."""
        shipped = 0
        if not self.halt_sent:
            header = self.halt_header() or {"error": "", "position": None, "at": "", "end": None}
            if link.send(frames.HALTED, {"origin": self.name, **header}):
                self.halt_sent = True
        while len(self.inflight) < WINDOW and not self.stalled:
            if self.inflight and not self._full():
                break  # Nagle: this partial BATCH goes when the one in flight is acknowledged
            # The hub's limit may be below BATCH_BYTES (its WELCOME says): a BATCH over it
            # would be refused, or its socket would drop the connection, again and again.
            limit = min(BATCH_BYTES, self.max_message_bytes - FRAME_ROOM)
            with self._room:
                bodies: list[bytes] = []
                maps: list[list[Any]] = []  # [body index, schema, table, Table_map body]
                size = 0
                last = self.shipped
                while self.outbox and len(bodies) < self.config.batch_transactions:
                    item = self.outbox[0]
                    if bodies and size + len(item.body) + frames.BODY_FRAMING > limit:
                        break
                    self.outbox.popleft()
                    self.outbox_bytes -= len(item.body)
                    if item.generation == self.generation:
                        maps.extend([len(bodies), *m] for m in item.maps)
                        bodies.append(item.body)
                        size += len(item.body) + frames.BODY_FRAMING
                        last = item.last or last
                self._room.notify_all()
            if not bodies:
                break
            seq = self.next_seq
            self.next_seq += 1
            batch: dict[str, Any] = {"origin": self.name, "seq": seq, "after": self.shipped}
            if maps:
                batch["maps"] = maps
            if not link.send(frames.BATCH, batch, bodies):
                # No connection: what was taken is read again after the next WELCOME; until
                # then nothing later may go out, or the hub would see a gap.
                self.stalled = True
                break
            self.shipped = last
            self.inflight.append((seq, len(bodies)))
            shipped += len(bodies)
        return shipped

    def _full(self) -> bool:
        """Whether the outbox holds a full BATCH (by count or by bytes)."""
        return len(self.outbox) >= self.config.batch_transactions or (
            self.outbox_bytes >= BATCH_BYTES
        )

    def acknowledged(self, seq: int, upto: Position) -> None:
        if seq < self.first_seq:
            return  # an answer to a batch of an earlier run
        count = 0
        while self.inflight and self.inflight[0][0] <= seq:
            count += self.inflight.popleft()[1]
        if self.acked is None or upto > self.acked:
            self.acked = upto
        self.metrics.acknowledged.inc(count)
