"""The job's stages without Spark: the same partition functions on threads of this process.

On one machine, Spark's fixed cost (the JVM, the SparkContext, the first stage's Python
workers: 4–7 s measured on 2 cores) is most of a reconciliation of small tables, whose work is a
few queries inside the databases, and at 10M rows the threads were still faster (11.4 s
against 18.3 s): the databases do the hashing either way. The job uses a handful of RDD operations (parallelize,
mapPartitions, map, flatMap, collect, take, toLocalIterator, persist, unpersist); `InProcess` gives
them over lists, each partition on a thread of its own, as Spark's local mode gives each to a
Python worker. The partitions spend their time waiting on database sessions, which releases the
GIL, and each opens its own sessions (tasks.py), so threads are enough.

Operations run at once, not lazily: the job collects every stage right after building it.
`--engine` (options.py) says when this runs instead of Spark: by default, for every run that is
not sent to a cluster. Results stay in memory (Spark's persist spills to disk): a run that
finds millions of differing rows holds them here, which a reseed, not a repair, should settle.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class InProcess:
    """Stands in for the SparkContext of a run: `parallelize` and the few attributes read."""

    master = "in-process"
    applicationId = ""  # noqa: N815 - SparkContext's names
    version = ""

    def __init__(self, parallelism: int) -> None:
        self.defaultParallelism = max(1, parallelism)  # noqa: N815

    def parallelize(self, items: Iterable[Any], slices: int) -> Partitions:
        data = list(items)
        n = max(1, min(slices, len(data)))
        # Contiguous slices of near-equal size, as Spark cuts a local list.
        bounds = [len(data) * i // n for i in range(n + 1)]
        return Partitions([data[bounds[i] : bounds[i + 1]] for i in range(n)])

    def stop(self) -> None:
        """Nothing runs between stages."""


class Partitions:
    """A list cut into partitions; the RDD operations the job uses, done at once."""

    def __init__(self, parts: list[list[Any]]) -> None:
        self.parts = parts

    def mapPartitions(self, function: Callable[[Iterator[Any]], Iterable[Any]]) -> Partitions:  # noqa: N802
        if len(self.parts) <= 1:
            return Partitions([list(function(iter(p))) for p in self.parts])
        with ThreadPoolExecutor(len(self.parts), thread_name_prefix="reconcile") as pool:
            done = list(pool.map(lambda p: list(function(iter(p))), self.parts))
        return Partitions(done)

    def map(self, function: Callable[[Any], Any]) -> Partitions:
        return Partitions([[function(x) for x in p] for p in self.parts])

    def flatMap(self, function: Callable[[Any], Iterable[Any]]) -> Partitions:  # noqa: N802
        return Partitions([[y for x in p for y in function(x)] for p in self.parts])

    def collect(self) -> list[Any]:
        return [x for p in self.parts for x in p]

    def take(self, n: int) -> list[Any]:
        return list(itertools.islice(self.toLocalIterator(), n))

    def toLocalIterator(self) -> Iterator[Any]:  # noqa: N802
        return (x for p in self.parts for x in p)

    def persist(self, _level: Any = None) -> Partitions:
        return self  # already in memory

    def unpersist(self) -> Partitions:
        self.parts = []
        return self
