"""Sharing findings from who uses each GPU, what each pod was allocated and the node's labels."""

from __future__ import annotations

import pytest
from agent_helpers import GIB, GPU0, gpu

from node_agent.model import (
    Allocated,
    Allocations,
    GpuUsage,
    NodeSharing,
    PodRef,
    ProcessUsage,
)
from node_agent.sampler import sum_containers
from node_agent.sharing import findings_for, strategy_from

pytestmark = pytest.mark.unit


def usage(*procs: tuple[str | None, Allocated, int]) -> GpuUsage:
    """Processes on GPU 0: (namespace/pod or None for the host, allocated, bytes)."""
    ps = []
    for pid, (key, allocated, used) in enumerate(procs, start=1):
        pod = None
        if key is not None:
            ns, name = key.split("/")
            pod = PodRef(ns, name, f"uid-{name}", "main")
        ps.append(ProcessUsage(pid, "python", used, pod, allocated))
    return GpuUsage(gpu(0, GPU0), tuple(ps), sum_containers(ps))


def kinds(found: list) -> list[tuple[str, tuple[str, ...]]]:
    return [(f.kind, f.pods) for f in found]


NONE = strategy_from({"nvidia.com/gpu.sharing-strategy": "none"}, None)
TIME_SLICING = strategy_from({"nvidia.com/gpu.sharing-strategy": "time-slicing",
                              "nvidia.com/gpu.replicas": "4"}, None)


def test_one_allocated_pod_is_no_finding() -> None:
    assert findings_for(usage(("ml/a", Allocated.TRUE, GIB)), NONE) == []


def test_a_pod_on_a_gpu_it_did_not_request_is_unrequested_use() -> None:
    found = findings_for(usage(("ml/b", Allocated.FALSE, 3 * GIB)), NONE)
    assert kinds(found) == [("unrequested-gpu-use", ("ml/b",))]
    assert "3.0 GiB" in found[0].message and GPU0 in found[0].message


def test_two_pods_on_an_unshared_node_is_unintended_sharing() -> None:
    found = findings_for(usage(("ml/a", Allocated.TRUE, GIB), ("ml/b", Allocated.FALSE, GIB)),
                         NONE)
    assert kinds(found) == [("unrequested-gpu-use", ("ml/b",)),
                            ("unintended-sharing", ("ml/a", "ml/b"))]


def test_two_pods_under_time_slicing_is_intended_sharing() -> None:
    found = findings_for(usage(("ml/a", Allocated.TRUE, GIB), ("ml/b", Allocated.TRUE, GIB)),
                         TIME_SLICING)
    assert kinds(found) == [("intended-sharing", ("ml/a", "ml/b"))]
    assert "time-slicing" in found[0].message


def test_host_processes_do_not_make_sharing() -> None:
    found = findings_for(usage(("ml/a", Allocated.TRUE, GIB), (None, Allocated.HOST, GIB)), NONE)
    assert found == []


def test_unknown_allocation_is_not_an_accusation() -> None:
    assert findings_for(usage(("ml/a", Allocated.UNKNOWN, GIB)), NONE) == []


@pytest.mark.parametrize(
    ("labels", "allocations", "expected"),
    [
        ({"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"},
         None, ("time-slicing", 4)),
        ({"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "2"}, None,
         ("mps", 2)),
        ({"nvidia.com/mig.strategy": "mixed"}, None, ("mig", 1)),
        ({"nvidia.com/gpu.sharing-strategy": "none"}, None, ("none", 1)),
        ({}, Allocations({}, replicated=True), ("time-slicing", 1)),
        ({}, Allocations({}, mig=True), ("mig", 1)),
        ({}, None, ("none", 1)),
        ({"nvidia.com/gpu.replicas": "many"}, None, ("none", 1)),
    ],
)
def test_strategy_from_labels_or_device_ids(labels, allocations, expected) -> None:
    s = strategy_from(labels, allocations)
    assert (s.kind, s.replicas) == expected


@pytest.mark.parametrize(
    ("value", "replicas"),
    [
        ("4", 4),
        ("0", 1),
        ("-3", 1),
        ("4096", 4096),
        ("4097", 4096),
        ("99999999999999999999999", 4096),
        ("9" * 10_000, 4096),
        ("000000000000000000000000000012", 12),
        ("1e3", 1),
        (" 5", 1),
        ("\u0663", 1),  # ARABIC-INDIC DIGIT THREE: int() would take it
        ("", 1),
        (7, 1),
    ],
)
def test_replicas_label_is_clamped_to_1_through_4096(value: object, replicas: int) -> None:
    s = strategy_from({"nvidia.com/gpu.sharing-strategy": "time-slicing",
                       "nvidia.com/gpu.replicas": value}, None)  # type: ignore[dict-item]
    assert (s.kind, s.replicas) == ("time-slicing", replicas)


def test_a_non_string_strategy_label_is_ignored_not_a_crash() -> None:
    labels = {"nvidia.com/gpu.sharing-strategy": ["mps"], "nvidia.com/mig.strategy": 5}
    assert strategy_from(labels, None) == NodeSharing("none", 1)  # type: ignore[arg-type]
