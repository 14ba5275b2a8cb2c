"""Helpers for the dashboard linter's tests: the chart's dashboard, and findings of one rule
compared with upstream's expected messages."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from devtools.dashboard_lint import lint

ROOT = Path(__file__).resolve().parents[4]
CHART = ROOT / "charts" / "gpu-auditor"
DASHBOARD = CHART / "files" / "dashboards" / "gpu-auditor.json"
PROMETHEUS: dict[str, Any] = {"type": "datasource", "query": "prometheus"}


def with_hard_coded_job() -> dict[str, Any]:
    """The chart's dashboard with the Agents up panel's query as it was in 0.1."""
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    (panel,) = [p for p in dashboard["panels"] if p["title"] == "Agents up"]
    panel["targets"][0]["expr"] = 'sum(up{job="gpu-auditor-agent"})'
    return dashboard


def findings_of(rule: str, dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f.severity, f.message) for f in lint(dashboard) if f.rule == rule]


def assert_findings(found: list[tuple[str, str]], expected: list[tuple[str, str]]) -> None:
    assert len(found) == len(expected), found
    for (severity, message), (want_severity, want) in zip(found, expected, strict=True):
        assert severity == want_severity
        before, _, after = want.partition("{parser}")
        pattern = re.escape(before) + (".+" + re.escape(after) if "{parser}" in want else "")
        assert re.fullmatch(pattern, message), (message, want)


def one_panel(panel: dict[str, Any], templates: list[dict[str, Any]],
              title: str = "dashboard") -> dict[str, Any]:
    return {"title": title, "templating": {"list": templates}, "panels": [panel]}
