"""The paper-timing job writes its JSON and PNG per run (real servers, small sizes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from binlogsync.errors import UsageError
from binlogsync.ops.timing import run


def test_timing_writes_json_and_a_png_per_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", "timing", "--out", str(tmp_path / "out"),
         "--rows", "100", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    stored = json.loads(Path(result["json"]).read_text())
    assert {c["dml"] for c in stored["cells"]} == {"insert", "update", "delete"}
    assert all(c["rows"] == 100 and c["seconds"] > 0 and c["native_seconds"] > 0
               for c in stored["cells"])  # fmt: skip
    assert all(c["paper_seconds"] in (77, 83, 143) for c in stored["cells"])
    png = Path(result["png"]).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert Path(result["png"]).parent == tmp_path / "out"


def test_timing_refuses_sizes_the_paper_has_not(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="statement counts"):
        run(tmp_path, [150])
