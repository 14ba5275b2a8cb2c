"""--max-series-per-gpu: the per-pod families are capped per GPU, the largest kept, the rest
counted in gpu_auditor_agent_series_dropped_total; per-GPU figures still count every pod."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.cli import main
from node_agent.collector import AgentCollector
from node_agent.podresources.client import ContainerDevices, PodDevices
from node_agent.pods import FakeNode, FakePods, PodInfo
from node_agent.procfs import ProcReader
from node_agent.sampler import Sampler

from .agent_helpers import GIB, GPU0, GPU1, Scrape, StaticGpus, gpu, pod_cgroup, write_proc

pytestmark = pytest.mark.unit

NODE = "node-1"
MEMORY = "gpu_auditor_container_gpu_memory_bytes"
PROCESS = "gpu_auditor_process_gpu_memory_bytes"
FINDING = "gpu_auditor_sharing_finding"


def uid(i: int) -> str:
    return f"{i:08x}-1111-4222-8333-444444444444"


def crowded_node(root: Path, pods: int, *, labels: dict[str, str] | None = None) -> Sampler:
    """``pods`` pods on GPU 0, pod i holding i+1 GiB, none of them allocated GPU 0 (so each is
    in an unrequested-use finding and all share the GPU); one allocated pod alone on GPU 1."""
    infos, devices, procs = [], [], []
    for i in range(pods):
        cid = f"{i:064x}"
        write_proc(root, 1000 + i, cgroup=pod_cgroup(uid(i), cid))
        procs.append((1000 + i, (i + 1) * GIB))
        infos.append(PodInfo("ml", f"p{i}", uid(i), {cid: "main"}))
        devices.append(PodDevices("ml", f"p{i}", (ContainerDevices("main", "nvidia.com/gpu",
                                                                   ()),)))
    lone_cid = "f" * 64
    write_proc(root, 9999, cgroup=pod_cgroup(uid(9999), lone_cid))
    infos.append(PodInfo("ml", "lone", uid(9999), {lone_cid: "main"}))
    devices.append(PodDevices("ml", "lone", (ContainerDevices("main", "nvidia.com/gpu",
                                                              (GPU1,)),)))
    gpus = StaticGpus([gpu(0, GPU0, procs, total=10**6 * GIB), gpu(1, GPU1, [(9999, GIB)])])
    fake = FakePods(FakeNode(NODE, labels or {}, True, tuple(infos), tuple(devices)))
    return Sampler(NODE, gpus, ProcReader(root), fake)


def registry(collector: AgentCollector) -> Scrape:
    r = Scrape(collector)
    return r


def series(r: Scrape, name: str, **match: str) -> list[dict[str, str]]:
    return [s.labels for m in r.collect() for s in m.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in match.items())]


def dropped(r: Scrape, metric: str) -> float | None:
    return r.get_sample_value("gpu_auditor_agent_series_dropped_total",
                              {"node": NODE, "metric": metric})


def test_a_gpu_over_the_cap_keeps_the_largest_pods_and_counts_the_rest(proc_root: Path) -> None:
    snapshot = crowded_node(proc_root, 10).sample()
    r = registry(AgentCollector(lambda: snapshot, NODE, max_series_per_gpu=4))
    assert sorted(int(s["pod"][1:]) for s in series(r, MEMORY, gpu="0")) == [6, 7, 8, 9]
    assert r.get_sample_value("gpu_auditor_gpu_pods",
                              {"node": NODE, "gpu": "0", "uuid": GPU0}) == 10
    assert len(series(r, MEMORY, gpu="1")) == 1  # another GPU is not starved
    # 10 pods x (unrequested-gpu-use + unintended-sharing) = 20 finding series; 4 kept: the two
    # largest pods, each with its unrequested use first.
    kept = {(s["pod"], s["kind"]) for s in series(r, FINDING, gpu="0")}
    assert kept == {("p9", "unrequested-gpu-use"), ("p9", "unintended-sharing"),
                    ("p8", "unrequested-gpu-use"), ("p8", "unintended-sharing")}
    assert dropped(r, MEMORY) == 6
    assert dropped(r, FINDING) == 16


def test_exactly_at_the_cap_nothing_is_dropped(proc_root: Path) -> None:
    snapshot = crowded_node(proc_root, 4, labels={
        "nvidia.com/gpu.sharing-strategy": "time-slicing"}).sample()
    r = registry(AgentCollector(lambda: snapshot, NODE, max_series_per_gpu=4))
    assert len(series(r, MEMORY, gpu="0")) == 4
    assert dropped(r, MEMORY) == 0
    assert len(series(r, FINDING, gpu="0")) == 4  # 4 unrequested + 4 intended: 8, cap 4
    assert dropped(r, FINDING) == 4


def test_process_labels_keep_the_largest_processes(proc_root: Path) -> None:
    snapshot = crowded_node(proc_root, 5).sample()
    r = registry(AgentCollector(lambda: snapshot, NODE, process_labels=True,
                                max_series_per_gpu=2))
    assert sorted(s["pid"] for s in series(r, PROCESS, gpu="0")) == ["1003", "1004"]
    assert dropped(r, PROCESS) == 3


def test_the_dropped_counter_adds_once_per_pass_however_often_it_is_scraped(
        proc_root: Path) -> None:
    sampler = crowded_node(proc_root, 10)
    latest = [sampler.sample()]
    r = registry(AgentCollector(lambda: latest[0], NODE, max_series_per_gpu=4))
    assert dropped(r, MEMORY) == 6
    assert r.body  # a scrape
    assert r.body  # a scrape
    assert dropped(r, MEMORY) == 6  # the same snapshot, scraped three times
    latest[0] = sampler.sample()
    assert dropped(r, MEMORY) == 12  # a new pass left out 6 more


def test_the_dropped_counter_exists_at_0_from_the_start(proc_root: Path) -> None:
    snapshot = crowded_node(proc_root, 1).sample()
    r = registry(AgentCollector(lambda: snapshot, NODE))
    assert dropped(r, MEMORY) == 0 and dropped(r, FINDING) == 0


def test_the_default_cap_is_256_per_gpu(proc_root: Path) -> None:
    snapshot = crowded_node(proc_root, 257).sample()
    r = registry(AgentCollector(lambda: snapshot, NODE))
    assert len(series(r, MEMORY, gpu="0")) == 256
    assert dropped(r, MEMORY) == 1


def test_the_flag_reaches_the_exposition(capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parents[3] / "examples/fake-node"
    assert main(["--nvml-fake", str(example / "nvml.yaml"), "--proc-root", str(example / "proc"),
                 "--max-series-per-gpu", "1", "--once"]) == 0
    out = capsys.readouterr().out
    # GPU 0: trainer-0 (62 GiB) and notebook-1; GPU 1: llm-server-0 and the host process.
    assert sum(line.startswith(MEMORY + "{") for line in out.splitlines()) == 2
    assert 'pod="trainer-0"' in out and 'pod="llm-server-0"' in out
    assert ('gpu_auditor_agent_series_dropped_total{metric="gpu_auditor_container_gpu_memory_bytes"'
            ',node="gpu-node-1"} 2') in out
