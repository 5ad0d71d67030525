"""Which tables a rule covers: patterns `schema.table`, with `*` and `?` as in shell globs.

`shop.*` is every table of `shop`; `*.trx` is `trx` in every schema; `shop.order_?`.
Schema and table names match case-sensitively, as MySQL's do on Linux.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from .errors import ConfigError

SYSTEM_SCHEMAS = frozenset(
    {"mysql", "information_schema", "performance_schema", "sys", "binlogsync"}
)


@dataclass(frozen=True)
class TableFilter:
    patterns: tuple[str, ...] = ("*.*",)

    def __post_init__(self) -> None:
        for pattern in self.patterns:
            if pattern.count(".") != 1 or "" in pattern.split("."):
                raise ConfigError(
                    f"table pattern {pattern!r} is not SCHEMA.TABLE",
                    "write patterns like 'shop.orders', 'shop.*' or '*.trx'",
                )

    def matches(self, schema: str, table: str) -> bool:
        if schema in SYSTEM_SCHEMAS:
            return False
        name = f"{schema}.{table}"
        return any(fnmatchcase(name, p) for p in self.patterns)

    def covers_schema(self, schema: str) -> bool:
        """True when some table of `schema` may match (for DDL whose table is unknown)."""
        if schema in SYSTEM_SCHEMAS:
            return False
        return any(fnmatchcase(schema, p.split(".", 1)[0]) for p in self.patterns)
