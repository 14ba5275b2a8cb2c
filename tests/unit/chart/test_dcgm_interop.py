"""The dcgm-exporter interop recording rules (files/dcgm-interop-rules.yaml): promtool on series
shaped as dcgm-exporter renders them, and the chart's switch."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from chartlib import CHART, ROOT, Render, only

pytestmark = pytest.mark.unit

RULES = CHART / "files" / "dcgm-interop-rules.yaml"
TESTS = ROOT / "tests" / "promtool" / "dcgm-interop.test.yaml"
# dcgm-exporter's GPU series, internal/pkg/rendermetrics/render_metrics.go (NVIDIA/dcgm-exporter
# at d5e5f510, 2026-05-12; `Hostname` before that commit): these labels first, in this order,
# then its Labels and Attributes.
DCGM_LEADING = ("gpu", "UUID", "pci_bus_id", "device", "modelName")
DCGM_MIG = ("GPU_I_PROFILE", "GPU_I_ID")
DCGM_HOST = ("Hostname", "hostname")


def test_promtool_accepts_the_interop_rules(promtool: Path) -> None:
    result = subprocess.run([str(promtool), "check", "rules", str(RULES)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_the_interop_rules_pass_their_promtool_tests(promtool: Path) -> None:
    result = subprocess.run([str(promtool), "test", "rules", str(TESTS)], capture_output=True,
                            text=True, timeout=120, cwd=TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _labels(series: str) -> list[str]:
    return re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', series.split("{", 1)[1])


def test_the_test_series_of_dcgm_are_shaped_as_dcgm_exporter_renders_them() -> None:
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    dcgm = [s["series"] for t in tests for s in t["input_series"]
            if s["series"].startswith("DCGM_FI_")]
    assert len(dcgm) >= 6
    shapes = set()
    for series in dcgm:
        labels = [name for name in _labels(series) if name not in ("job", "instance")]
        assert tuple(labels[:5]) == DCGM_LEADING, series
        rest = labels[5:]
        if rest[:2] == list(DCGM_MIG):
            rest = rest[2:]
        assert rest[0] in DCGM_HOST, series
        shapes.add((DCGM_MIG[1] in labels, rest[0]))
    # both releases' host label, and both a whole GPU and a MIG instance
    assert shapes == {(False, "Hostname"), (True, "hostname")}


def test_the_switch_adds_the_group_unchanged_and_is_off_by_default(render: Render) -> None:
    shipped = yaml.safe_load(RULES.read_text())["groups"]
    on = only(render("prometheusRule.enabled=true", "prometheusRule.dcgmInterop.enabled=true"),
              "PrometheusRule")["spec"]["groups"]
    off = only(render("prometheusRule.enabled=true"), "PrometheusRule")["spec"]["groups"]
    assert [g for g in on if g["name"] == "gpu-auditor.dcgm-interop"] == shipped
    assert "gpu-auditor.dcgm-interop" not in [g["name"] for g in off]
