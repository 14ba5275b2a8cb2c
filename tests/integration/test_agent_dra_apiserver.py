"""GPUs allocated through DRA, against the real API server (resource.k8s.io/v1 of
kube-apiserver 1.36) and a pod-resources gRPC server answering with DRA entries.

In the API server: a DeviceClass, this node's ResourceSlices (NVIDIA's driver name with a
``uuid`` attribute per GPU; a second driver without one) and another node's slice, the
ResourceClaims with their allocation and reservations written to their status (as the
scheduler would), and the pods that reference them, bound to the node, with container IDs in
their status. The stand-in kubelet is a real grpcio server answering ``List`` with the pods'
``dynamic_resources`` (claim, driver, pool, device, CDI ids). The agent (``python -m
node_agent --once --report``) reads all of it through its own clients; the fake NVML source
names the GPUs and the processes (one per pod, cgroups as containerd writes them).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.node_agent.agent_helpers import pod_cgroup, write_proc

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "charts/gpu-auditor/crds/gpunodereports.gpu-auditor.io.yaml"
NODE = "it-dra-node"
NS = "dra-team"
NV, EXAMPLE = "gpu.nvidia.com", "gpu.example.com"
RES = ("resource.k8s.io", "v1")
GPUS = {"gpu-0": "GPU-0d0d0d0d-0000-4000-8000-000000000000",
        "gpu-1": "GPU-1d1d1d1d-1111-4111-8111-111111111111",
        "gpu-2": "GPU-2d2d2d2d-2222-4222-8222-222222222222"}
GIB = 2**30

# pod → (claim or None, driver, device the claim got, GPU its process uses)
PODS: dict[str, tuple[str | None, str, str, str]] = {
    "owner": ("single", NV, "gpu-0", GPUS["gpu-0"]),
    "intruder": (None, "", "", GPUS["gpu-0"]),  # no claim, on the owner's GPU
    "shared-a": ("shared", NV, "gpu-1", GPUS["gpu-1"]),
    "shared-b": ("shared", NV, "gpu-1", GPUS["gpu-1"]),
    "example": ("example", EXAMPLE, "dev-0", GPUS["gpu-2"]),  # driver without uuid attributes
}


def attrs(**values: str) -> dict[str, Any]:
    return {k: {"string": v} for k, v in values.items()}


def resource_slice(name: str, driver: str, node: str, devices: list[dict[str, Any]]
                   ) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node, "devices": devices,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}


@pytest.fixture(scope="module")
def dra_objects(cluster: Any) -> dict[str, str]:
    """Everything in the API server; returns pod name → UID."""
    from kubernetes import client

    api_client = cluster.api_client()
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    ext = client.ApiextensionsV1Api(api_client)
    try:
        ext.create_custom_resource_definition(yaml.safe_load(CRD.read_text()))
    except client.ApiException as err:
        if err.status != 409:
            raise
    core.create_namespace({"metadata": {"name": NS}})
    core.create_node({"metadata": {"name": NODE}})  # its labels: no GPU sharing strategy
    for driver in (NV, EXAMPLE):
        custom.create_cluster_custom_object(*RES, "deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": driver},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]}})
    custom.create_cluster_custom_object(*RES, "resourceslices", resource_slice(
        f"{NODE}-nvidia", NV, NODE,
        [{"name": d, "attributes": attrs(uuid=u, type="gpu", productName="NVIDIA H200")}
         for d, u in GPUS.items()]))
    custom.create_cluster_custom_object(*RES, "resourceslices", resource_slice(
        f"{NODE}-example", EXAMPLE, NODE,
        [{"name": "dev-0", "attributes": attrs(model="LATEST-GPU-MODEL")}]))
    custom.create_cluster_custom_object(*RES, "resourceslices", resource_slice(
        "other-node-nvidia", NV, "other-node",  # same driver and device name, another node
        [{"name": "gpu-0", "attributes": attrs(uuid="GPU-0ther000-0000-4000-8000-000000000000")}]))

    uids: dict[str, str] = {}
    for i, (pod, (claim, _, _, _)) in enumerate(PODS.items()):
        spec: dict[str, Any] = {"nodeName": NODE, "containers": [
            {"name": "main", "image": "registry.invalid/train:1"}]}
        if claim:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
            spec["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        made = core.create_namespaced_pod(NS, {"metadata": {"name": pod}, "spec": spec})
        uids[pod] = made.metadata.uid
        core.patch_namespaced_pod_status(pod, NS, {"status": {"phase": "Running",
            "containerStatuses": [{"name": "main", "containerID": f"containerd://{i:064x}",
                                   "image": "registry.invalid/train:1", "imageID": "",
                                   "ready": True, "restartCount": 0,
                                   "state": {"running": {}}}]}})
    for claim in sorted({c for c, _, _, _ in PODS.values() if c}):
        users = [p for p, (c, _, _, _) in PODS.items() if c == claim]
        driver, device = PODS[users[0]][1], PODS[users[0]][2]
        custom.create_namespaced_custom_object(*RES, NS, "resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": driver}}]}}})
        custom.patch_namespaced_custom_object_status(*RES, NS, "resourceclaims", claim, {
            "status": {
                "allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": driver, "pool": NODE, "device": device}]}},
                "reservedFor": [{"resource": "pods", "name": p, "uid": uids[p]}
                                for p in users]}})
    return uids


def answer(api_pb2: Any) -> Any:
    """What the kubelet's List says for these pods."""
    pods = []
    for pod, (claim, driver, device, _) in PODS.items():
        dynamic = [] if claim is None else [api_pb2.DynamicResource(
            claim_name=claim, claim_namespace=NS, claim_resources=[api_pb2.ClaimResource(
                driver_name=driver, pool_name=NODE, device_name=device,
                cdi_devices=[api_pb2.CDIDevice(name=f"k8s.{driver}/claim={claim}-{device}")])])]
        pods.append(api_pb2.PodResources(name=pod, namespace=NS, containers=[
            api_pb2.ContainerResources(name="main", dynamic_resources=dynamic)]))
    return api_pb2.ListPodResourcesResponse(pod_resources=pods)


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[Path]:
    import grpc

    from tests.podresources.v1 import api_pb2, api_pb2_grpc

    class Lister(api_pb2_grpc.PodResourcesListerServicer):
        def List(self, request: Any, context: Any) -> Any:
            return answer(api_pb2)

    socket = tmp_path / "kubelet.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(Lister(), server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    yield socket
    server.stop(grace=None)


def fake_gpus(tmp_path: Path, uids: dict[str, str]) -> tuple[Path, Path]:
    proc = tmp_path / "proc"
    by_gpu: dict[str, list[dict[str, int]]] = {u: [] for u in GPUS.values()}
    for i, (pod, (_, _, _, uuid)) in enumerate(PODS.items()):
        pid = 4000 + i
        write_proc(proc, pid, cgroup=pod_cgroup(uids[pod], f"{i:064x}"))
        by_gpu[uuid].append({"pid": pid, "usedBytes": (i + 1) * GIB})
    nvml = tmp_path / "nvml.yaml"
    nvml.write_text(yaml.safe_dump({"gpus": [
        {"index": i, "uuid": uuid, "model": "NVIDIA H200", "memoryTotalBytes": 141 * GIB,
         "processes": procs} for i, (uuid, procs) in enumerate(by_gpu.items())]}))
    return nvml, proc


def test_dra_allocations_are_allocations_and_a_pod_on_a_gpu_claimed_by_another_is_flagged(
        cluster: Any, dra_objects: dict[str, str], kubelet: Path, tmp_path: Path) -> None:
    nvml, proc = fake_gpus(tmp_path, dra_objects)
    done = subprocess.run(
        [sys.executable, "-m", "node_agent", "--nvml-fake", str(nvml), "--proc-root", str(proc),
         "--pod-resources-socket", str(kubelet), "--kubeconfig", str(cluster.kubeconfig),
         "--node-name", NODE, "--once", "--report"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    allocated = {}
    for line in out.splitlines():
        if line.startswith("gpu_auditor_container_gpu_memory_bytes{"):
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1:
                                                               line.index("}")].split(","))
            allocated[labels["pod"].strip('"')] = labels["allocated"].strip('"')
    assert allocated == {"owner": "true", "intruder": "false", "shared-a": "true",
                         "shared-b": "true", "example": "unknown"}
    assert 'gpu_auditor_agent_kubelet_up{node="it-dra-node"} 1' in out
    errors = [line for line in out.splitlines()
              if line.startswith("gpu_auditor_agent_errors_total")]
    assert errors and all(line.endswith(" 0") for line in errors), errors

    from kubernetes import client

    report = client.CustomObjectsApi(cluster.api_client()).get_cluster_custom_object(
        "gpu-auditor.io", "v1alpha1", "gpunodereports", NODE)
    pods = {p["pod"]: p["allocated"] for g in report["spec"]["gpus"] for p in g["pods"]}
    assert pods == allocated
    findings = {(f["kind"], tuple(f["pods"])) for f in report["spec"]["findings"]}
    assert findings == {
        ("unrequested-gpu-use", (f"{NS}/intruder",)),
        ("unintended-sharing", (f"{NS}/intruder", f"{NS}/owner")),
        ("intended-sharing", (f"{NS}/shared-a", f"{NS}/shared-b")),
    }
    shared = next(f for f in report["spec"]["findings"] if f["kind"] == "intended-sharing")
    assert f"sharing ResourceClaim {NS}/shared" in shared["message"]


def test_the_claims_in_the_api_server_say_what_the_kubelet_says(
        cluster: Any, dra_objects: dict[str, str]) -> None:
    """The stand-in kubelet's answer is the claims' own allocation (the scheduler's)."""
    from kubernetes import client

    custom = client.CustomObjectsApi(cluster.api_client())
    claims = custom.list_namespaced_custom_object(*RES, NS, "resourceclaims")["items"]
    seen = {}
    for c in claims:
        [result] = c["status"]["allocation"]["devices"]["results"]
        for user in c["status"]["reservedFor"]:
            seen[user["name"]] = (c["metadata"]["name"], result["driver"], result["device"])
    assert seen == {p: (c, d, dev) for p, (c, d, dev, _) in PODS.items() if c}
