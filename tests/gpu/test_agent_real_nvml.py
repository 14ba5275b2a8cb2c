"""On a real GPU: the agent's per-process bytes match NVML and nvidia-smi for live processes.

Run on the GPU machine with ``.venv/bin/pytest -m gpu tests/gpu/test_agent_real_nvml.py -v``.
Starts live torch processes that allocate different amounts, runs ``gpu-auditor-agent --once
--process-labels`` against real NVML and ``/proc``, and compares each pid's bytes with
``pynvml`` and ``nvidia-smi --query-compute-apps``. Skipped with the reason when NVML cannot
initialise (no driver, no GPU) or torch/CUDA is missing.
"""

from __future__ import annotations

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
TOLERANCE = 8 * MIB  # samples are taken moments apart; allocator/context drift is a few MiB
ALLOCATIONS_MIB = (256, 1024, 3072)

WORKER = """
import sys, torch
x = torch.empty({mib} * 2**20, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()  # hold the memory until the test closes stdin
"""


def _skip_reason() -> str | None:
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
    if not torch.cuda.is_available():
        return "torch reports no CUDA device"
    return None


@pytest.fixture(scope="module")
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    reason = _skip_reason()
    if reason:
        pytest.skip(f"gpu test skipped: {reason}")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER.format(mib=mib)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for mib in ALLOCATIONS_MIB]
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.strip() == "ready", f"worker {p.pid} did not start"
        time.sleep(1.0)  # let NVML's process list settle
        yield procs
    finally:
        for p in procs:
            if p.stdin:
                p.stdin.close()
            p.wait(timeout=30)


def nvml_bytes(pids: set[int]) -> dict[int, int]:
    import pynvml

    pynvml.nvmlInit()
    found: dict[int, int] = {}
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid in pids and p.usedGpuMemory is not None:
                found[p.pid] = found.get(p.pid, 0) + int(p.usedGpuMemory)
    return found


def smi_bytes(pids: set[int]) -> dict[int, int]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi is not on PATH")
    out = subprocess.run([smi, "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    found: dict[int, int] = {}
    for line in out.splitlines():
        pid, _, mib = (part.strip() for part in line.partition(","))
        if pid.isdigit() and int(pid) in pids and mib.isdigit():
            found[int(pid)] = found.get(int(pid), 0) + int(mib) * MIB
    return found


def agent_bytes(pids: set[int]) -> dict[int, int]:
    out = subprocess.run(
        [sys.executable, "-m", "node_agent", "--once", "--process-labels", "--proc-root",
         "/proc", "--no-report", "--node-name", "gpu-test"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=120).stdout
    assert 'gpu_auditor_agent_nvml_up{node="gpu-test"} 1.0' in out, out
    found: dict[int, int] = {}
    pattern = re.compile(r'^gpu_auditor_process_gpu_memory_bytes\{(.*)\} (\S+)$')
    for line in out.splitlines():
        m = pattern.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        pid = int(labels["pid"])
        if pid in pids:
            assert labels["allocated"] == "host"  # not in a pod on the test machine
            found[pid] = found.get(pid, 0) + int(float(m.group(2)))
    return found


def test_agent_bytes_per_pid_match_nvml_and_nvidia_smi(
        workers: list[subprocess.Popen[str]]) -> None:
    pids = {p.pid for p in workers}
    ours = agent_bytes(pids)
    nvml = nvml_bytes(pids)
    smi = smi_bytes(pids)
    print(f"\nper pid bytes: agent={ours}\n nvml={nvml}\n nvidia-smi={smi}")
    assert set(ours) == set(nvml) == set(smi) == pids
    for pid in pids:
        assert abs(ours[pid] - nvml[pid]) <= TOLERANCE, (pid, ours[pid], nvml[pid])
        assert abs(ours[pid] - smi[pid]) <= TOLERANCE, (pid, ours[pid], smi[pid])


def test_bigger_allocations_show_as_more_bytes(workers: list[subprocess.Popen[str]]) -> None:
    ours = agent_bytes({p.pid for p in workers})
    by_size = [ours[p.pid] for p in workers]  # workers are in ALLOCATIONS_MIB order
    assert by_size == sorted(by_size)
    # Each worker holds its tensor plus a CUDA context (~500 MiB on the H200).
    for mib, used in zip(ALLOCATIONS_MIB, by_size, strict=True):
        assert used >= mib * MIB
