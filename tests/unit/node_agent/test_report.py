"""The GPUNodeReport body and when a change is worth a write."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from agent_helpers import (
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

from node_agent.procfs import ProcReader
from node_agent.report import build_body, build_spec, material_change
from node_agent.sampler import Sampler

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


def test_a_shared_gpu_message_names_the_8_largest_pods_and_counts_the_rest() -> None:
    from node_agent.model import Allocated, GpuUsage, NodeSharing, PodRef, ProcessUsage
    from node_agent.sampler import sum_containers
    from node_agent.sharing import findings_for

    procs = [ProcessUsage(pid=i, comm="x", used_bytes=(i + 1) * GIB,
                          pod=PodRef("ml", f"p{i:02d}", f"u{i}", "main"),
                          allocated=Allocated.TRUE) for i in range(20)]
    usage = GpuUsage(gpu(0, GPU0), tuple(procs), sum_containers(procs))
    (finding,) = findings_for(usage, NodeSharing("none", 1))
    assert len(finding.pods) == 20
    assert finding.message.endswith("ml/p19 20.0 GiB, ml/p18 19.0 GiB, ml/p17 18.0 GiB, "
                                    "ml/p16 17.0 GiB, ml/p15 16.0 GiB, ml/p14 15.0 GiB, "
                                    "ml/p13 14.0 GiB, ml/p12 13.0 GiB and 12 more")
