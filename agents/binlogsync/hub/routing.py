"""Routing rules (the paper's "pairs"): which target sees which origin's tables, under which
schema name."""

from __future__ import annotations

from collections.abc import Iterable

from ..config import Route
from ..model import Transaction


class Router:
    def __init__(self, routes: tuple[Route, ...]) -> None:
        self.routes = routes
        self._decisions: dict[tuple[str, str, str, str], Route | None] = {}
        # The routes never change while the hub runs; these are asked per message, and a
        # scan of every route per message grows with the fleet (`bench fleet`).
        self._pairs: dict[tuple[str, str], list[Route]] = {}
        self._targets: dict[str, frozenset[str]] = {}
        self._origins: dict[str, frozenset[str]] = {}
        for r in routes:
            for t in r.targets:
                self._pairs.setdefault((r.origin, t), []).append(r)
        for origin, target in self._pairs:
            self._targets[origin] = self._targets.get(origin, frozenset()) | {target}
            self._origins[target] = self._origins.get(target, frozenset()) | {origin}
        self._whole = {
            pair: any("*.*" in r.tables.patterns and not r.rename for r in found)
            for pair, found in self._pairs.items()
        }

    def targets_of(self, origin: str) -> frozenset[str]:
        return self._targets.get(origin, frozenset())

    def origins_of(self, target: str) -> frozenset[str]:
        return self._origins.get(target, frozenset())

    def hosts(self) -> set[str]:
        return {r.origin for r in self.routes} | {t for r in self.routes for t in r.targets}

    def _routes(self, origin: str, target: str) -> list[Route]:
        return self._pairs.get((origin, target), [])

    def passes_whole(self, origin: str, target: str) -> bool:
        """True when the target gets every change unchanged, so stored bytes can be forwarded."""
        return self._whole.get((origin, target), False)

    def _route_for(self, routes: list[Route], schema: str, table: str) -> Route | None:
        for route in routes:
            if table and route.tables.matches(schema, table):
                return route
            if not table and route.tables.covers_schema(schema):
                return route
        return None

    def _decide(self, origin: str, target: str, schema: str, table: str) -> Route | None:
        key = (origin, target, schema, table)
        if key not in self._decisions:  # glob matching is slow; the answer never changes
            if len(self._decisions) > 100_000:
                self._decisions.clear()
            self._decisions[key] = self._route_for(self._routes(origin, target), schema, table)
        return self._decisions[key]

    def sends(self, origin: str, target: str, schema: str, table: str) -> bool:
        """True when the routes send `origin`'s `schema.table` to `target`."""
        return self._decide(origin, target, schema, table) is not None

    def unchanged(self, origin: str, target: str, tables: Iterable[tuple[str, str]]) -> bool:
        """True when changes of these (schema, table)s all reach `target` as they are (routed,
        no schema renamed), so the stored bytes can be forwarded without decoding them."""
        for schema, table in tables:
            route = self._decide(origin, target, schema, table)
            if route is None or route.target_schema(schema) != schema:
                return False
        return True

    def for_target(self, origin: str, target: str, tx: Transaction) -> Transaction:
        """The part of `tx` that `target` receives (possibly no changes: the position still
        moves). `tx` itself when the target receives all of it unchanged."""
        kept = []
        for change in tx.changes:
            route = self._decide(origin, target, change.schema, change.table)
            if route is not None:
                schema = route.target_schema(change.schema)
                kept.append(change if schema == change.schema else change.renamed(schema))
        if len(kept) == len(tx.changes) and all(
            a is b for a, b in zip(kept, tx.changes, strict=True)
        ):
            return tx
        return Transaction(tx.position, tx.timestamp, tuple(kept))
