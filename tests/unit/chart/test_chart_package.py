"""The chart as a package: lint, its documented values, the CRD it ships, rendered manifests."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import CHART, KUBE_VERSION, ROOT, run_helm

pytestmark = pytest.mark.unit

CI_VALUES = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
CRD = CHART / "crds" / "gpunodereports.gpu-auditor.io.yaml"


@pytest.mark.parametrize("values_file", [None, *CI_VALUES])
def test_helm_lint_is_clean(helm: Path, values_file: str | None) -> None:
    args = ["lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION]
    if values_file:
        args += ["-f", str(CHART / "ci" / values_file)]
    result = run_helm(helm, *args, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_there_are_ci_values_variants_for_the_switches() -> None:
    text = "\n".join((CHART / "ci" / f).read_text() for f in CI_VALUES)
    for switch in ("serviceMonitor", "podMonitor", "prometheusRule", "dashboards", "namespaces",
                   "enabled: false", "hostPID", "runAsUser", "podResourcesSocketGroup",
                   "reportPolicy", "metricsProxy", "tlsSecretName", "networkPolicy",
                   "metricsFrom", "cidrs"):
        assert switch in text, f"no ci/*-values.yaml exercises {switch}"


# -- values.yaml: every key documented, and the schema agrees ---------------------------------

def _schema_keys(schema: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...],
                                                                              dict[str, Any]]:
    out = {}
    for key, sub in schema.get("properties", {}).items():
        path = (*prefix, key)
        out[path] = sub
        out.update(_schema_keys(sub, path))
    return out


def _values_key_lines() -> list[tuple[tuple[str, ...], int, list[str]]]:
    """(key path, line number, lines) for every `key:` line of values.yaml outside list items."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    found = []
    for number, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z0-9_.\-/]+):( |$)", line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        found.append((tuple(k for _, k in stack), number, lines))
    return found


def test_every_value_has_a_comment_and_a_schema_entry() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    declared = _schema_keys(schema)
    for path, number, lines in _values_key_lines():
        parent = declared.get(path[:-1]) if len(path) > 1 else schema
        if parent is None or "properties" not in parent:
            continue  # inside a free-form value (resources, nodeSelector, probe timings...)
        assert path in declared, f"values.yaml:{number + 1}: {'.'.join(path)} not in the schema"
        if "properties" in declared[path]:
            continue  # a section; its keys carry the comments
        assert lines[number - 1].lstrip().startswith("#"), (
            f"values.yaml:{number + 1}: {'.'.join(path)} has no comment above it")


def test_every_schema_key_is_in_values_yaml() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    in_values = {path for path, _, _ in _values_key_lines()}
    for path in _schema_keys(schema):
        if path[:1] != ("global",) or path == ("global", "imageRegistry"):
            assert path in in_values, f"{'.'.join(path)} is in the schema but not in values.yaml"


def test_schema_closes_every_object_that_lists_its_keys() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    for path, sub in {(): schema, **_schema_keys(schema)}.items():
        if "properties" in sub and path != ("global",):  # shared with parent charts: open
            assert sub.get("additionalProperties") is False, ".".join(path) or "(root)"


# -- the CRD (written with the node agent; the chart ships it as-is) --------------------------

def test_the_chart_ships_the_gpunodereport_crd_of_the_contract() -> None:
    if not CRD.exists():
        pytest.fail(f"{CRD.relative_to(ROOT)} is missing (the node agent's CRD)")
    crd = yaml.safe_load(CRD.read_text())
    assert crd["kind"] == "CustomResourceDefinition"
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "gpunodereports.gpu-auditor.io"
    assert spec["group"] == "gpu-auditor.io"
    assert spec["scope"] == "Cluster"
    assert spec["names"]["plural"] == "gpunodereports"
    assert "gnr" in spec["names"].get("shortNames", [])
    assert "v1alpha1" in [v["name"] for v in spec["versions"]]


# -- manifests/ --------------------------------------------------------------------------------

def test_manifests_are_the_chart_rendered_with_default_values(helm: Path, tmp_path: Path) -> None:
    subprocess.run([str(ROOT / "scripts" / "render-manifests.sh"), str(tmp_path)], check=True,
                   capture_output=True, text=True, env={**os.environ, "HELM": str(helm)})
    fresh = (tmp_path / "gpu-auditor.yaml").read_text()
    shipped = ROOT / "manifests" / "gpu-auditor.yaml"
    assert shipped.exists() and shipped.read_text() == fresh, (
        "manifests/ is out of date: run scripts/render-manifests.sh (or `make manifests`)")


def test_manifests_hold_namespace_crd_and_workloads_without_the_helm_test() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests" / "gpu-auditor.yaml").read_text())
            if d]
    assert docs[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "gpu-auditor", "labels": {"app.kubernetes.io/name": "gpu-auditor",
                                          "app.kubernetes.io/part-of": "gpu-auditor",
                                          "pod-security.kubernetes.io/enforce": "privileged",
                                          "pod-security.kubernetes.io/enforce-version": "latest"}}}
    kinds = [d["kind"] for d in docs]
    assert kinds.index("CustomResourceDefinition") < kinds.index("DaemonSet")
    assert {"DaemonSet", "Deployment", "ClusterRole", "ClusterRoleBinding", "ServiceAccount",
            "Service"} <= set(kinds)
    assert "Pod" not in kinds
    for doc in docs[1:]:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                               "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            assert doc["metadata"]["namespace"] == "gpu-auditor", doc["metadata"]["name"]
