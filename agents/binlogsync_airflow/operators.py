"""Operators over `binlogsync.ops`. Each stores its arguments (templated, so DAG params
reach them), builds the hook in `execute()`, calls the library, logs what it did, and returns
a JSON report (the task's XCom). A condition an operator must report fails the task with a
message that names it, so Airflow's own alerting (e-mail, callbacks) carries it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.exceptions import AirflowException, AirflowSkipException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook, BaseOperator

from binlogsync.errors import BinlogsyncError, RetentionRefused
from binlogsync.ops import outbox, reconcile_run, site, state, timing
from binlogsync.ops.retention import RetentionOptions, binlog_retention
from binlogsync.reconcile import options as options_module
from binlogsync.reconcile import shipping, sparkapp

from .hooks import COMPARED_CONN_TYPES, BinlogsyncHook, state_dir

RECONCILE_JOB = Path(__file__).resolve().parent / "spark_jobs" / "reconcile_job.py"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class BinlogRetentionOperator(BaseOperator):
    """Purge each origin's binlogs below what anything still needs (ops/retention.py).
    Origins: `origins`, or every origin the hub routes. An origin whose needs are not all
    known is refused (nothing purged there); the others still run, then the task fails
    naming each refusal."""

    template_fields: Sequence[str] = (
        "origins",
        "keep_files",
        "keep_hours",
        "dry_run",
        "ignore_targets",
    )

    def __init__(
        self,
        *,
        origins: Sequence[str] | str = (),
        keep_files: int = 2,
        keep_hours: float = 24.0,
        dry_run: bool = False,
        ignore_targets: bool = False,
        binlogsync_conn_id: str = BinlogsyncHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.origins = origins
        self.keep_files = keep_files
        self.keep_hours = keep_hours
        self.dry_run = dry_run
        self.ignore_targets = ignore_targets
        self.binlogsync_conn_id = binlogsync_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        from binlogsync.ops.commands import render

        hook = BinlogsyncHook(self.binlogsync_conn_id)
        admin = hook.admin_config()
        names = _names(self.origins)
        if not names:
            try:
                names = site.origins(hook.status())
            except BinlogsyncError as exc:
                raise RetentionRefused(
                    f"retention refused: nothing purged, the hub's positions are unknown ({exc})",
                    "start the hub (or fix the connection binlogsync_default), then run again",
                ) from exc
        results: dict[str, Any] = {}
        refused: list[str] = []
        for origin in names:
            options = RetentionOptions(
                config=admin,
                origin=origin,
                source=hook.database(origin),
                replicas=hook.replicas(origin),
                keep_files=int(self.keep_files),
                keep_hours=float(self.keep_hours),
                ignore_targets=_flag(self.ignore_targets),
                dry_run=_flag(self.dry_run),
            )
            try:
                result = binlog_retention(options)
            except RetentionRefused as exc:
                self.log.error("origin %s: %s", origin, exc)
                refused.append(f"{origin}: {exc}")
                results[origin] = {"refused": str(exc)}
                continue
            self.log.info("%s", render(result))
            results[origin] = result.to_json()
        report = {"at": _now(), "dry_run": _flag(self.dry_run), "origins": results}
        state.keep(state_dir(), state.RETENTION, report)
        if refused:
            raise RetentionRefused(
                f"retention refused for {len(refused)} origin(s): " + " | ".join(refused)
            )
        return report


class OutboxOperator(BaseOperator):
    """The outbox as operations (ops/outbox.py): offline hosts, backlogs, stuck targets;
    detach past the detach limits, reseed detached targets that are back (`reseed`). Fails
    with every alert in one message; the report is the return value either way (kept in the
    state folder)."""

    template_fields: Sequence[str] = (
        "max_offline",
        "max_age",
        "max_bytes",
        "max_transactions",
        "detach_after_age",
        "detach_after_bytes",
        "reseed",
    )

    def __init__(
        self,
        *,
        max_offline: float | None = 600.0,
        max_age: float | None = 3600.0,
        max_bytes: int | None = None,
        max_transactions: int | None = None,
        detach_after_age: float | None = None,
        detach_after_bytes: int | None = None,
        reseed: bool = True,
        binlogsync_conn_id: str = BinlogsyncHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.max_offline = max_offline
        self.max_age = max_age
        self.max_bytes = max_bytes
        self.max_transactions = max_transactions
        self.detach_after_age = detach_after_age
        self.detach_after_bytes = detach_after_bytes
        self.reseed = reseed
        self.binlogsync_conn_id = binlogsync_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        hook = BinlogsyncHook(self.binlogsync_conn_id)
        limits = outbox.Limits(
            _number(self.max_offline, float),
            _number(self.max_age, float),
            _number(self.max_bytes, int),
            _number(self.max_transactions, int),
            _number(self.detach_after_age, float),
            _number(self.detach_after_bytes, int),
        )
        sources = None
        if _flag(self.reseed):
            sources = {o: hook.database(o) for o in site.origins(hook.status())}
        report = outbox.run(hook.admin_config(), limits, hook.timeout, sources)
        self.log.info("%s", report.render())
        data = {"at": _now(), **report.to_json()}
        state.keep(state_dir(), state.OUTBOX, data)
        context["ti"].xcom_push(key="report", value=data)
        outbox.raise_alerts(report)
        return data


class ReconcilePlanOperator(BaseOperator):
    """Which reconciliations cover the site (ops/site.py): one per origin (per group of its
    targets with the same routes), each with the routed tables found on the origin that match
    `tables`. Targets whose connection is no database (type `redis`, say) are left out, and
    said so. Returns them as a list: TargetCaughtUpSensor (through sensors.wait_for_job) is mapped
    over it, and the Spark task submits them all in one application."""

    template_fields: Sequence[str] = ("origins", "tables", "out_root")

    def __init__(
        self,
        *,
        origins: Sequence[str] | str = (),
        tables: Sequence[str] | str = (),
        out_root: str | None = None,
        binlogsync_conn_id: str = BinlogsyncHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.origins = origins
        self.tables = tables
        self.out_root = out_root
        self.binlogsync_conn_id = binlogsync_conn_id

    def execute(self, context: Any) -> list[dict[str, Any]]:
        hook = BinlogsyncHook(self.binlogsync_conn_id)
        jobs = site.reconcile_jobs(hook.status(), _names(self.origins))
        root = Path(self.out_root) if self.out_root else state_dir() / "runs"
        run = _safe(str(context["run_id"]))
        planned = []
        for job in jobs:
            skipped = [t for t in job.targets if not hook.compared(t)]
            if skipped:
                self.log.info(
                    "%s -> %s: not compared (their connections are no database reconcile "
                    "reads: %s)", job.origin, skipped, ", ".join(COMPARED_CONN_TYPES),
                )  # fmt: skip
                job = dataclasses.replace(
                    job, targets=tuple(t for t in job.targets if t not in skipped)
                )
                if not job.targets:
                    continue
            tables = site.routed_tables(
                hook.database(job.origin), job.patterns, _names(self.tables)
            )
            out = root / run / _safe(job.name)
            planned.append({**job.to_json(), "tables": tables, "out": str(out)})
            self.log.info("%s -> %s: %s (out %s)", job.origin, job.targets, tables, out)
        return planned


class BinlogsyncReconcileOperator(SparkSubmitOperator):
    """`spark_jobs/reconcile_job.py` through the Spark provider's spark-submit (connection
    `spark_default`: `local[*]`, a standalone master, YARN, Kubernetes) for every planned job
    of the run, in one Spark application (one driver and one set of executors, whatever the
    number of jobs; each job its own `--job`, compared one after the other): the comparison
    runs in spark-submit's driver and its executors, never in this task's process.
    binlogsync's code goes along as `--py-files` (executors need not have it); the databases'
    passwords as files of their own (`--files`, one per database, mode 0600, removed
    afterwards), never in the arguments, the Spark conf or the environment. Differences are
    not this task's failure: the result task reads each job's report and decides; only a run
    in which a job could not compare fails here."""

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "jobs",
        "repair",
        "mode",
    )

    def __init__(
        self,
        *,
        jobs: Sequence[dict[str, Any]] | str,
        repair: bool = False,
        mode: str = "auto",
        binlogsync_conn_id: str = BinlogsyncHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("application", str(RECONCILE_JOB))
        kwargs.setdefault("name", "binlogsync-reconcile")
        super().__init__(**kwargs)
        self.jobs = jobs
        self.repair = repair
        self.mode = mode  # site.RECONCILE_MODES
        self.binlogsync_conn_id = binlogsync_conn_id

    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        planned: list[dict[str, Any]] = list(self.jobs or [])  # type: ignore[arg-type]
        if not planned:
            raise AirflowSkipException("the plan found nothing to compare")
        hook = BinlogsyncHook(self.binlogsync_conn_id)
        outs = [Path(j["out"]) for j in planned]
        run_dir = outs[0].parent  # the plan puts every job's report in the run's folder
        via = hook.write_admin_config(run_dir / "reconcile.hub.toml")
        day = context.get("logical_date") or dt.datetime.now(dt.UTC)  # None when manual
        incremental = site.since_last(str(self.mode), day.date())
        secrets = run_dir / "reconcile.secrets"  # one file per database, whatever the jobs
        args: list[str] = []
        files: dict[Path, None] = {}
        for planned_job, out in zip(planned, outs, strict=True):
            job_args, job_files = site.reconcile_arguments(
                site.ReconcileJob.from_json(planned_job),
                planned_job["tables"],
                hook.database,
                out,
                _flag(self.repair),
                via,
                incremental,
                secrets,
            )
            args += [options_module.JOB_FLAG, json.dumps(job_args)]
            files.update(dict.fromkeys(job_files))
        self.application_args = args
        self.files = ",".join([*filter(None, [self.files]), *(str(f) for f in files)])
        # named so that the job sees spark-submit shipped it (shipping.shipped), not again
        code = shipping.build(run_dir / shipping.ZIP_NAME)
        self.py_files = ",".join([*filter(None, [self.py_files]), str(code)])
        cache = self._class_cache()
        failed: AirflowException | None = None
        try:
            super().execute(context)
        except AirflowException as exc:
            failed = exc
        finally:
            shutil.rmtree(secrets, ignore_errors=True)
            if cache is not None:
                cache.finish()
        summaries = [state.read(out / "summary.json") or {} for out in outs]
        if failed is not None:
            codes = [summary.get("exit_code") for summary in summaries]
            if 1 not in codes or not all(code in (0, 1) for code in codes):
                raise failed
            self.log.info("the copies differ; %s reads the reports", "reconcile_result")
        reports = []
        for planned_job, out, summary in zip(planned, outs, summaries, strict=True):
            spark = summary.get("spark", {})
            self.log.info(
                "%s: Spark application %s on %s",
                planned_job["name"],
                spark.get("app_id"),
                spark.get("master"),
            )
            reports.append({
                "job": planned_job["name"],
                "out": str(out),
                "spark": spark,
                "exit_code": summary.get("exit_code"),
                "tables": [
                    {k: t.get(k) for k in ("table", "target", "status", "source_rows", "target_rows")}
                    for t in summary.get("tables", [])
                ],
            })  # fmt: skip
        return {"jobs": reports}

    def _class_cache(self) -> sparkapp.ClassCache | None:
        """In client deploy mode the driver runs here: in this Python (which has binlogsync
        installed; a cluster's `spark.pyspark.python` is for its executors), and in
        spark-submit's own JVM, which gets the command line's class-data-sharing archive
        (sparkapp.ClassCache)."""
        conn = BaseHook.get_connection(self._conn_id)
        extra = conn.extra_dejson or {}
        if (self._deploy_mode or extra.get("deploy-mode") or "client") != "client":
            return None
        self.conf = dict(self.conf or {})
        self.conf.setdefault("spark.pyspark.driver.python", sys.executable)
        if "spark.driver.extraJavaOptions" in self.conf:
            return None  # the DAG's author chose the driver's options
        import pyspark

        java = sparkapp.java_command(os.environ)
        options = sparkapp.DRIVER_JVM_OPTIONS
        cache = None
        if java is not None:
            cache = sparkapp.ClassCache(
                Path(options_module.CLASS_CACHE).expanduser(),
                java,
                os.path.dirname(pyspark.__file__),
                str(pyspark.__version__),
            )
            options = f"{options} {cache.options()}".strip()
        self.conf["spark.driver.extraJavaOptions"] = options
        return cache


class ReconcileResultOperator(BaseOperator):
    """Read each planned job's report (ops/reconcile_run.py), keep it as the job's last
    reconciliation, and fail the run listing the differing rows unless they were repaired
    (or naming why a run could not compare)."""

    template_fields: Sequence[str] = ("jobs",)

    def __init__(self, *, jobs: Any, show: int = 50, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.jobs = jobs
        self.show = show

    def execute(self, context: Any) -> dict[str, Any]:
        outcomes: dict[str, Any] = {}
        problems: list[str] = []
        for job in self.jobs or []:
            try:
                outcome = reconcile_run.collect(Path(job["out"]), self.show)
            except BinlogsyncError as exc:
                problems.append(f"{job['name']}: {exc}")
                continue
            reconcile_run.keep(outcome, state_dir() / state.RECONCILE_DIR / _safe(job["name"]))
            outcomes[job["name"]] = outcome.to_json()
            self.log.info("%s: %s (%s rows differ)", job["name"], outcome.state, outcome.differing)
            try:
                reconcile_run.check(outcome)
            except BinlogsyncError as exc:
                problems.append(f"{job['name']}: {exc}")
        context["ti"].xcom_push(key="pins", value={
            name: sorted({
                str((t.get("source_positions") or {}).get("last"))
                for t in o["tables"] if t.get("source_positions")
            })
            for name, o in outcomes.items()
        })  # fmt: skip
        if problems:
            raise reconcile_run.ReconcileDifferences(" | ".join(problems))
        return {"at": _now(), "jobs": outcomes}


class PaperTimingOperator(BaseOperator):
    """The paper's Table 1, kept per run as JSON and PNG in the state folder (ops/timing.py).
    With `origin` empty: on throwaway sandbox servers beside native replication (a clone of
    the repository and mariadbd needed). With `origin` (and `targets`): the site's own
    pipeline, on the scratch table `table` of that origin (connections binlogsync_db_<host>),
    its native replicas (the origin connection's extra `replicas`) timed beside it."""

    template_fields: Sequence[str] = ("rows", "runs", "origin", "targets", "table")

    def __init__(
        self,
        *,
        rows: Sequence[int] | str = (100,),
        runs: int = 1,
        origin: str = "",
        targets: Sequence[str] | str = (),
        table: str = timing.SCRATCH_TABLE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.rows = rows
        self.runs = runs
        self.origin = origin
        self.targets = targets
        self.table = table

    def execute(self, context: Any) -> dict[str, Any]:
        rows = [int(n) for n in (_names(self.rows) if isinstance(self.rows, str) else self.rows)]
        out = state_dir() / state.TIMING_DIR
        origin = str(self.origin or "").strip()
        if not origin:
            result: Any = timing.run(out, rows, int(self.runs))
        else:
            targets = _names(self.targets)
            result = timing.run_site(
                out,
                BinlogsyncHook.database(origin),
                {t: BinlogsyncHook.database(t) for t in targets},
                rows,
                int(self.runs),
                replicas=BinlogsyncHook.replicas(origin),
                table=str(self.table),
                origin_name=origin,
            )
            if not result.replicas:
                self.log.info("%s", timing.NO_NATIVE)
        self.log.info("timing kept in %s and %s", result.json_path, result.png_path)
        return dict(result.to_json())


def _names(value: Sequence[str] | str | None) -> list[str]:
    """A list param, given as a list or as one comma-separated string."""
    if not value:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _number(value: Any, kind: type) -> Any:
    """None, '' and 'none' mean no limit."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    return kind(value)
