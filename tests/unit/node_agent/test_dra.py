"""DRA: claimed devices → GPU UUIDs through this node's ResourceSlices, allocation and sharing.

ResourceSlices here are JSON as the API server serves resource.k8s.io/v1 (attributes on the
device; NVIDIA's DRA driver publishes ``uuid``); the kubelet's answer is plain PodDevices (the
client's decoding of the real messages: podresources/test_client.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node_agent.dra import DraSlices, device_uuid, slice_index
from node_agent.model import Allocated, FindingKind
from node_agent.podresources.client import (
    KubeletUnavailable,
    PodDevices,
)
from node_agent.pods import ClusterPods, PodInfo, index_pods
from node_agent.procfs import ProcReader
from node_agent.sampler import Sampler

from .agent_helpers import (
    GIB,
    GPU0,
    GPU1,
    MIG,
    NV,
    StaticGpus,
    claimed,
    gpu,
    pod_cgroup,
    write_proc,
)

pytestmark = pytest.mark.unit

NODE = "node-1"


def device(name: str, uuid: str | None = None, key: str = "uuid") -> dict[str, Any]:
    attributes: dict[str, Any] = {"type": {"string": "gpu"}, "index": {"int": 0}}
    if uuid is not None:
        attributes[key] = {"string": uuid}
    return {"name": name, "attributes": attributes}


def rslice(devices: list[dict[str, Any]], *, driver: str = NV, pool: str = NODE,
           node: str = NODE, generation: int = 1) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}-{generation}"},
            "spec": {"driver": driver, "nodeName": node, "devices": devices,
                     "pool": {"name": pool, "generation": generation,
                              "resourceSliceCount": 1}}}


def slices(*items: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "ResourceSliceList", "items": list(items)}


# ---- the ResourceSlice map -----------------------------------------------------------------

def test_the_uuid_attribute_maps_each_device_of_this_node() -> None:
    index = slice_index(slices(
        rslice([device("gpu-0", GPU0), device("gpu-1", GPU1, key=f"{NV}/uuid"),
                device("mig-0-1", MIG), device("no-uuid")]),
        rslice([device("gpu-0", "GPU-elsewhere")], node="node-2", pool="node-2"),
    ), NODE)
    assert index == {(NV, NODE, "gpu-0"): GPU0, (NV, NODE, "gpu-1"): GPU1,
                     (NV, NODE, "mig-0-1"): MIG, (NV, NODE, "no-uuid"): None}


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    index = slice_index(slices(rslice([device("gpu-0", "GPU-old")], generation=1),
                               rslice([device("gpu-0", GPU0)], generation=2)), NODE)
    assert index == {(NV, NODE, "gpu-0"): GPU0}


@pytest.mark.parametrize("item", [
    "not a mapping",
    {"spec": {"driver": "Bad_Driver", "nodeName": NODE, "pool": {"name": NODE, "generation": 1},
              "devices": [device("gpu-0", GPU0)]}},
    {"spec": {"driver": NV, "nodeName": NODE, "pool": {"name": NODE, "generation": "1"},
              "devices": [device("gpu-0", GPU0)]}},
    {"spec": {"driver": NV, "nodeName": NODE, "pool": {"name": NODE, "generation": 1},
              "devices": "gpu-0"}},
])
def test_a_malformed_slice_is_skipped(item: Any) -> None:
    index = slice_index(slices(item, rslice([device("gpu-1", GPU1)])), NODE)
    assert index == {(NV, NODE, "gpu-1"): GPU1}


@pytest.mark.parametrize("value", ["GPU-x::1", "", "x" * 129, "a b", 7, None])
def test_a_uuid_that_is_no_device_id_is_no_uuid(value: Any) -> None:
    assert device_uuid(NV, {"name": "gpu-0", "attributes": {"uuid": {"string": value}}}) is None


def test_v1beta1_basic_attributes_are_read_too() -> None:
    assert device_uuid(NV, {"name": "gpu-0", "basic": {"attributes": {
        "uuid": {"string": GPU0}}}}) == GPU0


class FakeSliceApi:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.calls: list[str] = []
        self.fail = False

    def list_resource_slices(self, *, field_selector: str, timeout: float) -> dict[str, Any]:
        self.calls.append(field_selector)
        if self.fail:
            raise RuntimeError("403 Forbidden")
        return self.body


def test_slices_are_listed_once_then_again_only_when_a_device_is_missing_or_old() -> None:
    now = [0.0]
    api = FakeSliceApi(slices(rslice([device("gpu-0", GPU0)])))
    dra = DraSlices(api, NODE, min_refresh=15, max_age=300, clock=lambda: now[0])
    known, missing = (NV, NODE, "gpu-0"), (NV, NODE, "gpu-9")
    assert dra.refresh_if_needed([known]) == 0
    assert api.calls == [f"spec.nodeName={NODE}"]
    for t in (1.0, 14.0, 200.0):  # all present: not before max_age; missing: not before 15 s
        now[0] = t
        dra.refresh_if_needed([known])
        if t < 15:
            dra.refresh_if_needed([missing])
    assert len(api.calls) == 1
    now[0] = 215.0
    dra.refresh_if_needed([missing])  # 215 s after the list, a device is missing: list again
    assert len(api.calls) == 2
    now[0] = 516.0
    dra.refresh_if_needed([known])  # max_age
    assert len(api.calls) == 3
    assert dra.uuid(known) == GPU0 and dra.uuid(missing) is None


def test_a_failed_list_keeps_the_last_map_and_counts_an_error() -> None:
    now = [0.0]
    api = FakeSliceApi(slices(rslice([device("gpu-0", GPU0)])))
    dra = DraSlices(api, NODE, clock=lambda: now[0])
    dra.refresh_if_needed([])
    api.fail = True
    now[0] = 301.0
    assert dra.refresh_if_needed([]) == 1
    assert dra.uuid((NV, NODE, "gpu-0")) == GPU0


# ---- a pass: findings and Events under DRA -------------------------------------------------

UIDS = {name: f"{i:08x}-1111-2222-3333-444444444444" for i, name in
        enumerate(["owner", "intruder", "shared-a", "shared-b", "other", "x1", "x2"])}


class Kubelet:
    def __init__(self, answer: list[PodDevices]) -> None:
        self.answer = answer

    def list(self) -> list[PodDevices]:
        if not self.answer:
            raise KubeletUnavailable("down")
        return self.answer


class StaticApi:
    def __init__(self) -> None:
        self.index = index_pods([PodInfo("team", n, uid, {f"{i:064x}": "main"})
                                 for i, (n, uid) in enumerate(UIDS.items())])
        self.labels: dict[str, str] = {}

    def refresh_if_needed(self, wanted: object) -> int:
        return 0


def dra_pass(proc_root: Path, answer: list[PodDevices], uses: dict[str, str],
             body: dict[str, Any] | None = None) -> Any:
    pids = {}
    for i, (name, uid) in enumerate(UIDS.items()):
        pids[name] = 100 + i
        write_proc(proc_root, 100 + i, cgroup=pod_cgroup(uid, f"{i:064x}"))
    by_gpu: dict[str, list[tuple[int, int]]] = {}
    for name, uuid in uses.items():
        by_gpu.setdefault(uuid, []).append((pids[name], GIB))
    gpus = StaticGpus([gpu(i, uuid, procs) for i, (uuid, procs) in enumerate(by_gpu.items())])
    api = FakeSliceApi(body or slices(rslice([device("gpu-0", GPU0), device("gpu-1", GPU1)]),
                                      rslice([device("dev-0")], driver="gpu.example.com")))
    pods = ClusterPods(Kubelet(answer), StaticApi(), DraSlices(api, NODE))  # type: ignore[arg-type]
    return Sampler(NODE, gpus, ProcReader(proc_root), pods).sample()


def allocated(snapshot: Any) -> dict[str, Allocated]:
    return {c.pod.pod: c.allocated for g in snapshot.gpus for c in g.containers}


def kinds(snapshot: Any) -> set[tuple[str, tuple[str, ...]]]:
    return {(f.kind.value, f.pods) for f in snapshot.findings}


def test_a_pod_with_its_gpu_from_a_claim_is_allocated_and_raises_nothing(proc_root: Path) -> None:
    s = dra_pass(proc_root, [claimed("owner", "mine", "gpu-0")], {"owner": GPU0})
    assert allocated(s) == {"owner": Allocated.TRUE}
    assert s.findings == ()


def test_a_pod_using_a_gpu_claimed_by_another_is_flagged(proc_root: Path) -> None:
    s = dra_pass(proc_root, [claimed("owner", "mine", "gpu-0"),
                             PodDevices("team", "intruder", ())],
                 {"owner": GPU0, "intruder": GPU0})
    assert allocated(s) == {"owner": Allocated.TRUE, "intruder": Allocated.FALSE}
    assert kinds(s) == {("unrequested-gpu-use", ("team/intruder",)),
                        ("unintended-sharing", ("team/intruder", "team/owner"))}


def test_a_claim_shared_by_two_pods_is_intended_sharing(proc_root: Path) -> None:
    s = dra_pass(proc_root, [claimed("shared-a", "shared", "gpu-1"),
                             claimed("shared-b", "shared", "gpu-1")],
                 {"shared-a": GPU1, "shared-b": GPU1})
    assert set(allocated(s).values()) == {Allocated.TRUE}
    [finding] = s.findings
    assert finding.kind is FindingKind.INTENDED_SHARING
    assert finding.pods == ("team/shared-a", "team/shared-b")
    assert "sharing ResourceClaim team/shared" in finding.message


def test_one_device_given_to_two_claims_is_intended_too(proc_root: Path) -> None:
    s = dra_pass(proc_root, [claimed("x1", "c1", "gpu-1"), claimed("x2", "c2", "gpu-1")],
                 {"x1": GPU1, "x2": GPU1})
    [finding] = s.findings
    assert finding.kind is FindingKind.INTENDED_SHARING
    assert "team/c1, team/c2" in finding.message


def test_a_driver_without_uuids_gives_unknown_and_no_accusation(proc_root: Path) -> None:
    s = dra_pass(proc_root, [claimed("other", "c", "dev-0", driver="gpu.example.com")],
                 {"other": GPU0})
    assert allocated(s) == {"other": Allocated.UNKNOWN}
    assert s.findings == ()


def test_slices_that_cannot_be_listed_give_unknown_and_an_api_error(proc_root: Path) -> None:
    class Refusing(FakeSliceApi):
        def list_resource_slices(self, *, field_selector: str, timeout: float) -> Any:
            raise RuntimeError("forbidden: resourceslices.resource.k8s.io")

    for i, (_, uid) in enumerate(UIDS.items()):
        write_proc(proc_root, 100 + i, cgroup=pod_cgroup(uid, f"{i:064x}"))
    pods = ClusterPods(Kubelet([claimed("owner", "mine", "gpu-0")]), StaticApi(),  # type: ignore[arg-type]
                       DraSlices(Refusing({}), NODE))
    s = Sampler(NODE, StaticGpus([gpu(0, GPU0, [(100, GIB)])]), ProcReader(proc_root),
                pods).sample()
    assert allocated(s) == {"owner": Allocated.UNKNOWN}
    assert s.errors["apiserver"] == 1 and s.findings == ()


def test_no_slice_list_without_any_claim(proc_root: Path) -> None:
    api = FakeSliceApi(slices())
    pods = ClusterPods(Kubelet([PodDevices("team", "owner", ())]), StaticApi(),  # type: ignore[arg-type]
                       DraSlices(api, NODE))
    pods.view()
    assert api.calls == []
