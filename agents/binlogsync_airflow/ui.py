"""The "binlogsync" page in the Airflow UI: a FastAPI app the plugin mounts at /binlogsync.

    GET /binlogsync/               the page (it fetches the overview every 5 s)
    GET /binlogsync/api/overview   ops/overview.py's map: the hub's numbers, the same as
                                   `binlogsync status --json`, and the jobs' last results
    GET /binlogsync/api/timing.png the latest paper_timing plot
    GET /binlogsync/api/reconcile/{job}/summary.json
                                   the report (summary.json) of that reconcile job's last run;
                                   `job` must be a job the state folder knows, and the file
                                   is the one the job recorded: no other path is ever served

Every endpoint needs the Airflow login: the user comes from Airflow's own token (the UI's
cookie or a bearer token), so a request without it is answered 401, as the REST API is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse

from binlogsync.ops import overview, state

from .hooks import BinlogsyncHook, state_dir

PAGE = Path(__file__).with_name("page.html")

app = FastAPI(title="binlogsync", docs_url=None, redoc_url=None, openapi_url=None)
User = Annotated[Any, Depends(get_user)]


@app.get("/", response_class=HTMLResponse)
def page(user: User) -> HTMLResponse:
    return HTMLResponse(PAGE.read_text())


@app.get("/api/overview")
def overview_json(user: User) -> dict[str, Any]:
    # A sync endpoint: FastAPI runs it in a thread, so the hub's answer never blocks the loop.
    try:
        access = BinlogsyncHook().admin_config()
    except Exception as exc:  # a missing or wrong connection is shown on the page
        data = overview.build_offline(state_dir())
        data["hub_error"] = f"connection binlogsync_default: {exc}"
        return data
    return overview.build(access, state_dir())


@app.get("/api/reconcile/{job}/summary.json")
def reconcile_summary(job: str, user: User) -> FileResponse:
    summary = overview.reconcile_summary(state_dir(), job)
    if summary is None:
        raise HTTPException(404, "no reconciliation report for this job")
    return FileResponse(summary, media_type="application/json")


@app.get("/api/timing.png")
def timing_png(user: User) -> FileResponse:
    latest = overview.latest_timing(state_dir())
    if not latest or not latest["png"]:
        raise HTTPException(404, "no paper_timing run yet")
    return FileResponse(state_dir() / state.TIMING_DIR / latest["png"], media_type="image/png")
