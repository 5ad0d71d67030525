"""BinlogsyncDagBundle: the DAGs that ship inside this package, as an Airflow DAG bundle, so an
Airflow that has binlogsync installed (`pip install 'binlogsync[airflow]'`) runs them without
copying any file into its DAGs folder. Add it beside the bundles Airflow already has:

    [dag_processor]
    dag_bundle_config_list = [
        {"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}},
        {"name": "binlogsync", "classpath": "binlogsync_airflow.bundle.BinlogsyncDagBundle", "kwargs": {}}
      ]

It is a local bundle (no versions): the DAGs change when the package is upgraded, on every
machine that runs the dag processor or tasks (they must all have the same binlogsync).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.dag_processing.bundles.local import LocalDagBundle

DAGS = Path(__file__).resolve().parent / "dags"


class BinlogsyncDagBundle(LocalDagBundle):
    """A LocalDagBundle whose path is this package's `dags` folder (any `path` given is
    refused: the bundle is the package's DAGs or nothing)."""

    def __init__(self, **kwargs: Any) -> None:
        if kwargs.get("path") not in (None, str(DAGS)):
            raise ValueError(
                "BinlogsyncDagBundle serves the DAGs of the installed binlogsync package; "
                f"it takes no path (got {kwargs['path']!r}). For DAG files of your own use "
                "airflow.dag_processing.bundles.local.LocalDagBundle"
            )
        kwargs["path"] = str(DAGS)
        super().__init__(**kwargs)
