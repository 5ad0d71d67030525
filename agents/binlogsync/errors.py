"""The errors binlogsync raises, as one small tree.

    BinlogsyncError                 base; .fix says what the user should change
    ├── ConfigError                 fatal: a setting is missing or wrong (names the key)   exit 2
    │   ├── UsageError              fatal: the command line is wrong                       exit 2
    │   └── TlsError                fatal: TLS to a database failed (names setting, file)  exit 2
    ├── PreflightError              fatal: the MySQL server is not set up for capture      exit 2
    ├── CaptureHalted               capture stopped at a position it must not pass alone
    ├── SandboxError                fatal: a throwaway server could not start or stop (dev)
    ├── ProtocolError               a frame on the socket is malformed: dropped and logged
    ├── TransportError              a socket cannot bind or connect (start-up)             exit 2
    ├── UnreachableError            retryable: a database or the hub cannot be reached now
    ├── DatabaseError               a server refused a statement (.code, .kind: mysql.py)
    ├── RetentionRefused            a position that binlog retention must respect is unknown
    ├── ApplyError                  retryable: a transaction cannot be applied on a target
    │   ├── MissingTableError       the target has no such table
    │   ├── SchemaMismatchError     the target's columns differ from the origin's
    │   ├── NoPrimaryKeyError       the target table has no primary key to apply by
    │   └── ConstraintError         the target refused a row (duplicate, FK, NOT NULL, …)
    └── ReconcileError              a reconciliation cannot run or finish               exit 2
        ├── TableError              a table cannot be compared (no key, columns differ, …)
        ├── PinError                a snapshot cannot be pinned or a target does not catch up
        └── RepairError             a repair was refused or failed

`retryable` tells the run loops what to do: retry with back-off, or stop with the message.
`exit_code` is what the command line returns when the error ends a command: 2 for what the
user must change before trying again (config, usage, setup), 1 for failures at run time.
Exceptions of PyMySQL (mysql.py) and pyzmq (transport/) are translated at those edges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .position import Position


class BinlogsyncError(Exception):
    """Base of every error binlogsync raises on purpose."""

    retryable = False
    exit_code = 1

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message} — {self.fix}" if self.fix else self.message


class ConfigError(BinlogsyncError):
    """A configuration key is missing, of the wrong type, or out of range."""

    exit_code = 2


class UsageError(ConfigError):
    """The command line asks for something that cannot be done as written."""


class TlsError(ConfigError):
    """TLS to a database cannot work as configured: a certificate the CA did not sign, a
    server without TLS under `required`, a client certificate the server refuses (tls.py).
    Not retried as "unreachable": the settings or the server must change."""


class PreflightError(BinlogsyncError):
    """The origin server's binlog settings do not allow capture."""

    exit_code = 2


class CaptureHalted(BinlogsyncError):
    """Capture met something it must not pass by itself (statement-based DML, a partial row
    image, a row too large to send…). `position` is where capture stands (the end of the last
    transaction it read whole), `at` the event that stopped it, `end` where the offending
    transaction ends when known; moving past it takes `binlogsync capture-skip` or a reseed."""

    def __init__(
        self,
        message: str,
        fix: str = "",
        position: Position | None = None,
        at: str = "",
        end: Position | None = None,
    ) -> None:
        super().__init__(message, fix)
        self.position, self.at, self.end = position, at, end


class SandboxError(BinlogsyncError):
    """A throwaway MariaDB server could not be created, started or stopped."""

    exit_code = 2


class ProtocolError(BinlogsyncError):
    """A message on the socket does not follow docs/protocol.md."""

    code = "rejected"  # the ERROR code the hub answers with


class StaleSnapshotError(ProtocolError):
    """A repair or seed chunk was read at a position the hub's log no longer holds: read it
    again (a fresh snapshot) and send it again."""

    code = "stale-snapshot"


class TransportError(BinlogsyncError):
    """A ZeroMQ socket cannot be bound or connected as configured."""

    exit_code = 2


class DatabaseError(BinlogsyncError):
    """A MySQL/MariaDB server refused a statement; `code` and `kind` as in mysql.py."""

    code: int | None = None
    kind: str = "other"


class UnreachableError(BinlogsyncError):
    """A database server or the hub cannot be reached right now."""

    retryable = True


class RetentionRefused(BinlogsyncError):
    """Binlog retention purges nothing: a position it must keep (the hub's head, a target's
    checkpoint, a native replica's) cannot be read. The message names which one."""


class ApplyError(BinlogsyncError):
    """A transaction could not be applied on a target; it is retried, never skipped silently.

    `position` names the origin transaction that failed, when the applier could tell.
    """

    retryable = True
    position: Position | None = None


class MissingTableError(ApplyError):
    """The target has no table of that name."""


class SchemaMismatchError(ApplyError):
    """The target table's columns differ from the origin's."""


class NoPrimaryKeyError(ApplyError):
    """The target table has no primary key, so rows cannot be addressed."""


class ConstraintError(ApplyError):
    """The target refused a row: duplicate key, foreign key, NOT NULL, CHECK, …"""


class ReconcileError(BinlogsyncError):
    """A reconciliation cannot run or cannot finish."""

    exit_code = 2


class TableError(ReconcileError):
    """A table cannot be compared as asked (missing, no primary key, columns differ, …)."""


class PinError(ReconcileError):
    """A source snapshot cannot be pinned, or a target does not reach it in time."""


class RepairError(ReconcileError):
    """A repair was refused or failed."""
