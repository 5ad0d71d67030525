"""`RedisStore`: the exactly-once core (core.py) over the Redis engine (engines/redis.py, whose
module doc says how rows, keys, the checkpoint and skips are kept in Redis), with the arguments
a Redis target takes (`[target] kind = "redis"`)."""

from __future__ import annotations

import redis

from .. import tls as tls_settings
from ..engines.redis import RedisEngine, checkpoints, text
from ..tabledef import TableDef
from ..tls import TlsSettings
from .core import Mode, Target

__all__ = ["RedisStore", "checkpoints", "text"]


class RedisStore(Target):
    """The exactly-once core (core.py) over the Redis engine: `[target] kind = "redis"`."""

    def __init__(
        self,
        url: str,
        origin: str,
        key_pattern: str = "{schema}:{table}:{key}",
        ttl: int = 0,
        password: str = "",
        epoch: str | None = None,
        tls: TlsSettings = tls_settings.DEFAULT,
        schema_changes: Mode = "off",
    ) -> None:
        self.redis = RedisEngine(url, origin, key_pattern, ttl, password, tls)
        super().__init__(self.redis, origin, epoch=epoch, schema_changes=schema_changes)
        self.url = url

    @property
    def client(self) -> redis.Redis:
        return self.redis.client

    @property
    def tables(self) -> dict[str, TableDef]:
        return self.redis.tables
