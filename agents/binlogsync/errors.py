"""The errors binlogsync raises, as one small tree.

    BinlogsyncError                 base; .fix says what the user should change
    ├── ConfigError                 fatal: a setting is missing or wrong (names the key)
    ├── PreflightError              fatal: the MySQL server is not set up for capture
    ├── SandboxError                fatal: a throwaway server could not start or stop
    ├── ProtocolError               a frame on the socket is malformed: dropped and logged
    ├── UnreachableError            retryable: a database or the hub cannot be reached now
    └── ApplyError                  retryable: a transaction cannot be applied on a target
        ├── MissingTableError       the target has no such table
        ├── SchemaMismatchError     the target's columns differ from the origin's
        ├── NoPrimaryKeyError       the target table has no primary key to apply by
        └── ConstraintError         the target refused a row (duplicate, FK, NOT NULL, …)

`retryable` tells the run loops what to do: retry with back-off, or stop with the message.
Exceptions of PyMySQL and pyzmq are translated at the edge of the module that calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .position import Position


class BinlogsyncError(Exception):
    """Base of every error binlogsync raises on purpose."""

    retryable = False

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message} — {self.fix}" if self.fix else self.message


class ConfigError(BinlogsyncError):
    """A configuration key is missing, of the wrong type, or out of range."""


class PreflightError(BinlogsyncError):
    """The origin server's binlog settings do not allow capture."""


class SandboxError(BinlogsyncError):
    """A throwaway MariaDB server could not be created, started or stopped."""


class ProtocolError(BinlogsyncError):
    """A message on the socket does not follow docs/protocol.md."""


class UnreachableError(BinlogsyncError):
    """A database server or the hub cannot be reached right now."""

    retryable = True


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
