"""examples/platforms/values-*.yaml: each renders, lints, and sets what its platform needs
(docs/platforms.md). tests/integration/test_platform_values_apiserver.py sends every object
each renders to a real kube-apiserver as a dry-run create."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import CHART, KUBE_VERSION, ROOT, only, run_helm

pytestmark = pytest.mark.unit

PLATFORMS = ROOT / "examples" / "platforms"
NAMES = ("gke", "eks", "aks", "openshift")


def render(helm: Path, name: str) -> list[dict[str, Any]]:
    out = run_helm(helm, "template", "gpu-auditor", str(CHART), "--namespace", "gpu-auditor",
                   "--kube-version", KUBE_VERSION, "-f", str(PLATFORMS / f"values-{name}.yaml"))
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def agent_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = only(objects, "DaemonSet", "-agent")["spec"]["template"]["spec"]
    return spec


def test_every_platform_file_exists_and_lints(helm: Path) -> None:
    assert sorted(p.name for p in PLATFORMS.glob("values-*.yaml")) == sorted(
        f"values-{n}.yaml" for n in NAMES)
    for name in NAMES:
        result = run_helm(helm, "lint", str(CHART), "--strict", "-f",
                          str(PLATFORMS / f"values-{name}.yaml"))
        assert "0 chart(s) failed" in result.stdout, result.stdout


@pytest.mark.parametrize("name", NAMES)
def test_no_platform_names_the_nvidia_runtime_class(helm: Path, name: str) -> None:
    assert "runtimeClassName" not in agent_pod(render(helm, name))


def test_gke_mounts_the_driver_installers_folder_and_finds_nvml_in_it(helm: Path) -> None:
    pod = agent_pod(render(helm, "gke"))
    (agent,) = [c for c in pod["containers"] if c["name"] == "agent"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    assert volumes["nvidia-install-dir-host"]["hostPath"]["path"] == "/home/kubernetes/bin/nvidia"
    assert mounts["nvidia-install-dir-host"] == {
        "name": "nvidia-install-dir-host", "mountPath": "/usr/local/nvidia", "readOnly": True}
    assert {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"} in agent["env"]
    assert agent["securityContext"]["privileged"] is True
    assert "allowPrivilegeEscalation" not in agent["securityContext"]
    assert "nodeSelector" not in pod and "priorityClassName" not in pod
    terms = pod["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [
        {"key": "cloud.google.com/gke-accelerator", "operator": "Exists"}]}]


def test_eks_selects_gpu_nodes_without_gpu_feature_discovery(helm: Path) -> None:
    pod = agent_pod(render(helm, "eks"))
    assert "nodeSelector" not in pod
    keys = [e["key"] for t in pod["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        for e in t["matchExpressions"]]
    assert keys == ["karpenter.k8s.aws/instance-gpu-manufacturer",
                    "node.kubernetes.io/instance-type"]


def test_aks_selects_its_accelerator_label_and_tolerates_its_gpu_taint(helm: Path) -> None:
    pod = agent_pod(render(helm, "aks"))
    assert pod["nodeSelector"] == {"kubernetes.azure.com/accelerator": "nvidia"}
    assert {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in \
        pod["tolerations"]


def test_openshift_leaves_the_operators_user_to_the_project_range(helm: Path) -> None:
    objects = render(helm, "openshift")
    operator = only(objects, "Deployment", "-operator")["spec"]["template"]["spec"]
    assert operator["securityContext"] == {"runAsNonRoot": True,
                                           "seccompProfile": {"type": "RuntimeDefault"}}
    assert agent_pod(objects)["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
