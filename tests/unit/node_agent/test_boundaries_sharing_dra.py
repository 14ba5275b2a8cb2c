"""Boundary tables for the agent's DRA sharing rule (issue 18), on the pure core alone.

``findings_for`` with the ResourceClaims the kubelet reported (``Allocations.claims``:
(pod, GPU UUID) -> claims): pods that all got this GPU through a claim share it on purpose,
whatever the node's labels say; one pod on it without a claim *for this GPU* makes it
unintended again; a pod whose allocation is unknown is never accused of unrequested use.
Literal pod and claim names and literal counts (8 claims named, then "and N more"), never the
module's constants. tests/unit/node_agent/test_agent_dra.py runs the same rule end to end
through the sampler; these pin each condition of it from both sides.
"""

from __future__ import annotations

import pytest
from agent_helpers import GIB, GPU0, GPU1, gpu

from node_agent.model import (
    Allocated,
    Allocations,
    FindingKind,
    GpuUsage,
    NodeSharing,
    PodRef,
    ProcessUsage,
    SharingStrategy,
)
from node_agent.sampler import sum_containers
from node_agent.sharing import findings, findings_for

pytestmark = pytest.mark.unit

NONE = NodeSharing(SharingStrategy.NONE, 1)
MPS = NodeSharing(SharingStrategy.MPS, 3)


def usage(*procs: tuple[str | None, Allocated, int], index: int = 0,
          uuid: str = GPU0) -> GpuUsage:
    ps = []
    for pid, (key, allocated, used) in enumerate(procs, start=1):
        pod = None
        if key is not None:
            ns, name = key.split("/")
            pod = PodRef(ns, name, f"uid-{name}", "main")
        ps.append(ProcessUsage(pid, "python", used, pod, allocated))
    return GpuUsage(gpu(index, uuid), tuple(ps), sum_containers(ps))


def claims(**by_pod: str) -> Allocations:
    """``pod name -> "claim[,claim]"`` on GPU0 (pods in namespace ``ml``, claims in ``ml``)."""
    return Allocations(claims={
        (f"ml/{pod}", GPU0): frozenset(f"ml/{c}" for c in names.split(","))
        for pod, names in by_pod.items()
    })


TWO = usage(("ml/a", Allocated.TRUE, 3 * GIB), ("ml/b", Allocated.TRUE, GIB))


def only(found: list) -> tuple[FindingKind, tuple[str, ...], str]:  # type: ignore[type-arg]
    [f] = found
    return f.kind, f.pods, f.message


# -- one claim shared by several pods: intended, on a node that does not share GPUs -----------


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


# -- claims named in the message: 8, then "and N more" -----------------------------------------


def _many(n: int) -> tuple[GpuUsage, Allocations]:
    # n pods, each with its own claim c0..c(n-1) on GPU0: no claim in common, all named
    u = usage(*((f"ml/p{i}", Allocated.TRUE, GIB) for i in range(n)))
    a = Allocations(claims={(f"ml/p{i}", GPU0): frozenset({f"ml/c{i}"}) for i in range(n)})
    return u, a


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


# -- one pod without a claim for this GPU: unintended again ------------------------------------


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


# -- a GPU claimed by one pod and used by another: flagged -------------------------------------


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


# -- unknown is never "not allocated" -------------------------------------------------------


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


# -- findings(): the allocations reach every GPU ----------------------------------------------


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
