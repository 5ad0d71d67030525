"""The alert rules shipped in deploy/prometheus: Prometheus' own promtool checks them and runs
their unit tests (binlogsync-alerts.test.yml: each alert fires on the series that mean it, a
blip does not page). promtool comes with Debian's `prometheus` package."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: apt-get install prometheus (Debian's package has it)"
    return found


def test_the_alert_rules_are_valid_and_their_unit_tests_pass() -> None:
    for command in (["check", "rules", "binlogsync-alerts.yml"],
                    ["test", "rules", "binlogsync-alerts.test.yml"]):  # fmt: skip
        done = subprocess.run(
            [promtool(), *command], cwd=RULES, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_unit_test_and_a_meaning_in_the_docs() -> None:
    import yaml

    rules = yaml.safe_load((RULES / "binlogsync-alerts.yml").read_text())
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    tests = yaml.safe_load((RULES / "binlogsync-alerts.test.yml").read_text())
    tested = {t["alertname"] for case in tests["tests"] for t in case["alert_rule_test"]}
    assert names == tested
    docs = (RULES.parents[1] / "docs" / "deploy.md").read_text()
    assert all(f"`{name}`" in docs for name in names), names
