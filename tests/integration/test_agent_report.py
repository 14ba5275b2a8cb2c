"""The node agent publishes its GPUNodeReport to a real API server (the local control plane).

The test installs the chart's CRD itself through the apiextensions API, runs the agent against
the example fake node and reads the report back.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "charts/gpu-auditor/crds/gpunodereports.gpu-auditor.io.yaml"
EXAMPLE = REPO / "examples/fake-node"
GROUP, VERSION, PLURAL = "gpu-auditor.io", "v1alpha1", "gpunodereports"


def wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as err:  # 404 until it exists
            last = err
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} ({last})")


@pytest.fixture(scope="module")
def crd_installed(cluster: Any) -> Any:
    from kubernetes import client

    api_client = cluster.api_client()
    ext = client.ApiextensionsV1Api(api_client)
    body = yaml.safe_load(CRD.read_text())
    try:
        ext.create_custom_resource_definition(body)
    except client.ApiException as err:
        if err.status != 409:  # already there (e.g. installed by the chart tests)
            raise

    def established() -> bool:
        crd = ext.read_custom_resource_definition(body["metadata"]["name"])
        conditions = (crd.status.conditions or []) if crd.status else []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait(established, 30, "CRD Established")
    return client.CustomObjectsApi(api_client)


def agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "node_agent", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def fake_node(tmp_path: Path) -> Path:
    """A writable copy of the example fake node."""
    dst = tmp_path / "fake-node"
    shutil.copytree(EXAMPLE, dst)
    return dst


def test_once_with_report_publishes_the_example_nodes_report(cluster: Any, crd_installed: Any,
                                                             tmp_path: Path) -> None:
    node = fake_node(tmp_path)
    result = agent("--nvml-fake", str(node / "nvml.yaml"), "--proc-root", str(node / "proc"),
                   "--node-name", "it-once-node", "--kubeconfig", str(cluster.kubeconfig),
                   "--once", "--report")
    assert result.returncode == 0, result.stderr
    assert 'pod="notebook-1"' in result.stdout

    report = crd_installed.get_cluster_custom_object(GROUP, VERSION, PLURAL, "it-once-node")
    spec = report["spec"]
    assert (spec["nodeName"], spec["sharingStrategy"], spec["nvmlUp"], spec["kubeletUp"]) == (
        "it-once-node", "none", True, True)
    assert [g["index"] for g in spec["gpus"]] == [0, 1]
    pods = {p["pod"]: p for p in spec["gpus"][0]["pods"]}
    assert pods["notebook-1"]["allocated"] == "false"
    assert pods["notebook-1"]["bytes"] == 9 * 2**30
    assert pods["trainer-0"]["allocated"] == "true"
    assert sorted(pods["trainer-0"]["pids"]) == [48211, 48377]
    kinds = {(f["kind"], tuple(f["pods"])) for f in spec["findings"]}
    assert ("unrequested-gpu-use", ("ml/notebook-1",)) in kinds
    assert ("unintended-sharing", ("ml/notebook-1", "ml/trainer-0")) in kinds

    # A second run replaces the same object (create-or-replace), with the new figures.
    nvml = node / "nvml.yaml"
    nvml.write_text(nvml.read_text().replace("usedBytes: 9663676416", "usedBytes: 19327352832"))
    again = agent("--nvml-fake", str(nvml), "--proc-root", str(node / "proc"),
                  "--node-name", "it-once-node", "--kubeconfig", str(cluster.kubeconfig),
                  "--once", "--report")
    assert again.returncode == 0, again.stderr
    report2 = crd_installed.get_cluster_custom_object(GROUP, VERSION, PLURAL, "it-once-node")
    pods2 = {p["pod"]: p for p in report2["spec"]["gpus"][0]["pods"]}
    assert pods2["notebook-1"]["bytes"] == 18 * 2**30
    assert report2["metadata"]["resourceVersion"] != report["metadata"]["resourceVersion"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def running_agent(cluster: Any, crd_installed: Any, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    node = fake_node(tmp_path)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "node_agent", "--nvml-fake", str(node / "nvml.yaml"),
         "--proc-root", str(node / "proc"), "--node-name", "it-daemon-node",
         "--kubeconfig", str(cluster.kubeconfig), "--bind-address", "127.0.0.1",
         "--port", str(port), "--interval", "0.5", "--report-min-interval", "1"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield f"http://127.0.0.1:{port}", node
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        print(out)


def test_the_daemon_publishes_by_default_and_rewrites_on_material_change(
        running_agent: tuple[str, Path], crd_installed: Any) -> None:
    url, node = running_agent

    def healthy() -> bool:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
            return r.status == 200

    wait(healthy, 30, "agent /healthz")

    def report() -> dict[str, Any]:
        return crd_installed.get_cluster_custom_object(GROUP, VERSION, PLURAL, "it-daemon-node")

    first = wait(report, 30, "the first GPUNodeReport")
    assert len(first["spec"]["findings"]) == 2

    # The notebook leaves GPU 0: the findings go away in the next write.
    nvml = node / "nvml.yaml"
    nvml.write_text("\n".join(line for line in nvml.read_text().splitlines()
                              if "pid: 51904" not in line) + "\n")
    updated = wait(lambda: (r := report())["spec"]["findings"] == [] and r, 30,
                   "a report without findings")
    assert {p["pod"] for p in updated["spec"]["gpus"][0]["pods"]} == {"trainer-0"}


def test_pod_identity_comes_from_the_api_servers_pods_on_this_node(cluster: Any) -> None:
    """ApiPods lists this node's pods (raw JSON, field selector) and the node's labels, through
    the agent's own API client configured from the cluster's kubeconfig (client certificate)."""
    from kubernetes import client

    from node_agent.kube import api_client as agent_api_client
    from node_agent.model import CgroupIdentity, PodRef
    from node_agent.pods import ApiPods, ClusterPods

    api_client = cluster.api_client()
    core = client.CoreV1Api(api_client)
    node_name = "it-api-node"
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
        name=node_name, labels={"nvidia.com/gpu.sharing-strategy": "time-slicing",
                                "nvidia.com/gpu.replicas": "4"})))
    pod = core.create_namespaced_pod("default", client.V1Pod(
        metadata=client.V1ObjectMeta(name="it-trainer"),
        spec=client.V1PodSpec(node_name=node_name, containers=[
            client.V1Container(name="main", image="example.invalid/trainer:1")])))
    other = core.create_namespaced_pod("default", client.V1Pod(
        metadata=client.V1ObjectMeta(name="it-elsewhere"),
        spec=client.V1PodSpec(node_name="another-node", containers=[
            client.V1Container(name="main", image="example.invalid/trainer:1")])))
    cid = "c" * 64
    core.patch_namespaced_pod_status("it-trainer", "default", {"status": {"containerStatuses": [
        {"name": "main", "containerID": f"containerd://{cid}", "image": "x", "imageID": "",
         "ready": True, "restartCount": 0, "state": {"running": {}}}]}})

    agent_client = agent_api_client(str(cluster.kubeconfig))
    view = ClusterPods(None, ApiPods(agent_client, node_name)).view([pod.metadata.uid])
    assert view.errors == {}
    assert view.resolve(CgroupIdentity(pod.metadata.uid, cid)) == PodRef(
        "default", "it-trainer", pod.metadata.uid, "main")
    assert other.metadata.uid not in view.index
    assert (view.strategy.kind, view.strategy.replicas) == ("time-slicing", 4)


def test_the_agents_client_maps_real_api_server_errors_to_their_class(
        cluster: Any, crd_installed: Any) -> None:
    """404 and 409 from the real API server, as the publisher relies on them: one class each."""
    from gpu_auditor.base.errors import APIConflictError, APINotFoundError
    from node_agent.kube import api_client as agent_api_client

    api = agent_api_client(str(cluster.kubeconfig))
    with pytest.raises(APINotFoundError) as err:
        api.read_report("it-no-such-node", timeout=10)
    assert err.value.status == 404
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUNodeReport",
            "metadata": {"name": "it-status-node"},
            "spec": {"nodeName": "it-status-node", "generatedAt": "2024-01-01T00:00:00Z",
                     "gpus": []}}
    created = api.create_report(body, timeout=10)
    with pytest.raises(APIConflictError):
        api.create_report(body, timeout=10)
    stale = {**created, "metadata": {**created["metadata"], "resourceVersion": "1"}}
    with pytest.raises(APIConflictError):
        api.replace_report("it-status-node", stale, timeout=10)
    created["spec"]["generatedAt"] = "2024-01-01T00:01:00Z"
    replaced = api.replace_report("it-status-node", created, timeout=10)
    assert replaced["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
