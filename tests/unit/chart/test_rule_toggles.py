"""The PrometheusRule's toggles (kube-prometheus-stack's conventions): `disabled` by alert name,
`additionalRuleLabels`, `additionalRuleAnnotations`, `runbookUrl`. The rules helm renders with
them are run through real promtool against every case of tests/promtool/, the expectations
changed as the toggles say."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import CHART, KUBE_VERSION, ROOT, Render, only, run_helm

pytestmark = pytest.mark.unit

RULE_TESTS = ROOT / "tests" / "promtool" / "gpu-auditor-rules.test.yaml"
SETS = ("prometheusRule.enabled=true",
        "prometheusRule.disabled.GPUMemoryLeakSuspected=true",
        "prometheusRule.disabled.GPUAuditorKubeletDown=true",
        "prometheusRule.additionalRuleLabels.team=ml-platform",
        "prometheusRule.additionalRuleLabels.severity=info",
        "prometheusRule.additionalRuleAnnotations.dashboard=https://grafana.example.com/d/x",
        "prometheusRule.runbookUrl=https://wiki.example.com/runbooks/")


def _alerts(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in spec["groups"] for r in g["rules"] if "alert" in r}


def _expected(test: dict[str, Any]) -> dict[str, Any]:
    """The promtool cases of tests/promtool/, as they must read with SETS applied."""
    out = copy.deepcopy(test)
    for case in out.get("alert_rule_test", []):
        name = case["alertname"]
        if name in ("GPUMemoryLeakSuspected", "GPUAuditorKubeletDown"):
            case["exp_alerts"] = []
            continue
        for alert in case.get("exp_alerts") or []:
            alert["exp_labels"]["team"] = "ml-platform"  # severity: the alert's own wins
            alert["exp_annotations"]["dashboard"] = "https://grafana.example.com/d/x"
            alert["exp_annotations"]["runbook_url"] = (
                f"https://wiki.example.com/runbooks/{name.lower()}")
    return out


def test_the_rendered_rules_with_every_toggle_pass_promtool(
        render: Render, promtool: Path, tmp_path: Path) -> None:
    spec = only(render(*SETS), "PrometheusRule")["spec"]
    rules = tmp_path / "rendered-rules.yaml"
    rules.write_text(yaml.safe_dump(spec))
    check = subprocess.run([str(promtool), "check", "rules", str(rules)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    suite = yaml.safe_load(RULE_TESTS.read_text())
    suite["rule_files"] = [str(rules)]
    suite["tests"] = [_expected(t) for t in suite["tests"]]
    tests = tmp_path / "rendered-rules.test.yaml"
    tests.write_text(yaml.safe_dump(suite))
    result = subprocess.run([str(promtool), "test", "rules", str(tests)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_disabled_alerts_are_left_out_and_the_others_keep_their_rule_text(
        render: Render) -> None:
    shipped = _alerts(yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text()))
    rendered = _alerts(only(render(*SETS), "PrometheusRule")["spec"])
    assert set(shipped) - set(rendered) == {"GPUMemoryLeakSuspected", "GPUAuditorKubeletDown"}
    for name, rule in rendered.items():
        assert rule["expr"] == shipped[name]["expr"]
        assert rule.get("for") == shipped[name].get("for")
        assert rule["labels"] == {**shipped[name]["labels"], "team": "ml-platform"}


def test_a_whole_group_disabled_disappears(helm: Path) -> None:
    out = run_helm(helm, "template", "r", str(CHART), "--kube-version", KUBE_VERSION,
                   "--set", "prometheusRule.enabled=true",
                   "--set", "prometheusRule.disabled.GPUCUDAOutOfMemoryDiagnosed=true",
                   "--show-only", "templates/prometheusrule.yaml").stdout
    groups = [g["name"] for g in yaml.safe_load(out)["spec"]["groups"]]
    assert "gpu-auditor.diagnoses" not in groups and "gpu-auditor.gpu" in groups


def test_a_name_in_disabled_that_is_no_alert_fails_the_install(helm: Path) -> None:
    result = run_helm(helm, "template", "r", str(CHART), "--kube-version", KUBE_VERSION,
                      "--set", "prometheusRule.enabled=true",
                      "--set", "prometheusRule.disabled.GPUMemoryNearlyFul=true", check=False)
    assert result.returncode != 0
    assert "prometheusRule.disabled: GPUMemoryNearlyFul is no alert of this chart" in \
        result.stderr


def test_a_runbook_url_that_is_not_http_is_refused_by_the_schema(helm: Path) -> None:
    result = run_helm(helm, "template", "r", str(CHART), "--kube-version", KUBE_VERSION,
                      "--set", "prometheusRule.runbookUrl=javascript:alert(1)", check=False)
    assert result.returncode != 0 and "runbookUrl" in result.stderr
