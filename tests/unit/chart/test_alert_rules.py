"""The alert rules the chart ships (files/prometheus-rules.yaml), checked by promtool."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import CHART, ROOT

pytestmark = pytest.mark.unit

RULES = CHART / "files" / "prometheus-rules.yaml"
RULE_TESTS = ROOT / "tests" / "promtool" / "gpu-auditor-rules.test.yaml"
INSTALL_DOC = ROOT / "docs" / "install.md"


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_accepts_the_rule_file(promtool: Path) -> None:
    result = subprocess.run([str(promtool), "check", "rules", str(RULES)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_passes_its_promtool_unit_tests(promtool: Path) -> None:
    result = subprocess.run([str(promtool), "test", "rules", str(RULE_TESTS)],
                            capture_output=True, text=True, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_unit_tested_both_firing_and_quiet() -> None:
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
             for case in test.get("alert_rule_test", [])]
    for alert in alerts():
        mine = [c for c in cases if c["alertname"] == alert["alert"]]
        assert any(c.get("exp_alerts") for c in mine), f"{alert['alert']}: no firing case"
        assert any(not c.get("exp_alerts") for c in mine), f"{alert['alert']}: no quiet case"


def test_every_recording_rule_is_unit_tested() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    records = [rule["record"] for group in groups for rule in group["rules"] if "record" in rule]
    tested = [case["expr"] for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for case in test.get("promql_expr_test", [])]
    assert records
    for record in records:
        assert any(record in expr for expr in tested), f"{record}: no promql_expr_test"


def test_precision_counts_fixed_over_fixed_and_not_fixed_and_never_divides_by_zero() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    [rule] = [r for g in groups for r in g["rules"]
              if r.get("record") == "gpu_auditor:recommendation_precision:ratio7d"]
    assert 'outcome="fixed"' in rule["expr"] and 'outcome=~"fixed|not-fixed"' in rule["expr"]
    assert re.search(r"\) > 0\s*\)\s*$", rule["expr"])


def test_every_alert_has_a_severity_summary_description_and_runbook() -> None:
    for alert in alerts():
        assert alert["labels"]["severity"] in ("critical", "warning", "info"), alert["alert"]
        annotations = alert["annotations"]
        assert {"summary", "description", "runbook_url"} <= annotations.keys(), alert["alert"]
        assert annotations["runbook_url"].endswith("#" + alert["alert"].lower())


def test_every_runbook_link_has_a_section_in_the_install_doc() -> None:
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in INSTALL_DOC.read_text().splitlines() if line.startswith("#")
    }
    for alert in alerts():
        assert alert["alert"].lower() in headings, f"docs/install.md: no section {alert['alert']}"


@pytest.mark.parametrize("topic, pattern", [
    ("GPU memory nearly full", r"gpu_memory_used_bytes"),
    ("unintended GPU sharing", r'kind="unintended-sharing"'),
    ("GPU used without a request", r'allocated="false"'),
    ("CUDA OOM diagnosed, with the kind", r"increase\(gpu_auditor_diagnoses_total"),
    ("suspected GPU memory leak", r"predict_linear\(gpu_auditor_container_gpu_memory_bytes"),
    ("agent down", r'up\{job="gpu-auditor-agent"\} == 0'),
    ("agent absent", r'absent\(up\{job="gpu-auditor-agent"\}\)'),
    ("NVML down", r"gpu_auditor_agent_nvml_up == 0"),
])
def test_the_alerts_the_issue_asks_for_exist(topic: str, pattern: str) -> None:
    assert any(re.search(pattern, a["expr"]) for a in alerts()), topic


def test_cuda_oom_alert_keeps_the_kind_and_the_leak_alert_waits() -> None:
    by_name = {a["alert"]: a for a in alerts()}
    assert "by (namespace, kind)" in by_name["GPUCUDAOutOfMemoryDiagnosed"]["expr"]
    assert by_name["GPUMemoryLeakSuspected"]["for"] == "15m"
