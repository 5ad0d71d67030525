"""bench/reconcile_bench.py leaves nothing behind in the system's temporary folder: without
`--dir` its folder (the sandbox's servers and each run's report, about 2 GB after a 10M-row
run) is removed at the end, also when the bench fails; a `--dir` given is kept."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[2] / "bench" / "reconcile_bench.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reconcile_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_temporary_folder_is_removed_at_the_end_even_after_a_failure() -> None:
    bench = _bench()
    with bench.bench_root(None) as root:
        (root / "sandbox").mkdir()
        (root / "sandbox" / "report.parquet").write_bytes(b"x" * 1000)
        kept = root
    assert not kept.exists()
    with pytest.raises(RuntimeError), bench.bench_root(None) as root:
        failed = root
        raise RuntimeError("a run failed")
    assert not failed.exists()


def test_a_folder_given_with_dir_is_kept(tmp_path: Path) -> None:
    bench = _bench()
    with bench.bench_root(str(tmp_path / "mine")) as root:
        root.mkdir()
        (root / "report").write_text("kept")
    assert (tmp_path / "mine" / "report").read_text() == "kept"
