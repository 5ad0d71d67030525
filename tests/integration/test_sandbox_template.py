"""The sandbox's template datadir, made by several test workers at the same moment.

Each `mariadb-install-db` bootstrap deletes every `#sql-*` file in its temporary folder when it
starts; sharing /tmp, one bootstrap removed another's temporary tables and that install failed
("Unknown table 'mysql.tmp_user_sys'"). CI lost four test modules' fixtures to it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from binlogsync_dev.sandbox import Sandbox

pytestmark = pytest.mark.integration


def test_templates_made_at_once_all_succeed(tmp_path: Path) -> None:
    # Four at once, three rounds: before the fix about one install in four failed this way.
    for round_ in range(3):
        boxes = [Sandbox(tmp_path / f"r{round_}-{i}") for i in range(4)]
        with ThreadPoolExecutor(len(boxes)) as pool:
            templates = list(pool.map(lambda box: box._template(), boxes))
        for template in templates:
            assert (template / "mysql" / "global_priv.frm").exists()
