"""The agent's pod-resources client (HTTP/2 by h2, the messages by protobuf) against a real
grpcio server on a unix socket, answering with the kubelet's generated messages
(a stand-in kubelet: device-plugin devices and DRA claims)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from node_agent.model import Allocated
from node_agent.podresources.client import KubeletUnavailable, PodResourcesClient
from node_agent.pods import ApiPods, ClusterPods, PodInfo, index_pods
from node_agent.procfs import ProcReader
from node_agent.sampler import Sampler
from tests.podresources.v1 import api_pb2, api_pb2_grpc

from ..agent_helpers import GIB, GPU0, StaticGpus, gpu, pod_cgroup, write_proc

pytestmark = pytest.mark.unit


def claim(namespace: str, name: str, *devices: tuple[str, str, str]) -> Any:
    return api_pb2.DynamicResource(claim_name=name, claim_namespace=namespace, claim_resources=[
        api_pb2.ClaimResource(driver_name=driver, pool_name=pool, device_name=device,
                              cdi_devices=[api_pb2.CDIDevice(name=f"k8s.{driver}/gpu={device}")])
        for driver, pool, device in devices])


class Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, delay: float = 0.0, extra_pods: int = 0,
                 status: Any = None) -> None:
        self.delay = delay
        self.calls = 0
        self.extra_pods = extra_pods
        self.status = status

    def List(self, request: Any, context: Any) -> Any:
        self.calls += 1
        time.sleep(self.delay)
        if self.status is not None:
            context.abort(self.status, "refused: 100% sure")
        return api_pb2.ListPodResourcesResponse(pod_resources=[
            api_pb2.PodResources(name="trainer-0", namespace="ml", containers=[
                api_pb2.ContainerResources(name="main", devices=[
                    api_pb2.ContainerDevices(resource_name="nvidia.com/gpu",
                                             device_ids=[GPU0],
                                             topology=api_pb2.TopologyInfo(
                                                 nodes=[api_pb2.NUMANode(ID=1)])),
                ], cpu_ids=[2, 3], memory=[api_pb2.ContainerMemory(memory_type="memory",
                                                                   size=2**40)]),
            ]),
            api_pb2.PodResources(name="notebook-1", namespace="ml", containers=[
                api_pb2.ContainerResources(name="jupyter"),
            ]),
            api_pb2.PodResources(name="dra-0", namespace="team", containers=[
                api_pb2.ContainerResources(name="ctr", dynamic_resources=[
                    claim("team", "two-gpus", ("gpu.nvidia.com", "node-1", "gpu-0"),
                          ("gpu.nvidia.com", "node-1", "gpu-1")),
                ]),
            ]),
            *[api_pb2.PodResources(name=f"filler-{i}", namespace="bulk", containers=[
                api_pb2.ContainerResources(name="c", devices=[api_pb2.ContainerDevices(
                    resource_name="example.com/nic", device_ids=[f"nic-{i}-{'x' * 40}"])])])
              for i in range(self.extra_pods)],
        ])

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        return api_pb2.AllocatableResourcesResponse(devices=[
            api_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[GPU0, "GPU-b"])],
            cpu_ids=[0, 1, 2])


def serve(socket: Path, lister: Lister) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(lister, server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    return server


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[Path, Lister]]:
    socket = tmp_path / "kubelet.sock"
    lister = Lister()
    server = serve(socket, lister)
    yield socket, lister
    server.stop(grace=None)


def test_client_lists_pods_and_their_devices(kubelet: tuple[Path, Lister]) -> None:
    socket, lister = kubelet
    client = PodResourcesClient(str(socket), timeout=2)
    pods = {(p.namespace, p.name): p for p in client.list()}
    trainer = pods[("ml", "trainer-0")]
    assert [(d.container, d.resource_name, d.device_ids) for d in trainer.devices] == [
        ("main", "nvidia.com/gpu", (GPU0,))]
    assert trainer.claims == ()
    assert pods[("ml", "notebook-1")].devices == ()
    assert lister.calls == 1


def test_client_reads_dra_claims_with_driver_pool_device_and_cdi_ids(
        kubelet: tuple[Path, Lister]) -> None:
    socket, _ = kubelet
    pods = {(p.namespace, p.name): p for p in PodResourcesClient(str(socket)).list()}
    [c] = pods[("team", "dra-0")].claims
    assert (c.container, c.claim_namespace, c.claim_name) == ("ctr", "team", "two-gpus")
    assert [(d.driver, d.pool, d.device, d.cdi_ids) for d in c.devices] == [
        ("gpu.nvidia.com", "node-1", "gpu-0", ("k8s.gpu.nvidia.com/gpu=gpu-0",)),
        ("gpu.nvidia.com", "node-1", "gpu-1", ("k8s.gpu.nvidia.com/gpu=gpu-1",))]
    assert pods[("team", "dra-0")].devices == ()


def test_client_reads_allocatable_devices(kubelet: tuple[Path, Lister]) -> None:
    socket, _ = kubelet
    [devices] = PodResourcesClient(str(socket)).allocatable()
    assert (devices.resource_name, devices.device_ids) == ("nvidia.com/gpu", (GPU0, "GPU-b"))


def test_an_answer_larger_than_the_http2_window_and_frame_size_is_read_whole(
        tmp_path: Path) -> None:
    """3,000 pods: ~250 KiB, so many DATA frames and more than HTTP/2's default 64 KiB
    window: the client's WINDOW_UPDATEs, sent as it reads, let grpcio send the rest."""
    socket = tmp_path / "big.sock"
    server = serve(socket, Lister(extra_pods=3000))
    try:
        pods = PodResourcesClient(str(socket), timeout=5).list()
    finally:
        server.stop(grace=None)
    fillers = [p for p in pods if p.namespace == "bulk"]
    assert len(fillers) == 3000
    assert fillers[2999].devices[0].device_ids == (f"nic-2999-{'x' * 40}",)


def test_a_grpc_error_status_is_kubelet_unavailable_with_the_code_and_message(
        tmp_path: Path) -> None:
    socket = tmp_path / "denied.sock"
    server = serve(socket, Lister(status=grpc.StatusCode.PERMISSION_DENIED))
    try:
        with pytest.raises(KubeletUnavailable,
                           match=r"List on .*: PERMISSION_DENIED: refused: 100% sure"):
            PodResourcesClient(str(socket), timeout=2).list()
    finally:
        server.stop(grace=None)


def test_an_unimplemented_method_is_reported_as_such(tmp_path: Path) -> None:
    """A kubelet without the method (an older one) answers UNIMPLEMENTED."""
    socket = tmp_path / "old.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister", {})])
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        with pytest.raises(KubeletUnavailable, match="UNIMPLEMENTED"):
            PodResourcesClient(str(socket), timeout=2).allocatable()
    finally:
        server.stop(grace=None)


def test_missing_socket_is_kubelet_unavailable(tmp_path: Path) -> None:
    client = PodResourcesClient(str(tmp_path / "absent.sock"), timeout=0.5)
    with pytest.raises(KubeletUnavailable):
        client.list()


def test_the_client_imports_neither_grpcio_nor_prometheus_client() -> None:
    """h2 and protobuf's runtime, not grpcio (a channel and its threads for one call per pass;
    docs/dependencies.md)."""
    import subprocess
    import sys

    code = ("import sys, node_agent.podresources.client, node_agent.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('grpc', 'prometheus_client', 'yaml')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_a_slow_kubelet_times_out(tmp_path: Path) -> None:
    socket = tmp_path / "slow.sock"
    server = serve(socket, Lister(delay=2.0))
    try:
        client = PodResourcesClient(str(socket), timeout=0.2)
        started = time.monotonic()
        with pytest.raises(KubeletUnavailable, match="DEADLINE_EXCEEDED"):
            client.list()
        assert time.monotonic() - started < 1.5
    finally:
        server.stop(grace=None)


class StaticApiPods(ApiPods):
    """ApiPods with a fixed index (no API server needed)."""

    def __init__(self, pods: list[PodInfo]) -> None:
        super().__init__(None, "node-1")
        self.index = index_pods(pods)

    def refresh_if_needed(self, wanted_uids: object) -> int:
        return 0


UID_T = "11111111-2222-3333-4444-555555555555"
UID_N = "66666666-7777-8888-9999-000000000000"


def sampler_with_kubelet(proc_root: Path, socket: Path, timeout: float = 1.0) -> Sampler:
    write_proc(proc_root, 10, cgroup=pod_cgroup(UID_T, "c" * 64))
    write_proc(proc_root, 20, cgroup=pod_cgroup(UID_N, "d" * 64))
    api = StaticApiPods([PodInfo("ml", "trainer-0", UID_T, {"c" * 64: "main"}),
                         PodInfo("ml", "notebook-1", UID_N, {"d" * 64: "jupyter"})])
    pods = ClusterPods(PodResourcesClient(str(socket), timeout=timeout), api)
    gpus = StaticGpus([gpu(0, GPU0, [(10, GIB), (20, GIB)])])
    return Sampler("node-1", gpus, ProcReader(proc_root), pods)


def allocations(snapshot: Any) -> dict[str, Allocated]:
    return {c.pod.pod: c.allocated for c in snapshot.gpus[0].containers}


def test_a_pass_joins_kubelet_allocations_by_pod_name(
        proc_root: Path, kubelet: tuple[Path, Lister]) -> None:
    socket, _ = kubelet
    snapshot = sampler_with_kubelet(proc_root, socket).sample()
    assert snapshot.kubelet_up
    assert allocations(snapshot) == {"trainer-0": Allocated.TRUE,
                                     "notebook-1": Allocated.FALSE}


def test_a_pass_with_the_kubelet_socket_missing_still_completes(proc_root: Path,
                                                                 tmp_path: Path) -> None:
    sampler = sampler_with_kubelet(proc_root, tmp_path / "absent.sock", timeout=0.3)
    snapshot = sampler.sample()
    assert not snapshot.kubelet_up
    assert set(allocations(snapshot).values()) == {Allocated.UNKNOWN}
    assert snapshot.errors["kubelet"] == 1


def test_a_socket_this_uid_may_not_write_is_unavailable_with_the_reason(
        kubelet: tuple[Path, Lister], monkeypatch: pytest.MonkeyPatch) -> None:
    """A socket without write permission for us (the kubelet's is root-owned, 0755): the agent
    is told why and gRPC is not asked. Root passes every access check, so when the tests run
    as root, access() answers as it would for another uid."""
    socket, lister = kubelet
    socket.chmod(0o555)
    import os

    if os.geteuid() == 0:
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: not mode & os.W_OK)
    client = PodResourcesClient(str(socket), timeout=2)
    with pytest.raises(KubeletUnavailable, match=r"uid \d+ may not connect \(mode 0555, "
                       r"owner uid \d+\): connecting needs write permission"):
        client.list()
    assert lister.calls == 0


def test_a_file_that_is_not_a_socket_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "kubelet.sock"
    path.write_text("not a socket")
    with pytest.raises(KubeletUnavailable, match="not a socket"):
        PodResourcesClient(str(path), timeout=0.5).list()
