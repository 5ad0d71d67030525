"""Net-change reduction: the effect of a group of transactions per table and primary key.

The applier runs a group of consecutive origin transactions in one target transaction, so no
reader of the target sees anything between them: only the group's net effect per row has to
reach the target. Every row change is applied by the TARGET's primary key with whole row images
(`statements.py`: an upsert of the after image, a delete of the key), so for one key the last
operation decides what the target holds, whatever the target held before:

    insert, update (same key)   upsert of the image (the last image wins)
    update of a key             delete of the old key, upsert of the new key
    delete                      delete of the key

So a table's group reduces to one set of keys to delete and one set of final images to upsert,
two multi-row statements instead of one statement per run of equal operations. An insert
followed by a delete still sends the delete (not nothing): deletes are idempotent, and after a
repair (`Applier.repair` rewinds the checkpoint) the target may hold rows that a replayed group
inserts and deletes again; "last operation wins" is exactly what the unreduced path does, on
any starting state.

Order: all deletes of a table before its upserts. Operations on different keys of a table
whose only unique key is the primary key commute, so that order is the whole story there. A
table with other unique keys on the target (`unique_keys` of its plan) could see two rows swap
unique values inside a group, and the final images, upserted one by one, would clash with the
old images still there: for such a table every touched key is deleted first and the final
images are inserted after, so no old unique value is left in the way (the final images are one
consistent state of the origin). Tables are independent of each other: the caller does not
reduce a group that touches a table with foreign keys or triggers (`Applier._reduce`).

Keys that the target compares as equal and Python does not ('a' and 'A' in a case-insensitive
collation) are safe: images carry the stored spelling and a row leaves a spelling only through
a delete of it, so of one row's spellings at most the current one ends in an upsert, and the
deletes, sent first, cannot remove it. What the target no longer sees are the intermediate
images: a constraint that only the target has (a CHECK, a unique key the origin lacks) is
checked against the group's final state only.

Barriers: a TRUNCATE (and, for `reduce_changes`, a DDL change) flushes what was reduced before
it and keeps its place. Anything the reducer is not sure about raises NotReducible and the
caller applies the group unreduced: rows of one table with different column lists in one group
(an upsert writes only the columns it names, so the last image would not stand for the earlier
ones), a key value that cannot be compared (unhashable).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from ..model import ROW_KINDS, Change, Row


class NotReducible(Exception):
    """This group must be applied unreduced (the reason is the message)."""


class KeyPlan(Protocol):
    """How to reduce rows of one column list of one table (a `statements.Layout` is one)."""

    @property
    def key(self) -> tuple[int, ...]:
        """Indices in the change's columns of the target's primary key."""
        ...

    @property
    def unique_keys(self) -> bool:
        """The target table has unique keys other than its primary key."""
        ...


class _TableNet:
    """The net effect on one table: per key, the last operation (True: upsert) and its row."""

    __slots__ = ("columns", "key", "net", "replace", "schema", "table")

    def __init__(self, change: Change, plan: KeyPlan) -> None:
        self.schema, self.table, self.columns = change.schema, change.table, change.columns
        self.key = plan.key
        self.replace = plan.unique_keys
        self.net: dict[object, tuple[bool, Row]] = {}

    def changes(self) -> list[Change]:
        """A delete change, then an insert (upsert) change, each left out when empty."""
        upserts = [row for up, row in self.net.values() if up]
        if self.replace:
            deletes = [row for _, row in self.net.values()]  # every touched key
        else:
            deletes = [row for up, row in self.net.values() if not up]
        out = []
        if deletes:
            out.append(Change("delete", self.schema, self.table, self.columns, tuple(deletes)))
        if upserts:
            out.append(Change("insert", self.schema, self.table, self.columns, (), tuple(upserts)))
        return out


class Reducer:
    """Collects row changes (`add`) and gives their net effect as changes (`flush`)."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, str], _TableNet] = {}

    def __bool__(self) -> bool:
        return bool(self._tables)

    def add(self, change: Change, plan: KeyPlan) -> None:
        """Fold one insert, update or delete in. Raises NotReducible (nothing is folded then
        that the caller should keep: it drops the reducer)."""
        kind = change.kind
        if kind not in ROW_KINDS:
            raise NotReducible(f"a {kind} change is a barrier, not a row change")
        name = (change.schema, change.table)
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = _TableNet(change, plan)
        elif table.columns != change.columns or table.key != plan.key:
            raise NotReducible(
                f"`{change.schema}`.`{change.table}` changes with different column lists"
            )
        net, key = table.net, plan.key
        one = key[0] if len(key) == 1 else -1
        try:
            if kind == "insert":
                for row in change.after:
                    net[row[one] if one >= 0 else tuple([row[i] for i in key])] = (True, row)
            elif kind == "delete":
                for row in change.before:
                    net[row[one] if one >= 0 else tuple([row[i] for i in key])] = (False, row)
            else:
                for before, after in zip(change.before, change.after, strict=True):
                    if one >= 0:
                        old, new = before[one], after[one]
                    else:
                        old, new = tuple([before[i] for i in key]), tuple([after[i] for i in key])
                    if old != new:
                        net[old] = (False, before)
                    net[new] = (True, after)
        except (TypeError, ValueError) as exc:  # an unhashable key (a SET), uneven images
            raise NotReducible(f"a key of `{change.schema}`.`{change.table}`: {exc}") from None

    def flush(self) -> list[Change]:
        """The net changes so far, table by table in order of first appearance; then empty."""
        out: list[Change] = []
        for table in self._tables.values():
            out.extend(table.changes())
        self._tables = {}
        return out


def reduce_changes(
    changes: Iterable[Change], plan: Callable[[Change], KeyPlan | None]
) -> list[Change]:
    """The net effect of `changes`; TRUNCATE and DDL changes are barriers kept in place.

    `plan` tells the key of a row change's table, or None when it cannot be reduced (then
    NotReducible is raised).
    """
    reducer = Reducer()
    out: list[Change] = []
    for change in changes:
        if change.kind in ROW_KINDS:
            found = plan(change)
            if found is None:
                raise NotReducible(f"`{change.schema}`.`{change.table}` is not reduced")
            reducer.add(change, found)
        else:
            out.extend(reducer.flush())
            out.append(change)
    out.extend(reducer.flush())
    return out
