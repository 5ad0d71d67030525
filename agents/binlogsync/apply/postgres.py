"""`PostgresStore`: the exactly-once core (core.py) over the PostgreSQL engine
(engines/postgresql.py), with the arguments a PostgreSQL target takes (`[target] kind =
"postgresql"`). The core gives it what every kind gets: skip, net-change apply with the
unreduced replay that names a failing transaction, schema following, repair and seed; the
adapter knows PostgreSQL (its sessions, types, catalog, DDL and errors).
"""

from __future__ import annotations

from .. import tls as tls_settings
from ..engines.pgedge import connect
from ..engines.pgschema import pg_type
from ..engines.postgresql import COPY_ROWS, PostgresEngine, checkpoints
from ..tls import TlsSettings
from .core import Mode, Target

__all__ = ["COPY_ROWS", "PostgresStore", "checkpoints", "connect", "pg_type"]


class PostgresStore(Target):
    def __init__(
        self, url: str, origin: str, create_tables: bool = False, password: str = "",
        epoch: str | None = None, tls: TlsSettings = tls_settings.DEFAULT,
        zero_dates: str = "error", schema_changes: Mode = "off", reduce: bool = True,
    ) -> None:  # fmt: skip
        self.postgres = PostgresEngine(url, origin, create_tables, password, tls, zero_dates)
        super().__init__(
            self.postgres, origin, epoch=epoch, reduce=reduce, schema_changes=schema_changes
        )
        self.url = url
