"""Joining processes to pods: cgroup UID → API pod → kubelet allocations by name."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.base.errors import APIConnectionError, ConfigError
from node_agent.model import Allocated, Allocations, CgroupIdentity, PodRef
from node_agent.podresources.client import (
    ClaimDevice,
    ContainerClaim,
    ContainerDevices,
    KubeletUnavailable,
    PodDevices,
)
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

from .agent_helpers import GPU0, GPU1, MIG, NV, claimed

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


UID_A = "aaaaaaaa-1111-4222-8333-444444444444"
UID_MIRROR = "eeeeeeee-1111-4222-8333-444444444444"
C1, C0 = "1" * 64, "0" * 64
API_LIST = {
    "items": [
        {"metadata": {"namespace": "ml", "name": "a", "uid": UID_A},
         "status": {"containerStatuses": [{"name": "main", "containerID": f"containerd://{C1}"}],
                    "initContainerStatuses": [{"name": "init", "containerID": f"cri-o://{C0}"}]}},
        {"metadata": {"namespace": "kube-system", "name": "etcd-node-1", "uid": UID_MIRROR,
                      "annotations": {"kubernetes.io/config.mirror": "f" * 32}},
         "status": {}},
    ]
}


def test_api_pods_are_indexed_by_uid_and_static_pods_by_config_hash() -> None:
    index = index_pods(pods_from_api_list(API_LIST))
    assert resolve(index, CgroupIdentity(UID_A, C1)) == PodRef("ml", "a", UID_A, "main")
    assert resolve(index, CgroupIdentity(UID_A, C0)).container == "init"
    assert resolve(index, CgroupIdentity("f" * 32, None)) == PodRef(
        "kube-system", "etcd-node-1", UID_MIRROR, "")


def api_pod(namespace: object = "ml", name: object = "a", uid: object = UID_A,
            **extra: object) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "uid": uid, **extra},
            "status": {"containerStatuses": [{"name": "main", "containerID": f"docker://{C1}"}]}}


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(api_pod(name="x" * 254), id="name-254-characters"),
        pytest.param(api_pod(name="a\nb"), id="name-with-newline"),
        pytest.param(api_pod(namespace="ML"), id="namespace-uppercase"),
        pytest.param(api_pod(namespace="n" * 64), id="namespace-64-characters"),
        pytest.param(api_pod(uid="uid-a"), id="uid-not-a-uuid"),
        pytest.param(api_pod(uid=None), id="uid-missing"),
        pytest.param(api_pod(name=["a"]), id="name-a-list"),
        pytest.param({"metadata": "x"}, id="metadata-a-string"),
        pytest.param("x", id="item-a-string"),
    ],
)
def test_api_pods_with_names_the_api_server_could_not_have_sent_are_skipped(item: Any) -> None:
    good = api_pod(name="b", uid="bbbbbbbb-1111-4222-8333-444444444444")
    assert [p.name for p in pods_from_api_list({"items": [item, good]})] == ["b"]


def test_api_pod_names_at_the_kubernetes_limits_are_kept() -> None:
    item = api_pod(namespace="n" * 63, name="p" * 253)
    [pod] = pods_from_api_list({"items": [item]})
    assert (len(pod.namespace), len(pod.name), pod.containers) == (63, 253, {C1: "main"})


def test_malformed_container_statuses_and_mirror_hashes_are_dropped_not_fatal() -> None:
    item = api_pod(annotations={"kubernetes.io/config.mirror": "../../x"})
    item["status"] = {"containerStatuses": [
        {"name": "main", "containerID": "containerd://not-hex"},
        {"name": "Bad Name", "containerID": f"containerd://{C0}"},
        "garbage",
        {"name": "side", "containerID": f"containerd://{C1}"},
    ], "initContainerStatuses": "garbage"}
    [pod] = pods_from_api_list({"items": [item]})
    assert (pod.containers, pod.mirror_hash) == ({C1: "side"}, None)


def test_at_most_10000_pods_are_read_from_one_list() -> None:
    items = [api_pod(name=f"p{i}", uid=f"{i:08x}-1111-4222-8333-444444444444")
             for i in range(10_001)]
    assert len(pods_from_api_list({"items": items})) == 10_000


def test_a_kubelet_answer_with_a_bad_device_id_makes_that_pod_unknown_not_unallocated() -> None:
    a = allocations_from([
        pd("ml", "a", ("main", "nvidia.com/gpu", ["GPU-x", "GPU-\x00" + "y" * 5000])),
        pd("ml", "b", ("main", "nvidia.com/gpu", ["GPU-y"])),
    ])
    assert a.by_pod == {"ml/b": frozenset({"GPU-y"})}
    assert allocation_of(PodRef("ml", "a", UID_A, "main"), "GPU-z", a) is Allocated.UNKNOWN


def test_a_kubelet_answer_with_over_1024_distinct_gpus_for_a_pod_is_not_trusted() -> None:
    ids = [f"GPU-{i}" for i in range(1025)]
    a = allocations_from([pd("ml", "a", ("main", "nvidia.com/gpu", ids)),
                          pd("ml", "b", ("main", "nvidia.com/gpu", ids[:1024]))])
    assert set(a.by_pod) == {"ml/b"} and len(a.by_pod["ml/b"]) == 1024


def test_time_slicing_replicas_of_one_gpu_count_once_toward_the_bound() -> None:
    ids = [f"GPU-x::{i}" for i in range(5000)]
    a = allocations_from([pd("ml", "a", ("main", "nvidia.com/gpu", ids))])
    assert a.by_pod == {"ml/a": frozenset({"GPU-x"})}


def test_kubelet_pods_with_malformed_names_are_skipped() -> None:
    a = allocations_from([pd("ml", "a" * 254, ("main", "nvidia.com/gpu", ["GPU-x"])),
                          pd("", "b", ("main", "nvidia.com/gpu", ["GPU-x"]))])
    assert a.by_pod == {}


def test_node_labels_that_are_not_strings_are_dropped() -> None:
    class Core(FakeCoreV1):
        def get_node(self, name: str, *, timeout: float) -> dict[str, Any]:
            return {"metadata": {"labels": {"nvidia.com/gpu.replicas": 5, "a": "b",
                                            "nvidia.com/gpu.sharing-strategy": ["mps"]}}}

    pods = ApiPods(Core(), "node-1")
    assert pods.refresh_if_needed([]) == 0
    assert pods.labels == {"a": "b"}


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
            raise APIConnectionError("connection refused")
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
    assert pods.refresh_if_needed([UID_A]) == 0
    assert pods.labels == {"nvidia.com/gpu.sharing-strategy": "mps"}
    now[0] = 5.0
    pods.refresh_if_needed(["uid-new"])  # too soon
    now[0] = 16.0
    pods.refresh_if_needed([UID_A])  # known: no need
    pods.refresh_if_needed(["uid-new"])  # unknown and old enough
    assert api.calls.count("list_pods") == 2


def test_api_errors_keep_the_last_index_and_count() -> None:
    pods = ApiPods(FakeCoreV1(fail=True), "node-1")
    view = ClusterPods(None, pods).view(["uid-a"])
    assert view.errors == {"apiserver": 1}


def test_a_failing_pod_list_is_logged_once_until_it_works_again(
        caplog: pytest.LogCaptureFixture) -> None:
    """Counted every attempt, logged once (it was logged on every pass; DRA's list logged
    once: one schedule, relist.Relist, serves both now)."""
    now = [0.0]
    api = FakeCoreV1(fail=True)
    pods = ApiPods(api, "node-1", min_refresh=15, max_age=300, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        errors = []
        for step in range(4):
            now[0] = step * 301.0
            errors.append(pods.refresh_if_needed([UID_A]))
        api.fail = False
        now[0] = 5 * 301.0
        errors.append(pods.refresh_if_needed([UID_A]))
    assert errors == [1, 1, 1, 1, 0]
    assert caplog.text.count("listing pods of node node-1 from the API server failed") == 1
    assert caplog.text.count("from the API server works again") == 1
    assert UID_A in pods.index


class BrokenKubelet:
    """A client that raises what it should not (the old client let a ValueError out for a
    grpc-status of '²'): the pass must still finish, with the kubelet down."""

    def list(self) -> list[PodDevices]:
        raise ValueError("invalid literal for int() with base 10: '²'")


def test_any_exception_from_the_kubelet_client_is_the_kubelet_down_never_a_failed_pass(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        view = ClusterPods(BrokenKubelet(), None).view()
    assert view.allocations is None and not view.kubelet_up
    assert view.errors == {"kubelet": 1}
    assert "ValueError" in caplog.text


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


# DRA: claimed devices become the pod's GPUs through the UUID map (the map itself: test_dra.py).

NODE = "node-1"
LOOKUP = {(NV, NODE, "gpu-0"): GPU0, (NV, NODE, "gpu-1"): GPU1, (NV, NODE, "mig-0"): MIG}


def pod_ref(name: str) -> Any:
    from node_agent.model import PodRef

    return PodRef("team", name, "", "main")


def test_claimed_devices_become_the_pods_gpus_with_their_claims() -> None:
    a = allocations_from([claimed("a", "single", "gpu-0"), claimed("b", "two", "gpu-1", "mig-0"),
                          PodDevices("team", "plain", (ContainerDevices(
                              "main", "nvidia.com/gpu", (GPU1,)),))], LOOKUP.get)
    assert a.by_pod == {"team/a": frozenset({GPU0}), "team/b": frozenset({GPU1, MIG}),
                        "team/plain": frozenset({GPU1})}
    assert a.claims == {("team/a", GPU0): frozenset({"team/single"}),
                        ("team/b", GPU1): frozenset({"team/two"}),
                        ("team/b", MIG): frozenset({"team/two"})}
    assert a.unresolved == frozenset() and a.mig


def test_a_device_without_a_uuid_makes_the_pod_unknown_on_other_gpus_never_false() -> None:
    a = allocations_from([claimed("a", "c", "gpu-0", "dev-7", driver=NV)], LOOKUP.get)
    assert a.unresolved == frozenset({"team/a"})
    ref = pod_ref("a")
    assert allocation_of(ref, GPU0, a) is Allocated.TRUE
    assert allocation_of(ref, GPU1, a) is Allocated.UNKNOWN


def test_without_an_api_server_every_claimed_device_is_unknown() -> None:
    a = allocations_from([claimed("a", "c", "gpu-0")])
    assert allocation_of(pod_ref("a"), GPU0, a) is Allocated.UNKNOWN


@pytest.mark.parametrize("pod", [
    PodDevices("team", "a", (), (ContainerClaim("main", "team", "Bad_Claim", ()),)),
    PodDevices("team", "a", (), (ContainerClaim("main", "", "c", ()),)),
    PodDevices("team", "a", (), (ContainerClaim("main", "team", "c", (
        ClaimDevice(NV, NODE, "GPU 0"),)),)),
    PodDevices("team", "a", (), (ContainerClaim("main", "team", "c", (
        ClaimDevice("x" * 64, NODE, "gpu-0"),)),)),
])
def test_a_claim_kubernetes_would_not_accept_leaves_the_pod_unknown(pod: PodDevices) -> None:
    a = allocations_from([pod], LOOKUP.get)
    assert "team/a" not in a.by_pod and a.claims == {}
    assert allocation_of(pod_ref("a"), GPU0, a) is Allocated.UNKNOWN


def test_more_than_1024_claimed_gpus_leave_the_pod_unknown() -> None:
    many = {(NV, NODE, f"gpu-{i}"): f"GPU-{i}" for i in range(1025)}
    a = allocations_from([claimed("a", "c", *(f"gpu-{i}" for i in range(1025)))], many.get)
    assert "team/a" not in a.by_pod
    exactly = allocations_from([claimed("a", "c", *(f"gpu-{i}" for i in range(1024)))],
                               many.get)
    assert len(exactly.by_pod["team/a"]) == 1024
