"""`python -m devtools.dashboard_lint`: the chart's dashboard passes, upstream's message and
exit status on a finding, warnings failing only with --strict, bad input and lint
configuration files refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.dashboard_lint import main

from .lint_helpers import DASHBOARD, ROOT, with_hard_coded_job

pytestmark = pytest.mark.unit


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devtools.dashboard_lint", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


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
