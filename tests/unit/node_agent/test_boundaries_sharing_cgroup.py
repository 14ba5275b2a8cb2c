"""Boundary tables for the agent's sharing and cgroup rules (issue 18): each rule from both
sides, literal numbers and label values, never the module's constants.

Survivors these kill: MPS not treated as intended sharing, replicas not clamped, ``pod<uid>``
matched without a segment boundary; and the strategy's precedence (labels over the kubelet's
device IDs, MIG over none), the finding's message (pods named, "and N more").
"""

from __future__ import annotations

import pytest
from agent_helpers import GIB, GPU0, gpu

from node_agent.cgroup import classify_cgroup_path, parse_cgroup_file, parse_cgroup_path
from node_agent.model import (
    Allocated,
    Allocations,
    CgroupIdentity,
    ContainerUsage,
    GpuUsage,
    NodeSharing,
    NoPod,
    PodRef,
    ProcessUsage,
    SharingStrategy,
)
from node_agent.sampler import sum_containers
from node_agent.sharing import findings, findings_for, replicas_from, strategy_from

pytestmark = pytest.mark.unit

UID = "3f2a7c1e-8b4d-4e6a-9c21-5d7f0a3b8e41"
SLICE_UID = UID.replace("-", "_")
CID = "06ea17a8" * 8


# -- nvidia.com/gpu.replicas: plain digits, clamped to [1, 4096] -----------------------------


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


# -- the node's strategy -----------------------------------------------------------------------

S = "nvidia.com/gpu.sharing-strategy"
MIG = "nvidia.com/mig.strategy"
REPLICATED = Allocations(replicated=True)
MIG_IDS = Allocations(mig=True)


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


# -- findings ------------------------------------------------------------------------------------


def usage(*procs: tuple[str | None, Allocated, int]) -> GpuUsage:
    ps = []
    for pid, (key, allocated, used) in enumerate(procs, start=1):
        pod = None
        if key is not None:
            ns, name = key.split("/")
            pod = PodRef(ns, name, f"uid-{name}", "main")
        ps.append(ProcessUsage(pid, "python", used, pod, allocated))
    return GpuUsage(gpu(0, GPU0), tuple(ps), sum_containers(ps))


def kinds(found: object) -> list[tuple[str, tuple[str, ...]]]:
    return [(f.kind, f.pods) for f in found]  # type: ignore[attr-defined]


TWO = usage(("ml/a", Allocated.TRUE, 3 * GIB), ("ml/b", Allocated.TRUE, GIB))


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


# -- cgroup: pod<uid> only as a whole segment or a slice's last dash-part ----------------------


@pytest.mark.parametrize(
    "path",
    [
        f"/kubepods/besteffort/pod{UID}/{CID}",
        f"/kubepods/pod{UID}/{CID}",
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SLICE_UID}.slice/"
        f"cri-containerd-{CID}.scope",
        f"/kubepods.slice/kubepods-pod{SLICE_UID}.slice/crio-{CID}.scope",
        f"/kubepods.slice/kubepods-pod{SLICE_UID}.slice:cri-containerd:{CID}",
        f"/../pod{UID}/{CID}",
    ],
)
def test_a_pod_segment_is_read(path: str) -> None:
    assert parse_cgroup_path(path) == CgroupIdentity(UID, CID)


@pytest.mark.parametrize(
    "path",
    [
        f"/kubepods/besteffort/xpod{UID}/{CID}",  # not at a segment start
        f"/kubepods/besteffort/mypod{UID}/{CID}",
        f"/kubepods/besteffort/pod{UID}x/{CID}",  # not at a segment end
        f"/kubepods/besteffort/pod{UID}.slicex/{CID}",
        f"/kubepods/besteffort/pod{UID[:-1]}/{CID}",  # one hex short
        f"/kubepods/besteffort/pod{UID.upper()}/{CID}",
        f"/kubepods/besteffort/pod{UID.replace('-', '')}0/{CID}",  # 33 hex
    ],
)
def test_pod_inside_a_segment_is_no_pod(path: str) -> None:
    assert parse_cgroup_path(path) is None
    assert classify_cgroup_path(path) is NoPod.UNKNOWN  # under kubepods: never the host


def test_a_32_hex_static_pod_hash_is_a_uid() -> None:
    h = "0123456789abcdef0123456789abcdef"
    assert parse_cgroup_path(f"/kubepods/burstable/pod{h}/{CID}") == CgroupIdentity(h, CID)


@pytest.mark.parametrize(
    ("tail", "container"),
    [
        (f"/{CID}", CID),
        (f"/cri-containerd-{CID}.scope", CID),
        (f"/docker-{CID}.scope", CID),
        (f"/containerd-{CID}", CID),
        (f"/{CID}x", None),  # not a whole segment
        (f"/{CID[:-1]}", None),  # 63 hex
        (f"/x{CID}", None),
        (f"/{CID}/sub/{'ab' * 32}", CID),  # the first container after the pod
        ("", None),
    ],
)
def test_the_container_is_the_first_whole_id_segment_after_the_pod(
    tail: str, container: str | None
) -> None:
    assert parse_cgroup_path(f"/kubepods/pod{UID}{tail}") == CgroupIdentity(UID, container)


def test_a_container_id_before_the_pod_does_not_count() -> None:
    path = f"/{CID}/kubepods/pod{UID}"
    assert parse_cgroup_path(path) == CgroupIdentity(UID, None)


def test_the_leftmost_pod_wins_over_a_sub_cgroup_named_like_a_pod() -> None:
    other = "a91d4e27-3c6b-4f80-b5e2-0c8d7a1f6e93"
    path = f"/kubepods/pod{UID}/{CID}/pod{other}"
    assert parse_cgroup_path(path) == CgroupIdentity(UID, CID)


@pytest.mark.parametrize(
    ("path", "verdict"),
    [
        ("/system.slice/sshd.service", NoPod.HOST),
        ("/user.slice/user-0.slice/session-1.scope", NoPod.HOST),
        ("/kubepods.slice/kubepods-burstable.slice", NoPod.UNKNOWN),  # QoS slice, no pod
        ("/kubepods", NoPod.UNKNOWN),
        ("system.slice/sshd.service", NoPod.UNKNOWN),  # not absolute
        ("/system.slice/\x00x", NoPod.UNKNOWN),  # not printable
        ("/", NoPod.UNKNOWN),
        ("//", NoPod.UNKNOWN),
        ("/system.slice//x", NoPod.UNKNOWN),
        ("/system.slice/./x", NoPod.UNKNOWN),
        ("/system.slice/../x", NoPod.UNKNOWN),
        ("/..", NoPod.UNKNOWN),
        ("/../..", NoPod.UNKNOWN),
        (f"/../{CID}", NoPod.UNKNOWN),  # a sibling container seen from our namespace
        (f"/../cri-containerd-{CID}.scope", NoPod.UNKNOWN),
        (f"/../crio-conmon-{CID}.scope", NoPod.UNKNOWN),
        (f"/../libpod-{CID}.scope", NoPod.UNKNOWN),
        ("/../system.slice", NoPod.HOST),
        (f"/{CID}", NoPod.HOST),  # no climb: a container id outside kubepods is a host cgroup
        (f"/../x{CID}", NoPod.HOST),
        (f"/../{CID}/sub", NoPod.UNKNOWN),
    ],
)
def test_a_path_without_a_pod(path: str, verdict: NoPod) -> None:
    assert classify_cgroup_path(path) is verdict


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("0::/system.slice/a.service\n", NoPod.HOST),
        ("0::/system.slice/a.service", NoPod.HOST),
        ("", NoPod.UNKNOWN),
        ("\n\n", NoPod.UNKNOWN),
        ("0::/\n", NoPod.UNKNOWN),  # only the root says nothing
        ("1:cpu:/\n0::/system.slice/a.service\n", NoPod.HOST),
        ("0::/system.slice/a.service\ngarbage\n", NoPod.UNKNOWN),
        ("x::/system.slice/a.service\n", NoPod.UNKNOWN),
        ("12345678901::/system.slice/a.service\n", NoPod.UNKNOWN),  # 11 digits
        ("1234567890::/system.slice/a.service\n", NoPod.HOST),  # 10
        ("0:/system.slice\n", NoPod.UNKNOWN),  # two fields
        ("0::/kubepods\n", NoPod.UNKNOWN),
        ("0::/system.slice/a.service\n0::/kubepods\n", NoPod.UNKNOWN),
    ],
)
def test_a_file_without_a_pod(text: str, verdict: NoPod) -> None:
    assert parse_cgroup_file(text) is verdict


def test_a_pod_line_wins_over_host_and_unknown_lines() -> None:
    text = f"3:memory:/system.slice\n2:cpu:/kubepods/pod{UID}\n1::/kubepods\nbad\n"
    assert parse_cgroup_file(text) == CgroupIdentity(UID, None)


def test_the_line_with_the_container_wins() -> None:
    text = f"2:cpu:/kubepods/pod{UID}\n0::/kubepods/pod{UID}/{CID}\n"
    assert parse_cgroup_file(text) == CgroupIdentity(UID, CID)


def test_two_pods_are_unknown_two_containers_keep_the_pod() -> None:
    other = "a91d4e27-3c6b-4f80-b5e2-0c8d7a1f6e93"
    assert parse_cgroup_file(f"1::/kubepods/pod{UID}\n0::/kubepods/pod{other}\n") is (
        NoPod.UNKNOWN
    )
    text = f"1::/kubepods/pod{UID}/{CID}\n0::/kubepods/pod{UID}/{'ab' * 32}\n"
    assert parse_cgroup_file(text) == CgroupIdentity(UID, None)
    same = f"1::/kubepods/pod{UID}/{CID}\n0::/kubepods/pod{UID}/{CID}\n"
    assert parse_cgroup_file(same) == CgroupIdentity(UID, CID)


def test_a_path_with_colons_is_kept_whole() -> None:
    text = f"0::/kubepods.slice/kubepods-pod{SLICE_UID}.slice:cri-containerd:{CID}\n"
    assert parse_cgroup_file(text) == CgroupIdentity(UID, CID)


# -- what mutation testing found loose (scripts/mutation.py --modules node_agent.sharing) -------


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


def test_a_path_with_a_space_is_one_line() -> None:
    assert parse_cgroup_file("0::/system.slice/my job.service\n") is NoPod.HOST
    assert parse_cgroup_file(f"0::/kubepods/pod{UID}/{CID}\t\n") is NoPod.UNKNOWN


def test_an_empty_line_before_the_others_is_skipped() -> None:
    assert parse_cgroup_file("\n0::/system.slice/a.service\n") is NoPod.HOST
    assert parse_cgroup_file(f"\n\n0::/kubepods/pod{UID}/{CID}\n") == CgroupIdentity(UID, CID)
