"""Which of the origin's tables a seed copies, and how each is read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from ..errors import UsageError
from ..tabledef import TableDef, describe
from ..tables import SYSTEM_SCHEMAS


@dataclass(frozen=True, slots=True)
class SeedTable:
    schema: str
    table: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    floats: tuple[str, ...]  # FLOAT columns, read as `c + 0e0` so they write back exactly
    estimate: int  # the origin's row estimate (information_schema.TABLES.TABLE_ROWS)
    definition: TableDef

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"


def route_patterns(routes: Sequence[dict[str, Any]], origin: str, target: str) -> list[str]:
    """The table patterns of the hub's routes that send `origin` to `target` (STATUS form)."""
    out: list[str] = []
    for route in routes:
        if route.get("origin") == origin and target in route.get("targets", ()):
            out.extend(str(p) for p in route.get("tables", ()))
    return out


def plan(cur: Any, routed: Sequence[str], wanted: Sequence[str] | None) -> list[SeedTable]:
    """The base tables of the origin that the routes send (`routed` patterns) and that match
    `wanted` (--tables; None: all), in name order; UsageError when there is none, or when one
    cannot be seeded (no primary key)."""
    cur.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES "
        "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME"
    )
    found = [(s, t, int(n)) for s, t, n in cur.fetchall() if s not in SYSTEM_SCHEMAS]
    chosen = [
        (s, t, n)
        for s, t, n in found
        if any(fnmatchcase(f"{s}.{t}", p) for p in routed)
        and (wanted is None or any(fnmatchcase(f"{s}.{t}", p) for p in wanted))
    ]
    if not chosen:
        raise UsageError(
            f"no table of the origin matches {' '.join(wanted) if wanted else 'the routes'} "
            f"among the tables routed to this target ({', '.join(routed) or 'no route'})",
            "check --tables (SCHEMA.TABLE globs) and the hub's routes ([[route]] tables)",
        )
    out = []
    for schema, table, estimate in chosen:
        definition = describe(cur, schema, table)
        if definition is None:
            continue  # dropped since the listing
        if not definition.primary_key:
            raise UsageError(
                f"{schema}.{table} has no primary key, so its rows cannot be read in key order "
                "nor applied by key",
                f"add a primary key to {schema}.{table}, or leave it out with --tables",
            )
        out.append(
            SeedTable(
                schema,
                table,
                tuple(c.name for c in definition.columns),
                definition.primary_key,
                tuple(c.name for c in definition.columns if c.type == "float"),
                estimate,
                definition,
            )
        )
    return out
