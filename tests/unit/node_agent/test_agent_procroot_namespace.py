"""Without hostPID: the agent in its own PID namespace resolves host pids through the host's
/proc mounted read-only elsewhere (``--proc-root``), and nothing reads its own /proc.

NVML is the fake source here, listing a host pid as an old driver would (whether a current
driver does is what bench/gpu/hostpid_check.py finds out on a GPU). Needs ``unshare`` and the
right to create PID and mount namespaces (root, or unprivileged user namespaces).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

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
