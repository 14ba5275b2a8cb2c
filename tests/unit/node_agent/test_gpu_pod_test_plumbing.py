"""The GPU pod-attribution test (tests/gpu/test_agent_pods_real_nvml.py), run on a CPU: its
fake /proc, pods file, agent run and checks, with idle processes in place of the CUDA workers
and a fake NVML naming their real pids (the GPU is lent for minutes; this keeps its test from
rotting between loans). It must pass with the right mapping and fail with the broken one
(``GPU_AUDITOR_BREAK_POD_MAPPING=1`` on the GPU), or the GPU test proves nothing.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

GPU_TESTS = Path(__file__).resolve().parents[2] / "gpu"
UUID = "GPU-5a1d2c3b-4e5f-4061-8273-9a8b7c6d5e4f"


@pytest.fixture(scope="module")
def gpu_test() -> Iterator[ModuleType]:
    sys.path.insert(0, str(GPU_TESTS))
    try:
        spec = importlib.util.spec_from_file_location(
            "gpu_pod_test", GPU_TESTS / "test_agent_pods_real_nvml.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("gpu_pod_test", None)
        sys.path.remove(str(GPU_TESTS))


@pytest.fixture(scope="module")
def idle(gpu_test: ModuleType) -> Iterator[dict[Any, int]]:
    procs = {
        role: subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
        for role in gpu_test.ROLES
    }  # fmt: skip
    try:
        yield {role: p.pid for role, p in procs.items()}
    finally:
        for p in procs.values():
            assert p.stdin is not None
            p.stdin.close()
            p.wait(timeout=30)


def fake_nvml(path: Path, gpu_test: ModuleType, workers: dict[Any, int]) -> Path:
    context = 500 * gpu_test.MIB  # what a CUDA context adds on the GPU
    processes = [{"pid": pid, "usedBytes": role.mib * gpu_test.MIB + context}
                 for role, pid in workers.items()]  # fmt: skip
    gpus = [{"index": 0, "uuid": UUID, "model": "NVIDIA H200", "memoryTotalBytes": 150 * 2**30,
             "processes": processes}]  # fmt: skip
    path.write_text(yaml.safe_dump({"gpus": gpus}))
    return path


@pytest.mark.parametrize("broken", [False, True], ids=["mapping", "broken-mapping"])
def test_the_gpu_attribution_test_passes_only_on_the_right_mapping(
    gpu_test: ModuleType, idle: dict[Any, int], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, broken: bool,
) -> None:  # fmt: skip
    monkeypatch.setattr(gpu_test, "NVML_FAKE", fake_nvml(tmp_path / "nvml.yaml", gpu_test, idle))
    (tmp_path / "proc").mkdir()
    root = gpu_test.build_proc_root(tmp_path / "proc", idle, broken=broken)
    gpu = gpu_test.Gpu(0, UUID)
    check = gpu_test.test_each_process_is_named_with_its_pod_and_allocation
    if not broken:
        check(idle, gpu, root, tmp_path)
        gpu_test.test_two_pods_on_a_gpu_of_a_node_that_does_not_share_it(idle, gpu, root, tmp_path)
        gpu_test.test_sharing_on_an_mps_node_is_intended(idle, gpu, root, tmp_path)
        return
    with pytest.raises(AssertionError, match="trainer"):
        check(idle, gpu, root, tmp_path)
