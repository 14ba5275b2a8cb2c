"""/proc/<pid>/cgroup → pod UID and container ID, for every path form in the facts file."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node_agent.cgroup import (
    MAX_LINES,
    classify_cgroup_path,
    parse_cgroup_file,
    parse_cgroup_path,
)
from node_agent.model import CgroupIdentity, NoPod

pytestmark = pytest.mark.unit

UID = "1d2c3b4a-5e6f-4a0b-9c8d-7e6f5a4b3c2d"
U_ = UID.replace("-", "_")
CID = "0123456789abcdef" * 4
STATIC = "4f9b6c1e2d3a48b7a6c5d4e3f2a1b0c9"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param(
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/"
            f"cri-containerd-{CID}.scope",
            CgroupIdentity(UID, CID), id="systemd-burstable-containerd"),
        pytest.param(
            f"/kubepods.slice/kubepods-pod{U_}.slice/crio-{CID}.scope",
            CgroupIdentity(UID, CID), id="systemd-guaranteed-crio"),
        pytest.param(
            f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{U_}.slice/"
            f"docker-{CID}.scope",
            CgroupIdentity(UID, CID), id="systemd-besteffort-docker"),
        pytest.param(
            f"/kubepods/besteffort/pod{UID}/{CID}",
            CgroupIdentity(UID, CID), id="cgroupfs-besteffort"),
        pytest.param(
            f"/kubepods/pod{UID}/{CID}",
            CgroupIdentity(UID, CID), id="cgroupfs-guaranteed"),
        pytest.param(
            f"/system.slice/containerd.service/kubepods-besteffort-pod{U_}.slice:"
            f"cri-containerd:{CID}",
            CgroupIdentity(UID, CID), id="containerd-systemd-cgroup-path"),
        pytest.param(
            f"/kubepods/burstable/pod{STATIC}/{CID}",
            CgroupIdentity(STATIC, CID), id="static-pod-config-hash"),
        pytest.param(
            f"/../../kubepods-burstable-pod{U_}.slice/cri-containerd-{CID}.scope",
            CgroupIdentity(UID, CID), id="private-cgroup-namespace"),
        pytest.param(
            f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
            f"kubelet-kubepods-besteffort-pod{U_}.slice/cri-containerd-{CID}.scope",
            CgroupIdentity(UID, CID), id="kind-nested-kubelet-slice"),
        pytest.param(
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice",
            CgroupIdentity(UID, None), id="pod-slice-without-container"),
        pytest.param(
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/"
            f"crio-conmon-{CID}.scope",
            CgroupIdentity(UID, None), id="crio-conmon-is-not-the-container"),
    ],
)
def test_pod_cgroup_paths_give_pod_uid_and_container_id(path: str,
                                                        expected: CgroupIdentity) -> None:
    assert parse_cgroup_path(path) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/process_api/838914e7a1b2c3d4",
        "/user.slice/user-1000.slice/session-3.scope",
        "/system.slice/ollama.service",
        "/",
        f"/system.slice/podman-{CID}.scope",
        "/kubepods.slice/kubepods-burstable.slice",
        "/my-app-podcast.slice/whatever",
    ],
)
def test_paths_outside_any_pod_give_none(path: str) -> None:
    assert parse_cgroup_path(path) is None


def test_cgroup_v2_file_with_one_line() -> None:
    text = f"0::/kubepods/besteffort/pod{UID}/{CID}\n"
    assert parse_cgroup_file(text) == CgroupIdentity(UID, CID)


def test_cgroup_v1_file_prefers_a_line_naming_the_container() -> None:
    text = (
        "12:pids:/user.slice\n"
        f"11:name=systemd:/kubepods.slice/kubepods-pod{U_}.slice\n"
        f"10:memory:/kubepods.slice/kubepods-pod{U_}.slice/cri-containerd-{CID}.scope\n"
        f"1:cpu,cpuacct:/kubepods.slice/kubepods-pod{U_}.slice/cri-containerd-{CID}.scope\n"
    )
    assert parse_cgroup_file(text) == CgroupIdentity(UID, CID)


def test_colons_inside_the_path_are_kept() -> None:
    text = (f"0::/system.slice/containerd.service/kubepods-burstable-pod{U_}.slice:"
            f"cri-containerd:{CID}\n")
    assert parse_cgroup_file(text) == CgroupIdentity(UID, CID)


def test_a_host_process_file_is_host() -> None:
    assert parse_cgroup_file("0::/user.slice/user-0.slice/session-1.scope\n") is NoPod.HOST


def test_a_cgroup_v1_host_process_with_unmanaged_root_controllers_is_host() -> None:
    text = ("12:rdma:/\n11:memory:/system.slice/ollama.service\n"
            "1:name=systemd:/system.slice/ollama.service\n0::/system.slice/ollama.service\n")
    assert parse_cgroup_file(text) is NoPod.HOST


def test_a_host_process_seen_from_the_agents_private_cgroup_namespace_is_host() -> None:
    assert parse_cgroup_file("0::/../../../../system.slice/ollama.service\n") is NoPod.HOST


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("\n\n", id="blank-lines"),
        pytest.param("not a cgroup line\n", id="no-colons"),
        pytest.param("x::/user.slice\n", id="hierarchy-not-a-number"),
        pytest.param("0::user.slice\n", id="relative-path"),
        pytest.param("0::/\n", id="only-the-root"),
        pytest.param("0::/../../..\n", id="only-a-climb"),
        pytest.param("0::/kubepods.slice/kubepods-burstable.slice\n", id="qos-slice-no-pod"),
        pytest.param("0::/kubepods/besteffort/podnot-a-uid/abc\n", id="kubepods-garbage-uid"),
        pytest.param(f"0::/../cri-containerd-{CID}.scope\n", id="sibling-container"),
        pytest.param(f"0::/../../{CID}\n", id="sibling-container-cgroupfs"),
        pytest.param("0::/system.slice/a\x1b[31mb.service\n", id="control-characters"),
        pytest.param("0::/system.slice/../kubepods\n", id="dot-dot-inside"),
        pytest.param("0::/user.slice\n12:memory:garbage\n", id="host-and-garbage"),
        pytest.param("\x00\xff\xfe:\x01:\x02\n", id="binary"),
        pytest.param(f"0::/kubepods/pod{UID}/{CID}\n"
                     f"1:memory:/kubepods/pod{STATIC}/{CID}\n", id="two-different-pods"),
    ],
)
def test_garbage_or_ambiguous_cgroup_is_unknown_never_host(text: str) -> None:
    assert parse_cgroup_file(text) is NoPod.UNKNOWN


def test_a_pod_line_wins_over_garbage_and_unmanaged_lines() -> None:
    text = f"12:rdma:/\nnonsense\n0::/kubepods/besteffort/pod{UID}/{CID}\n"
    assert parse_cgroup_file(text) == CgroupIdentity(UID, CID)


def test_a_pod_whose_lines_disagree_on_the_container_keeps_the_pod_only() -> None:
    other = "f" * 64
    text = f"1:memory:/kubepods/pod{UID}/{CID}\n0::/kubepods/pod{UID}/{other}\n"
    assert parse_cgroup_file(text) == CgroupIdentity(UID, None)


def test_a_sub_cgroup_a_tenant_creates_cannot_change_its_pod_or_container() -> None:
    """Below its own container's cgroup a process may create more (cgroup delegation): a
    segment named like another pod or container there does not count."""
    other_uid = "99999999-8888-4777-8666-555555555555"
    path = (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/"
            f"cri-containerd-{CID}.scope/kubepods-pod{other_uid.replace('-', '_')}.slice/"
            f"{'e' * 64}")
    assert classify_cgroup_path(path) == CgroupIdentity(UID, CID)


def test_a_long_hostile_path_is_parsed_in_linear_time() -> None:
    """64 KiB of near-misses for the pod and container patterns (the procfs read limit)."""
    path = "/" + "-pod" * 16384
    assert classify_cgroup_path(path) is NoPod.HOST
    path = "/kubepods/" + ("0" * 63 + "/") * 1000
    assert classify_cgroup_path(path) is NoPod.UNKNOWN


# Boundary tables of the cgroup rules (issue 18): each rule from both sides, literal values.

UID_2 = "3f2a7c1e-8b4d-4e6a-9c21-5d7f0a3b8e41"
SLICE_UID_2 = UID_2.replace("-", "_")
CID_2 = "06ea17a8" * 8


@pytest.mark.parametrize(
    "path",
    [
        f"/kubepods/besteffort/pod{UID_2}/{CID_2}",
        f"/kubepods/pod{UID_2}/{CID_2}",
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SLICE_UID_2}.slice/"
        f"cri-containerd-{CID_2}.scope",
        f"/kubepods.slice/kubepods-pod{SLICE_UID_2}.slice/crio-{CID_2}.scope",
        f"/kubepods.slice/kubepods-pod{SLICE_UID_2}.slice:cri-containerd:{CID_2}",
        f"/../pod{UID_2}/{CID_2}",
    ],
)
def test_a_pod_segment_is_read(path: str) -> None:
    assert parse_cgroup_path(path) == CgroupIdentity(UID_2, CID_2)


@pytest.mark.parametrize(
    "path",
    [
        f"/kubepods/besteffort/xpod{UID_2}/{CID_2}",  # not at a segment start
        f"/kubepods/besteffort/mypod{UID_2}/{CID_2}",
        f"/kubepods/besteffort/pod{UID_2}x/{CID_2}",  # not at a segment end
        f"/kubepods/besteffort/pod{UID_2}.slicex/{CID_2}",
        f"/kubepods/besteffort/pod{UID_2[:-1]}/{CID_2}",  # one hex short
        f"/kubepods/besteffort/pod{UID_2.upper()}/{CID_2}",
        f"/kubepods/besteffort/pod{UID_2.replace('-', '')}0/{CID_2}",  # 33 hex
    ],
)
def test_pod_inside_a_segment_is_no_pod(path: str) -> None:
    assert parse_cgroup_path(path) is None
    assert classify_cgroup_path(path) is NoPod.UNKNOWN  # under kubepods: never the host


def test_a_32_hex_static_pod_hash_is_a_uid() -> None:
    h = "0123456789abcdef0123456789abcdef"
    assert parse_cgroup_path(f"/kubepods/burstable/pod{h}/{CID_2}") == CgroupIdentity(h, CID_2)


@pytest.mark.parametrize(
    ("tail", "container"),
    [
        (f"/{CID_2}", CID_2),
        (f"/cri-containerd-{CID_2}.scope", CID_2),
        (f"/docker-{CID_2}.scope", CID_2),
        (f"/containerd-{CID_2}", CID_2),
        (f"/{CID_2}x", None),  # not a whole segment
        (f"/{CID_2[:-1]}", None),  # 63 hex
        (f"/x{CID_2}", None),
        (f"/{CID_2}/sub/{'ab' * 32}", CID_2),  # the first container after the pod
        ("", None),
    ],
)
def test_the_container_is_the_first_whole_id_segment_after_the_pod(
    tail: str, container: str | None
) -> None:
    assert parse_cgroup_path(f"/kubepods/pod{UID_2}{tail}") == CgroupIdentity(UID_2, container)


def test_a_container_id_before_the_pod_does_not_count() -> None:
    path = f"/{CID_2}/kubepods/pod{UID_2}"
    assert parse_cgroup_path(path) == CgroupIdentity(UID_2, None)


def test_the_leftmost_pod_wins_over_a_sub_cgroup_named_like_a_pod() -> None:
    other = "a91d4e27-3c6b-4f80-b5e2-0c8d7a1f6e93"
    path = f"/kubepods/pod{UID_2}/{CID_2}/pod{other}"
    assert parse_cgroup_path(path) == CgroupIdentity(UID_2, CID_2)


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
        (f"/../{CID_2}", NoPod.UNKNOWN),  # a sibling container seen from our namespace
        (f"/../cri-containerd-{CID_2}.scope", NoPod.UNKNOWN),
        (f"/../crio-conmon-{CID_2}.scope", NoPod.UNKNOWN),
        (f"/../libpod-{CID_2}.scope", NoPod.UNKNOWN),
        ("/../system.slice", NoPod.HOST),
        (f"/{CID_2}", NoPod.HOST),  # no climb: a container id outside kubepods is a host cgroup
        (f"/../x{CID_2}", NoPod.HOST),
        (f"/../{CID_2}/sub", NoPod.UNKNOWN),
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
    text = f"3:memory:/system.slice\n2:cpu:/kubepods/pod{UID_2}\n1::/kubepods\nbad\n"
    assert parse_cgroup_file(text) == CgroupIdentity(UID_2, None)


def test_the_line_with_the_container_wins() -> None:
    text = f"2:cpu:/kubepods/pod{UID_2}\n0::/kubepods/pod{UID_2}/{CID_2}\n"
    assert parse_cgroup_file(text) == CgroupIdentity(UID_2, CID_2)


def test_two_pods_are_unknown_two_containers_keep_the_pod() -> None:
    other = "a91d4e27-3c6b-4f80-b5e2-0c8d7a1f6e93"
    assert parse_cgroup_file(f"1::/kubepods/pod{UID_2}\n0::/kubepods/pod{other}\n") is (
        NoPod.UNKNOWN
    )
    text = f"1::/kubepods/pod{UID_2}/{CID_2}\n0::/kubepods/pod{UID_2}/{'ab' * 32}\n"
    assert parse_cgroup_file(text) == CgroupIdentity(UID_2, None)
    same = f"1::/kubepods/pod{UID_2}/{CID_2}\n0::/kubepods/pod{UID_2}/{CID_2}\n"
    assert parse_cgroup_file(same) == CgroupIdentity(UID_2, CID_2)


def test_a_path_with_colons_is_kept_whole() -> None:
    text = f"0::/kubepods.slice/kubepods-pod{SLICE_UID_2}.slice:cri-containerd:{CID_2}\n"
    assert parse_cgroup_file(text) == CgroupIdentity(UID_2, CID_2)


def test_a_path_with_a_space_is_one_line() -> None:
    assert parse_cgroup_file("0::/system.slice/my job.service\n") is NoPod.HOST
    assert parse_cgroup_file(f"0::/kubepods/pod{UID_2}/{CID_2}\t\n") is NoPod.UNKNOWN


def test_an_empty_line_before_the_others_is_skipped() -> None:
    assert parse_cgroup_file("\n0::/system.slice/a.service\n") is NoPod.HOST
    assert parse_cgroup_file(f"\n\n0::/kubepods/pod{UID_2}/{CID_2}\n") == CgroupIdentity(
        UID_2, CID_2)


@given(st.text(st.sampled_from("0123456789:/-_.abcdefkubepodsliceri\n\x00 é"), max_size=400))
@settings(max_examples=500, deadline=None)
def test_any_text_is_a_placement_never_an_exception(text: str) -> None:
    """The file is the process's own to shape (a delegated sub-cgroup): whatever it says, the
    answer is a pod, host or unknown (bench/fuzz_agent_parsers.py: a million more)."""
    assert isinstance(parse_cgroup_file(text), (CgroupIdentity, NoPod))


def test_more_lines_than_the_kernel_writes_are_unknown_without_reading_them() -> None:
    line = "0::/user.slice/session-1.scope\n"
    assert parse_cgroup_file(line * MAX_LINES) is NoPod.HOST
    assert parse_cgroup_file(line * (MAX_LINES + 1)) is NoPod.UNKNOWN
    assert parse_cgroup_file(line * MAX_LINES + "\n\n") is NoPod.HOST
