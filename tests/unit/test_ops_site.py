"""ops/site.py and ops/overview.py without servers: reconcile jobs from the hub's routes, the
Spark job's arguments (passwords only in the environment), `caught_up`, the page's map."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from binlogsync.config import DatabaseSettings, PostgresSettings
from binlogsync.errors import UsageError
from binlogsync.ops import overview, site, state
from binlogsync.reconcile.urls import parse_url

pytestmark = pytest.mark.unit


def _status(*routes: dict) -> dict:  # type: ignore[type-arg]
    return {"routes": list(routes), "targets": [], "hosts": []}


def test_targets_with_the_same_routes_share_one_job_and_others_get_their_own() -> None:
    status = _status(
        {"origin": "db1", "targets": ["a", "b"], "tables": ["shop.*"], "rename": {}},
        {"origin": "db1", "targets": ["c"], "tables": ["shop.*"], "rename": {"shop": "copy"}},
        {"origin": "db2", "targets": ["a"], "tables": ["crm.*"], "rename": {}},
    )
    jobs = {j.name: j for j in site.reconcile_jobs(status)}
    assert set(jobs) == {"db1+a+b", "db1+c", "db2"}
    assert jobs["db1+a+b"].targets == ("a", "b")
    assert jobs["db1+c"].rename == {"shop": "copy"}
    assert [j.name for j in site.reconcile_jobs(status, ["db2"])] == ["db2"]
    with pytest.raises(UsageError, match="no origin named db9"):
        site.reconcile_jobs(status, ["db9"])


def test_reconcile_arguments_carry_no_password(tmp_path: Path) -> None:
    """Passwords go into files of their own (mode 0600) that the URLs name; neither the
    arguments nor anything else the operator hands to spark-submit holds them."""
    job = site.ReconcileJob("db1", "db1", ("a",), ("shop.*",), {"shop": "copy"})
    dbs = {
        "db1": DatabaseSettings("10.0.0.1", 3306, "rec@on", "s3cret"),
        "a": DatabaseSettings("10.0.0.2", 3307, "rec", "other"),
    }
    out = tmp_path / "run" / "db1"
    args, files = site.reconcile_arguments(
        job, ["shop.orders"], dbs.__getitem__, out, True, Path("/out/hub.toml")
    )
    assert not any("s3cret" in a or "other" in a for a in args)
    folder = tmp_path / "run" / "db1.secrets"
    assert files == [folder / "db1.pw", folder / "a.pw"]
    assert [f.read_text() for f in files] == ["s3cret", "other"]
    assert {oct(f.stat().st_mode & 0o777) for f in files} == {"0o600"}
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert f"mysql://rec%40on@10.0.0.1:3306?password_file={folder}/db1.pw" in args
    assert args[args.index("--rename") + 1] == "shop=copy"
    assert args[args.index("--target-host") + 1] == "a"
    # The job reads the same password back from the URL.
    source = parse_url(args[args.index("--source") + 1])
    assert (source.user, source.password) == ("rec@on", "s3cret")
    with pytest.raises(UsageError):
        site.reconcile_arguments(job, ["shop.orders"], dbs.__getitem__, out, True, None)
    dbs["a"] = PostgresSettings("10.0.0.3", 5433, "rec", "pgpw", "dw")  # a PostgreSQL target
    args, files = site.reconcile_arguments(job, ["shop.t"], dbs.__getitem__, out, False, None)
    assert f"postgresql://rec@10.0.0.3:5433/dw?password_file={folder}/a.pw" in args
    assert files[1].read_text() == "pgpw" and not any("pgpw" in a for a in args)


def test_reconcile_mode_full_weekly_and_since_last_otherwise(tmp_path: Path) -> None:
    sunday, monday = dt.date(2026, 11, 22), dt.date(2026, 11, 23)
    assert not site.since_last("auto", sunday) and site.since_last("auto", monday)
    assert site.since_last("since_last", sunday) and not site.since_last("full", monday)
    with pytest.raises(UsageError, match="since_last"):
        site.since_last("incremental", monday)
    job = site.ReconcileJob("db1", "db1", ("a",), ("shop.*",), {})
    dbs = {"db1": DatabaseSettings("h", 1, "u", "p"), "a": DatabaseSettings("h", 2, "u", "p")}
    args, _files = site.reconcile_arguments(
        job, ["shop.t"], dbs.__getitem__, tmp_path / "o", False, None, incremental=True
    )
    assert "--since-last" in args
    args, _files = site.reconcile_arguments(
        job, ["shop.t"], dbs.__getitem__, tmp_path / "o", False, None
    )
    assert "--since-last" not in args


def test_caught_up_names_what_a_target_waits_for() -> None:
    row = {"target": "a", "origin": "db1", "backlog": 0, "backlog_age_seconds": 0.0}
    assert site.caught_up({"targets": [row]}, "a") == (True, "caught up")
    late = {**row, "backlog": 5, "backlog_age_seconds": 12.0, "last_error": "boom"}
    done, why = site.caught_up({"targets": [late]}, "a")
    assert not done and "5 transaction(s)" in why and "boom" in why
    assert site.caught_up({"targets": [late]}, "a", max_backlog=5)[0]
    assert not site.caught_up({"targets": [{**row, "detached": True}]}, "a")[0]
    assert "no cursor for b" in site.caught_up({"targets": [row]}, "b")[1]


def test_overview_reads_the_jobs_results_and_survives_missing_ones(tmp_path: Path) -> None:
    assert overview.build_offline(tmp_path)["reconcile"] == []
    job = tmp_path / state.RECONCILE_DIR / "db1"
    state.keep(job, "last-reconcile.json", {
        "state": "different", "differing_rows": 3, "started_at": "2026-11-24T10:00:00",
        "tables": [{"source_positions": {"first": "0-1-5", "last": "0-1-9"}}], "out": "/x",
    })  # fmt: skip
    (tmp_path / "timing").mkdir()
    (tmp_path / "timing" / "timing-1.json").write_text(json.dumps({"worst_lag_ms": 3.5}))
    (tmp_path / "last-retention.json").write_text("{not json")  # half-written: ignored
    data = overview.build_offline(tmp_path)
    assert data["reconcile"][0]["pins"] == ["0-1-9"] and data["reconcile"][0]["differing_rows"] == 3
    assert data["timing"]["worst_lag_ms"] == 3.5 and data["timing"]["png"] is None
    assert data["retention"] is None
