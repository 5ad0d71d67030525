"""A reconciliation's options (`Options`), every flag checked as it is made. Cheap to import:
a warm server's client checks its command line with it before it asks the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..config import DatabaseSettings
from ..errors import ConfigError
from .choices import HASH_CHOICES, PORTABLE


@dataclass(frozen=True)
class Options:
    source: DatabaseSettings
    targets: tuple[DatabaseSettings, ...]
    tables: tuple[str, ...]  # source tables, "schema.table"
    out: Path | None = None
    repair: str | None = None  # None, "hub" or "sql"
    via: str | None = None  # hub or client agent config, for --repair through the hub
    origin: str | None = None  # the source's host name in the hub config
    target_hosts: tuple[str, ...] = ()  # each target's host name in the hub config
    renames: Mapping[str, str] = field(default_factory=dict)  # source schema -> target schema
    pin: str = "auto"
    json: str = "text"
    hash: str = "auto"  # choices.HASH_CHOICES
    since_last: bool = False  # only keys changed since each table's last equal run (changed.py)
    common_columns: bool = False
    chunk_rows: int = 100_000
    max_task_rows: int = 50_000
    connections: int | None = None
    wait_timeout: float = 300.0
    confirm: int = 2
    max_rounds: int = 6
    max_repair_rows: int = 100_000
    repair_batch: int = 2_000
    show: int = 20

    def __post_init__(self) -> None:
        if not self.targets:
            raise ConfigError("reconcile needs at least one --target URL")
        if not self.tables:
            raise ConfigError("reconcile needs --tables schema.table[,schema.table…]")
        for name in self.tables:
            if name.count(".") != 1 or "" in name.split("."):
                raise ConfigError(
                    f"table {name!r} is not schema.table", "write --tables shop.orders,shop.items"
                )
        for key, value in (
            ("chunk_rows", self.chunk_rows),
            ("max_task_rows", self.max_task_rows),
            ("confirm", self.confirm),
            ("max_rounds", self.max_rounds),
            ("max_repair_rows", self.max_repair_rows),
        ):
            if value < 1:
                raise ConfigError(f"--{key.replace('_', '-')} must be at least 1, got {value}")
        if self.hash not in HASH_CHOICES:
            raise ConfigError(f"--hash must be one of {', '.join(HASH_CHOICES)}, not {self.hash}")
        if self.max_rounds < self.confirm:
            raise ConfigError("--max-rounds must be at least --confirm")
        if self.repair not in (None, "hub", "sql"):
            raise ConfigError(f"--repair must be given alone or as --repair=sql, not {self.repair}")
        if self.repair == "hub":
            missing = [
                name
                for name, value in (("--via", self.via), ("--origin", self.origin))
                if not value
            ]
            if missing or len(self.target_hosts) != len(self.targets):
                raise ConfigError(
                    "--repair sends the repair through the hub and needs "
                    + ", ".join(missing + ["one --target-host NAME per --target"]),
                    "--via is the hub's (or any client's) config; --origin and --target-host are "
                    "the host names of the source and each target in the hub config",
                )
        if self.repair is not None and self.out is None:
            raise ConfigError("a repair needs --out DIR (the report and the repair go there)")
        if any(t.kind == "postgresql" for t in self.targets):
            if self.repair == "sql":
                raise ConfigError(
                    "--repair=sql writes MariaDB/MySQL statements; a PostgreSQL target is "
                    "repaired through the hub",
                    "use --repair (with --via, --origin and --target-host)",
                )
            if self.json != "text":
                raise ConfigError(
                    "--json value compares JSON by MariaDB's JSON_NORMALIZE, which PostgreSQL "
                    "does not have",
                    "compare PostgreSQL targets with --json text (the default)",
                )
            if self.hash not in ("auto", PORTABLE):
                raise ConfigError(
                    f"--hash {self.hash} cannot be computed in PostgreSQL (it has neither "
                    "CRC32 nor SHA-1 without an extension)",
                    f"use --hash auto or --hash {PORTABLE} with a PostgreSQL target",
                )

    def target_label(self, index: int) -> str:
        if index < len(self.target_hosts):
            return self.target_hosts[index]
        return (
            str(self.targets[index])
            if len(self.targets) == 1
            else f"target{index + 1} ({self.targets[index]})"
        )
