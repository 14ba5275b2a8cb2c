"""Sharing findings from who uses each GPU, what each pod was allocated and the node's labels."""

from __future__ import annotations

import pytest

from node_agent.model import (
    Allocated,
    Allocations,
    ContainerUsage,
    FindingKind,
    GpuUsage,
    NodeSharing,
    PodRef,
    ProcessUsage,
    SharingStrategy,
)
from node_agent.sampler import sum_containers
from node_agent.sharing import findings, findings_for, replicas_from, strategy_from

from .agent_helpers import GIB, GPU0, GPU1, gpu

pytestmark = pytest.mark.unit


def usage(*procs: tuple[str | None, Allocated, int], index: int = 0,
          uuid: str = GPU0) -> GpuUsage:
    """Processes on GPU ``index``: (namespace/pod or None for the host, allocated, bytes)."""
    ps = []
    for pid, (key, allocated, used) in enumerate(procs, start=1):
        pod = None
        if key is not None:
            ns, name = key.split("/")
            pod = PodRef(ns, name, f"uid-{name}", "main")
        ps.append(ProcessUsage(pid, "python", used, pod, allocated))
    return GpuUsage(gpu(index, uuid), tuple(ps), sum_containers(ps))


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


# Boundary tables for the agent's sharing rules (issue 18): each rule from both
# sides, literal numbers and label values, never the module's constants.

S = "nvidia.com/gpu.sharing-strategy"
MIG = "nvidia.com/mig.strategy"
REPLICATED = Allocations(replicated=True)
MIG_IDS = Allocations(mig=True)
TWO = usage(("ml/a", Allocated.TRUE, 3 * GIB), ("ml/b", Allocated.TRUE, GIB))


@pytest.mark.parametrize(
    ("label", "replicas"),
    [
        ("1", 1),
        ("4", 4),
        ("4095", 4095),
        ("4096", 4096),
        ("4097", 4096),
        ("10000", 4096),
        ("99999", 4096),
        ("0", 1),
        ("0000", 1),
        ("0004", 4),
        ("00004096", 4096),
        ("00004097", 4096),
        ("9" * 10_000, 4096),
        ("", 1),
        ("-4", 1),
        ("4.0", 1),
        (" 4", 1),
        ("\u0664", 1),  # ARABIC-INDIC DIGIT FOUR: isdigit() but not ASCII
        (4, 1),  # not a string
        (None, 1),
    ],
)
def test_replicas_are_plain_digits_clamped_to_1_and_4096(label: object, replicas: int) -> None:
    assert replicas_from(label) == replicas


def test_the_strategy_carries_the_clamped_replicas() -> None:
    labels = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "5000"}
    assert strategy_from(labels, None) == NodeSharing(SharingStrategy.TIME_SLICING, 4096)


@pytest.mark.parametrize(
    ("labels", "allocations", "kind"),
    [
        ({S: "mps"}, None, SharingStrategy.MPS),
        ({S: "MPS "}, None, SharingStrategy.MPS),  # trimmed, lower-cased
        ({S: "time-slicing"}, None, SharingStrategy.TIME_SLICING),
        ({S: " Time-Slicing"}, None, SharingStrategy.TIME_SLICING),
        ({S: "none"}, None, SharingStrategy.NONE),
        ({S: "none"}, REPLICATED, SharingStrategy.NONE),  # the label wins over the device IDs
        ({S: "mps"}, MIG_IDS, SharingStrategy.MPS),
        ({S: "mps", MIG: "single"}, None, SharingStrategy.MPS),  # sharing label before MIG
        ({MIG: "single"}, None, SharingStrategy.MIG),
        ({MIG: "mixed"}, REPLICATED, SharingStrategy.MIG),
        ({MIG: "none"}, None, SharingStrategy.NONE),
        ({MIG: ""}, None, SharingStrategy.NONE),
        ({MIG: "none", S: "none"}, MIG_IDS, SharingStrategy.NONE),
        ({}, REPLICATED, SharingStrategy.TIME_SLICING),  # <UUID>::<n> device IDs
        ({}, MIG_IDS, SharingStrategy.MIG),
        ({}, Allocations(replicated=True, mig=True), SharingStrategy.TIME_SLICING),
        ({}, Allocations(), SharingStrategy.NONE),
        ({}, None, SharingStrategy.NONE),
        ({S: "sharing-please"}, None, SharingStrategy.NONE),
        ({S: "mps" + "x" * 64}, None, SharingStrategy.NONE),
    ],
)
def test_the_nodes_strategy(
    labels: dict[str, str], allocations: Allocations | None, kind: SharingStrategy
) -> None:
    assert strategy_from(labels, allocations).kind is kind


def test_a_strategy_label_is_read_up_to_64_characters() -> None:
    # 60 spaces then "mps": trimmed to "mps" only because the cut is after the strip
    assert strategy_from({S: " " * 60 + "mps"}, None).kind is SharingStrategy.MPS
    assert strategy_from({S: "none" + " " * 100}, REPLICATED).kind is SharingStrategy.NONE


def test_a_non_string_label_is_the_default() -> None:
    labels = {S: 7, MIG: ["single"]}
    assert strategy_from(labels, None).kind is SharingStrategy.NONE  # type: ignore[arg-type]
    assert strategy_from(labels, REPLICATED).kind is SharingStrategy.TIME_SLICING  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sharing", "kind"),
    [
        (NodeSharing(SharingStrategy.MPS, 1), "intended-sharing"),
        (NodeSharing(SharingStrategy.TIME_SLICING, 2), "intended-sharing"),
        (NodeSharing(SharingStrategy.MIG, 1), "unintended-sharing"),
        (NodeSharing(SharingStrategy.NONE, 4), "unintended-sharing"),
    ],
)
def test_two_pods_on_one_gpu_by_strategy(sharing: NodeSharing, kind: str) -> None:
    assert kinds(findings_for(TWO, sharing)) == [(kind, ("ml/a", "ml/b"))]


def test_an_mps_node_from_its_label_shares_on_purpose() -> None:
    found = findings_for(TWO, strategy_from({S: "mps", "nvidia.com/gpu.replicas": "2"}, None))
    assert kinds(found) == [("intended-sharing", ("ml/a", "ml/b"))]
    assert found[0].message == (
        f"2 pods on GPU 0 ({GPU0}), shared by mps (replicas 2): ml/a 3.0 GiB, ml/b 1.0 GiB"
    )


def test_the_unintended_message_names_the_strategy_and_each_pods_memory_largest_first() -> None:
    found = findings_for(TWO, NodeSharing(SharingStrategy.NONE, 1))
    assert found[0].message == (
        f"2 pods on GPU 0 ({GPU0}), node does not share GPUs (strategy none): "
        "ml/a 3.0 GiB, ml/b 1.0 GiB"
    )


def test_one_pod_and_host_processes_share_nothing() -> None:
    one = usage(("ml/a", Allocated.TRUE, GIB), (None, Allocated.UNKNOWN, 5 * GIB))
    assert findings_for(one, NodeSharing(SharingStrategy.NONE, 1)) == []


def test_one_pods_two_containers_are_one_pod() -> None:
    ps = [
        ProcessUsage(1, "python", GIB, PodRef("ml", "a", "uid-a", "main"), Allocated.TRUE),
        ProcessUsage(2, "python", GIB, PodRef("ml", "a", "uid-a", "side"), Allocated.TRUE),
    ]
    one = GpuUsage(gpu(0, GPU0), tuple(ps), sum_containers(ps))
    assert findings_for(one, NodeSharing(SharingStrategy.NONE, 1)) == []


def test_unrequested_use_sums_the_pods_containers() -> None:
    ps = [
        ProcessUsage(1, "python", GIB, PodRef("ml", "b", "uid-b", "main"), Allocated.FALSE),
        ProcessUsage(2, "python", 2 * GIB, PodRef("ml", "b", "uid-b", "side"), Allocated.FALSE),
        ProcessUsage(3, "python", 5 * GIB, PodRef("ml", "b", "uid-b", "ok"), Allocated.UNKNOWN),
    ]
    one = GpuUsage(gpu(0, GPU0), tuple(ps), sum_containers(ps))
    found = findings_for(one, NodeSharing(SharingStrategy.NONE, 1))
    assert kinds(found) == [("unrequested-gpu-use", ("ml/b",))]
    assert found[0].message == f"ml/b uses 3.0 GiB on GPU 0 ({GPU0}) that it was not allocated"


def test_a_finding_message_names_8_pods_and_counts_the_rest() -> None:
    nine = usage(*((f"ml/p{i}", Allocated.TRUE, (i + 1) * GIB) for i in range(9)))
    message = findings_for(nine, NodeSharing(SharingStrategy.NONE, 1))[0].message
    assert message.endswith("ml/p1 2.0 GiB and 1 more")
    assert "ml/p0 " not in message  # the smallest is the one left out
    assert len(findings_for(nine, NodeSharing(SharingStrategy.NONE, 1))[0].pods) == 9
    eight = usage(*((f"ml/p{i}", Allocated.TRUE, (i + 1) * GIB) for i in range(8)))
    message = findings_for(eight, NodeSharing(SharingStrategy.NONE, 1))[0].message
    assert message.endswith("ml/p0 1.0 GiB") and "more" not in message


def test_equal_memory_is_named_by_pod() -> None:
    same = usage(("ml/b", Allocated.TRUE, GIB), ("ml/a", Allocated.TRUE, GIB))
    message = findings_for(same, NodeSharing(SharingStrategy.NONE, 1))[0].message
    assert message.endswith(": ml/a 1.0 GiB, ml/b 1.0 GiB")


def test_findings_of_every_gpu_in_order() -> None:
    other = GpuUsage(gpu(1, "GPU-other"), (), ())
    found = findings([TWO, other, TWO], NodeSharing(SharingStrategy.NONE, 1))
    assert [f.gpu for f in found] == ["0", "0"]


@pytest.mark.parametrize(
    ("labels", "allocations", "sharing"),
    [
        ({MIG: "single", "nvidia.com/gpu.replicas": "4"}, None,
         NodeSharing(SharingStrategy.MIG, 4)),
        ({S: "none", "nvidia.com/gpu.replicas": "4"}, REPLICATED,
         NodeSharing(SharingStrategy.NONE, 4)),
        ({"nvidia.com/gpu.replicas": "4"}, REPLICATED,
         NodeSharing(SharingStrategy.TIME_SLICING, 4)),
        ({"nvidia.com/gpu.replicas": "4"}, MIG_IDS, NodeSharing(SharingStrategy.MIG, 4)),
        ({"nvidia.com/gpu.replicas": "4"}, None, NodeSharing(SharingStrategy.NONE, 4)),
        ({S: "mps", "nvidia.com/gpu.replicas": "4"}, None, NodeSharing(SharingStrategy.MPS, 4)),
    ],
)  # fmt: skip
def test_every_strategy_carries_the_replicas_label(
    labels: dict[str, str], allocations: Allocations | None, sharing: NodeSharing
) -> None:
    assert strategy_from(labels, allocations) == sharing


def test_a_pods_containers_are_summed_in_the_sharing_message() -> None:
    ps = [
        ProcessUsage(1, "python", GIB, PodRef("ml", "a", "uid-a", "main"), Allocated.TRUE),
        ProcessUsage(2, "python", GIB, PodRef("ml", "a", "uid-a", "side"), Allocated.TRUE),
        ProcessUsage(3, "python", 3 * GIB, PodRef("ml", "b", "uid-b", "main"), Allocated.TRUE),
    ]
    two = GpuUsage(gpu(0, GPU0), tuple(ps), sum_containers(ps))
    message = findings_for(two, NodeSharing(SharingStrategy.NONE, 1))[0].message
    assert message.endswith(": ml/b 3.0 GiB, ml/a 2.0 GiB")


def test_bytes_are_summed_from_zero() -> None:
    # 53,687,091 bytes is 0.04999999 GiB, printed 0.0; one byte more would print 0.1
    tiny = usage(("ml/a", Allocated.FALSE, 53_687_091), ("ml/b", Allocated.TRUE, GIB))
    found = findings_for(tiny, NodeSharing(SharingStrategy.NONE, 1))
    assert found[0].message == f"ml/a uses 0.0 GiB on GPU 0 ({GPU0}) that it was not allocated"
    assert found[1].message.endswith(": ml/b 1.0 GiB, ml/a 0.0 GiB")
    assert findings_for(usage(("ml/a", Allocated.FALSE, 53_687_092)),
                        NodeSharing(SharingStrategy.NONE, 1))[0].message.startswith(
        "ml/a uses 0.1 GiB")  # fmt: skip


def test_host_processes_listed_first_do_not_hide_the_pods_after_them() -> None:
    host = ContainerUsage(None, Allocated.UNKNOWN, 5 * GIB, (9,), None)
    a = ContainerUsage(PodRef("ml", "a", "uid-a", "main"), Allocated.TRUE, GIB, (1,), None)
    b = ContainerUsage(PodRef("ml", "b", "uid-b", "main"), Allocated.FALSE, GIB, (2,), None)
    mixed = GpuUsage(gpu(0, GPU0), (), (host, a, b))
    assert kinds(findings_for(mixed, NodeSharing(SharingStrategy.NONE, 1))) == [
        ("unrequested-gpu-use", ("ml/b",)),
        ("unintended-sharing", ("ml/a", "ml/b")),
    ]


# Boundary tables for the agent's DRA sharing rule (issue 18), on the pure core alone.

MPS = NodeSharing(SharingStrategy.MPS, 3)


def claims(**by_pod: str) -> Allocations:
    """``pod name -> "claim[,claim]"`` on GPU0 (pods in namespace ``ml``, claims in ``ml``)."""
    return Allocations(claims={
        (f"ml/{pod}", GPU0): frozenset(f"ml/{c}" for c in names.split(","))
        for pod, names in by_pod.items()
    })


def only(found: list) -> tuple[FindingKind, tuple[str, ...], str]:  # type: ignore[type-arg]
    [f] = found
    return f.kind, f.pods, f.message


def _many(n: int) -> tuple[GpuUsage, Allocations]:
    # n pods, each with its own claim c0..c(n-1) on GPU0: no claim in common, all named
    u = usage(*((f"ml/p{i}", Allocated.TRUE, GIB) for i in range(n)))
    a = Allocations(claims={(f"ml/p{i}", GPU0): frozenset({f"ml/c{i}"}) for i in range(n)})
    return u, a


def test_one_claim_shared_by_two_pods_is_intended_sharing_on_a_none_node() -> None:
    kind, pods, message = only(findings_for(TWO, NONE, claims(a="train", b="train")))
    assert kind is FindingKind.INTENDED_SHARING
    assert pods == ("ml/a", "ml/b")
    assert message == (
        f"2 pods on GPU 0 ({GPU0}), sharing ResourceClaim ml/train: ml/a 3.0 GiB, ml/b 1.0 GiB"
    )


def test_the_common_claim_is_named_not_the_other_claims_of_the_pods() -> None:
    # a holds "train" and "extra", b holds "train": only the claim they share is the reason
    kind, _, message = only(findings_for(TWO, NONE, claims(a="extra,train", b="train")))
    assert kind is FindingKind.INTENDED_SHARING
    assert ", sharing ResourceClaim ml/train: " in message
    assert "extra" not in message


def test_two_claims_given_the_same_gpu_are_intended_and_both_named() -> None:
    # no claim in common: the scheduler gave the one device to two claims (shareable device)
    kind, _, message = only(findings_for(TWO, NONE, claims(a="c2", b="c1")))
    assert kind is FindingKind.INTENDED_SHARING
    assert message == (
        f"2 pods on GPU 0 ({GPU0}), each allocated it by a ResourceClaim (ml/c1, ml/c2): "
        "ml/a 3.0 GiB, ml/b 1.0 GiB"
    )


def test_the_claims_reason_wins_over_the_nodes_sharing_label() -> None:
    # an MPS node: still intended, and the claim (not "shared by mps") is the reason given
    _, _, message = only(findings_for(TWO, MPS, claims(a="train", b="train")))
    assert ", sharing ResourceClaim ml/train: " in message
    assert "mps" not in message


def test_eight_claims_are_all_named_without_a_count() -> None:
    u, a = _many(8)
    _, _, message = only(findings_for(u, NONE, a))
    assert "(ml/c0, ml/c1, ml/c2, ml/c3, ml/c4, ml/c5, ml/c6, ml/c7): " in message
    assert "more)" not in message


def test_nine_claims_name_eight_sorted_and_count_one_more() -> None:
    u, a = _many(9)
    _, _, message = only(findings_for(u, NONE, a))
    assert "(ml/c0, ml/c1, ml/c2, ml/c3, ml/c4, ml/c5, ml/c6, ml/c7 and 1 more): " in message


def test_eleven_claims_count_three_more() -> None:
    u, a = _many(11)
    _, _, message = only(findings_for(u, NONE, a))
    # sorted as text: c0, c1, c10, c2, ...
    assert "(ml/c0, ml/c1, ml/c10, ml/c2, ml/c3, ml/c4, ml/c5, ml/c6 and 3 more): " in message


@pytest.mark.parametrize(
    "allocations",
    [
        claims(a="train"),  # b has no claim at all
        Allocations(claims={("ml/a", GPU0): frozenset({"ml/train"}),
                            ("ml/b", GPU1): frozenset({"ml/train"})}),  # b's claim is GPU1's
        Allocations(claims={("ml/a", GPU0): frozenset({"ml/train"}),
                            ("ml/b", GPU0): frozenset()}),  # an empty set is no claim
        Allocations(claims={("ml/a", GPU1): frozenset({"ml/train"}),
                            ("ml/b", GPU1): frozenset({"ml/train"})}),  # both on the other GPU
        Allocations(),  # no claims on the node
        None,  # no allocations known
    ],
)
def test_a_pod_without_a_claim_for_this_gpu_makes_it_unintended(
        allocations: Allocations | None) -> None:
    kind, pods, message = only(findings_for(TWO, NONE, allocations))
    assert kind is FindingKind.UNINTENDED_SHARING
    assert pods == ("ml/a", "ml/b")
    assert ", node does not share GPUs (strategy none): " in message


def test_without_a_claim_for_each_pod_the_nodes_label_decides() -> None:
    kind, _, message = only(findings_for(TWO, MPS, claims(a="train")))
    assert kind is FindingKind.INTENDED_SHARING
    assert ", shared by mps (replicas 3): " in message


def test_the_claims_are_looked_up_on_this_gpus_uuid() -> None:
    # the same two pods on GPU1, whose claims are recorded under GPU1: intended there
    on_gpu1 = usage(("ml/a", Allocated.TRUE, GIB), ("ml/b", Allocated.TRUE, GIB),
                    index=1, uuid=GPU1)
    a = Allocations(claims={("ml/a", GPU1): frozenset({"ml/x"}),
                            ("ml/b", GPU1): frozenset({"ml/x"})})
    assert only(findings_for(on_gpu1, NONE, a))[0] is FindingKind.INTENDED_SHARING
    assert only(findings_for(TWO, NONE, a))[0] is FindingKind.UNINTENDED_SHARING


def test_a_pod_using_a_gpu_another_pod_claimed_is_flagged_twice() -> None:
    intruder = usage(("ml/owner", Allocated.TRUE, GIB), ("ml/intruder", Allocated.FALSE, 2 * GIB))
    found = findings_for(intruder, NONE, claims(owner="mine"))
    assert [(f.kind, f.pods) for f in found] == [
        (FindingKind.UNREQUESTED_GPU_USE, ("ml/intruder",)),
        (FindingKind.UNINTENDED_SHARING, ("ml/intruder", "ml/owner")),
    ]
    assert found[0].message == (
        f"ml/intruder uses 2.0 GiB on GPU 0 ({GPU0}) that it was not allocated"
    )


def test_a_pod_whose_allocation_is_unknown_is_not_accused() -> None:
    # its claim's device had no uuid attribute: Allocated.UNKNOWN, no unrequested-gpu-use
    alone = usage(("ml/other", Allocated.UNKNOWN, GIB))
    assert findings_for(alone, NONE, Allocations(unresolved=frozenset({"ml/other"}))) == []


def test_an_unknown_pod_beside_a_claimed_one_is_sharing_but_not_unrequested() -> None:
    both = usage(("ml/owner", Allocated.TRUE, GIB), ("ml/other", Allocated.UNKNOWN, GIB))
    a = Allocations(claims={("ml/owner", GPU0): frozenset({"ml/mine"})},
                    unresolved=frozenset({"ml/other"}))
    kind, pods, _ = only(findings_for(both, NONE, a))
    assert kind is FindingKind.UNINTENDED_SHARING
    assert pods == ("ml/other", "ml/owner")


def test_findings_passes_the_claims_to_each_gpu() -> None:
    on_gpu1 = usage(("ml/a", Allocated.TRUE, GIB), ("ml/b", Allocated.TRUE, GIB),
                    index=1, uuid=GPU1)
    a = Allocations(claims={("ml/a", GPU0): frozenset({"ml/train"}),
                            ("ml/b", GPU0): frozenset({"ml/train"})})
    found = findings([TWO, on_gpu1], NONE, a)
    assert [(f.kind, f.gpu) for f in found] == [
        (FindingKind.INTENDED_SHARING, "0"),
        (FindingKind.UNINTENDED_SHARING, "1"),
    ]


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
