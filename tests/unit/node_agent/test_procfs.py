"""Reading /proc/<pid>: start time, comm, pod; vanished pids; pid reuse; the cache."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node_agent.model import CgroupIdentity, NoPod
from node_agent.procfs import ProcReader, clean_comm, parse_start_time

from .agent_helpers import CID_A, UID_A, pod_cgroup, write_proc

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
    assert info is not None and info.cgroup is NoPod.HOST


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
    assert before is not None and isinstance(before.cgroup, CgroupIdentity)
    write_proc(proc_root, 30, cgroup="0::/system.slice/sshd.service\n", start=200, comm="sshd")
    after = reader.read(30)
    assert after is not None
    assert (after.start_time, after.comm, after.cgroup) == (200, "sshd", NoPod.HOST)


def test_forget_drops_pids_not_seen_in_the_pass(proc_root: Path) -> None:
    write_proc(proc_root, 40, start=1)
    write_proc(proc_root, 41, start=1)
    reader = ProcReader(proc_root)
    reader.read(40)
    first_41 = reader.read(41)
    reader.forget_all_but([40])
    assert reader.read(41) is not first_41  # read again, not from the cache


def test_a_garbage_cgroup_file_is_an_unknown_pod_not_a_host_process(proc_root: Path) -> None:
    write_proc(proc_root, 13, cgroup="\x00garbage\n")
    info = ProcReader(proc_root).read(13)
    assert info is not None and info.cgroup is NoPod.UNKNOWN


def test_processes_of_one_container_share_one_parsed_cgroup(proc_root: Path) -> None:
    write_proc(proc_root, 14, cgroup=pod_cgroup(UID_A, CID_A))
    write_proc(proc_root, 15, cgroup=pod_cgroup(UID_A, CID_A))
    reader = ProcReader(proc_root)
    a, b = reader.read(14), reader.read(15)
    assert a is not None and b is not None and a.cgroup is b.cgroup


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        (b"python\n", "python"),
        (b"evil\x1b[2J\n", "evil?[2J"),
        (b"a\tb\rc\x7f", "a?b?c?"),
        (b"\xff\xfename", "\ufffd\ufffdname"),
        (b"rtl\xe2\x80\xaeexe", "rtl?exe"),  # U+202E RIGHT-TO-LEFT OVERRIDE
        (b"x" * 200, "x" * 64),
    ],
)
def test_comm_is_cleaned_for_labels(raw: bytes, label: str) -> None:
    assert clean_comm(raw) == label


def test_a_stat_start_time_with_thousands_of_digits_is_refused() -> None:
    rest = ["S"] + ["0"] * 18 + ["9" * 4000] + ["0"] * 30
    with pytest.raises(ValueError):
        parse_start_time(f"1 (x) {' '.join(rest)}")
    rest[19] = "9" * 20
    assert parse_start_time(f"1 (x) {' '.join(rest)}") == 10**20 - 1


def test_a_cgroup_file_over_64_kib_is_a_failed_read(proc_root: Path) -> None:
    write_proc(proc_root, 16, cgroup="0::/" + "a" * 65531 + "\n")  # 65,536 bytes: the limit
    assert ProcReader(proc_root).read(16) is not None
    write_proc(proc_root, 17, cgroup="0::/" + "a" * 65532 + "\n")  # 65,537 bytes
    reader = ProcReader(proc_root)
    assert reader.read(17) is None and reader.errors == 1


def test_a_fifo_or_device_in_place_of_a_proc_file_is_refused_without_blocking(
        proc_root: Path) -> None:
    """A FIFO would block an ordinary open() forever; /dev/zero would never end."""
    write_proc(proc_root, 18)
    (proc_root / "18" / "cgroup").unlink()
    os.mkfifo(proc_root / "18" / "cgroup")
    write_proc(proc_root, 19)
    (proc_root / "19" / "comm").unlink()
    (proc_root / "19" / "comm").symlink_to("/dev/zero")
    write_proc(proc_root, 21)
    (proc_root / "21" / "stat").unlink()
    (proc_root / "21" / "stat").mkdir()
    reader = ProcReader(proc_root)
    assert [reader.read(pid) for pid in (18, 19, 21)] == [None, None, None]
    assert reader.errors == 3


# Without hostPID: the agent in its own PID namespace resolves host pids through the host's
# /proc mounted read-only elsewhere (``--proc-root``), and nothing reads its own /proc.

REPO = Path(__file__).resolve().parents[3]
IN_NAMESPACE = """
set -eu
mount --bind /proc "$0"
mount -o remount,bind,ro "$0"
mount -t proc proc /proc
exec "$@"
"""


def _unshare_prefix() -> list[str] | None:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return None
    for prefix in (["unshare", "--pid", "--fork", "--mount"],
                   ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount"]):
        probe = subprocess.run([*prefix, "sh", "-c", "mount -t proc proc /proc && echo $$"],
                               capture_output=True, text=True, timeout=30, check=False)
        if probe.returncode == 0 and probe.stdout.strip() == "1":
            return prefix
    return None


@pytest.fixture
def host_process() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "120"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_the_agent_in_a_new_pid_namespace_names_a_host_pid_through_proc_root(
        tmp_path: Path, host_process: int) -> None:
    prefix = _unshare_prefix()
    if prefix is None:
        pytest.skip("cannot create a PID and mount namespace here (unshare, privileges)")
    hostproc = tmp_path / "hostproc"
    hostproc.mkdir()
    nvml = tmp_path / "nvml.yaml"
    nvml.write_text("gpus:\n- uuid: GPU-a\n  memoryTotalBytes: 100\n"
                    f"  processes: [{{pid: {host_process}, usedBytes: 7}}]\n")
    pods = tmp_path / "pods.yaml"
    pods.write_text("pods: []\n")

    def agent(proc_root: str) -> str:
        argv = [*prefix, "sh", "-c", IN_NAMESPACE, str(hostproc), sys.executable, "-m",
                "node_agent", "--nvml-fake", str(nvml), "--pods-fake", str(pods),
                "--proc-root", proc_root, "--process-labels", "--node-name", "n", "--once"]
        result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60,
                                check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout

    through_host_proc = agent(str(hostproc))
    assert f'pid="{host_process}",pod="",pod_uid="",process="sleep"' in through_host_proc
    assert 'gpu_auditor_agent_errors_total{node="n",source="proc"} 0' in through_host_proc
    # The same agent reading its own /proc does not find the pid: the setup proves something.
    own_proc = agent("/proc")
    assert 'allocated="unknown"' in own_proc and 'process="sleep"' not in own_proc


@given(st.binary(max_size=300))
@settings(max_examples=500, deadline=None)
def test_any_stat_is_a_start_time_or_a_value_error(data: bytes) -> None:
    """IndexError too was possible (fewer than 22 fields); now every garbage is ValueError,
    the one error the reader counts (bench/fuzz_agent_parsers.py: a million more)."""
    with contextlib.suppress(ValueError):
        assert parse_start_time(data) >= 0
    assert len(clean_comm(data)) <= 64


def test_a_stat_with_too_few_fields_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="fields"):
        parse_start_time(b"1 (a) S 1 2 3")
