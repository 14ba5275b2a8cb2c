"""The real NVML source against a fake pynvml module: faults map to dropped GPUs, not crashes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
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


def test_a_binding_missing_a_call_at_init_switches_to_the_fallback_once(
        caplog: pytest.LogCaptureFixture) -> None:
    lite = FakeNvml([], init_error=NVMLError_FunctionNotFound)
    other = FakeNvml([FakeDevice("GPU-a", procs=[(7, GIB)])])
    asked: list[int] = []

    def fallback() -> FakeNvml:
        asked.append(1)
        return other

    source = NvmlSource(lite, fallback=fallback)
    with caplog.at_level(logging.WARNING):
        first, second = source.sample(), source.sample()
    assert first.up and [g.uuid for g in first.gpus] == ["GPU-a"]
    assert second.gpus[0].processes[0].used_bytes == GIB
    assert (lite.init_calls, other.init_calls, len(asked)) == (1, 1, 1)
    assert "NVML binding found a call missing" in caplog.text
    assert "NVML unavailable" not in caplog.text


def test_without_a_fallback_a_missing_call_is_nvml_down_and_tried_again_later() -> None:
    now = [0.0]
    lite = FakeNvml([], init_error=NVMLError_FunctionNotFound)
    source = NvmlSource(lite, fallback=lambda: None, retry_seconds=60, clock=lambda: now[0])
    assert not source.sample().up
    now[0] = 61.0
    assert not source.sample().up
    assert lite.init_calls == 2


def test_other_init_failures_do_not_switch_binding() -> None:
    lite = FakeNvml([], init_error=NVMLError_LibraryNotFound)
    asked: list[int] = []
    source = NvmlSource(lite, fallback=lambda: asked.append(1))
    assert not source.sample().up
    assert asked == []
