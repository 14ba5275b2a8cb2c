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
            for p in g["pods"]] == [("a", "main", True, 10 * GIB, [1]),
                                    ("b", "side", False, 2 * GIB, [2])]
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
        lambda s: s["gpus"][0]["pods"][1].update(allocated=None),
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
