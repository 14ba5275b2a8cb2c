"""On a real GPU: can the agent attribute GPU processes without hostPID?

The chart's `agent.hostPID=false` runs the agent in its container's own PID namespace with the
host's /proc mounted read-only at /host/proc (`--proc-root=/host/proc`). That works only if NVML,
called from a process in another PID namespace, still names GPU processes by their pids in the
host's PID namespace, the ones /host/proc lists. This test builds that setup without Kubernetes:
a CUDA worker in this machine's PID namespace, and `gpu-auditor-agent --once --process-labels`
in a new PID and mount namespace (`unshare`) whose /proc is its own and whose /host/proc is a
read-only bind of this machine's /proc. It passes when the agent, from inside, reports the
worker's pid with the worker's command name and NVML's bytes; the agent reading its own /proc
there must not find it (else the setup proves nothing).

Run on the GPU machine, as root (or where unprivileged user namespaces are allowed):

    .venv/bin/pytest -m gpu tests/integration/test_chart_procroot_gpu.py -v -s

A pass means agent.hostPID can default to false; the printout shows what NVML reported inside.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20
TOLERANCE = 8 * MIB
WORKER = """
import sys, torch
x = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()
"""
# Inside the new namespaces: keep a read-only view of the host's /proc, then give this PID
# namespace its own /proc (as a container has), then run the agent once.
IN_NAMESPACE = """
set -eu
host_proc="$(mktemp -d)"
mount --bind /proc "$host_proc"
mount -o remount,bind,ro "$host_proc"
mount -t proc proc /proc
case "$1" in host) root="$host_proc" ;; own) root=/proc ;; esac
echo "pid namespace: I am pid $$; host proc at $host_proc; reading $root" >&2
exec "$PYTHON" -m node_agent --once --process-labels --no-report --node-name gpu-test \
  --proc-root "$root"
"""
SERIES = re.compile(r'^gpu_auditor_process_gpu_memory_bytes\{(.*)\} (\S+)$')


def _skip_reason() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            return "NVML reports no GPU"
    except Exception as err:
        return f"pynvml cannot initialise NVML ({type(err).__name__}: {err})"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    return None if torch.cuda.is_available() else "torch reports no CUDA device"


@pytest.fixture(scope="module")
def worker() -> Iterator[subprocess.Popen[str]]:
    reason = _skip_reason()
    if reason:
        pytest.skip(f"gpu test skipped: {reason}")
    proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", "the CUDA worker did not start"
        time.sleep(1.0)  # let NVML's process list settle
        yield proc
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=30)


def _agent_in_own_pid_namespace(proc_root: str) -> dict[int, dict[str, str]]:
    """The agent's per-process series, keyed by pid, run in a new PID + mount namespace."""
    unshare = ["unshare", "--mount", "--pid", "--fork", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare[1:1] = ["--user", "--map-root-user"]
    result = subprocess.run(
        [*unshare, "bash", "-c", IN_NAMESPACE, "in-namespace", proc_root],
        cwd=REPO, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHON": sys.executable})
    print(f"\n--- agent reading the {proc_root} /proc inside a new PID namespace "
          f"(rc {result.returncode}) ---\n{result.stderr[-2000:]}")
    assert result.returncode == 0, result.stderr[-4000:]
    assert 'gpu_auditor_agent_nvml_up{node="gpu-test"} 1' in result.stdout, result.stdout[-2000:]
    found: dict[int, dict[str, str]] = {}
    for line in result.stdout.splitlines():
        match = SERIES.match(line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            labels["bytes"] = match.group(2)
            found[int(labels["pid"])] = labels
    print(f"per-process series: {found}")
    return found


def _nvml_bytes(pid: int) -> int:
    import pynvml

    pynvml.nvmlInit()
    total = 0
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == pid and p.usedGpuMemory is not None:
                total += int(p.usedGpuMemory)
    return total


def test_the_agent_without_host_pid_resolves_gpu_processes_through_the_hosts_proc(
    worker: subprocess.Popen[str],
) -> None:
    comm = Path(f"/proc/{worker.pid}/comm").read_text().strip()
    series = _agent_in_own_pid_namespace("host")
    assert worker.pid in series, (
        f"NVML, called from another PID namespace, did not report the worker by its host pid "
        f"{worker.pid} (pids seen: {sorted(series)}): agent.hostPID must stay true")
    labels = series[worker.pid]
    assert labels["process"] == comm, labels  # read from the host's /proc/<pid>/comm
    assert abs(int(float(labels["bytes"])) - _nvml_bytes(worker.pid)) <= TOLERANCE, labels


def test_its_own_proc_alone_would_not_resolve_them(worker: subprocess.Popen[str]) -> None:
    """The control: without the host's /proc the same agent cannot name the worker, which is
    why the chart mounts /host/proc when hostPID is off."""
    comm = Path(f"/proc/{worker.pid}/comm").read_text().strip()
    series = _agent_in_own_pid_namespace("own")
    assert series.get(worker.pid, {}).get("process") != comm, series.get(worker.pid)
