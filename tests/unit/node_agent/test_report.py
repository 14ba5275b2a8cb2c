"""The GPUNodeReport body and when a change is worth a write."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from gpu_auditor.base.nodereport import parse_report
from node_agent.model import Allocated, ContainerUsage, GpuUsage, NodeSharing, PodRef, Snapshot
from node_agent.procfs import ProcReader
from node_agent.report import build_body, build_spec, material_change, series_points
from node_agent.sampler import Sampler

from .agent_helpers import (
    CID_A,
    CID_B,
    GIB,
    GPU0,
    UID_A,
    UID_B,
    StaticGpus,
    fake_pods,
    gpu,
    pod_cgroup,
    write_proc,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
CRD = REPO / "charts/gpu-auditor/crds/gpunodereports.gpu-auditor.io.yaml"


@pytest.fixture
def spec(proc_root: Path) -> dict:
    write_proc(proc_root, 1, cgroup=pod_cgroup(UID_A, CID_A))
    write_proc(proc_root, 2, cgroup=pod_cgroup(UID_B, CID_B))
    write_proc(proc_root, 3)
    gpus = StaticGpus([gpu(0, GPU0, [(1, 10 * GIB), (2, 2 * GIB), (3, GIB)])])
    snapshot = Sampler("node-1", gpus, ProcReader(proc_root), fake_pods()).sample()
    return build_spec(snapshot)


def test_spec_lists_gpus_pods_allocation_and_findings(spec: dict) -> None:
    assert spec["nodeName"] == "node-1"
    assert spec["generatedAt"].endswith("Z")
    assert (spec["sharingStrategy"], spec["replicas"], spec["nvmlUp"], spec["kubeletUp"]) == (
        "none", 1, True, True)
    (g,) = spec["gpus"]
    assert (g["uuid"], g["index"], g["memoryTotalBytes"]) == (GPU0, 0, 80 * GIB)
    assert [(p["pod"], p["container"], p["allocated"], p["bytes"], p["pids"])
            for p in g["pods"]] == [("a", "main", "true", 10 * GIB, [1]),
                                    ("b", "side", "false", 2 * GIB, [2])]
    assert g["pods"][0]["growthBytesPerSecond"] is None  # one point of history only
    assert [(f["kind"], f["pods"]) for f in spec["findings"]] == [
        ("unrequested-gpu-use", ["ml/b"]), ("unintended-sharing", ["ml/a", "ml/b"])]


def test_body_is_named_after_the_node(spec: dict) -> None:
    body = build_body(spec)
    assert body["apiVersion"] == "gpu-auditor.io/v1alpha1"
    assert body["kind"] == "GPUNodeReport"
    assert body["metadata"]["name"] == "node-1"


def test_the_crd_schema_names_every_field_the_agent_writes(spec: dict) -> None:
    crd = yaml.safe_load(CRD.read_text())
    version = crd["spec"]["versions"][0]
    props = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(spec) <= set(props)
    gpu_props = props["gpus"]["items"]["properties"]
    assert set(spec["gpus"][0]) <= set(gpu_props)
    assert set(spec["gpus"][0]["pods"][0]) <= set(gpu_props["pods"]["items"]["properties"])
    assert set(spec["findings"][0]) <= set(props["findings"]["items"]["properties"])
    assert (crd["spec"]["scope"], crd["spec"]["names"]["shortNames"]) == ("Cluster", ["gnr"])


def test_the_operator_reads_back_exactly_what_the_agent_writes(spec: dict) -> None:
    """One definition of the shape: the agent's writer and the operator's reader agree."""
    from gpu_auditor.base.nodereport import parse_report, to_spec

    report = parse_report(build_body(spec))
    assert not report.dropped
    assert to_spec(report) == spec


def test_only_a_new_time_or_small_drift_is_not_material(spec: dict) -> None:
    new = copy.deepcopy(spec)
    new["generatedAt"] = "2030-01-01T00:00:00Z"
    new["gpus"][0]["pods"][0]["bytes"] += 100 * 2**20
    new["gpus"][0]["pods"][0]["growthBytesPerSecond"] = 12.5
    assert not material_change(spec, new)


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s["gpus"][0]["pods"][0].update(bytes=s["gpus"][0]["pods"][0]["bytes"] * 2),
        lambda s: s["gpus"][0]["pods"].pop(),
        lambda s: s["gpus"][0]["pods"][1].update(allocated="unknown"),
        lambda s: s["findings"].pop(),
        lambda s: s.update(kubeletUp=False),
        lambda s: s["gpus"].pop(),
    ],
    ids=["bytes-doubled", "pod-left", "allocation-unknown", "finding-gone", "kubelet-down",
         "gpu-gone"],
)
def test_material_changes(spec: dict, change) -> None:
    new = copy.deepcopy(spec)
    change(new)
    assert material_change(spec, new)


def test_the_first_report_is_always_material(spec: dict) -> None:
    assert material_change(None, spec)


def test_a_container_with_200_processes_lists_its_64_lowest_pids(
        proc_root: Path) -> None:
    for pid in range(100, 300):
        write_proc(proc_root, pid, cgroup=pod_cgroup(UID_A, CID_A))
    gpus = StaticGpus([gpu(0, GPU0, [(pid, 2**20) for pid in range(100, 300)])])
    spec = build_spec(Sampler("node-1", gpus, ProcReader(proc_root), fake_pods()).sample())
    (entry,) = spec["gpus"][0]["pods"]
    assert entry["pids"] == list(range(100, 164))
    assert entry["bytes"] == 200 * 2**20  # every process still counted


# Each container's memory series in the report, and a new high making the report worth a write.

class _Gpus:
    now = gpu(0, GPU0)

    def sample(self):  # type: ignore[no-untyped-def]
        from node_agent.model import NvmlReading

        return NvmlReading(up=True, gpus=(self.now,))


def _snapshot(n_containers: int, points: int) -> Snapshot:
    """Containers p0000.. (p<i> holds i+1 GiB), 250 to a GPU (a GPU lists 256 pods at most)."""
    series = tuple((1000.0 + i, GIB) for i in range(points))
    containers = [
        ContainerUsage(pod=PodRef("ml", f"p{i:04d}", f"uid-{i}", "main"),
                       allocated=Allocated.TRUE, used_bytes=(i + 1) * GIB, pids=(i,),
                       growth_bytes_per_second=None, memory_series=series)
        for i in range(n_containers)]
    gpus = tuple(GpuUsage(gpu(g, f"GPU-{g}"), (), tuple(containers[250 * g: 250 * (g + 1)]))
                 for g in range((n_containers + 249) // 250))
    return Snapshot(node="node-1", taken_at=2000.0, duration_seconds=0.0, nvml_up=True,
                    kubelet_up=True, strategy=NodeSharing(), gpus=gpus, findings=(), errors={})


def _pods(spec: dict) -> list[dict]:
    return [p for g in spec["gpus"] for p in g["pods"]]


def test_each_pod_container_gets_its_series_in_the_report(proc_root: Path) -> None:
    write_proc(proc_root, 1, cgroup=pod_cgroup(UID_A, CID_A))
    write_proc(proc_root, 2, cgroup=pod_cgroup(UID_B, CID_B))
    write_proc(proc_root, 3)  # a host process: no entry, no series
    clock = iter([1000.0, 1010.0, 1020.0])
    source = _Gpus()
    sampler = Sampler("node-1", source, ProcReader(proc_root), fake_pods(),
                      wall_clock=lambda: next(clock))
    for used in (10, 11, 13):
        source.now = gpu(0, GPU0, [(1, used * GIB), (2, 2 * GIB), (3, GIB)])
        spec = build_spec(sampler.sample())
    a, b = spec["gpus"][0]["pods"]
    assert a["memorySeries"] == {"times": [1000.0, 1010.0, 1020.0],
                                 "bytes": [10 * GIB, 11 * GIB, 13 * GIB]}
    assert b["memorySeries"]["bytes"] == [2 * GIB] * 3
    report = parse_report(build_body(spec))
    assert not report.dropped
    assert [e.memory_series[-1] for _, e in report.pod_entries()] == [(1020.0, 13 * GIB),
                                                                      (1020.0, 2 * GIB)]


def test_a_report_within_the_budget_carries_every_point() -> None:
    spec = build_spec(_snapshot(256, 32))
    assert [len(p["memorySeries"]["times"]) for p in _pods(spec)] == [32] * 256


def test_past_the_budget_each_series_gets_an_equal_share() -> None:
    spec = build_spec(_snapshot(512, 32))
    lengths = {len(p["memorySeries"]["times"]) for p in _pods(spec)}
    assert lengths == {16}
    assert not parse_report(build_body(spec)).dropped


def test_past_a_share_of_8_only_the_largest_containers_keep_a_series() -> None:
    snapshot = _snapshot(1100, 32)
    counts = series_points(snapshot.gpus)
    assert sum(counts.values()) == 8192
    spec = build_spec(snapshot)
    with_series = sorted(int(p["pod"][1:]) for p in _pods(spec) if "memorySeries" in p)
    assert with_series == list(range(1100 - 1024, 1100))  # the 1024 holding the most memory
    assert not parse_report(build_body(spec)).dropped


def test_points_that_round_onto_one_millisecond_are_written_once() -> None:
    snapshot = _snapshot(1, 0)
    usage = snapshot.gpus[0]
    c = usage.containers[0]
    close = ((1000.0001, GIB), (1000.0002, 2 * GIB), (1000.5, 3 * GIB))
    from dataclasses import replace

    snapshot = replace(snapshot, gpus=(replace(usage, containers=(
        replace(c, memory_series=close),)),))
    entry = build_spec(snapshot)["gpus"][0]["pods"][0]
    assert entry["memorySeries"] == {"times": [1000.0, 1000.5], "bytes": [GIB, 3 * GIB]}


def test_a_new_high_256_mib_above_the_written_series_is_material() -> None:
    old = build_spec(_snapshot(1, 5))  # p0000 holds 1 GiB, its series 1 GiB flat
    new = copy.deepcopy(old)
    new["gpus"][0]["pods"][0]["bytes"] = GIB + 256 * 2**20
    assert material_change(old, new)  # 25 % but only 256 MiB: the old rule wanted more
    new["gpus"][0]["pods"][0]["bytes"] = GIB + 255 * 2**20
    assert not material_change(old, new)


def test_a_rise_that_only_returns_to_an_earlier_high_is_not_material() -> None:
    old = build_spec(_snapshot(1, 5))
    old["gpus"][0]["pods"][0]["memorySeries"]["bytes"][1] = 40 * GIB  # was at 40 GiB before
    old["gpus"][0]["pods"][0]["bytes"] = 39 * GIB
    new = copy.deepcopy(old)
    new["gpus"][0]["pods"][0]["bytes"] = 40 * GIB
    assert not material_change(old, new)
