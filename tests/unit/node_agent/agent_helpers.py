"""Helpers for the node agent's unit tests: a /proc directory, fake GPU and pod sources."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node_agent.model import GpuSample, NvmlReading, ProcessSample
from node_agent.podresources.client import ClaimDevice, ContainerClaim, ContainerDevices, PodDevices
from node_agent.pods import FakeNode, FakePods, PodInfo

GIB = 2**30
GPU0 = "GPU-00000000-0000-0000-0000-000000000000"
GPU1 = "GPU-11111111-1111-1111-1111-111111111111"
UID_A = "aaaaaaaa-1111-2222-3333-444444444444"
UID_B = "bbbbbbbb-1111-2222-3333-444444444444"
CID_A = "a" * 64
CID_B = "b" * 64
NV = "gpu.nvidia.com"  # NVIDIA's DRA driver
MIG = "MIG-22222222-2222-2222-2222-222222222222"


def pod_cgroup(uid: str, container_id: str) -> str:
    u = uid.replace("-", "_")
    return (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/"
            f"cri-containerd-{container_id}.scope\n")


def claimed(name: str, claim: str, *devices: str, driver: str = NV, namespace: str = "team",
            node: str = "node-1") -> PodDevices:
    """What the kubelet says of a pod whose one container got ``devices`` through a claim."""
    return PodDevices(namespace, name, (), (ContainerClaim(
        "main", namespace, claim, tuple(ClaimDevice(driver, node, d, (f"k8s.{driver}/gpu={d}",))
                                        for d in devices)),))


def write_proc(root: Path, pid: int, *, cgroup: str = "0::/user.slice/session-1.scope\n",
               start: int = 1000, comm: str = "python") -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    rest = ["S"] + ["0"] * 18 + [str(start)] + ["0"] * 30
    (d / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")
    (d / "cgroup").write_text(cgroup)
    (d / "comm").write_text(comm + "\n")


def gpu(index: int, uuid: str, procs: Iterable[tuple[int, int | None]] = (),
        total: int = 80 * GIB) -> GpuSample:
    processes = tuple(ProcessSample(pid, used) for pid, used in procs)
    used = sum(p.used_bytes or 0 for p in processes)
    return GpuSample(gpu=str(index), index=index, uuid=uuid, model="NVIDIA H200",
                     total_bytes=total, used_bytes=used, free_bytes=total - used,
                     reserved_bytes=0, processes=processes)


@dataclass
class StaticGpus:
    """A GPU source that returns what the test set."""

    gpus: list[GpuSample] = field(default_factory=list)
    up: bool = True
    errors: int = 0

    def sample(self) -> NvmlReading:
        return NvmlReading(up=self.up, gpus=tuple(self.gpus) if self.up else (),
                           errors=self.errors)


def fake_pods(allocated: dict[str, list[str]] | None = None, *, kubelet_up: bool = True,
              labels: dict[str, str] | None = None) -> FakePods:
    """Pods ml/a (UID_A, container main) and ml/b (UID_B, container side); GPUs per pod."""
    allocated = allocated if allocated is not None else {"ml/a": [GPU0], "ml/b": []}
    pods = (PodInfo("ml", "a", UID_A, {CID_A: "main"}), PodInfo("ml", "b", UID_B, {CID_B: "side"}))
    devices = tuple(
        PodDevices(p.namespace, p.name,
                   (ContainerDevices(next(iter(p.containers.values())), "nvidia.com/gpu",
                                     tuple(allocated.get(f"{p.namespace}/{p.name}", []))),))
        for p in pods
    )
    return FakePods(FakeNode("node-1", labels or {}, kubelet_up, pods, devices))


class Scrape:
    """What a scraper reads from a collector: every access collects and renders afresh, and
    the text is parsed by prometheus_client's parser (an independent reader of the format)."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector

    @property
    def body(self) -> bytes:
        from node_agent.exposition import render

        return render(self.collector.collect())

    def collect(self) -> list[Any]:
        from prometheus_client.parser import text_string_to_metric_families

        return list(text_string_to_metric_families(self.body.decode()))

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        for family in self.collect():
            for s in family.samples:
                if s.name == name and s.labels == (labels or {}):
                    return float(s.value)
        return None
