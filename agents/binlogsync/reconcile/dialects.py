"""What differs between the kinds of server a reconciliation reads, behind one face.

The source is always MariaDB/MySQL; a target is MariaDB/MySQL or PostgreSQL. The plan (job.py)
and the stages (tasks.py, repair.py) ask a target's dialect for its sessions, catalog, pin,
`--since-last` state, SQL and snapshot statement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pymysql

from ..config import DatabaseSettings
from ..mysql import ident
from . import checksums, connections, pgsql, pinning, postgres, schema, verified
from .checksums import Encoding

Types = Mapping[str, str]  # column → PostgreSQL type (empty for MariaDB/MySQL)


class MySQL:
    kind = "mysql"
    quote = staticmethod(ident)
    snapshot = "START TRANSACTION WITH CONSISTENT SNAPSHOT"

    @staticmethod
    def errors() -> tuple[type[Exception], ...]:
        return (pymysql.err.MySQLError,)

    @staticmethod
    def connect(db: DatabaseSettings, role: str) -> Any:
        return connections.connect(db, role)

    close = staticmethod(connections.close)
    applied = staticmethod(pinning.applied)
    detect = staticmethod(pinning.detect)
    read_verified = staticmethod(verified.read)
    write_verified = staticmethod(verified.write)
    describe = staticmethod(schema.describe)
    portable = False  # whether only the portable hash can be computed there

    @staticmethod
    def checksum_sql(side: tuple[str, str], encoding: Encoding, types: Types, where: str) -> str:
        return checksums.checksum_sql(side[0], side[1], encoding, where)

    @staticmethod
    def row_hashes_sql(
        side: tuple[str, str], key: Sequence[str], encoding: Encoding, types: Types, where: str
    ) -> str:
        return checksums.row_hashes_sql(side[0], side[1], key, encoding, where)

    @staticmethod
    def column_hashes_sql(
        side: tuple[str, str], key: Sequence[str], encoding: Encoding, types: Types, where: str
    ) -> str:
        return checksums.column_hashes_sql(side[0], side[1], key, encoding, where)

    @staticmethod
    def rows_sql(
        side: tuple[str, str], columns: Sequence[str], where: str, floats: Sequence[str]
    ) -> str:
        return checksums.rows_sql(side[0], side[1], columns, where, floats)

    @staticmethod
    def key(values: tuple[Any, ...], integer: tuple[bool, ...]) -> tuple[Any, ...]:
        return values


class PostgreSQL:
    kind = "postgresql"
    quote = staticmethod(pgsql.quote)
    snapshot = postgres.SNAPSHOT
    errors = staticmethod(postgres.errors)
    connect = staticmethod(postgres.connect)
    close = staticmethod(postgres.close)
    applied = staticmethod(postgres.applied)
    detect = staticmethod(postgres.detect)
    read_verified = staticmethod(postgres.read_verified)
    write_verified = staticmethod(postgres.write_verified)
    describe = staticmethod(postgres.describe)
    portable = True

    @staticmethod
    def checksum_sql(side: tuple[str, str], encoding: Encoding, types: Types, where: str) -> str:
        return pgsql.checksum_sql(side[0], side[1], encoding, types, where)

    @staticmethod
    def row_hashes_sql(
        side: tuple[str, str], key: Sequence[str], encoding: Encoding, types: Types, where: str
    ) -> str:
        return pgsql.row_hashes_sql(side[0], side[1], key, encoding, types, where)

    @staticmethod
    def column_hashes_sql(
        side: tuple[str, str], key: Sequence[str], encoding: Encoding, types: Types, where: str
    ) -> str:
        return pgsql.column_hashes_sql(side[0], side[1], key, encoding, types, where)

    @staticmethod
    def rows_sql(
        side: tuple[str, str], columns: Sequence[str], where: str, floats: Sequence[str]
    ) -> str:
        return pgsql.rows_sql(side[0], side[1], columns, where, floats)

    key = staticmethod(postgres.normalise_key)


Dialect = type[MySQL] | type[PostgreSQL]


def of(db: DatabaseSettings) -> Dialect:
    return PostgreSQL if postgres.is_postgres(db) else MySQL


def query_errors() -> tuple[type[Exception], ...]:
    """Every driver's query errors (a failed query in a task is reported, not raised)."""
    return (*MySQL.errors(), *PostgreSQL.errors())
