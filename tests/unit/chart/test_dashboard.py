"""The Grafana dashboard the chart ships (files/dashboards/gpu-auditor.json)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import CHART, ROOT

from devtools.dashboard_lint import lint

pytestmark = pytest.mark.unit

DASHBOARD = CHART / "files" / "dashboards" / "gpu-auditor.json"
RULES = CHART / "files" / "prometheus-rules.yaml"

# Grafana's variables, replaced by what Grafana would send with "All" selected.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h",
                     "$node": ".*", "$uuid": ".*", "$namespace": ".*",
                     "$cluster": ".*", "$job": ".+", "$instance": ".+"}


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]


def to_promql(expr: str) -> str:
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    return expr


def contract_metric_names() -> set[str]:
    """Metric names in docs/contracts.md; `_used_bytes` after a name is that name's sibling."""
    names: set[str] = set()
    last = ""
    for token in re.findall(r"`(gpu_auditor_[a-z0-9_]+|_[a-z0-9_]+)",
                            (ROOT / "docs" / "contracts.md").read_text()):
        if token.startswith("gpu_auditor_"):
            last = token
            names.add(token)
        elif last:
            names.add(last.rsplit("_", 2)[0] + token)
    histograms = {n for n in names if n.endswith("_seconds") and "latency" in n}
    names |= {h + s for h in histograms for s in ("_bucket", "_sum", "_count")}
    return names


def test_dashboard_is_json_with_a_stable_uid_and_a_datasource_variable() -> None:
    dashboard = load()
    assert dashboard["uid"] == "gpu-auditor"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for p in panels(dashboard):
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            assert p.get("description"), f"panel {p['title']!r} has no description"


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in panels(load())]
    assert len(ids) == len(set(ids))


def test_every_dashboard_and_rule_metric_is_a_contract_metric() -> None:
    known = contract_metric_names()
    assert "gpu_auditor_gpu_memory_free_bytes" in known  # the sibling shorthand was read
    rules = yaml.safe_load(RULES.read_text())["groups"]
    texts = expressions(load()) + [r["expr"] for g in rules for r in g["rules"]]
    for text in texts:
        for name in re.findall(r"\bgpu_auditor_[a-z0-9_]+", text):
            assert name in known, f"{name} (in {text!r}) is not in docs/contracts.md"


def test_every_dashboard_expression_parses(promtool: Path, tmp_path: Path) -> None:
    exprs = expressions(load())
    variables = [v for v in load()["templating"]["list"] if v["type"] == "query"]
    for variable in variables:
        match = re.fullmatch(r"label_values\((.*), *\w+\)", variable["definition"])
        assert match, variable["definition"]
        exprs.append(match.group(1))
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}", "expr": to_promql(e)} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([str(promtool), "check", "rules", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("what, pattern", [
    ("GPU memory by node and GPU", r"^gpu_auditor_gpu_memory_used_bytes\{"),
    ("per pod, by namespace/pod", r"sum by \(namespace, pod, allocated\) \(gpu_auditor_container"),
    ("unrequested use", r'allocated="false"'),
    ("diagnoses over time by kind", r"sum by \(kind\) \(increase\(gpu_auditor_diagnoses_total"),
    ("agent health: NVML", r"gpu_auditor_agent_nvml_up"),
    ("agent health: kubelet", r"gpu_auditor_agent_kubelet_up"),
    ("agent health: collect duration", r"gpu_auditor_agent_collect_duration_seconds"),
    ("agent health: errors", r"rate\(gpu_auditor_agent_errors_total"),
])
def test_dashboard_shows(what: str, pattern: str) -> None:
    assert any(re.search(pattern, e) for e in expressions(load())), what


def test_per_pod_memory_is_stacked_in_one_panel_per_gpu() -> None:
    (panel,) = [p for p in panels(load()) if p.get("repeat")]
    assert panel["repeat"] == "uuid"
    assert panel["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert 'uuid=~"$uuid"' in panel["targets"][0]["expr"]


def test_the_dashboard_has_no_dashboard_linter_finding() -> None:
    assert lint(json.loads(DASHBOARD.read_text()), strict=True) == []
