"""On a real GPU: the agent names each GPU process's pod, says whether the pod was allocated the
GPU, and reports the sharing findings, from real NVML.

Three CUDA workers hold 768, 512 and 256 MiB. A fake ``--proc-root`` lists their real pids with
their real ``stat`` and ``comm`` and a ``cgroup`` file written for each: the first in pod
``ml/trainer-0`` (cgroupfs driver path; the pod was allocated this GPU), the second in
``ml/notebook-1`` (systemd driver path; allocated no GPU), the third a host process. The pods
file (``--pods-fake``, what the API server and the kubelet would say) names both pods, with this
GPU's real UUID. ``gpu-auditor-agent --once --process-labels`` then runs against real NVML; the
test checks what a user reads: pod, container, ``allocated``, bytes per process (at least the
tensor, ordered as the tensors are) and the ``gpu_auditor_sharing_finding`` series, on a node
that does not share GPUs and on one whose labels say MPS.

``GPU_AUDITOR_BREAK_POD_MAPPING=1`` swaps the two pods' cgroup files: the attribution test must
then fail on the trainer (the lead shows this once, on the GPU; tests/unit/node_agent/
test_gpu_pod_test_plumbing.py checks the same on a CPU with a fake NVML). On the H200, from the
repository root (no venv there; about 30 s a run):

    export PYTHONPATH=.:operator GPU_AUDITOR_REQUIRE_GPU=1
    timeout 55 python3 -m pytest -p no:cacheprovider -m gpu \
        tests/gpu/test_agent_pods_real_nvml.py -v -s                     # 3 passed
    GPU_AUDITOR_BREAK_POD_MAPPING=1 timeout 55 python3 -m pytest -p no:cacheprovider -m gpu \
        tests/gpu/test_agent_pods_real_nvml.py -v -s                     # 1 failed, 2 passed
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from gpu_helpers import require_torch_cuda

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20
CONTEXT_MAX = 2048 * MIB  # a CUDA context with torch's kernels is ~500 MiB on the H200
BREAK = os.environ.get("GPU_AUDITOR_BREAK_POD_MAPPING") == "1"
NVML_FAKE: Path | None = None
"""Only for tests/unit/node_agent/test_gpu_pod_test_plumbing.py, which runs this file's
plumbing on a CPU machine (idle processes, a fake NVML naming their pids): never set here."""

WORKER = """
import sys, torch
x = torch.empty({mib} * 2**20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()  # hold the memory until the test closes stdin
"""


@dataclass(frozen=True)
class Role:
    name: str
    mib: int
    namespace: str = ""
    pod: str = ""
    container: str = ""
    uid: str = ""
    container_id: str = ""
    allocated: str = "host"


TRAINER = Role("trainer", 768, "ml", "trainer-0", "trainer",
               "3f2a7c1e-8b4d-4e6a-9c21-5d7f0a3b8e41", "06ea17a8" * 8, "true")  # fmt: skip
NOTEBOOK = Role("notebook", 512, "ml", "notebook-1", "jupyter",
                "a91d4e27-3c6b-4f80-b5e2-0c8d7a1f6e93", "b53bcf91" * 8, "false")  # fmt: skip
HOST = Role("host", 256)
ROLES = (TRAINER, NOTEBOOK, HOST)


def cgroup_file(role: Role) -> str:
    """What /proc/<pid>/cgroup says for the role (cgroup v2: one line)."""
    if role is TRAINER:  # cgroupfs driver
        return f"0::/kubepods/besteffort/pod{role.uid}/{role.container_id}\n"
    if role is NOTEBOOK:  # systemd driver, containerd
        slice_uid = role.uid.replace("-", "_")
        return (
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{slice_uid}.slice/cri-containerd-{role.container_id}.scope\n"
        )
    return "0::/system.slice/gpu-test.service\n"


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str


@pytest.fixture(scope="module")
def workers() -> Iterator[dict[Role, int]]:
    require_torch_cuda()
    procs = {
        role: subprocess.Popen(
            [sys.executable, "-c", WORKER.format(mib=role.mib)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for role in ROLES
    }
    try:
        for role, p in procs.items():
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.strip() == "ready", f"the {role.name} worker (pid {p.pid}) did not start"
        yield {role: p.pid for role, p in procs.items()}
    finally:
        for p in procs.values():
            if p.stdin:
                p.stdin.close()
        for p in procs.values():
            p.wait(timeout=60)


@pytest.fixture(scope="module")
def gpu(workers: dict[Role, int]) -> Gpu:
    """The GPU NVML lists the workers on (waits for NVML's process list to show all three)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        deadline = time.monotonic() + 20
        while True:
            seen: dict[int, Gpu] = {}
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    seen[p.pid] = Gpu(i, uuid)
            found = {seen[pid] for pid in workers.values() if pid in seen}
            if len(found) == 1 and all(pid in seen for pid in workers.values()):
                return found.pop()
            if time.monotonic() > deadline:
                pytest.fail(f"NVML does not list the workers {workers} on one GPU: {seen}")
            time.sleep(0.2)
    finally:
        pynvml.nvmlShutdown()


@pytest.fixture(scope="module")
def proc_root(workers: dict[Role, int], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_proc_root(tmp_path_factory.mktemp("proc"), workers, broken=BREAK)


def build_proc_root(root: Path, workers: dict[Role, int], *, broken: bool) -> Path:
    """A /proc with each worker's real stat and comm and the cgroup file of its role."""
    placed = {role: cgroup_file(role) for role in ROLES}
    if broken:  # the deliberately broken mapping: the two pods' processes swapped
        placed[TRAINER], placed[NOTEBOOK] = placed[NOTEBOOK], placed[TRAINER]
    for role, pid in workers.items():
        d = root / str(pid)
        d.mkdir()
        for name in ("stat", "comm"):
            (d / name).write_bytes(Path(f"/proc/{pid}/{name}").read_bytes())
        (d / "cgroup").write_text(placed[role])
    return root


def pods_file(directory: Path, gpu: Gpu, strategy: str) -> Path:
    pods = [
        {
            "namespace": role.namespace,
            "name": role.pod,
            "uid": role.uid,
            "containers": [
                {
                    "name": role.container,
                    "containerID": f"containerd://{role.container_id}",
                    "gpus": [gpu.uuid] if role.allocated == "true" else [],
                }
            ],
        }
        for role in (TRAINER, NOTEBOOK)
    ]
    labels = {"nvidia.com/gpu.sharing-strategy": strategy, "nvidia.com/gpu.replicas": "1"}
    path = directory / f"pods-{strategy}.yaml"
    path.write_text(yaml.safe_dump({"node": {"name": "gpu-test", "labels": labels},
                                    "kubeletUp": True, "pods": pods}))  # fmt: skip
    return path


SERIES = re.compile(r"^(gpu_auditor_\w+)\{(.*)\} (\S+)$", re.MULTILINE)


def agent(proc_root: Path, pods: Path) -> list[tuple[str, dict[str, str], float]]:
    out = subprocess.run(
        [sys.executable, "-m", "node_agent", "--once", "--process-labels", "--no-report",
         "--node-name", "gpu-test", "--proc-root", str(proc_root), "--pods-fake", str(pods),
         *(["--nvml-fake", str(NVML_FAKE)] if NVML_FAKE is not None else [])],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    series = [
        (name, dict(re.findall(r'(\w+)="([^"]*)"', labels)), float(value))
        for name, labels, value in SERIES.findall(out.stdout)
    ]
    assert ("gpu_auditor_agent_nvml_up", {"node": "gpu-test"}, 1.0) in series, out.stdout[-4000:]
    return series


def test_each_process_is_named_with_its_pod_and_allocation(
    workers: dict[Role, int], gpu: Gpu, proc_root: Path, tmp_path: Path
) -> None:
    series = agent(proc_root, pods_file(tmp_path, gpu, "none"))
    by_pid = {
        int(labels["pid"]): (labels, value)
        for name, labels, value in series
        if name == "gpu_auditor_process_gpu_memory_bytes" and labels.get("pid")
    }
    print(f"\nGPU {gpu.index} {gpu.uuid}")
    for role, pid in workers.items():
        print(f"{role.name:9} pid {pid}: {by_pid.get(pid)}")
    used = {}
    for role, pid in workers.items():
        assert pid in by_pid, f"the agent does not list the {role.name} worker (pid {pid})"
        labels, value = by_pid[pid]
        assert (labels["gpu"], labels["uuid"]) == (str(gpu.index), gpu.uuid)
        got = (labels["namespace"], labels["pod"], labels["container"], labels["pod_uid"])
        assert got == (role.namespace, role.pod, role.container, role.uid), role.name
        assert labels["allocated"] == role.allocated, role.name
        assert role.mib * MIB <= value <= role.mib * MIB + CONTEXT_MAX, (role.name, value)
        used[role] = value
    # the same context in each worker: the bytes follow the tensors
    assert used[TRAINER] > used[NOTEBOOK] > used[HOST]


def findings(series: list[tuple[str, dict[str, str], float]], gpu: Gpu) -> set[tuple[str, str]]:
    return {
        (f"{labels['namespace']}/{labels['pod']}", labels["kind"])
        for name, labels, value in series
        if name == "gpu_auditor_sharing_finding" and labels["uuid"] == gpu.uuid and value == 1
    }


def test_two_pods_on_a_gpu_of_a_node_that_does_not_share_it(
    workers: dict[Role, int], gpu: Gpu, proc_root: Path, tmp_path: Path
) -> None:
    series = agent(proc_root, pods_file(tmp_path, gpu, "none"))
    assert findings(series, gpu) == {
        ("ml/notebook-1", "unrequested-gpu-use"),
        ("ml/notebook-1", "unintended-sharing"),
        ("ml/trainer-0", "unintended-sharing"),
    }
    pods = [
        v for n, labels, v in series if n == "gpu_auditor_gpu_pods" and labels["uuid"] == gpu.uuid
    ]
    assert pods and pods[0] >= 2


def test_sharing_on_an_mps_node_is_intended(
    workers: dict[Role, int], gpu: Gpu, proc_root: Path, tmp_path: Path
) -> None:
    series = agent(proc_root, pods_file(tmp_path, gpu, "mps"))
    assert findings(series, gpu) == {
        ("ml/notebook-1", "unrequested-gpu-use"),  # sharing or not, it requested no GPU
        ("ml/notebook-1", "intended-sharing"),
        ("ml/trainer-0", "intended-sharing"),
    }
