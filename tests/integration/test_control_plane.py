"""Smoke tests: the local control plane is real and does what the other tests rely on."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from devtools.localcluster import LocalCluster, cri

pytestmark = pytest.mark.integration


def _namespace(core: client.CoreV1Api) -> str:
    name = f"smoke-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def _pod(name: str, **extra: object) -> dict[str, object]:
    container = {"name": "main", "image": "trainer:latest", **extra.pop("container", {})}  # type: ignore[dict-item]
    return {
        "metadata": {"name": name, **extra.pop("metadata", {})},  # type: ignore[dict-item]
        "spec": {"containers": [container], "restartPolicy": "Never", **extra},
    }


def _gpu_node(kwok_cluster: LocalCluster) -> str:
    name = f"gpu-{uuid.uuid4().hex[:6]}"
    kwok_cluster.create_node(name, gpus=8, labels={"nvidia.com/gpu.present": "true"})
    return name


def test_api_server_reports_the_stamped_kubernetes_version(cluster: LocalCluster) -> None:
    assert re.fullmatch(r"v1\.\d+\.\d+", cluster.version()["gitVersion"])


def test_a_namespace_and_a_pod_are_stored_and_read_back(cluster: LocalCluster) -> None:
    core = client.CoreV1Api(cluster.api_client())
    ns = _namespace(core)
    core.create_namespaced_pod(ns, _pod("hello"))
    pod = core.read_namespaced_pod("hello", ns)
    assert pod.spec.containers[0].image == "trainer:latest"
    assert pod.status.phase == "Pending"


def test_a_kwok_gpu_node_becomes_ready_with_eight_gpus(kwok_cluster: LocalCluster) -> None:
    core = client.CoreV1Api(kwok_cluster.api_client())
    node = core.read_node(_gpu_node(kwok_cluster))
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"


def test_a_gpu_pod_is_scheduled_onto_the_gpu_node_and_runs(kwok_cluster: LocalCluster) -> None:
    core = client.CoreV1Api(kwok_cluster.api_client())
    node = _gpu_node(kwok_cluster)
    ns = _namespace(core)
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    core.create_namespaced_pod(
        ns, _pod("trainer", container=gpu, nodeSelector={"kubernetes.io/hostname": node})
    )
    pod = kwok_cluster.wait(
        lambda: (p := core.read_namespaced_pod("trainer", ns)).status.phase == "Running" and p,
        60, "pod Running",
    )
    assert pod.spec.node_name == node


def test_pod_logs_are_served_from_a_kwok_logs_object_current_and_previous(
    kwok_cluster: LocalCluster, tmp_path: Path
) -> None:
    core = client.CoreV1Api(kwok_cluster.api_client())
    node = _gpu_node(kwok_cluster)
    ns = _namespace(core)
    current, previous = tmp_path / "current.log", tmp_path / "previous.log"
    current.write_bytes(cri("epoch 2 resumed", stream="stdout"))
    previous.write_bytes(cri("epoch 1\ntorch.OutOfMemoryError: CUDA out of memory."))
    core.create_namespaced_pod(ns, _pod("logger", nodeName=node))
    kwok_cluster.serve_logs(ns, "logger", current=current, previous=previous)
    kwok_cluster.wait(
        lambda: core.read_namespaced_pod("logger", ns).status.phase == "Running", 60, "Running"
    )
    text = kwok_cluster.wait(
        lambda: core.read_namespaced_pod_log("logger", ns, container="main"), 30, "pod log"
    )
    assert text.strip() == "epoch 2 resumed"
    old = core.read_namespaced_pod_log("logger", ns, container="main", previous=True)
    assert "CUDA out of memory" in old


def test_a_kwok_stage_drives_a_pod_to_oomkilled_exit_137(kwok_cluster: LocalCluster) -> None:
    core = client.CoreV1Api(kwok_cluster.api_client())
    node = _gpu_node(kwok_cluster)
    ns = _namespace(core)
    stage = "pod-container-running-failed.stage.kwok.x-k8s.io"
    core.create_namespaced_pod(ns, _pod(
        "hog", nodeName=node,
        metadata={"labels": {stage: "true"},
                  "annotations": {f"{stage}/reason": "OOMKilled", f"{stage}/exit-code": "137",
                                  f"{stage}/delay": "100ms"}},
    ))
    pod = kwok_cluster.wait(
        lambda: (p := core.read_namespaced_pod("hog", ns)).status.phase == "Failed" and p,
        60, "pod Failed",
    )
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.reason, terminated.exit_code) == ("OOMKilled", 137)


def test_our_restart_stage_leaves_an_oomkilled_last_state_and_a_running_container(
    kwok_cluster: LocalCluster,
) -> None:
    core = client.CoreV1Api(kwok_cluster.api_client())
    node = _gpu_node(kwok_cluster)
    ns = _namespace(core)
    core.create_namespaced_pod(ns, _pod(
        "restarter", nodeName=node, restartPolicy="Always",
        metadata={"labels": {"stage.gpu-auditor.io/restart-after-failure": "true"},
                  "annotations": {"stage.gpu-auditor.io/reason": "OOMKilled",
                                  "stage.gpu-auditor.io/exit-code": "137"}},
    ))
    status = kwok_cluster.wait(
        lambda: (s := core.read_namespaced_pod("restarter", ns).status.container_statuses)
        and s[0].restart_count == 1 and s[0],
        60, "container restarted",
    )
    assert status.last_state.terminated.reason == "OOMKilled"
    assert status.last_state.terminated.exit_code == 137
    assert status.state.running is not None


def test_helm_runs(cluster: LocalCluster) -> None:
    out = subprocess.run([str(cluster.bin_dir / "helm"), "version", "--short"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("v3.")
