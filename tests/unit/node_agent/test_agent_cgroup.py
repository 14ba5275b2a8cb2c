"""/proc/<pid>/cgroup → pod UID and container ID, for every path form in the facts file."""

from __future__ import annotations

import pytest

from node_agent.cgroup import parse_cgroup_file, parse_cgroup_path
from node_agent.model import CgroupIdentity

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


def test_host_process_file_and_garbage_give_none() -> None:
    assert parse_cgroup_file("0::/user.slice/user-0.slice/session-1.scope\n") is None
    assert parse_cgroup_file("") is None
    assert parse_cgroup_file("not a cgroup line\n") is None
