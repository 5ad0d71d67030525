"""What a driver error during apply means, told as one of our errors with the whole story:
which origin, which transaction, which table, on which target, the cause and the fix.

The kinds come from the one code table in mysql.py; this module adds what they mean for a row
that the origin accepted.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ... import mysql
from ...errors import (
    ApplyError,
    BinlogsyncError,
    ConstraintError,
    MissingTableError,
    SchemaMismatchError,
    UnreachableError,
)
from ...position import Position
from ...zerodate import is_zero_date_text
from .targettables import context

_QUOTED_VALUE = re.compile(r"value: '([^']*)'")


def _refused_zero_date(cause: str) -> bool:
    """Whether a refused value (MariaDB/MySQL: "Incorrect datetime value: '…' for column …")
    is a date that is no calendar date."""
    found = _QUOTED_VALUE.search(cause)
    return found is not None and is_zero_date_text(found[1])


GRANTS = (
    "the account needs SELECT, INSERT, UPDATE, DELETE on the routed tables and CREATE, "
    "ALTER, SELECT, INSERT, UPDATE on binlogsync.*"
)


def translate(
    exc: BaseException,
    *,
    origin: str,
    target: object,
    doing: str,
    where: Position | str | None,
    schema: str,
    table: str,
    statement_kind: str | None,
    with_ddl: Callable[[str, str, str], str],
) -> BinlogsyncError:
    kind = mysql.kind_of(exc)
    cause = mysql.describe(exc)
    if kind == "too_large":
        return ApplyError(
            context(origin, target, where, schema, table) + f"a statement is too large: {cause}",
            "raise max_allowed_packet on the target (SET GLOBAL max_allowed_packet=…) "
            "to at least the size of the largest row",
        )
    if kind == "unreachable":
        during = f" while {doing}" if doing else ""
        on = f" (transaction {where}, `{schema}`.`{table}`)" if schema else ""
        fix = (
            "check that the target server runs and is reachable; nothing of this call "
            "was kept, apply retries from the checkpoint"
        )
        if doing == "committing":
            fix = (
                "check that the target server runs and is reachable; whether the last "
                "commit happened is unknown, so the next attempt re-reads the checkpoint "
                "and skips whatever was committed"
            )
        return UnreachableError(
            f"origin {origin}: lost or refused connection to target {target}{during}{on}: {cause}",
            fix,
        )
    denied = kind in ("access", "privilege")
    if not schema:  # checkpoint table, session setup
        return ApplyError(
            f"origin {origin}: target {target} failed while {doing}: {cause}",
            GRANTS if denied else "see the MySQL error; apply retries from the checkpoint",
        )
    prefix = context(origin, target, where, schema, table)
    if kind == "missing_table":
        return MissingTableError(
            prefix + cause,
            with_ddl(
                schema,
                table,
                "create the table on the target as the origin defines it, or exclude it from "
                "the route; apply resumes by itself",
            ),
        )
    if kind in ("missing_column", "no_default"):
        return SchemaMismatchError(
            prefix + cause,
            with_ddl(
                schema,
                table,
                "make the target table's columns match the origin's (extra target columns "
                "need a default); apply resumes by itself",
            ),
        )
    if kind == "value" and _refused_zero_date(cause):
        return SchemaMismatchError(
            prefix + "the target column refused a date that is no calendar date (zero, "
            f"partial or invalid), as the origin stored it: {cause}",
            with_ddl(
                schema,
                table,
                "the apply session already allows such dates (its sql_mode has no "
                "NO_ZERO_DATE or NO_ZERO_IN_DATE and has ALLOW_INVALID_DATES), so the column's "
                "type refuses it: a TIMESTAMP holds the zero TIMESTAMP but no partial or "
                "invalid date; give the target column the origin's type (ALTER TABLE … "
                "MODIFY), or correct the value on the origin; apply resumes by itself",
            ),
        )
    if kind == "value":
        return SchemaMismatchError(
            prefix + f"a value does not fit the target column: {cause}",
            with_ddl(
                schema,
                table,
                "give the target column the origin's type (ALTER TABLE … MODIFY); apply "
                "resumes by itself",
            ),
        )
    if kind == "constraint":
        if mysql.code_of(exc) == 1048 and statement_kind == "upsert":
            cause += (
                " (on an upsert this also means: the row clashes with a different row on "
                "another unique key of the target)"
            )
        return ConstraintError(
            prefix + f"the target refused a row: {cause}",
            "the target's constraints or data differ from the origin's: compare the table "
            "on both sides (reconcile), fix the target, or skip this transaction on purpose "
            "(binlogsync skip, recorded in binlogsync.skipped)",
        )
    if kind == "transient":
        return ApplyError(
            prefix + f"{cause} (another session holds the rows)",
            "transient: apply retries from the checkpoint",
        )
    if denied:
        return ApplyError(
            prefix + cause,
            "grant the applier's account SELECT, INSERT, UPDATE, DELETE on the routed tables",
        )
    return ApplyError(prefix + cause, "see the MySQL error; apply retries from the checkpoint")
