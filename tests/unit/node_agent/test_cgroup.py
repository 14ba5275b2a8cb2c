"""/proc/<pid>/cgroup → pod UID and container ID, for every path form in the facts file."""

from __future__ import annotations

import pytest

from node_agent.cgroup import classify_cgroup_path, parse_cgroup_file, parse_cgroup_path
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
