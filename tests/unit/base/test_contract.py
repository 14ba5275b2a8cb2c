"""The naming tables of docs/contracts.md against the code, the CRD and the chart: one name for
one concept everywhere, and a rename that skips one surface fails here."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
CONTRACTS = ROOT / "docs" / "contracts.md"
CRD = ROOT / "charts/gpu-auditor/crds/gpunodereports.gpu-auditor.io.yaml"
RULES = ROOT / "charts/gpu-auditor/files/prometheus-rules.yaml"
DASHBOARD = ROOT / "charts/gpu-auditor/files/dashboards/gpu-auditor.json"


def table(heading: str) -> list[list[str]]:
    """The rows of the first markdown table after `heading` (header and rule dropped)."""
    text = CONTRACTS.read_text()
    start = text.index(f"\n{heading}\n")
    rows: list[list[str]] = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    assert len(rows) > 2, f"no table under {heading}"
    return rows[2:]


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def resolve(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


# -- enumerations and names ------------------------------------------------------------------


@pytest.mark.parametrize("row", table("### Enumerations"), ids=lambda r: r[0])
def test_each_enumeration_has_exactly_the_documented_values_in_order(row: list[str]) -> None:
    _, code, values = row
    (path,) = ticked(code)
    enum = resolve(path)
    assert [member.value for member in enum] == ticked(values)


@pytest.mark.parametrize("row", table("### Labels and other names"), ids=lambda r: r[0])
def test_each_name_is_the_documented_constant(row: list[str]) -> None:
    _, code, value = row
    (path,) = ticked(code)
    (expected,) = ticked(value)
    assert resolve(path) == expected


def test_the_crd_carries_the_reports_names_and_the_same_enumerations() -> None:
    from gpu_auditor.base import contract, nodereport

    crd = yaml.safe_load(CRD.read_text())
    spec = crd["spec"]
    assert (spec["group"], spec["names"]["plural"], spec["names"]["kind"],
            spec["names"]["shortNames"]) == (nodereport.GROUP, nodereport.PLURAL,
                                             nodereport.KIND, [nodereport.SHORT_NAME])
    assert [v["name"] for v in spec["versions"]] == [nodereport.VERSION]
    body = spec["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    finding = body["findings"]["items"]["properties"]["kind"]
    assert finding["enum"] == [k.value for k in contract.FindingKind]
    allocated = body["gpus"]["items"]["properties"]["pods"]["items"]["properties"]["allocated"]
    assert allocated["enum"] == [a.value for a in nodereport.REPORT_ALLOCATED]
    strategy = body["sharingStrategy"]
    assert strategy.get("enum", [s.value for s in contract.SharingStrategy]) == [
        s.value for s in contract.SharingStrategy]


# -- metrics ------------------------------------------------------------------------------------


def documented_metrics() -> dict[str, tuple[str, tuple[str, ...], str]]:
    out = {}
    for name, kind, labels, component in table("### Metrics"):
        (metric,) = ticked(name)
        out[metric] = (kind, tuple(ticked(labels)), component.split()[0])
    return out


def _exposed(name: str, kind: str) -> str:
    return f"{name}_total" if kind == "counter" else name


def code_metrics() -> dict[str, tuple[str, tuple[str, ...], str]]:
    from prometheus_client.metrics import MetricWrapperBase

    from gpu_auditor.controller import metrics as operator_metrics
    from gpu_auditor.webhook import metrics as webhook_metrics
    from node_agent.collector import AgentCollector

    out = {}
    for family in AgentCollector(lambda: None, "n", process_labels=True).describe():
        out[family.name] = (family.type, family.labels, "agent")  # exposed names (_total)
    for module, component in ((operator_metrics, "operator"), (webhook_metrics, "webhook")):
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                kind = value._type
                out[_exposed(value._name, kind)] = (kind, tuple(value._labelnames), component)
    return out


def test_the_metrics_table_is_every_family_the_code_serves_with_its_labels() -> None:
    assert documented_metrics() == code_metrics()


def test_the_chart_queries_only_documented_metrics_and_labels() -> None:
    documented = documented_metrics()
    rules = yaml.safe_load(RULES.read_text())["groups"]
    texts = [r["expr"] for g in rules for r in g["rules"]]
    texts += re.findall(r'"(?:expr|query|definition)": "((?:[^"\\]|\\.)*)"',
                        DASHBOARD.read_text())
    assert texts
    for text in texts:
        text = json.loads(f'"{text}"') if "\\" in text else text
        for name, matchers in re.findall(r"\b(gpu_auditor_[a-z0-9_]+)(\{[^}]*\})?", text):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert base in documented, f"{name} in {text!r} is not in docs/contracts.md"
            # job and instance come with every scrape; cluster where a Prometheus adds it
            # (external labels, relabeling): the dashboard's cluster variable matches it or ""
            allowed = {*documented[base][1], "job", "instance", "le", "cluster"}
            for label in re.findall(r"([a-z_]+)\s*[!=]~?", matchers):
                assert label in allowed, f"{name}: label {label} is not documented ({text!r})"
