"""Fixtures of the Airflow tests: one migrated AIRFLOW_HOME per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflowkit import base_env, migrate


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("airflow")
    migrate(base_env(home))
    return home
