"""The MariaDB/MySQL engine adapter: the only code that knows a MySQL-protocol target.

engine.py        MariaDBEngine and its session: the adapter the exactly-once core drives
statements.py    parameterized, merged SQL built from identifiers and the target's key
pipeline.py      runs one target transaction's statements, building the next meanwhile
targettables.py  the target's table definitions, the origin's DDL, dropped columns
schemachange.py  the origin's DDL, followed: ALTER/CREATE TABLE built from table definitions
failures.py      driver errors told as our errors, with origin, transaction, table and fix
checkpoint.py    the binlogsync.checkpoint / binlogsync.skipped tables

Nothing is imported here: reconciliation's Spark executors import checkpoint.py alone.
"""
