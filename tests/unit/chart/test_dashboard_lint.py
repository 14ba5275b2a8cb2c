"""Grafana's dashboard-linter rules over the chart's dashboard: no finding, in strict mode.

The rules are devtools.dashboard_lint, a Python port of grafana/dashboard-linter at commit
6d38b915eed8 (the Go module is no longer served and needs AGPL Loki). They check, among others,
that every query has job and instance matchers from `$job`/`$instance` variables
(multi-select, allValue .+), that rates use `$__rate_interval`, that every panel has a unit,
a description and the templated datasource, and that the dashboard is not editable. The
dashboard of gpu-auditor 0.1 (a hard-coded `up{job="gpu-auditor-agent"}`, no job or instance
variable; tests/fixtures/dashboards/gpu-auditor-0.1.json) had 61 findings from the Go linter,
and has the same 61 from the port; none is accepted now.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from chartlib import CHART

from devtools.dashboard_lint import lint, main

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = CHART / "files" / "dashboards" / "gpu-auditor.json"
DASHBOARD_0_1 = ROOT / "tests" / "fixtures" / "dashboards" / "gpu-auditor-0.1.json"


def with_hard_coded_job() -> dict[str, Any]:
    """The chart's dashboard with the Agents up panel's query as it was in 0.1."""
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    (panel,) = [p for p in dashboard["panels"] if p["title"] == "Agents up"]
    panel["targets"][0]["expr"] = 'sum(up{job="gpu-auditor-agent"})'
    return dashboard


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devtools.dashboard_lint", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_the_dashboard_has_no_dashboard_linter_finding() -> None:
    assert lint(json.loads(DASHBOARD.read_text()), strict=True) == []


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


def test_the_cli_passes_the_chart_dashboard(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--strict", str(DASHBOARD)]) == 0
    assert capsys.readouterr().out == ""


def test_the_cli_prints_upstreams_message_and_fails(tmp_path: Path) -> None:
    path = tmp_path / "gpu-auditor.json"
    path.write_text(json.dumps(with_hard_coded_job()))
    result = run_cli("--strict", str(path))
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines() == [
        "[error] target-instance-rule: Dashboard 'gpu-auditor', panel 'Agents up', target idx "
        "'0' invalid PromQL query 'sum(up{job=\"gpu-auditor-agent\"})': instance selector not "
        "found",
        "[error] target-job-rule: Dashboard 'gpu-auditor', panel 'Agents up', target idx '0' "
        "invalid PromQL query 'sum(up{job=\"gpu-auditor-agent\"})': job selector is "
        "gpu-auditor-agent, not $job"]


def test_warnings_fail_the_cli_only_with_strict(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    (job,) = [t for t in dashboard["templating"]["list"] if t["name"] == "job"]
    job["label"] = "job"
    path = tmp_path / "d.json"
    path.write_text(json.dumps(dashboard))
    loose, strict = run_cli(str(path)), run_cli("--strict", str(path))
    assert (loose.returncode, strict.returncode) == (0, 1)
    assert loose.stdout.startswith("[warning] template-job-rule: Dashboard 'gpu-auditor' job ")
    assert strict.stdout.startswith("[error] template-job-rule: Dashboard 'gpu-auditor' job ")


@pytest.mark.parametrize(("content", "error"), [
    ("{", "not JSON: Expecting property name enclosed in double quotes"),
    ("[]", "not a dashboard: the JSON is a list, not an object"),
    ('{"title": 3}', "dashboard.title: expected a string, got the number 3"),
    ('{"panels": [{"targets": {}}]}', "dashboard.panels[0].targets: expected a list"),
    ('{"templating": {"list": [{"type": "query"}]}}', "invalid type for field 'query': <nil>"),
])
def test_input_that_is_not_a_dashboard_exits_2_without_a_traceback(
        tmp_path: Path, content: str, error: str) -> None:
    path = tmp_path / "d.json"
    path.write_text(content)
    result = run_cli(str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    assert error in result.stderr
    assert "Traceback" not in result.stderr


def test_a_lint_configuration_file_is_refused_rather_than_ignored(tmp_path: Path) -> None:
    (tmp_path / ".lint").write_text("exclusions:\n  target-job-rule: {}\n")
    (tmp_path / "d.json").write_text(DASHBOARD.read_text())
    result = run_cli(str(tmp_path / "d.json"))
    assert result.returncode == 2
    assert ".lint exists" in result.stderr
