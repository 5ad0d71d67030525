"""What the scheduled jobs learn from the hub about a site: its origins and, for the
reconcile job, which targets of an origin to compare on which tables.

The hub's routes (STATUS `routes`) say what goes where; the databases come from the caller
(the Airflow DAGs read them from connections named `binlogsync_db_<HOST>`). Targets of one
origin that receive the same table patterns under the same schema renames are compared in
one run (the source is read once for all of them); others get a run of their own.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .. import mysql, tls
from ..config import DatabaseSettings, PostgresSettings
from ..errors import UsageError
from ..seed.tables import plan as routed_plan


@dataclass(frozen=True)
class ReconcileJob:
    name: str  # unique per site: the origin, or origin+target… when it has several groups
    origin: str
    targets: tuple[str, ...]
    patterns: tuple[str, ...]  # the routes' table patterns
    rename: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "origin": self.origin,
            "targets": list(self.targets),
            "patterns": list(self.patterns),
            "rename": self.rename,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReconcileJob:
        """The job `to_json` made (extra keys, such as the plan's `tables` and `out`, ignored)."""
        return cls(
            data["name"],
            data["origin"],
            tuple(data["targets"]),
            tuple(data["patterns"]),
            dict(data.get("rename", {})),
        )


def origins(status: dict[str, Any]) -> list[str]:
    """Every origin the hub routes, in name order."""
    return sorted({str(r["origin"]) for r in status.get("routes", ())})


def reconcile_jobs(status: dict[str, Any], only: Sequence[str] = ()) -> list[ReconcileJob]:
    """The reconciliations that cover every routed (origin, target); `only` limits them to
    those origins. UsageError names an origin of `only` that the hub does not route."""
    unknown = sorted(set(only) - set(origins(status)))
    if unknown:
        raise UsageError(
            f"the hub routes no origin named {', '.join(unknown)} (it routes "
            f"{', '.join(origins(status)) or 'nothing'})",
            "give origins as the hub's routes name them, or none for all",
        )
    groups: dict[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]], list[str]] = {}
    for origin in origins(status):
        if only and origin not in only:
            continue
        per_target: dict[str, tuple[list[str], dict[str, str]]] = {}
        for route in status.get("routes", ()):
            if route["origin"] != origin:
                continue
            for target in route["targets"]:
                patterns, rename = per_target.setdefault(target, ([], {}))
                patterns.extend(route.get("tables", ()))
                rename.update(route.get("rename", {}))
        for target, (patterns, rename) in sorted(per_target.items()):
            key = (origin, tuple(sorted(set(patterns))), tuple(sorted(rename.items())))
            groups.setdefault(key, []).append(target)
    jobs = []
    for (origin, wanted_patterns, renames), targets in groups.items():
        several = sum(1 for k in groups if k[0] == origin) > 1
        name = f"{origin}+{'+'.join(targets)}" if several else origin
        jobs.append(ReconcileJob(name, origin, tuple(targets), wanted_patterns, dict(renames)))
    return jobs


def routed_tables(
    source: DatabaseSettings, patterns: Sequence[str], wanted: Sequence[str]
) -> list[str]:
    """`schema.table` of every base table of the origin that the routes send and that
    matches `wanted` (globs; empty: all). UsageError when none does or one has no key."""
    conn = mysql.connect(source, "listing the routed tables")
    try:
        with conn.cursor() as cur:
            return [t.name for t in routed_plan(cur, patterns, list(wanted) or None)]
    finally:
        conn.close()


def _file_name(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", host) + ".pw"


def database_url(host: str, db: DatabaseSettings, secrets: Path) -> tuple[str, Path]:
    """A reconcile URL for `db` whose password is in a file of its own in `secrets` (written
    here, mode 0600), never in the URL: argv shows in `ps` and in Airflow's rendered
    arguments, and an environment variable would show in Spark's (the provider turns
    `env_vars` into Spark conf on YARN and Kubernetes). The file's path, for `--files`."""
    secrets.mkdir(parents=True, exist_ok=True)
    os.chmod(secrets, 0o700)
    path = (secrets / _file_name(host)).resolve()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(db.password)
    user = quote(db.user, safe="")
    file = quote(str(path), safe="/")
    # TLS travels as URL options naming the files (never their contents): on a cluster the
    # executors need them at the same paths.
    options = "".join(
        f"&{key}={quote(value, safe='/')}" for key, value in db.tls.to_query().items()
    ) if db.tls != tls.DEFAULT else ""  # fmt: skip
    if isinstance(db, PostgresSettings):
        database = quote(db.database, safe="")
        url = f"postgresql://{user}@{db.host}:{db.port}/{database}?password_file={file}{options}"
    else:
        url = f"mysql://{user}@{db.host}:{db.port}?password_file={file}{options}"
    return url, path


RECONCILE_MODES = ("auto", "full", "since_last")
FULL_WEEKDAY = 6  # Sunday: `auto` compares every row once a week, only changed keys otherwise


def since_last(mode: str, day: dt.date) -> bool:
    """Whether a reconcile run in `mode` on `day` compares only the keys changed since the last
    equal run. Full runs stay the way to catch changes made outside replication."""
    if mode not in RECONCILE_MODES:
        raise UsageError(f"mode must be one of {', '.join(RECONCILE_MODES)}, not {mode!r}")
    if mode == "auto":
        return day.weekday() != FULL_WEEKDAY
    return mode == "since_last"


def reconcile_arguments(
    job: ReconcileJob,
    tables: Sequence[str],
    databases: Callable[[str], DatabaseSettings],
    out: Path,
    repair: bool,
    via: Path | None,
    incremental: bool = False,
    secrets: Path | None = None,
) -> tuple[list[str], list[Path]]:
    """The arguments of `spark_jobs/reconcile_job.py` for `job`, and the password files they
    name (written into `secrets`, by default `OUT.secrets/`; remove them after the run).
    `via` is an [admin] config file that reaches the hub (repair)."""
    folder = secrets if secrets is not None else out.with_name(out.name + ".secrets")
    source, first = database_url(job.origin, databases(job.origin), folder)
    args = ["--source", source]
    files = [first]
    for target in job.targets:
        url, path = database_url(target, databases(target), folder)
        args += ["--target", url]
        files.append(path)
    args += ["--tables", ",".join(tables), "--out", str(out)]
    for src, dst in sorted(job.rename.items()):
        args += ["--rename", f"{src}={dst}"]
    if incremental:
        args += ["--since-last"]
    # The hub's names: the report names each target by them, and a target that holds several
    # origins is pinned to this one's checkpoint.
    args += ["--origin", job.origin]
    for target in job.targets:
        args += ["--target-host", target]
    if repair:
        if via is None:
            raise UsageError("a repair needs a config that reaches the hub")
        args += ["--repair", "--via", str(via)]
    return args, files


def caught_up(
    status: dict[str, Any], target: str, origin: str | None = None, max_backlog: int = 0
) -> tuple[bool, str]:
    """Whether `target` has applied everything the hub holds for it (from `origin`, or from
    every origin), within `max_backlog` transactions; and what it waits for, when not."""
    rows = [
        t
        for t in status.get("targets", ())
        if t["target"] == target and (origin is None or t["origin"] == origin)
    ]
    if not rows:
        return False, f"the hub has no cursor for {target}" + (f" from {origin}" if origin else "")
    waiting = []
    for t in rows:
        if t.get("detached"):
            waiting.append(f"{t['origin']} -> {target} is detached (a reseed brings it back)")
        elif t.get("blocked"):
            waiting.append(f"{t['origin']} -> {target} is blocked: {t['blocked']}")
        elif int(t.get("backlog", 0)) > max_backlog:
            waiting.append(
                f"{t['origin']} -> {target}: {t['backlog']} transaction(s) to apply, the oldest "
                f"{t.get('backlog_age_seconds', 0):.0f} s old"
                + (f"; last error: {t['last_error']}" if t.get("last_error") else "")
            )
    return not waiting, "; ".join(waiting) or "caught up"


def all_caught_up(
    status: dict[str, Any], target: str | Sequence[str], origin: str | None, max_backlog: int
) -> tuple[bool, str]:
    """caught_up for one target or each of a list; the message names
    every target."""
    names = [target] if isinstance(target, str) else list(target)
    results = [(name, *caught_up(status, name, origin, max_backlog)) for name in names]
    return all(done for _, done, _ in results), "; ".join(f"{n}: {why}" for n, _, why in results)
