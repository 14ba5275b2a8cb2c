"""The pod-resources client against a real gRPC server on a unix socket (a stand-in kubelet)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from agent_helpers import GIB, GPU0, StaticGpus, gpu, pod_cgroup, write_proc

from node_agent.model import Allocated
from node_agent.podresources.client import KubeletUnavailable, PodResourcesClient
from node_agent.podresources.v1 import api_pb2, api_pb2_grpc
from node_agent.pods import ApiPods, ClusterPods, PodInfo, index_pods
from node_agent.procfs import ProcReader
from node_agent.sampler import Sampler

pytestmark = pytest.mark.unit


class Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls = 0

    def List(self, request: Any, context: Any) -> Any:
        self.calls += 1
        time.sleep(self.delay)
        return api_pb2.ListPodResourcesResponse(pod_resources=[
            api_pb2.PodResources(name="trainer-0", namespace="ml", containers=[
                api_pb2.ContainerResources(name="main", devices=[
                    api_pb2.ContainerDevices(resource_name="nvidia.com/gpu",
                                             device_ids=[GPU0]),
                ], cpu_ids=[2, 3]),
            ]),
            api_pb2.PodResources(name="notebook-1", namespace="ml", containers=[
                api_pb2.ContainerResources(name="jupyter"),
            ]),
        ])


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
    socket, _ = kubelet
    client = PodResourcesClient(str(socket), timeout=2)
    pods = {(p.namespace, p.name): p for p in client.list()}
    client.close()
    trainer = pods[("ml", "trainer-0")]
    assert [(d.container, d.resource_name, d.device_ids) for d in trainer.devices] == [
        ("main", "nvidia.com/gpu", (GPU0,))]
    assert pods[("ml", "notebook-1")].devices == ()


def test_missing_socket_is_kubelet_unavailable(tmp_path: Path) -> None:
    client = PodResourcesClient(str(tmp_path / "absent.sock"), timeout=0.5)
    with pytest.raises(KubeletUnavailable):
        client.list()


def test_stubs_that_refuse_the_installed_grpcio_are_kubelet_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seen on a GPU image with grpcio 1.84: the generated stubs raise RuntimeError on import.
    import importlib

    real = importlib.import_module

    def refuse(name: str, *args: Any) -> Any:
        if name.endswith("api_pb2_grpc"):
            raise RuntimeError("The grpc package installed is at version 1.84.0, but the "
                               "generated code depends on grpcio>=1.85.1")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", refuse)
    client = PodResourcesClient(str(tmp_path / "kubelet.sock"), timeout=0.5)
    with pytest.raises(KubeletUnavailable, match=r"grpcio>=1\.85\.1"):
        client.list()


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
