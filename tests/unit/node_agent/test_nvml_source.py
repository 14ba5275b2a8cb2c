"""The real NVML source against a fake pynvml module: faults map to dropped GPUs, not crashes."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from node_agent.nvml_source import NvmlSource

pytestmark = pytest.mark.unit

GIB = 2**30


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_NotFound(NVMLError):
    pass


class NVMLError_FunctionNotFound(NVMLError):
    pass


@dataclass
class FakeDevice:
    uuid: str
    procs: list[tuple[int, int | None]] = field(default_factory=list)
    fail: type[Exception] | None = None
    mig: list[FakeDevice] | None = None
    gi: int = 0
    v2: bool = True


class FakeNvml:
    """Just enough of pynvml's surface for NvmlSource."""

    NVMLError = NVMLError
    NVML_DEVICE_MIG_ENABLE = 1
    nvmlMemory_v2 = 0x2000028

    def __init__(self, devices: list[FakeDevice], init_error: type[Exception] | None = None):
        self.devices = devices
        self.init_error = init_error
        self.init_calls = 0

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error()

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeDevice:
        return self.devices[i]

    def nvmlDeviceGetMigMode(self, h: FakeDevice) -> tuple[int, int]:
        if h.mig is None:
            raise NVMLError_NotSupported()
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeDevice) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeDevice, i: int) -> FakeDevice:
        assert h.mig is not None
        if i >= len(h.mig):
            raise NVMLError_NotFound()
        return h.mig[i]

    def nvmlDeviceGetGpuInstanceId(self, h: FakeDevice) -> int:
        return h.gi

    def nvmlDeviceGetUUID(self, h: FakeDevice) -> str:
        if h.fail is not None:
            raise h.fail()
        return h.uuid

    def nvmlDeviceGetName(self, h: FakeDevice) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h: FakeDevice, version: Any = None) -> Any:
        if version is not None and not h.v2:
            raise NVMLError_NotSupported()
        reserved = GIB if version is not None else 0
        used = sum(b or 0 for _, b in h.procs)
        return SimpleNamespace(total=80 * GIB, used=used, free=80 * GIB - used - reserved,
                               reserved=reserved)

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeDevice) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in h.procs]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h: FakeDevice) -> list[Any]:
        raise NVMLError_NotSupported()


def test_no_nvml_library_reports_down_logs_once_and_retries_later(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    nvml = FakeNvml([], init_error=NVMLError_LibraryNotFound)
    source = NvmlSource(nvml, retry_seconds=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        readings = [source.sample() for _ in range(3)]
        now[0] = 61.0
        readings.append(source.sample())
    assert [r.up for r in readings] == [False] * 4
    assert nvml.init_calls == 2  # once, then once more after retry_seconds
    assert len([r for r in caplog.records if "NVML unavailable" in r.message]) == 1
    assert "libnvidia-ml.so.1" in caplog.text


def test_nvml_is_initialised_once_across_passes() -> None:
    nvml = FakeNvml([FakeDevice("GPU-a")])
    source = NvmlSource(nvml)
    for _ in range(5):
        source.sample()
    assert nvml.init_calls == 1


def test_gpus_memory_and_processes_are_read() -> None:
    nvml = FakeNvml([FakeDevice("GPU-a", procs=[(7, 2 * GIB), (8, GIB)])])
    reading = NvmlSource(nvml).sample()
    assert reading.up and reading.errors == 0
    (g,) = reading.gpus
    assert (g.gpu, g.index, g.uuid, g.model) == ("0", 0, "GPU-a", "NVIDIA H200")
    assert (g.total_bytes, g.used_bytes, g.reserved_bytes) == (80 * GIB, 3 * GIB, GIB)
    assert [(p.pid, p.used_bytes) for p in g.processes] == [(7, 2 * GIB), (8, GIB)]


def test_a_failing_gpu_is_dropped_alone_and_counted() -> None:
    nvml = FakeNvml([FakeDevice("GPU-a", procs=[(7, GIB)]),
                     FakeDevice("GPU-lost", fail=NVMLError_GpuIsLost),
                     FakeDevice("GPU-c", procs=[(9, GIB)])])
    reading = NvmlSource(nvml).sample()
    assert reading.up
    assert [g.uuid for g in reading.gpus] == ["GPU-a", "GPU-c"]
    assert reading.errors == 1


def test_used_gpu_memory_not_available_is_none_not_a_crash() -> None:
    nvml = FakeNvml([FakeDevice("GPU-a", procs=[(7, None), (8, 2**64 - 1)])])
    (g,) = NvmlSource(nvml).sample().gpus
    assert [p.used_bytes for p in g.processes] == [None, None]


def test_used_gpu_memory_above_2_to_the_63_is_not_a_figure() -> None:
    nvml = FakeNvml([FakeDevice("GPU-a", procs=[(7, 2**63 - 1), (8, 2**63), (9, -1)])])
    (g,) = NvmlSource(nvml).sample().gpus
    assert [p.used_bytes for p in g.processes] == [2**63 - 1, None, None]


def test_memory_v1_fallback_when_v2_is_not_supported() -> None:
    nvml = FakeNvml([FakeDevice("GPU-old", procs=[(7, GIB)], v2=False)])
    (g,) = NvmlSource(nvml).sample().gpus
    assert (g.used_bytes, g.reserved_bytes) == (GIB, 0)


def test_mig_instances_are_sampled_one_by_one() -> None:
    migs = [FakeDevice("MIG-1", procs=[(7, GIB)], gi=1), FakeDevice("MIG-2", gi=2)]
    nvml = FakeNvml([FakeDevice("GPU-parent", mig=migs)])
    reading = NvmlSource(nvml).sample()
    assert [(g.gpu, g.uuid, g.index, g.mig) for g in reading.gpus] == [
        ("0/1", "MIG-1", 0, True), ("0/2", "MIG-2", 0, True)]
    assert [p.pid for p in reading.gpus[0].processes] == [7]


def test_a_call_missing_at_init_is_nvml_down_and_tried_again_later() -> None:
    now = [0.0]
    nvml = FakeNvml([], init_error=NVMLError_FunctionNotFound)
    source = NvmlSource(nvml, retry_seconds=60, clock=lambda: now[0])
    assert not source.sample().up
    now[0] = 61.0
    assert not source.sample().up
    assert nvml.init_calls == 2


class NVMLLibraryMismatchError(Exception):
    """pynvml's, raised by an unversioned call whose _v3 symbol the library lacks."""


class OldDriver(FakeNvml):
    """pynvml on a driver before R510: the unversioned listings (_v3) raise a mismatch, the
    _v2 ones work."""

    def __init__(self, devices: list[FakeDevice]) -> None:
        super().__init__(devices)
        self.v2_calls = 0

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeDevice) -> list[Any]:
        raise NVMLLibraryMismatchError("Unversioned function called ...")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: FakeDevice) -> list[Any]:
        self.v2_calls += 1
        return super().nvmlDeviceGetComputeRunningProcesses(h)


def test_a_driver_without_v3_listings_is_asked_through_v2_and_the_switch_is_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    nvml = OldDriver([FakeDevice("GPU-a", procs=[(7, GIB)])])
    source = NvmlSource(nvml)
    with caplog.at_level(logging.WARNING):
        first, second = source.sample(), source.sample()
    assert [(p.pid, p.used_bytes) for p in first.gpus[0].processes] == [(7, GIB)]
    assert second.gpus[0].processes == first.gpus[0].processes and second.errors == 0
    assert nvml.v2_calls == 2
    assert caplog.text.count("no _v3 call") == 1


def test_an_exception_that_is_not_nvmls_is_not_swallowed() -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetComputeRunningProcesses(self, h: FakeDevice) -> list[Any]:
            raise TypeError("a bug, not a driver")

    with pytest.raises(TypeError):
        NvmlSource(Broken([FakeDevice("GPU-a")])).sample()


# ---- through nvidia-ml-py's pynvml, against a fake libnvidia-ml.so.1 built from C ----------
#
# fakenvml/fake_nvml.c has nvml.h's signatures and struct layouts; pynvml loads it by name
# (CDLL("libnvidia-ml.so.1")), so a subprocess with LD_LIBRARY_PATH pointing at the build is
# the real binding over the fake driver. A wrong struct would be a wrong figure on a pod, so
# the figures are checked literally.

SOURCE = Path(__file__).resolve().parent / "fakenvml" / "fake_nvml.c"
REPO = Path(__file__).resolve().parents[3]
CC = shutil.which("cc") or shutil.which("gcc")
VARIANTS = {"current": [], "no_v3": ["-DNO_V3"], "no_v2": ["-DNO_V2"]}

READ = r"""
import ctypes, dataclasses, json, logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from node_agent.nvml_source import NvmlSource
source = NvmlSource()
readings = [dataclasses.asdict(source.sample()) for _ in range(2)]
lib = ctypes.CDLL('libnvidia-ml.so.1')
lib.fake_last_process_call.restype = ctypes.c_char_p
print(json.dumps({'readings': readings, 'last_call': lib.fake_last_process_call().decode()}))
"""


@pytest.fixture(scope="module")
def fake_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if CC is None:
        pytest.skip("no C compiler (cc/gcc) to build the fake libnvidia-ml.so.1")
    root = tmp_path_factory.mktemp("fakenvml")
    runs = {}
    for name, flags in VARIANTS.items():
        (root / name).mkdir()
        subprocess.run([CC, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", *flags, "-o",
                        str(root / name / "libnvidia-ml.so.1"), str(SOURCE)], check=True,
                       timeout=60)
        env = {**os.environ, "LD_LIBRARY_PATH": str(root / name),
               "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "operator")])}
        done = subprocess.run([sys.executable, "-c", READ], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        runs[name] = {**json.loads(done.stdout), "log": done.stderr}
    return runs


def test_pynvml_reads_the_fake_drivers_own_figures(fake_runs: dict[str, Any]) -> None:
    """Literal values from fake_nvml.c: GPUs, MIG instances (one NotFound slot, one without
    memory v2), per-process bytes including NVML's 'not available', MPS processes."""
    run = fake_runs["current"]
    first, second = run["readings"]
    assert first == second and first["up"] and first["errors"] == 0
    gpus = {g["gpu"]: g for g in first["gpus"]}
    assert sorted(gpus) == ["0", "1/1", "1/5", "2"]
    g0 = gpus["0"]
    assert (g0["uuid"], g0["model"]) == ("GPU-0a1b2c3d-0000-4000-8000-000000000000",
                                         "NVIDIA H200")
    assert (g0["total_bytes"], g0["used_bytes"], g0["free_bytes"], g0["reserved_bytes"]) == (
        150754820096, 10572652544, 139611545600, 570621952)
    assert [(p["pid"], p["used_bytes"]) for p in g0["processes"]] == [
        (4101, 1713373184), (4102, 2787115008), (4103, None), (4200, 524288000)]
    assert (gpus["1/5"]["reserved_bytes"], gpus["1/5"]["used_bytes"]) == (0, 33554432)
    assert [(p["pid"], p["used_bytes"]) for p in gpus["1/1"]["processes"]] == [
        (5101, 1073741824), (5102, 1040187392)]
    assert gpus["2"]["processes"] == []
    assert run["last_call"] == "nvmlDeviceGetMPSComputeRunningProcesses_v3"


def test_a_driver_without_v3_gives_the_same_reading_through_v2(fake_runs: dict) -> None:
    old = fake_runs["no_v3"]
    assert old["readings"][0] == fake_runs["current"]["readings"][0]
    assert old["last_call"] == "nvmlDeviceGetMPSComputeRunningProcesses_v2"
    assert old["log"].count("no _v3 call") == 2  # once per listing (compute, MPS), not per pass


def test_a_driver_with_only_v1_listings_keeps_memory_figures_without_processes(
        fake_runs: dict) -> None:
    reading = fake_runs["no_v2"]["readings"][1]
    assert reading["up"] and reading["errors"] == 0
    gpus = {g["gpu"]: g for g in reading["gpus"]}
    assert gpus["0"]["total_bytes"] == 150754820096 and gpus["0"]["processes"] == []
