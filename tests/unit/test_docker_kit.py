"""The deployment tests' kept Docker data root is held by one session at a time: a second
holder gets None (and starts a root of its own), and the root is free again once released."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlogsync_dev.docker_kit import kept_root

pytestmark = pytest.mark.unit


def test_a_kept_root_is_held_by_one_session_at_a_time(tmp_path: Path) -> None:
    with kept_root("compose", tmp_path) as first:
        assert first == tmp_path / "compose"
        with kept_root("compose", tmp_path) as second:
            assert second is None
        with kept_root("ansible", tmp_path) as other:
            assert other == tmp_path / "ansible"
    with kept_root("compose", tmp_path) as again:
        assert again == tmp_path / "compose"
