"""`lint` over whole dashboards: the check has teeth on the chart's dashboard with a hard-coded
job, and the dashboard of gpu-auditor 0.1 (tests/fixtures/dashboards/gpu-auditor-0.1.json)
has the 61 findings the Go linter gave it."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from devtools.dashboard_lint import lint

from .lint_helpers import ROOT, with_hard_coded_job

pytestmark = pytest.mark.unit


DASHBOARD_0_1 = ROOT / "tests" / "fixtures" / "dashboards" / "gpu-auditor-0.1.json"


def test_the_linter_flags_a_hard_coded_job() -> None:
    """The check has teeth: the Agents up panel as it was in 0.1."""
    findings = lint(with_hard_coded_job(), strict=True)
    assert any("Agents up" in f.message and "job selector" in f.message
               and f.severity == "error" for f in findings), findings


def test_the_0_1_dashboard_has_the_go_linters_61_findings() -> None:
    """29 selectors without a `$job` matcher and 29 without `$instance`, no job or instance
    variable, editable."""
    findings = lint(json.loads(DASHBOARD_0_1.read_text()), strict=True)
    assert Counter(f.rule for f in findings) == {
        "target-job-rule": 29, "target-instance-rule": 29, "template-job-rule": 1,
        "template-instance-rule": 1, "uneditable-dashboard": 1}
