"""The target a config names: every kind is the exactly-once core (core.Target) over its
engine adapter, so the target role drives one interface whatever the kind:

    checkpoint()            the position applied so far (None: nothing yet), read now
    apply(txs, upto)        apply what is new in `txs` together with the new checkpoint,
                            atomically; return the checkpoint
    apply_part(part, end)   one part of a large transaction; the last part commits
    abort_stream()          drop a transaction being streamed (its parts come again)
    repair(tx, snapshot, seed=, reset=)   source rows read at `snapshot` (reconcile, seed)
    repair_in_lane(tx, snapshot, lane)    a seed chunk beside others, on its own connection
                            (where the engine has lanes: `lanes`)
    skip(position, reason)  move past one transaction on purpose, with a record
    close()

Kinds (`[target] kind`): `mysql` (MariaDB/MySQL, apply/applier.py), `postgresql`
(apply/postgres.py), `redis` (a hash per row, apply/redisstore.py) and `auditlog` (JSON lines,
apply/auditlog.py). `open_store` makes the one a target config names.
"""

from __future__ import annotations

from ..config import TargetConfig
from ..errors import ConfigError
from .core import Target

EXTRAS = {"postgresql": ("psycopg", "postgresql"), "redis": ("redis", "redis")}


def require(kind: str) -> None:
    """ConfigError naming the extra to install when `kind`'s client library is missing."""
    if kind not in EXTRAS:
        return
    module, extra = EXTRAS[kind]
    try:
        __import__(module)
    except ImportError as exc:
        raise ConfigError(
            f"target.kind {kind!r} needs the Python package {module!r}, which is not installed",
            f"pip install 'binlogsync[{extra}]'",
        ) from exc


def open_store(config: TargetConfig, origin: str, epoch: str | None) -> Target:
    require(config.kind)
    if config.kind == "auditlog":
        from .auditlog import AuditLogStore

        assert config.path is not None  # checked with the config
        return AuditLogStore(config.path, origin, config.rotate_bytes, epoch)
    if config.kind == "postgresql":
        from .postgres import PostgresStore

        return PostgresStore(
            config.url,
            origin,
            config.create_tables,
            config.database.password,
            epoch,
            tls=config.database.tls,
            zero_dates=config.zero_dates,
            schema_changes=config.apply_schema_changes,  # type: ignore[arg-type]  # checked
        )
    if config.kind == "redis":
        from .redisstore import RedisStore

        return RedisStore(
            config.url,
            origin,
            config.key_pattern,
            config.ttl,
            config.database.password,
            epoch,
            tls=config.database.tls,
            schema_changes=config.apply_schema_changes,  # type: ignore[arg-type]  # checked
        )
    from .applier import Applier

    return Applier(
        config.database,
        origin,
        epoch=epoch,
        schema_changes=config.apply_schema_changes,  # type: ignore[arg-type]  # checked
    )
