"""What a scrape shows, asserted sample by sample (the rendered text, parsed)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from node_agent.collector import AgentCollector
from node_agent.model import Allocated, GpuUsage, NodeSharing, PodRef, ProcessUsage, Snapshot
from node_agent.pods import PodSource
from node_agent.procfs import ProcReader
from node_agent.sampler import Sampler, sum_containers

from .agent_helpers import (
    CID_A,
    CID_B,
    GIB,
    GPU0,
    GPU1,
    UID_A,
    UID_B,
    Scrape,
    StaticGpus,
    fake_pods,
    gpu,
    pod_cgroup,
    write_proc,
)

pytestmark = pytest.mark.unit

NODE = "node-1"


def scrape(sampler: Sampler, *, process_labels: bool = False) -> Scrape:
    snapshot = sampler.sample()
    return Scrape(AgentCollector(lambda: snapshot, NODE, process_labels))


def proc_labels(uuid: str, ns: str, pod: str, container: str, uid: str, allocated: str,
                gpu_label: str = "0") -> dict[str, str]:
    return {"node": NODE, "gpu": gpu_label, "uuid": uuid, "namespace": ns, "pod": pod,
            "container": container, "pod_uid": uid, "allocated": allocated}


@pytest.fixture
def node(proc_root: Path) -> tuple[StaticGpus, Path]:
    """GPU 0: pod a (allocated, 2 processes), pod b (not allocated); GPU 1: a host process."""
    write_proc(proc_root, 100, cgroup=pod_cgroup(UID_A, CID_A), comm="python")
    write_proc(proc_root, 101, cgroup=pod_cgroup(UID_A, CID_A), comm="python")
    write_proc(proc_root, 200, cgroup=pod_cgroup(UID_B, CID_B), comm="jupyter")
    write_proc(proc_root, 300, comm="ollama")
    gpus = StaticGpus([gpu(0, GPU0, [(100, 10 * GIB), (101, GIB), (200, 3 * GIB)]),
                       gpu(1, GPU1, [(300, 4 * GIB)])])
    return gpus, proc_root


def sampler_for(node: tuple[StaticGpus, Path], pods: PodSource | None = None) -> Sampler:
    gpus, root = node
    return Sampler(NODE, gpus, ProcReader(root), pods or fake_pods())


def test_container_memory_is_summed_and_labelled_allocated_true(node) -> None:
    r = scrape(sampler_for(node))
    value = r.get_sample_value("gpu_auditor_container_gpu_memory_bytes",
                               proc_labels(GPU0, "ml", "a", "main", UID_A, "true"))
    assert value == 11 * GIB


def test_use_without_a_request_is_labelled_allocated_false(node) -> None:
    r = scrape(sampler_for(node))
    value = r.get_sample_value("gpu_auditor_container_gpu_memory_bytes",
                               proc_labels(GPU0, "ml", "b", "side", UID_B, "false"))
    assert value == 3 * GIB


def test_a_host_process_is_kept_with_empty_pod_labels(node) -> None:
    r = scrape(sampler_for(node))
    value = r.get_sample_value("gpu_auditor_container_gpu_memory_bytes",
                               proc_labels(GPU1, "", "", "", "", "host", gpu_label="1"))
    assert value == 4 * GIB


def test_gpu_memory_pods_and_findings(node) -> None:
    r = scrape(sampler_for(node))
    gl = {"node": NODE, "gpu": "0", "uuid": GPU0, "model": "NVIDIA H200"}
    assert r.get_sample_value("gpu_auditor_gpu_memory_total_bytes", gl) == 80 * GIB
    assert r.get_sample_value("gpu_auditor_gpu_memory_used_bytes", gl) == 14 * GIB
    assert r.get_sample_value("gpu_auditor_gpu_memory_free_bytes", gl) == 66 * GIB
    assert r.get_sample_value("gpu_auditor_gpu_memory_reserved_bytes", gl) == 0
    assert r.get_sample_value("gpu_auditor_gpu_pods",
                              {"node": NODE, "gpu": "0", "uuid": GPU0}) == 2
    assert r.get_sample_value("gpu_auditor_gpu_pods",
                              {"node": NODE, "gpu": "1", "uuid": GPU1}) == 0
    f = {"node": NODE, "gpu": "0", "uuid": GPU0, "namespace": "ml"}
    assert r.get_sample_value("gpu_auditor_sharing_finding",
                              {**f, "pod": "b", "kind": "unrequested-gpu-use"}) == 1
    for pod in ("a", "b"):
        assert r.get_sample_value("gpu_auditor_sharing_finding",
                                  {**f, "pod": pod, "kind": "unintended-sharing"}) == 1
    assert r.get_sample_value("gpu_auditor_sharing_finding",
                              {**f, "pod": "a", "kind": "unrequested-gpu-use"}) is None


def test_health_gauges_and_error_counters_exist_up_front(node) -> None:
    r = scrape(sampler_for(node))
    assert r.get_sample_value("gpu_auditor_agent_nvml_up", {"node": NODE}) == 1
    assert r.get_sample_value("gpu_auditor_agent_kubelet_up", {"node": NODE}) == 1
    assert r.get_sample_value("gpu_auditor_agent_collect_duration_seconds",
                              {"node": NODE}) is not None
    for source in ("nvml", "kubelet", "proc", "apiserver"):
        assert r.get_sample_value("gpu_auditor_agent_errors_total",
                                  {"node": NODE, "source": source}) == 0


def test_process_labels_give_one_series_per_process(node) -> None:
    r = scrape(sampler_for(node), process_labels=True)
    labels = {**proc_labels(GPU0, "ml", "a", "main", UID_A, "true"), "pid": "101",
              "process": "python"}
    assert r.get_sample_value("gpu_auditor_process_gpu_memory_bytes", labels) == GIB


def test_no_nvml_still_serves_with_nvml_up_0(node) -> None:
    gpus, _ = node
    gpus.up = False
    r = scrape(sampler_for(node))
    assert r.get_sample_value("gpu_auditor_agent_nvml_up", {"node": NODE}) == 0
    assert r.get_sample_value("gpu_auditor_agent_kubelet_up", {"node": NODE}) == 1
    assert b"gpu_auditor_container_gpu_memory_bytes{" not in r.body


def test_a_failed_gpu_drops_only_its_own_series_and_counts_an_nvml_error(node) -> None:
    gpus, _ = node
    gpus.gpus = gpus.gpus[1:]  # GPU 0 failed this pass
    gpus.errors = 1
    r = scrape(sampler_for(node))
    assert r.get_sample_value("gpu_auditor_gpu_memory_total_bytes",
                              {"node": NODE, "gpu": "0", "uuid": GPU0,
                               "model": "NVIDIA H200"}) is None
    assert r.get_sample_value("gpu_auditor_gpu_memory_total_bytes",
                              {"node": NODE, "gpu": "1", "uuid": GPU1,
                               "model": "NVIDIA H200"}) == 80 * GIB
    assert r.get_sample_value("gpu_auditor_agent_errors_total",
                              {"node": NODE, "source": "nvml"}) == 1


def test_a_vanished_pid_is_an_unknown_pod_and_a_proc_error(node) -> None:
    _, root = node
    (root / "200" / "stat").unlink()  # gone between the NVML list and the /proc read
    r = scrape(sampler_for(node))
    assert r.get_sample_value("gpu_auditor_container_gpu_memory_bytes",
                              proc_labels(GPU0, "", "", "", "", "unknown")) == 3 * GIB
    assert r.get_sample_value("gpu_auditor_agent_errors_total",
                              {"node": NODE, "source": "proc"}) == 1


def test_a_garbage_cgroup_is_unknown_with_no_pod_and_no_finding(node) -> None:
    """Before: anything that named no pod was labelled host. A process we cannot place must
    not be called a host process, nor make a sharing finding with pod a."""
    gpus, root = node
    write_proc(root, 400, cgroup="0::/kubepods.slice/kubepods-burstable.slice\n")  # no pod
    write_proc(root, 401, cgroup="\x00\x01garbage")
    gpus.gpus = [gpu(0, GPU0, [(100, 10 * GIB), (400, 2 * GIB), (401, GIB)])]
    r = scrape(sampler_for(node))
    assert r.get_sample_value("gpu_auditor_container_gpu_memory_bytes",
                              proc_labels(GPU0, "", "", "", "", "unknown")) == 3 * GIB
    assert r.get_sample_value("gpu_auditor_container_gpu_memory_bytes",
                              proc_labels(GPU0, "", "", "", "", "host")) is None
    assert r.get_sample_value("gpu_auditor_gpu_pods",
                              {"node": NODE, "gpu": "0", "uuid": GPU0}) == 1
    assert b"gpu_auditor_sharing_finding{" not in r.body


def test_kubelet_down_makes_allocation_unknown_and_counts_an_error(node) -> None:
    r = scrape(sampler_for(node, fake_pods(kubelet_up=False)))
    assert r.get_sample_value("gpu_auditor_agent_kubelet_up", {"node": NODE}) == 0
    assert r.get_sample_value("gpu_auditor_container_gpu_memory_bytes",
                              proc_labels(GPU0, "ml", "b", "side", UID_B, "unknown")) == 3 * GIB
    assert r.get_sample_value("gpu_auditor_agent_errors_total",
                              {"node": NODE, "source": "kubelet"}) == 1


def test_before_the_first_pass_a_scrape_is_empty_but_fine() -> None:
    registry = Scrape(AgentCollector(lambda: None, NODE))
    assert registry.get_sample_value("gpu_auditor_agent_nvml_up", {"node": NODE}) is None
    assert b"# TYPE gpu_auditor_agent_nvml_up gauge" in registry.body


def test_a_broken_snapshot_does_not_crash_the_scrape() -> None:
    def broken() -> Snapshot:
        raise RuntimeError("boom")

    registry = Scrape(AgentCollector(broken, NODE))
    assert b"gpu_auditor_gpu_pods" in registry.body


def test_describing_does_not_collect() -> None:
    calls = []

    def latest() -> None:
        calls.append(1)

    families = AgentCollector(latest, NODE).describe()
    assert calls == []
    assert "gpu_auditor_agent_nvml_up" in {f.name for f in families}


def test_label_sets_are_fresh_each_scrape(node) -> None:
    """A pod that left is gone from the next scrape (no stale series)."""
    gpus, _ = node
    sampler = sampler_for(node)
    snapshots = [sampler.sample()]
    gpus.gpus = [gpu(0, GPU0, [(100, GIB)])]
    snapshots.append(sampler.sample())
    registry = Scrape(AgentCollector(lambda: snapshots[-1], NODE))
    assert registry.get_sample_value("gpu_auditor_container_gpu_memory_bytes",
                                     proc_labels(GPU0, "ml", "b", "side", UID_B, "false")) is None
    assert registry.get_sample_value("gpu_auditor_container_gpu_memory_bytes",
                                     proc_labels(GPU0, "ml", "a", "main", UID_A, "true")) == GIB


# The agent's metric families as a scrape describes them (issue 18, found by
# ``scripts/mutation.py --modules node_agent.collector``): each family's name and HELP text, which
# dashboards and alert descriptions quote, and the per-process family only with --process-labels.

HELP = {
    "gpu_auditor_container_gpu_memory_bytes":
        "GPU memory used by a container's processes, summed per GPU, pod and container",
    "gpu_auditor_gpu_memory_total_bytes": "Total GPU memory",
    "gpu_auditor_gpu_memory_used_bytes":
        "Used GPU memory (NVML memory v2: without driver-reserved memory)",
    "gpu_auditor_gpu_memory_free_bytes": "Free GPU memory",
    "gpu_auditor_gpu_memory_reserved_bytes": "GPU memory reserved by the driver",
    "gpu_auditor_gpu_pods": "Pods with a process on the GPU",
    "gpu_auditor_sharing_finding": "1 per pod in a sharing finding",
    "gpu_auditor_agent_nvml_up": "1 when NVML answered in the last pass",
    "gpu_auditor_agent_kubelet_up":
        "1 when the kubelet pod-resources API answered in the last pass",
    "gpu_auditor_agent_collect_duration_seconds": "Duration of the last sampling pass",
    "gpu_auditor_agent_errors_total": "Errors by source since the agent started",
    "gpu_auditor_agent_series_dropped_total":
        "Series left out of a metric by --max-series-per-gpu, summed over sampling passes",
}  # fmt: skip


PROCESS = {
    "gpu_auditor_process_gpu_memory_bytes": "GPU memory used by one process (--process-labels)",
}


def described(collector: AgentCollector) -> dict[str, str]:
    return {f.name: f.doc for f in collector.describe()}


def test_every_family_with_its_help_text() -> None:
    assert described(AgentCollector(lambda: None, "node-1")) == HELP


def test_the_process_family_only_with_process_labels() -> None:
    assert described(AgentCollector(lambda: None, "node-1", process_labels=True)) == {
        **HELP, **PROCESS}
    assert described(AgentCollector(lambda: None, "node-1", process_labels=False)) == HELP


# What the agent's scrape says for figures that are zero or missing (issue 18, mutation
# survivors of ``node_agent.collector``): a source without errors counts 0, a container and a
# process using 0 bytes are 0 bytes (not 1), and a failed
# scrape says why in the log. A hand-built snapshot, literal values.

def snapshot(*procs: ProcessUsage, errors: dict[str, int] | None = None) -> Snapshot:
    usage = GpuUsage(gpu(0, GPU0, total=80 * GIB), procs, sum_containers(list(procs)))
    return Snapshot(node=NODE, taken_at=1.0, duration_seconds=0.5, nvml_up=True,
                    kubelet_up=True, strategy=NodeSharing(), gpus=(usage,), findings=(),
                    errors=errors if errors is not None else {})


def samples(scrape: Scrape, name: str) -> list[float]:
    return [s.value for f in scrape.collect() for s in f.samples if s.name == name]


POD = PodRef("ml", "train", "uid-1", "main")


def test_a_source_missing_from_the_errors_counts_0() -> None:
    scrape = Scrape(AgentCollector(lambda: snapshot(errors={"nvml": 2}), NODE))
    for source, count in (("nvml", 2.0), ("kubelet", 0.0), ("proc", 0.0), ("apiserver", 0.0)):
        value = scrape.get_sample_value("gpu_auditor_agent_errors_total",
                                        {"node": NODE, "source": source})
        assert value == count, source


def test_a_container_using_0_bytes_is_0_bytes() -> None:
    s = snapshot(ProcessUsage(7, "python", 0, POD, Allocated.TRUE))
    scrape = Scrape(AgentCollector(lambda: s, NODE))
    assert samples(scrape, "gpu_auditor_container_gpu_memory_bytes") == [0.0]


def test_a_process_using_0_bytes_is_0_bytes() -> None:
    s = snapshot(ProcessUsage(7, "python", 0, POD, Allocated.TRUE))
    scrape = Scrape(AgentCollector(lambda: s, NODE, process_labels=True))
    assert samples(scrape, "gpu_auditor_process_gpu_memory_bytes") == [0.0]


def test_a_failed_scrape_logs_why(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> Snapshot:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="node_agent.collector"):
        Scrape(AgentCollector(broken, NODE)).collect()
    assert [r.getMessage() for r in caplog.records] == [
        "building metrics from the snapshot failed"]
