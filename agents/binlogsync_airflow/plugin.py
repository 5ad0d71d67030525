"""Registers the binlogsync page in the Airflow UI (Airflow >= 3.1): the FastAPI app is
mounted in the API server at /binlogsync, and the external view puts it in the navigation
(Browse → binlogsync), shown at /plugin/binlogsync. Airflow finds it through the
`airflow.plugins` entry point of the installed binlogsync (pyproject.toml)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from .ui import app


class BinlogsyncPlugin(AirflowPlugin):
    name = "binlogsync"
    fastapi_apps = [{"app": app, "url_prefix": "/binlogsync", "name": "binlogsync"}]
    external_views = [
        {
            "name": "binlogsync",
            "href": "binlogsync/",
            "destination": "nav",
            "url_route": "binlogsync",
            "category": "browse",
        }
    ]
