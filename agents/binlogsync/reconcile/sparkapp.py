"""The Spark application a reconciliation runs in: how it starts, and how fast.

Every reconciliation is a Spark application (there is no other engine): `local[*]` when no
master is given, spark-submit's when the job runs under spark-submit, or any master named
(`spark://…`, `yarn`, `k8s://…`). This module starts it for the command line and the job:

    SparkStart      builds the SparkSession on a thread of its own, so the plan's catalog
                    queries (job.py) run while the JVM starts; `session()` waits for it
    ClassCache      a JVM class-data-sharing archive of the driver's classes, made by the
                    first run on a machine and mapped by every later one: the driver JVM,
                    the SparkContext and Spark SQL's first query start in about half the time
                    (measured on 2 cores: 9.5 s -> 4.8 s for start-up, a join and a Parquet
                    write). A JVM that cannot use the archive (another Java, another Spark)
                    starts without it; the archive's name holds what it was made with.
                    `write_class_archive` makes it ahead of the first run (an image's
                    build): a first run that writes it as its JVM exits takes seconds
                    longer (a minute for two at once on a busy 2-core host).

In local mode the driver also stays on loopback, without a web UI, with a JVM tuned to start
rather than to run long (C1 only, a serial GC: it schedules tasks, the databases do the
hashing). A cluster's executors get the same JVM options unless the run's conf names others:
they too live for one run, and their tasks' work is Python's and the databases'. Under
spark-submit the JVM already runs: its conf is taken as it is.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import warnings
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ReconcileError
from . import shipping

log = logging.getLogger(__name__)

APP_NAME = "binlogsync-reconcile"
LOCAL_MASTER = "local[*]"
# The driver JVM only schedules tasks: its quick compiler and a serial GC start it sooner
# and leave the CPU to the databases (measured on 2 cores).
DRIVER_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# A cluster's executors, started for one run, likewise (each starts a JVM on a worker: in the
# compose site two at once took 45 s to start beside their drivers).
EXECUTOR_JVM_OPTIONS = DRIVER_JVM_OPTIONS
ARCHIVE_TIMEOUT = 1800.0  # write_class_archive's wait for the JVM writing the archive
# A JVM that cannot map an archive says so on stderr at every start; the archive is a cache.
QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"


class SparkUnavailable(ReconcileError):
    """Spark could not start: no Java, no PySpark, a master that cannot be reached."""


def is_local(master: str | None) -> bool:
    return master is None or master.startswith("local")


def under_submit(environ: MutableMapping[str, str]) -> bool:
    """Whether this process is the driver spark-submit started (its JVM is running)."""
    return "PYSPARK_GATEWAY_PORT" in environ


@dataclass(frozen=True)
class SparkSettings:
    master: str | None = None  # None: spark-submit's master, else local[*]
    conf: tuple[tuple[str, str], ...] = ()
    class_cache: Path | None = None  # ClassCache's folder; None: no archive
    shuffle_partitions: int = 2  # Spark SQL's partitions for the row stage's join


class ClassCache:
    """A dynamic class-data-sharing archive (JDK 13+) of the driver's classes, per Java and
    Spark. `options()` maps it when it exists, else asks this JVM to write it at exit (to a
    name of its own, so runs never read a half-written one); `finish()`, once the JVM has
    exited, gives it its final name."""

    def __init__(self, folder: Path, java: str, spark_home: str, spark_version: str) -> None:
        real = os.path.realpath(java)
        try:
            stat = os.stat(real)
            java_id = f"{real}:{stat.st_size}:{int(stat.st_mtime)}"
        except OSError:
            java_id = real
        digest = hashlib.sha256(
            f"{java_id}|{os.path.realpath(spark_home)}|{spark_version}".encode()
        ).hexdigest()[:16]
        self.folder = folder
        self.writing = False  # this run's JVM writes the archive as it exits
        self.archive = folder / f"spark-{spark_version}-{digest}.jsa"
        self.making = folder / f"{self.archive.name}.{os.getpid()}.tmp"

    def options(self) -> str:
        if self.archive.is_file():
            return f"-XX:SharedArchiveFile={self.archive} {QUIET_CDS}"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return ""  # no cache then: the run is only slower
        self.writing = True
        return f"-XX:ArchiveClassesAtExit={self.making} {QUIET_CDS}"

    def finish(self) -> None:
        try:
            if self.making.is_file() and self.making.stat().st_size > 0:
                os.replace(self.making, self.archive)
            else:
                self.making.unlink(missing_ok=True)
        except OSError:
            pass


def write_class_archive(folder: Path, environ: MutableMapping[str, str]) -> Path:
    """Write the driver's class archive (ClassCache) into `folder` now, ahead of the first
    run: a local application that loads what a run's driver loads (the SparkContext, the
    Python workers, Spark SQL's join and a Parquet write) and exits. Its path; a
    SparkUnavailable when Spark cannot start or the JVM wrote no archive. `environ` (the
    process's, which PySpark launches the JVM with) loses PYSPARK_SUBMIT_ARGS."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReconcileError(
            f"cannot make the class archive's folder {folder}: {exc.strerror or exc}",
            "name a folder this user can write (--class-cache DIR)",
        ) from exc
    java = java_command(environ)
    if java is not None:
        made = _class_cache(folder, java, _pyspark()).archive
        if made.is_file():
            return made  # by an earlier call or a run
    # Launch options inherited from a caller (PySpark's own variable, which SparkStart leaves
    # as it finds it) would keep the options that write the archive out of the JVM.
    environ.pop("PYSPARK_SUBMIT_ARGS", None)
    start = SparkStart(SparkSettings("local[1]", (), folder), environ)
    try:
        session = start.session()
        with tempfile.TemporaryDirectory(prefix="binlogsync-cds-") as scratch:
            frame = session.createDataFrame([(0, "shop.t", 1)], "k int, table string, h long")
            frame.write.partitionBy("table").parquet(f"{scratch}/rows.parquet")
    finally:
        # writing the archive is what this is for: 54 s on a quiet 2-core machine, minutes
        # on a busy one (a run's driver gives up after 120 s)
        start.stop(wait=True, exit_timeout=ARCHIVE_TIMEOUT)
    if start._cache is None or not start._cache.archive.is_file():
        raise SparkUnavailable(
            f"the Spark driver's JVM wrote no class archive into {folder}",
            "check that the folder is writable and Java is 17 or later",
        )
    return start._cache.archive


def _class_cache(folder: Path, java: str, pyspark: Any) -> ClassCache:
    return ClassCache(folder, java, os.path.dirname(pyspark.__file__), str(pyspark.__version__))


def java_command(environ: MutableMapping[str, str]) -> str | None:
    """The `java` Spark's scripts will run: $JAVA_HOME/bin/java, else the one on PATH."""
    home = environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if candidate.is_file() else None
    return shutil.which("java", path=environ.get("PATH"))


def _pyspark() -> Any:
    try:
        import pyspark
    except ImportError as exc:
        raise SparkUnavailable(
            f"PySpark is not installed ({exc}): every reconciliation is a Spark application",
            "pip install 'binlogsync[spark]' (PySpark and pyarrow; Java 17 or later too)",
        ) from exc
    return pyspark


class SparkStart:
    """The run's SparkSession, built on a thread of its own from the moment this is made."""

    def __init__(self, settings: SparkSettings, environ: MutableMapping[str, str]) -> None:
        self.settings = settings
        self.environ = environ
        self._context: Any = None
        self._session: Any = None
        self._context_ready = threading.Event()
        self._ready = threading.Event()
        self._owner = False
        self._error: BaseException | None = None
        self._cache: ClassCache | None = None
        self._prepare()
        self._thread = threading.Thread(target=self._start, name="spark-start", daemon=True)
        self._thread.start()

    def _prepare(self) -> None:
        """What must hold before PySpark launches the JVM (checked here, in the caller's
        thread, so a missing Java or PySpark is a clear error rather than a gateway that
        "exited before sending its port number")."""
        pyspark = _pyspark()
        logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per gateway connection
        if under_submit(self.environ):
            return
        java = java_command(self.environ)
        if java is None:
            raise SparkUnavailable(
                "Spark needs Java 17 or later and finds none ($JAVA_HOME is not set and there "
                "is no `java` on PATH): every reconciliation is a Spark application",
                "install a Java runtime (Debian: apt-get install openjdk-17-jre-headless) or "
                "set JAVA_HOME",
            )
        # Local executors run this interpreter, the one that has binlogsync (nothing is shipped
        # in local mode); a cluster's run their own (PYSPARK_PYTHON, spark.pyspark.python),
        # which need not have it (shipping.py).
        if is_local(self.settings.master):
            self.environ["PYSPARK_PYTHON"] = _executable()
            # Local mode stays on loopback from the JVM's first moment (before SparkConf).
            self.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        options = DRIVER_JVM_OPTIONS
        if self.settings.class_cache is not None:
            self._cache = _class_cache(self.settings.class_cache, java, pyspark)
            options = f"{options} {self._cache.options()}".strip()
        self.environ.setdefault(
            "PYSPARK_SUBMIT_ARGS", f"--driver-java-options '{options}' pyspark-shell"
        )

    def _start(self) -> None:
        """Context, then (while the plan and the first chunk queries already use it) the SQL
        session and Spark SQL's planning and compiling of a query like the row stage's, and,
        on a thread of their own, the Python workers (where the executors can import
        binlogsync already: a cluster's get it only once the run ships it)."""
        try:
            from pyspark import SparkContext

            # A SparkContext that runs already (another run in this process) is not ours to stop.
            self._owner = SparkContext._active_spark_context is None
            self._context = _context(self.settings, self.environ)
        except BaseException as exc:  # handed to the caller of context() or session()
            self._error = exc
            self._context_ready.set()
            self._ready.set()
            return
        self._context_ready.set()
        if self._owner and executors_have_binlogsync(self._context):
            # A job: in local mode it may wait for task slots the checksum tasks hold, so it
            # must not hold up the session behind it.
            threading.Thread(
                target=_warm_workers, args=(self._context,), name="spark-warm", daemon=True
            ).start()
        try:
            from pyspark.sql import SparkSession

            self._session = SparkSession.builder.getOrCreate()  # on this context
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        if self._owner:
            _warm_sql(self._session)

    def context(self) -> Any:
        """The SparkContext (waits for it); SparkUnavailable when it could not start."""
        self._context_ready.wait()
        self._raise()
        return self._context

    def session(self) -> Any:
        """The SparkSession on it (waits for it, not for the warm-up that follows it);
        SparkUnavailable when Spark could not start."""
        self._ready.wait()
        self._raise()
        return self._session

    def _raise(self) -> None:
        if self._error is None:
            return
        if isinstance(self._error, ReconcileError):
            raise self._error
        first = str(self._error).strip().splitlines()[0] if str(self._error).strip() else ""
        raise SparkUnavailable(
            f"Spark did not start: {type(self._error).__name__}: {first}",
            "check the master URL, Java (17 or later) and the Spark log above",
        ) from self._error

    def stop(self, wait: bool = True, exit_timeout: float = 120) -> None:
        """Stop the application. When this process launched the JVM: wait for it to exit,
        or, with `wait` False (a command about to exit), only when it writes the class
        archive as it exits; a JVM not gone after `exit_timeout` seconds is killed (a run's
        archive is only a cache)."""
        self._thread.join()
        if self._context is None or not self._owner:
            if self._cache is not None:
                self._cache.finish()
            return
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        writing = self._cache is not None and self._cache.writing
        wait = wait or writing
        if wait or under_submit(self.environ) or gateway is None or proc is None:
            (self._session or self._context).stop()
        # Else the JVM stops the application itself as it exits, once its stdin closes below
        # (Spark's shutdown hook: SparkContext.stop, the event log, a cluster's master told):
        # the command, about to exit, needs nothing more from it and does not wait the second
        # that takes.
        if gateway is not None and proc is not None and not under_submit(self.environ):
            # The gateway JVM exits when its stdin closes (PythonGatewayServer).
            SparkContext._gateway = None
            SparkContext._jvm = None
            try:
                gateway.shutdown()
            except Exception:  # noqa: BLE001 - the JVM may be gone already
                pass
            if proc.stdin is not None:
                proc.stdin.close()
            if wait:  # (a JVM writing the class archive does so as it exits)
                try:
                    proc.wait(timeout=exit_timeout)
                except Exception:  # noqa: BLE001 - a JVM that does not exit is killed
                    proc.kill()
        if self._cache is not None:
            self._cache.finish()


def executors_have_binlogsync(sc: Any) -> bool:
    """Whether the executors can import binlogsync before the run ships it (job.py): local
    executors run this process's Python; a cluster's only when spark-submit shipped the zip
    (shipping.py). Elsewhere a task that imports it fails until the run has shipped it."""
    return is_local(sc.master) or shipping.shipped(sc.getConf().get("spark.submit.pyFiles", ""))


def _warm_workers(sc: Any) -> None:
    """Start the Python workers, with the task modules imported, while the plan runs (the
    first job would pay it). A failure is left to the run's own jobs to report."""
    try:
        n = max(1, sc.defaultParallelism)
        sc.parallelize(range(n), n).foreachPartition(_import_task_modules)
    except Exception:  # noqa: BLE001 - only a warm-up
        log.debug("Spark warm-up failed", exc_info=True)


def _warm_sql(session: Any) -> None:
    """Spark SQL's analysis, planning and code generation (compiled) of a query shaped like the
    row stage's, on no rows and without a job (in local mode the checksum tasks hold every task
    slot until they end, so a job would wait for them and warm nothing): the row stage's first
    query then starts with Catalyst's classes loaded and its code compiled."""
    try:
        from .rowstage import candidates

        query = candidates(session, session.sparkContext.emptyRDD())._jdf.queryExecution()
        query.debug().codegenToSeq()  # plans, generates and compiles; runs nothing
    except Exception:  # noqa: BLE001 - only a warm-up
        log.debug("Spark SQL warm-up failed", exc_info=True)


def _import_task_modules(_rows: Any) -> None:
    from . import recheck, tasks  # noqa: F401 - imported for the worker's next tasks


def _executable() -> str:
    import sys

    return sys.executable


def _context(settings: SparkSettings, environ: MutableMapping[str, str]) -> Any:
    from pyspark import SparkConf, SparkContext

    # pandas 3 makes PySpark warn at its first DataFrame; the job uses no pandas.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    SparkContext._ensure_initialized()  # the JVM; under spark-submit it holds submit's conf
    given = SparkConf()
    # Under spark-submit the name is submit's (--name); pyspark's own launch calls it
    # "pyspark-shell".
    submitted = "PYSPARK_GATEWAY_PORT" in environ and given.get("spark.app.name", "") not in (
        "",
        "pyspark-shell",
    )
    conf = given if submitted else given.setAppName(APP_NAME)
    if settings.master:
        conf = conf.setMaster(settings.master)
    elif not given.contains("spark.master"):
        conf = conf.setMaster(LOCAL_MASTER)
    effective = settings.master or given.get("spark.master", LOCAL_MASTER)
    defaults = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(max(1, settings.shuffle_partitions)),
        # The report's Parquet without a .crc file beside every file.
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
        # The row stage's queries are small: adaptive execution ran each of their shuffles as
        # a job of its own, and its plan holds no generated code until it runs, so the
        # warm-up could not compile the join's code ahead (measured: the first join of a
        # cold run 0.81-0.91 s with it, 0.50-0.60 s without it and compiled ahead).
        "spark.sql.adaptive.enabled": "false",
    }
    if is_local(effective):
        # One machine: no web UI to start (saves a second), and stay on loopback.
        defaults.update(
            {
                "spark.ui.enabled": "false",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
            }
        )
    else:
        defaults["spark.executor.extraJavaOptions"] = EXECUTOR_JVM_OPTIONS
    explicit = dict(settings.conf)
    for key, value in defaults.items():
        if key not in explicit and not given.contains(key):
            conf = conf.set(key, value)
    if "spark.ui.showConsoleProgress" not in explicit:
        # pyspark's own launch turns the progress bar on; the command prints its own summary
        conf = conf.set("spark.ui.showConsoleProgress", "false")
    for key, value in settings.conf:
        conf = conf.set(key, value)
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("WARN")
    return sc
