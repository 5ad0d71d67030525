"""COM_BINLOG_DUMP: stream the virtual files to one subscriber, from where it asks.

As a MariaDB primary does (sql/sql_repl.cc), a dump starts with a fake Rotate naming the file
and position, then the file's Format_description (log_pos 0 when the dump starts inside the
file, so the replica does not count it), then the file's events from the position on; at the
end of a file its Rotate, then the next file's fake Rotate and Format_description. When
everything is sent it waits for the indexer, sending a Heartbeat every
@master_heartbeat_period; with the non-blocking flag (mariadb-binlog) it ends with an EOF
packet instead.

Where it starts:
- file and position (an empty name: the first file): any event boundary of a file SHOW BINARY LOGS lists (a position inside a
  transaction is reached by rendering the transaction and skipping its first events: a
  replica's IO thread reconnects there);
- GTID (@slave_connect_state, MariaDB): for each domain the transaction after the one the
  subscriber has, the earliest of them; transactions it already has are skipped on the way.
  A GTID the service never served, or one whose transaction the hub has compacted, gets
  error 1236 with what to do.

Options the subscriber set before: @master_binlog_checksum (set to anything, the events carry
their CRC32, as in the file; unset, they do not), @mariadb_slave_capability (below 4 a GTID event becomes the Query
BEGIN of the same size, and Gtid_list events are left out, as MariaDB does), and
@master_heartbeat_period (nanoseconds).
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import BinlogsyncError, ProtocolError
from ..hub.tablemaps import MapReader
from ..position import parse_state
from ..tables import TableFilter
from . import events as ev
from .index import FileInfo, Index, Tx, file_name, header, rotate_size
from .indexer import CACHE_TX_BYTES, EventCache, Indexer
from .packets import ER_MASTER_FATAL_READING_BINLOG, Connection, eof_packet
from .render import Placement, Renderer, Shapes
from .source import LogSource, Stored
from .tablemap import MapError

NON_BLOCK = 0x01
CAPABILITY_TOLERATE_HOLES = 2
CAPABILITY_BINLOG_CHECKPOINT = 3
CAPABILITY_GTID = 4
_FLUSH_BYTES = 256 * 1024
_POLL = 0.5  # how often a waiting dump looks at its socket and the stop flag


class DumpError(BinlogsyncError):
    """Ends a dump with MySQL error 1236 (the replica then stops and shows the message)."""


@dataclass
class Subscriber:
    """A dump in progress, as `status` shows it."""

    id: int
    server_id: int
    address: str
    mode: str  # "gtid" or "file"
    started: float
    file: str = ""
    position: int = 0
    gtid: str = ""  # the last GTID sent
    sent_events: int = 0
    sent_transactions: int = 0
    lag: float = 0.0  # seconds the oldest transaction not yet sent has waited (0: none)
    host: str = ""  # as COM_REGISTER_SLAVE reported it
    port: int = 0
    tls: str = ""  # the TLS version, "" in the clear
    stop: threading.Event = field(default_factory=threading.Event)

    def row(self) -> dict[str, object]:
        return {
            "server_id": self.server_id,
            "address": self.address,
            "mode": self.mode,
            "file": self.file,
            "position": self.position,
            "gtid": self.gtid,
            "lag_seconds": round(self.lag, 3),
            "transactions": self.sent_transactions,
            "connected_seconds": round(time.time() - self.started, 1),
            "tls": self.tls or None,
        }


@dataclass(frozen=True)
class Request:
    file: str
    position: int
    flags: int
    server_id: int


class Dump:
    def __init__(
        self,
        conn: Connection,
        request: Request,
        user_vars: dict[str, object],
        indexer: Indexer,
        cache: EventCache,
        shapes: Shapes,
        subscriber: Subscriber,
        stopping: threading.Event,
    ) -> None:
        self.conn, self.request, self.indexer = conn, request, indexer
        self.cache, self.shapes, self.me, self.stopping = cache, shapes, subscriber, stopping
        settings = indexer.settings
        self.server_id, self.base = settings.server_id, settings.base
        # As MariaDB: a subscriber that set @master_binlog_checksum at all gets the events as
        # the file has them (with CRC32, which the Format_description announces), whatever it
        # set; only the first fake Rotate follows the value. One that did not set it (MariaDB
        # refuses it) gets them without, and a Format_description that says so.
        checksum = user_vars.get("master_binlog_checksum")
        self.checksum = checksum is not None
        self.first_checksum = self.checksum and str(checksum).upper() != "NONE"
        self.capability = _int(user_vars.get("mariadb_slave_capability"), 0)
        self.heartbeat = _int(user_vars.get("master_heartbeat_period"), 0) / 1e9
        state = user_vars.get("slave_connect_state")
        self.connect_state = None if state is None else str(state)
        self.plain = self.checksum and self.capability >= CAPABILITY_GTID
        self.index = Index(settings.data_dir, settings.base)
        self.source = LogSource(settings.data_dir / "hub.sqlite3")
        self.maps = MapReader(self.source.db, indexer.maps.version)
        self.renderers: dict[tuple[str, ...], Renderer] = {}
        self.skip: dict[int, int] = {}  # GTID start: domain -> last seq the subscriber has
        self.ahead: dict[tuple[str, int], Stored] = {}  # transactions read ahead

    def close(self) -> None:
        self.index.close()
        self.source.close()

    # -- the stream -----------------------------------------------------------------------
    def run(self) -> None:
        """Stream until the subscriber goes, the service stops, or (non-blocking) the end;
        a DumpError becomes error 1236 on the wire."""
        try:
            info, pos = self._start()
            self._stream(info, pos)
        except DumpError as exc:
            self.conn.queue(_error(f"{exc.message} — {exc.fix}" if exc.fix else exc.message))
            self.conn.flush()

    def _start(self) -> tuple[FileInfo, int]:
        files = self.index.files()
        if not files:
            raise DumpError("the binlog service has no files yet", "try again in a moment")
        if self.connect_state is not None:
            self.me.mode = "gtid"
            return self._gtid_start(files)
        name, pos = self.request.file, self.request.position
        if not name:
            return files[0], max(pos, 4)
        info = self._named(name, files)
        if pos < 4 or (info.size is not None and pos > info.size):
            raise DumpError(
                f"Client requested master to start replication from impossible position "
                f"{pos} in '{name}'",
                "give a position SHOW BINARY LOGS shows within the file, or 4",
            )
        return info, pos

    def _named(self, name: str, files: list[FileInfo]) -> FileInfo:
        number = None
        if name.startswith(self.base + ".") and name[len(self.base) + 1 :].isdigit():
            number = int(name[len(self.base) + 1 :])
        info = self.index.file(number) if number is not None else None
        if info is None:
            held = f"{files[0].name} to {files[-1].name}" if files else "none"
            purged = number is not None and number < self.index.purged_below()
            raise DumpError(
                f"Could not find first log file name in binary log index file: '{name[:100]}'"
                + (" was purged" if purged else " is not one of the service's files")
                + f" (it holds {held})",
                "the hub compacted what that file held (retain_hours): start the subscriber "
                "again from a copy, or by GTID from the state it has"
                if purged
                else "point the subscriber at a file SHOW BINARY LOGS lists",
            )
        return info

    def _gtid_start(self, files: list[FileInfo]) -> tuple[FileInfo, int]:
        text = self.connect_state or ""
        try:
            wanted = parse_state(text)
        except ProtocolError as exc:
            raise DumpError(f"malformed @slave_connect_state: {exc.message}") from exc
        # Where the log ends, read before the GTID state: a transaction indexed between the
        # two reads is then in the state and found by its GTID. Read after, the end passed a
        # transaction the state did not hold yet, and a subscriber with nothing to catch up
        # started beyond it, never to be sent (CI saw a replica wait for its CREATE TABLE).
        last_file = files[-1]
        end = self.index.end_of(last_file)
        ours = self.index.state(self.server_id)
        starts: list[tuple[int, int]] = []
        for domain, (server, seq) in wanted.items():
            have = ours.get(domain)
            if have is None:
                self.skip[domain] = seq  # a domain the service has not served (yet)
                continue
            if server != self.server_id or seq > have[1]:
                raise DumpError(
                    f"Error: connecting slave requested to start from GTID "
                    f"{domain}-{server}-{seq}, which is not in the master's binlog",
                    f"the service's domain {domain} holds GTIDs {domain}-{self.server_id}-1 "
                    f"to {domain}-{self.server_id}-{have[1]}; a replica that followed the "
                    "origin directly must start here from a copy (gtid_slave_pos of this "
                    "service), not from the origin's GTIDs",
                )
            self.skip[domain] = seq
        for domain, (_server, last) in ours.items():
            after = self.skip.get(domain, 0)
            if after >= last:
                continue
            found = self.index.by_gtid(domain, after + 1)
            if found is None or found.seq != after + 1:
                first = self.index.first_seq(domain)
                raise DumpError(
                    "Error: connecting slave requested to start from GTID "
                    f"{domain}-{self.server_id}-{after}, whose next transaction the binlog "
                    "service no longer holds (purged)",
                    f"the oldest held in domain {domain} is "
                    f"{domain}-{self.server_id}-{first}; the hub keeps its log for "
                    "[binlog_service] retain_hours: start the subscriber again from a copy"
                    if first is not None
                    else "start the subscriber again from a copy",
                )
            starts.append((found.file, found.start))
        if not starts:
            return last_file, end
        number, start = min(starts)
        info = self.index.file(number)
        if info is None:
            raise DumpError(f"{file_name(self.base, number)} was purged just now", "reconnect")
        return info, start

    def _stream(self, info: FileInfo, pos: int) -> None:
        conn = self.conn
        first = ev.rotate(info.name, server_id=self.server_id, log_pos=0, position=pos,
                          artificial=True)  # fmt: skip
        conn.queue(b"\x00" + (first if self.first_checksum else ev.strip_checksum(first)))
        while True:
            self._send_header(info, pos)
            pos = max(pos, info.header_end)
            info, pos, more = self._send_file(info, pos)
            if not more:
                return
            conn.flush()

    def _send_header(self, info: FileInfo, pos: int) -> None:
        events = header(info, self.server_id)
        fde = events[0]
        if pos > 4:
            fde = ev.set_log_pos(fde, 0, clear_created=True)
        self._send(fde)
        at = 4 + len(events[0])
        for event in events[1:]:
            if at >= pos:
                kind = event[4]
                if kind == ev.GTID_LIST and self.capability < CAPABILITY_GTID:
                    pass
                elif (
                    kind == ev.BINLOG_CHECKPOINT and self.capability < CAPABILITY_BINLOG_CHECKPOINT
                ):
                    pass
                else:
                    self._send(event)
            at += len(event)
        if (
            pos not in (4, info.header_end)
            and pos < info.header_end
            and pos
            not in (
                4 + len(events[0]),
                4 + len(events[0]) + len(events[1]),
            )
        ):
            raise DumpError(
                f"Slave requested incorrect position in master binlog. Requested position "
                f"{pos} in file '{info.name}', but this position does not correspond to the "
                "location of any binlog event",
                "give a position a replica or SHOW BINARY LOGS gave",
            )

    def _send_file(self, info: FileInfo, pos: int) -> tuple[FileInfo, int, bool]:
        """Send the file's transactions from `pos`; at its end the Rotate and the next file's
        fake Rotate. Returns the next (file, pos) and whether to go on."""
        inside = self.index.containing(info.number, pos)
        if inside is not None:
            pos = self._send_tx(info, inside, skip_to=pos)
        while True:
            if self.stopping.is_set() or self.me.stop.is_set():
                return info, pos, False
            # Read before the index: what the indexer commits after this query bumps it, so
            # `_wait` sees the change (read after, a commit between the two was never sent).
            generation = self.indexer.generation
            txs = self.index.txs(info.number, pos)
            self._read_ahead(txs)
            for tx in txs:
                if tx.start != pos:
                    raise DumpError(
                        f"Slave requested incorrect position in master binlog: {pos} in "
                        f"'{info.name}' is not where an event starts",
                        "give a position a replica or SHOW BINARY LOGS gave",
                    )
                pos = self._send_tx(info, tx)
                self._flush_if_full()
            if txs:
                continue
            current = self.index.file(info.number)
            if current is None:
                raise DumpError(f"{info.name} was purged while it was sent", "reconnect")
            info = current
            if info.size is not None and pos >= info.size - rotate_size(
                file_name(self.base, info.number + 1)
            ):
                following = file_name(self.base, info.number + 1)
                if pos < info.size:
                    self._send(ev.rotate(following, server_id=self.server_id,
                                         log_pos=info.size))  # fmt: skip
                nxt = self.index.file(info.number + 1)
                if nxt is None:
                    raise DumpError(f"{following} is missing", "reconnect")
                self._send(ev.rotate(nxt.name, server_id=self.server_id, log_pos=0,
                                     artificial=True))  # fmt: skip
                self.me.file, self.me.position = nxt.name, 4
                return nxt, 4, True
            self.me.file, self.me.position, self.me.lag = info.name, pos, 0.0
            if self.request.flags & NON_BLOCK:
                self.conn.queue(eof_packet())
                self.conn.flush()
                return info, pos, False
            if not self._wait(info, pos, generation):
                return info, pos, False

    def _wait(self, info: FileInfo, pos: int, generation: int) -> bool:
        """Wait until the indexer's generation is no longer `generation` (heartbeats
        meanwhile); False when the dump should end."""
        self.conn.flush()
        indexer = self.indexer
        last_beat = time.monotonic()
        while generation == indexer.generation:
            if self.stopping.is_set() or self.me.stop.is_set() or self._client_gone():
                return False
            timeout = _POLL
            if self.heartbeat > 0:
                timeout = min(timeout, max(0.0, last_beat + self.heartbeat - time.monotonic()))
            with indexer.changed:
                if generation == indexer.generation:
                    indexer.changed.wait(timeout)
            if self.heartbeat > 0 and time.monotonic() >= last_beat + self.heartbeat:
                self._send(ev.heartbeat(info.name, server_id=self.server_id, log_pos=pos))
                self.conn.flush()
                last_beat = time.monotonic()
        return True

    def _client_gone(self) -> bool:
        """Whether the subscriber closed the connection. A subscriber sends nothing during a
        dump that the service reads; what arrives is dropped (python-mysql-replication's
        MariaDB dump packet is four bytes longer than it says)."""
        sock = self.conn.sock
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return False
            if not isinstance(sock, ssl.SSLSocket):
                return not sock.recv(4096, socket.MSG_DONTWAIT)
            # TLS: no recv flags; a record that holds no data (a session ticket) is no close.
            timeout = sock.gettimeout()
            sock.setblocking(False)
            try:
                return not sock.recv(4096)
            except ssl.SSLWantReadError:
                return False
            finally:
                sock.settimeout(timeout)
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True

    # -- one transaction -----------------------------------------------------------------
    def _send_tx(self, info: FileInfo, tx: Tx, skip_to: int = 0) -> int:
        if self.skip.get(tx.domain, 0) >= tx.seq and not skip_to:
            return tx.end  # a GTID subscriber has it already
        chunk = self.cache.get(tx.file, tx.start) if not skip_to else None
        groups = (chunk,) if chunk is not None else self._render(info, tx)
        # What this dump renders goes to the cache too: subscribers catching up together
        # render each transaction once between them.
        kept: list[bytes] | None = [] if chunk is None else None
        at = tx.start
        sent = 0
        plain = self.plain and not skip_to  # the events go as they are
        for events in groups:
            if kept is not None:
                kept.extend(events)
                if at - tx.start > CACHE_TX_BYTES:
                    kept = None
            if plain:
                at += self.conn.queue_events(events)
                sent += len(events)
                continue
            for event in events:
                if at >= skip_to:
                    if sent == 0 and skip_to and at != skip_to:
                        raise DumpError(
                            f"Slave requested incorrect position in master binlog: {skip_to} "
                            f"in '{info.name}' is not where an event starts",
                            "give a position a replica or SHOW BINARY LOGS gave",
                        )
                    self._send_event(event)
                    sent += 1
                at += len(event)
        if at != tx.end:
            raise DumpError(
                f"the service made {at - tx.start} bytes of the transaction at "
                f"{info.name}:{tx.start}, which its index says takes {tx.end - tx.start}",
                "report this: the hub's log or the index was changed under the service",
            )
        if kept is not None:
            self.cache.put(tx.file, tx.start, tuple(kept))
        me = self.me
        me.file, me.position = info.name, tx.end
        me.gtid = f"{tx.domain}-{self.server_id}-{tx.seq}"
        me.sent_transactions += 1
        me.sent_events += sent if plain else 0
        me.lag = max(0.0, time.time() - tx.indexed_at) if tx.indexed_at else 0.0
        return tx.end

    def _read_ahead(self, txs: list[Tx]) -> None:
        """Read from the hub's log, in one query per origin, the transactions of `txs` the
        cache does not have (a subscriber catching up reads thousands a second)."""
        self.ahead = {}
        wanted: dict[str, list[int]] = {}
        for tx in txs:
            if self.cache.get(tx.file, tx.start) is None:
                wanted.setdefault(tx.origin, []).append(tx.key)
        for origin, keys in wanted.items():
            found = self.source.many(origin, keys)
            self.ahead.update({(origin, k): v for k, v in found.items()})

    def _render(self, info: FileInfo, tx: Tx) -> Iterator[list[bytes]]:
        stored = self.ahead.pop((tx.origin, tx.key), None) or self.source.at(tx.origin, tx.key)
        if stored is None:
            raise DumpError(
                f"the hub no longer holds {tx.origin}'s transaction "
                f"{tx.domain}-{self.server_id}-{tx.seq} ({info.name}:{tx.start}): purged",
                "the hub keeps its log for [binlog_service] retain_hours; start the subscriber "
                "again from a copy",
            )
        renderer = self.renderers.get(info.filter)
        if renderer is None:
            renderer = self.renderers[info.filter] = Renderer(
                self.server_id, TableFilter(info.filter), self.maps.at, self.shapes
            )
        try:
            yield from renderer.render(
                tx.origin,
                stored.key,
                stored.timestamp,
                self.source.bodies(tx.origin, stored),
                Placement(tx.domain, tx.seq, tx.start),
            )
        except (MapError, LookupError) as exc:
            raise DumpError(
                f"the transaction at {info.name}:{tx.start} cannot be sent: {exc}"
            ) from exc

    def _send_event(self, event: bytes) -> None:
        kind = event[4]
        if kind == ev.GTID and self.capability < CAPABILITY_GTID:
            standalone = event[ev.HEADER_SIZE + 12] & ev.FL_STANDALONE
            if standalone and self.capability >= CAPABILITY_TOLERATE_HOLES:
                return
            timestamp = int.from_bytes(event[:4], "little")
            log_pos = int.from_bytes(event[13:17], "little")
            event = ev.begin_instead_of_gtid(
                timestamp=timestamp, server_id=self.server_id, log_pos=log_pos
            )
        self._send(event)

    def _send(self, event: bytes) -> None:
        if not self.checksum:
            if event[4] == ev.FORMAT_DESCRIPTION:
                event = ev.format_description_without_checksum(event)
            else:
                event = ev.strip_checksum(event)
        self.conn.queue_event(event)
        self.me.sent_events += 1

    def _flush_if_full(self) -> None:
        if self.conn.queued >= _FLUSH_BYTES:
            self.conn.flush()


def _error(message: str) -> bytes:
    code, state = ER_MASTER_FATAL_READING_BINLOG
    text = message.encode("utf-8", "replace")[:4000]
    return b"\xff" + code.to_bytes(2, "little") + b"#" + state.encode() + text


def _int(value: object, default: int) -> int:
    try:
        return int(str(value)) if value is not None else default
    except ValueError:
        return default
