"""The row stage, in Spark SQL: which rows of the differing pieces differ.

The checksum tasks (tasks.py) emit the (key, row hash) of every row of each differing piece,
read on both sides at one pinned position. Here they become a DataFrame and are compared by
Spark:

    rows        the emitted rows (`tasks.RowHash`): table, target, chunk, side, key, hash
    candidates  source rows FULL OUTER JOIN target rows USING (table, target, key), keeping
                the keys present on one side only or with different hashes
    diffs       the candidates, re-checked by key in executors while writes continue
                (recheck.py): the report's rows, one per differing key (`recheck.DiffRow`)

The re-check results are persisted once, so the counts, the samples, the Parquet report and a
repair all read the same findings (a second re-check could see other live writes).
"""

from __future__ import annotations

from typing import Any

from .recheck import Rechecked, is_diff_row, recheck_partition
from .taskdata import Context, TaskError, is_row_hash


def _row_schema() -> Any:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("table", T.IntegerType(), False),
            T.StructField("target", T.IntegerType(), False),
            T.StructField("chunk", T.StringType(), False),
            T.StructField("side", T.ByteType(), False),
            T.StructField("key", T.StringType(), False),
            T.StructField("key_pickle", T.BinaryType(), False),
            T.StructField("hash", T.LongType(), False),
        ]
    )


def diff_schema() -> Any:
    """The report's rows; `table_index`, `target_index` and `key_pickle` stay inside the run."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("table_index", T.IntegerType(), False),
            T.StructField("target_index", T.IntegerType(), False),
            T.StructField("table", T.StringType(), False),
            T.StructField("target", T.StringType(), False),
            T.StructField("target_table", T.StringType(), False),
            T.StructField("kind", T.StringType(), False),
            T.StructField("key", T.StringType(), False),
            T.StructField("columns", T.ArrayType(T.StringType(), False), False),
            T.StructField("source_values", T.StringType(), True),
            T.StructField("target_values", T.StringType(), True),
            T.StructField("chunk", T.StringType(), False),
            T.StructField("key_pickle", T.BinaryType(), False),
        ]
    )


# The report's columns, as rows.parquet holds them (partitioned by `table`).
REPORT_COLUMNS = (
    "table",
    "target",
    "target_table",
    "kind",
    "key",
    "columns",
    "source_values",
    "target_values",
    "chunk",
)


def candidates(spark: Any, emitted: Any) -> Any:
    """The keys of the emitted rows that differ between the two sides: a DataFrame of
    (table, target, chunk, key_pickle). One SQL statement: each DataFrame step of the same
    query was a round trip to the JVM and an analysis of the plan so far (0.07 s against
    0.035 s to build it, warm)."""
    from .taskdata import SOURCE, TARGET

    rows = spark.createDataFrame(emitted.filter(is_row_hash), _row_schema(), verifySchema=False)
    return spark.sql(
        f"""SELECT coalesce(s.`table`, t.`table`) AS `table`,
                   coalesce(s.target, t.target) AS target,
                   coalesce(s.chunk, t.chunk) AS chunk,
                   coalesce(s.key_pickle, t.key_pickle) AS key_pickle
            FROM (SELECT * FROM {{rows}} WHERE side = {SOURCE}) s
            FULL OUTER JOIN (SELECT * FROM {{rows}} WHERE side = {TARGET}) t
              ON s.`table` = t.`table` AND s.target = t.target AND s.`key` = t.`key`
            WHERE s.hash IS NULL OR t.hash IS NULL OR s.hash != t.hash""",
        rows=rows,
    )


def recheck(spark: Any, ctx: Context, found: Any) -> tuple[Any, list[Rechecked], list[TaskError]]:
    """Re-check the candidate keys in executors: the persisted re-check results, what each
    table and target saw, and the errors."""
    from pyspark import StorageLevel

    results = found.rdd.map(tuple).mapPartitions(lambda rows: recheck_partition(ctx, rows))
    results = results.persist(StorageLevel.MEMORY_AND_DISK)
    meta = results.filter(lambda r: not is_diff_row(r)).collect()
    return (
        results,
        [m for m in meta if isinstance(m, Rechecked)],
        [m for m in meta if isinstance(m, TaskError)],
    )


def diffs(spark: Any, results: Any) -> Any:
    """The report's rows as a DataFrame, from the persisted re-check results."""
    return spark.createDataFrame(results.filter(is_diff_row), diff_schema(), verifySchema=False)


def write(spark: Any, frame: Any | None, path: str) -> None:
    """rows.parquet, written by Spark: a folder partitioned by `table` (one row per differing
    key), or, when nothing differs, one file with the schema and no rows (a partitioned write
    of nothing leaves no file to read the schema from)."""
    if frame is not None:
        frame.select(*REPORT_COLUMNS).write.mode("overwrite").partitionBy("table").parquet(path)
        return
    from pyspark.sql import types as T

    fields = [f for f in diff_schema().fields if f.name in REPORT_COLUMNS]
    ordered = T.StructType(sorted(fields, key=lambda f: REPORT_COLUMNS.index(f.name)))
    spark.createDataFrame([], ordered).coalesce(1).write.mode("overwrite").parquet(path)
