"""Joining processes to pods: cgroup UID → API pod → kubelet allocations by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from node_agent.apiclient import ApiError
from node_agent.errors import ConfigError
from node_agent.model import Allocated, Allocations, CgroupIdentity, PodRef
from node_agent.podresources.client import ContainerDevices, KubeletUnavailable, PodDevices
from node_agent.pods import (
    ApiPods,
    ClusterPods,
    FakePods,
    allocation_of,
    allocations_from,
    index_pods,
    pods_from_api_list,
    resolve,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def pd(ns: str, name: str, *devices: tuple[str, str, list[str]]) -> PodDevices:
    return PodDevices(ns, name, tuple(ContainerDevices(c, r, tuple(ids)) for c, r, ids in devices))


def test_time_slicing_replica_ids_become_the_gpu_uuid() -> None:
    a = allocations_from([pd("ml", "a", ("main", "nvidia.com/gpu", ["GPU-x::0", "GPU-y::3"]))])
    assert a.by_pod["ml/a"] == {"GPU-x", "GPU-y"}
    assert a.replicated and not a.mig


def test_mig_ids_are_kept_and_flag_mig() -> None:
    a = allocations_from([pd("ml", "a", ("main", "nvidia.com/mig-1g.18gb", ["MIG-abc"]))])
    assert a.by_pod["ml/a"] == {"MIG-abc"} and a.mig


def test_non_gpu_devices_and_gpu_less_pods() -> None:
    a = allocations_from([pd("ml", "a", ("main", "example.com/fpga", ["fpga0"])),
                          pd("ml", "b")])
    assert a.by_pod == {"ml/a": frozenset(), "ml/b": frozenset()}


API_LIST = {
    "items": [
        {"metadata": {"namespace": "ml", "name": "a", "uid": "uid-a"},
         "status": {"containerStatuses": [{"name": "main", "containerID": "containerd://c1"}],
                    "initContainerStatuses": [{"name": "init", "containerID": "cri-o://c0"}]}},
        {"metadata": {"namespace": "kube-system", "name": "etcd-node-1", "uid": "mirror-uid",
                      "annotations": {"kubernetes.io/config.mirror": "f" * 32}},
         "status": {}},
    ]
}


def test_api_pods_are_indexed_by_uid_and_static_pods_by_config_hash() -> None:
    index = index_pods(pods_from_api_list(API_LIST))
    assert resolve(index, CgroupIdentity("uid-a", "c1")) == PodRef("ml", "a", "uid-a", "main")
    assert resolve(index, CgroupIdentity("uid-a", "c0")).container == "init"
    assert resolve(index, CgroupIdentity("f" * 32, None)) == PodRef(
        "kube-system", "etcd-node-1", "mirror-uid", "")


def test_an_unknown_uid_keeps_the_uid_only() -> None:
    assert resolve({}, CgroupIdentity("uid-z", "c9")) == PodRef("", "", "uid-z", "")


@pytest.mark.parametrize(
    ("pod", "allocations", "expected"),
    [
        (PodRef("ml", "a", "u", "c"), Allocations({"ml/a": frozenset({"GPU-0"})}), Allocated.TRUE),
        (PodRef("ml", "a", "u", "c"), Allocations({"ml/a": frozenset()}), Allocated.FALSE),
        (PodRef("ml", "a", "u", "c"), None, Allocated.UNKNOWN),  # kubelet down
        (PodRef("ml", "a", "u", "c"), Allocations({}), Allocated.UNKNOWN),  # not listed (yet)
        (PodRef("", "", "u", ""), Allocations({}), Allocated.UNKNOWN),  # unnamed pod
    ],
)
def test_allocation_of(pod: PodRef, allocations: Allocations | None,
                       expected: Allocated) -> None:
    assert allocation_of(pod, "GPU-0", allocations) is expected


class DownKubelet:
    def list(self) -> list[PodDevices]:
        raise KubeletUnavailable("no socket")


def test_cluster_pods_with_kubelet_down_has_no_allocations_and_counts_it() -> None:
    view = ClusterPods(DownKubelet(), None).view()
    assert view.allocations is None and not view.kubelet_up
    assert view.errors == {"kubelet": 1}


class FakeCoreV1:
    """Answers the two core-API calls ApiPods makes, as ``apiclient.ApiClient`` does."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.fail = fail

    def _answer(self, call: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(call)
        if self.fail:
            raise ApiError(None, "connection refused")
        return json.loads(json.dumps(body))

    def list_pods(self, *, field_selector: str, timeout: float) -> dict[str, Any]:
        assert field_selector == "spec.nodeName=node-1"
        return self._answer("list_pods", API_LIST)

    def get_node(self, name: str, *, timeout: float) -> dict[str, Any]:
        return self._answer("read_node", {
            "metadata": {"labels": {"nvidia.com/gpu.sharing-strategy": "mps"}}})


def test_api_pods_relist_on_an_unknown_uid_at_most_every_min_refresh() -> None:
    now = [0.0]
    api = FakeCoreV1()
    pods = ApiPods(api, "node-1", min_refresh=15, max_age=300, clock=lambda: now[0])
    assert pods.refresh_if_needed(["uid-a"]) == 0
    assert pods.labels == {"nvidia.com/gpu.sharing-strategy": "mps"}
    now[0] = 5.0
    pods.refresh_if_needed(["uid-new"])  # too soon
    now[0] = 16.0
    pods.refresh_if_needed(["uid-a"])  # known: no need
    pods.refresh_if_needed(["uid-new"])  # unknown and old enough
    assert api.calls.count("list_pods") == 2


def test_api_errors_keep_the_last_index_and_count() -> None:
    pods = ApiPods(FakeCoreV1(fail=True), "node-1")
    view = ClusterPods(None, pods).view(["uid-a"])
    assert view.errors == {"apiserver": 1}


def test_the_example_fake_node_loads() -> None:
    pods = FakePods.from_file(REPO / "examples/fake-node/pods.yaml")
    assert pods.node.name == "gpu-node-1"
    view = pods.view()
    assert view.kubelet_up and view.strategy.kind == "none"
    assert len(view.allocations.by_pod) == 3 if view.allocations else False


def test_a_bad_fake_pods_file_is_a_clear_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "pods.yaml"
    bad.write_text("pods:\n- namespace: ml\n  name: a\n")
    with pytest.raises(ConfigError, match=r"pods\[0\].uid: required, a lowercase UUID"):
        FakePods.from_file(bad)
