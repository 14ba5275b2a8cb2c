"""Reading /proc/<pid>: start time, comm, pod; vanished pids; pid reuse; the cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_helpers import CID_A, UID_A, pod_cgroup, write_proc

from node_agent.model import CgroupIdentity
from node_agent.procfs import ProcReader, parse_start_time

pytestmark = pytest.mark.unit


def test_start_time_is_field_22_even_when_comm_has_spaces_and_parens() -> None:
    rest = ["S"] + [str(i) for i in range(4, 22)] + ["987654"] + ["0"] * 30
    stat = f"42 (my (weird) proc) {' '.join(rest)}"
    assert parse_start_time(stat) == 987654


def test_a_pod_process_is_read_with_its_pod(proc_root: Path) -> None:
    write_proc(proc_root, 10, cgroup=pod_cgroup(UID_A, CID_A), start=5, comm="python")
    info = ProcReader(proc_root).read(10)
    assert info is not None
    assert (info.pid, info.start_time, info.comm) == (10, 5, "python")
    assert info.cgroup == CgroupIdentity(UID_A, CID_A)


def test_a_host_process_has_no_pod(proc_root: Path) -> None:
    write_proc(proc_root, 11)
    info = ProcReader(proc_root).read(11)
    assert info is not None and info.cgroup is None


def test_a_vanished_pid_reads_as_none_and_counts_an_error(proc_root: Path) -> None:
    reader = ProcReader(proc_root)
    assert reader.read(404) is None
    assert reader.errors == 1


def test_a_garbled_stat_reads_as_none(proc_root: Path) -> None:
    write_proc(proc_root, 12)
    (proc_root / "12" / "stat").write_text("garbage")
    assert ProcReader(proc_root).read(12) is None


def test_same_pid_and_start_time_is_served_from_the_cache(proc_root: Path) -> None:
    write_proc(proc_root, 20, cgroup=pod_cgroup(UID_A, CID_A), start=100)
    reader = ProcReader(proc_root)
    first = reader.read(20)
    (proc_root / "20" / "cgroup").write_text("0::/user.slice\n")  # not re-read: same process
    assert reader.read(20) is first


def test_pid_reuse_is_detected_by_start_time(proc_root: Path) -> None:
    write_proc(proc_root, 30, cgroup=pod_cgroup(UID_A, CID_A), start=100, comm="python")
    reader = ProcReader(proc_root)
    before = reader.read(30)
    assert before is not None and before.cgroup is not None
    write_proc(proc_root, 30, cgroup="0::/system.slice/sshd.service\n", start=200, comm="sshd")
    after = reader.read(30)
    assert after is not None
    assert (after.start_time, after.comm, after.cgroup) == (200, "sshd", None)


def test_forget_drops_pids_not_seen_in_the_pass(proc_root: Path) -> None:
    write_proc(proc_root, 40, start=1)
    write_proc(proc_root, 41, start=1)
    reader = ProcReader(proc_root)
    reader.read(40)
    first_41 = reader.read(41)
    reader.forget_all_but([40])
    assert reader.read(41) is not first_41  # read again, not from the cache
