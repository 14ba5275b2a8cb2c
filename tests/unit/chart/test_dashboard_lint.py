"""Grafana's dashboard-linter over the chart's dashboard: no finding, in strict mode.

dashboard-linter is built from its Go module at a pinned commit into
~/.cache/gpu-auditor/bin (scripts/build-dashboard-linter.sh; `make tools`). It checks, among
others, that every query has job and instance matchers from `$job`/`$instance` variables
(multi-select, allValue .+), that rates use `$__rate_interval`, that every panel has a unit,
a description and the templated datasource, and that the dashboard is not editable. The
dashboard of gpu-auditor 0.1 (a hard-coded `up{job="gpu-auditor-agent"}`, no job or instance
variable) had 61 findings; none is accepted now.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from chartlib import CHART, tool_missing

pytestmark = pytest.mark.unit

DASHBOARD = CHART / "files" / "dashboards" / "gpu-auditor.json"


@pytest.fixture(scope="module")
def linter() -> Path:
    cache = Path(os.environ.get("GPU_AUDITOR_CACHE", Path.home() / ".cache" / "gpu-auditor"))
    path = Path(os.environ.get("GPU_AUDITOR_BIN", cache / "bin")) / "dashboard-linter"
    if not os.access(path, os.X_OK):
        tool_missing(f"dashboard-linter not found at {path} "
                     "(run scripts/build-dashboard-linter.sh)")
    return path


def lint(linter: Path, dashboard: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(linter), "lint", "--strict", str(dashboard)],
                          capture_output=True, text=True, timeout=60, cwd=dashboard.parent)


def findings(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (result.stdout + result.stderr).splitlines()
            if "Dashboard '" in line]


def test_the_dashboard_has_no_dashboard_linter_finding(linter: Path) -> None:
    result = lint(linter, DASHBOARD)
    assert findings(result) == []
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_linter_flags_a_hard_coded_job(linter: Path, tmp_path: Path) -> None:
    """The check has teeth: the Agents up panel as it was in 0.1."""
    dashboard = json.loads(DASHBOARD.read_text())
    (panel,) = [p for p in dashboard["panels"] if p["title"] == "Agents up"]
    panel["targets"][0]["expr"] = 'sum(up{job="gpu-auditor-agent"})'
    path = tmp_path / "gpu-auditor.json"
    path.write_text(json.dumps(dashboard))
    result = lint(linter, path)
    assert result.returncode != 0
    assert any("Agents up" in f and "job selector" in f for f in findings(result)), \
        findings(result)
