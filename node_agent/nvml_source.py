"""The real GPU source: NVML through nvidia-ml-py's ``pynvml``, NVIDIA's own binding.

``nvmlInit`` runs once (retried at most every ``retry_seconds`` while it fails, logged once).
Each pass lists every GPU and, when MIG is on, every MIG instance. A GPU whose NVML calls fail
is dropped from that pass alone and counted as an error; the pass never raises.

Process listings: pynvml's ``nvmlDeviceGet(MPS)ComputeRunningProcesses`` call the ``_v3``
symbol only (drivers from R510 on); a library without it (pynvml raises
``NVMLLibraryMismatchError``, not an ``NVMLError``) is asked through pynvml's ``_v2`` call
instead, once found missing. A library with neither lists no processes (logged once): the
GPU's memory figures are still served.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpu_auditor.base.errors import ConfigError
from node_agent.model import GpuSample, NvmlReading, ProcessSample

log = logging.getLogger(__name__)

_MAX_BYTES = 2**63 - 1  # the report's int64; NVML_VALUE_NOT_AVAILABLE (2^64-1) is above it

_INIT_FAILURES = {
    "NVMLError_LibraryNotFound": "the NVML library (libnvidia-ml.so.1) was not found: "
    "is the NVIDIA driver installed and the agent run with the nvidia runtime?",
    "NVMLError_DriverNotLoaded": "the NVIDIA kernel driver is not loaded",
    "NVMLError_NoPermission": "no permission to open the GPU devices",
    "NVMLError_LibRmVersionMismatch": "the NVML library and the kernel driver versions differ",
}
# Raised by pynvml (not an NVMLError) when an unversioned call's _v3 symbol is missing.
_MISMATCH = "NVMLLibraryMismatchError"
_PROCESS_QUERIES = ("nvmlDeviceGetComputeRunningProcesses",
                    "nvmlDeviceGetMPSComputeRunningProcesses")


def _name(err: BaseException) -> str:
    return type(err).__name__


def load_pynvml() -> ModuleType:
    """nvidia-ml-py's ``pynvml``; ConfigError (exit 2) where the agent extra is missing."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as err:
        raise ConfigError("the agent needs nvidia-ml-py for NVML (the agent extra): "
                          "pip install 'gpu-auditor[agent]'") from err


class NvmlSource:
    """Samples GPUs and their processes. ``nvml`` has the ``pynvml`` module's interface
    (``pynvml`` itself when not given; tests pass a fake)."""

    def __init__(
        self,
        nvml: ModuleType | Any | None = None,
        *,
        retry_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml = nvml if nvml is not None else load_pynvml()
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._initialised = False
        self._next_try = 0.0
        self._logged: set[str] = set()
        # the process listings in use: pynvml's unversioned (_v3) calls until one is missing
        self._queries = {q: getattr(self._nvml, q) for q in _PROCESS_QUERIES}
        self._switched: set[str] = set()

    def _log_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(message, *args)

    def _init(self) -> bool:
        if self._initialised:
            return True
        now = self._clock()
        if now < self._next_try:
            return False
        self._next_try = now + self._retry_seconds
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as err:
            why = _INIT_FAILURES.get(_name(err), str(err))
            self._log_once(
                "init",
                "NVML unavailable (%s: %s); serving without GPU metrics, nvml_up=0. "
                "Retrying every %.0f s.",
                _name(err),
                why,
                self._retry_seconds,
            )
            return False
        if "init" in self._logged:
            log.warning("NVML initialised after earlier failures")
            self._logged.discard("init")
        log.info("NVML initialised")
        self._initialised = True
        return True

    def sample(self) -> NvmlReading:
        if not self._init():
            return NvmlReading(up=False)
        nvml = self._nvml
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as err:
            if _name(err) in ("NVMLError_Uninitialized", "NVMLError_DriverNotLoaded"):
                self._initialised = False
            self._log_once("count", "nvmlDeviceGetCount failed: %s", err)
            return NvmlReading(up=False, errors=1)
        gpus: list[GpuSample] = []
        errors = 0
        for index in range(count):
            try:
                gpus.extend(self._sample_gpu(index))
            except nvml.NVMLError as err:
                errors += 1
                self._log_once(f"gpu{index}:{_name(err)}", "GPU %d dropped: %s", index, err)
        return NvmlReading(up=True, gpus=tuple(gpus), errors=errors)

    def _sample_gpu(self, index: int) -> list[GpuSample]:
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        migs = self._mig_handles(handle)
        if migs:
            return [self._sample_device(h, index, mig_gi=gi) for h, gi in migs]
        return [self._sample_device(handle, index, mig_gi=None)]

    def _mig_handles(self, handle: Any) -> list[tuple[Any, int]]:
        nvml = self._nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError:  # NotSupported on GPUs without MIG
            return []
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return []
        found: list[tuple[Any, int]] = []
        for i in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
                found.append((mig, int(nvml.nvmlDeviceGetGpuInstanceId(mig))))
            except nvml.NVMLError as err:
                if _name(err) not in ("NVMLError_NotFound", "NVMLError_InvalidArgument"):
                    raise
        return found

    def _sample_device(self, handle: Any, index: int, mig_gi: int | None) -> GpuSample:
        nvml = self._nvml
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        model = _text(nvml.nvmlDeviceGetName(handle))
        total, used, free, reserved = self._memory(handle)
        return GpuSample(
            gpu=str(index) if mig_gi is None else f"{index}/{mig_gi}",
            index=index,
            uuid=uuid,
            model=model,
            total_bytes=total,
            used_bytes=used,
            free_bytes=free,
            reserved_bytes=reserved,
            processes=self._processes(handle, uuid),
            mig=mig_gi is not None,
        )

    def _memory(self, handle: Any) -> tuple[int, int, int, int]:
        nvml = self._nvml
        try:
            m = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
            return _bytes(m.total), _bytes(m.used), _bytes(m.free), _bytes(m.reserved)
        except nvml.NVMLError as err:  # v2 not supported (old driver, some MIG handles)
            if _name(err) not in ("NVMLError_NotSupported", "NVMLError_FunctionNotFound"):
                raise
        m = nvml.nvmlDeviceGetMemoryInfo(handle)
        return _bytes(m.total), _bytes(m.used), _bytes(m.free), 0

    def _processes(self, handle: Any, uuid: str) -> tuple[ProcessSample, ...]:
        """Compute and MPS processes, one sample per pid. A GPU whose driver cannot list
        processes (NotSupported, e.g. some vGPU setups) keeps its memory metrics."""
        by_pid: dict[int, int | None] = {}
        for name in _PROCESS_QUERIES:
            procs = self._list(name, handle, uuid)
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                pid = int(p.pid)
                if by_pid.get(pid) is None:
                    by_pid[pid] = (int(used) if used is not None and 0 <= used <= _MAX_BYTES
                                   else None)
        return tuple(ProcessSample(pid=pid, used_bytes=b) for pid, b in sorted(by_pid.items()))

    def _list(self, name: str, handle: Any, uuid: str) -> list[Any]:
        """One process listing; [] where this driver cannot give it (logged once)."""
        nvml = self._nvml
        try:
            return list(self._queries[name](handle))
        except Exception as err:
            if _name(err) == _MISMATCH and name not in self._switched:
                self._switched.add(name)
                older = getattr(nvml, f"{name}_v2", None)  # a driver before _v3 (R510)
                if older is not None:
                    self._log_once(f"v2:{name}", "%s: this NVML library has no _v3 call; "
                                   "using _v2", name)
                    self._queries[name] = older
                    return self._list(name, handle, uuid)
            elif not isinstance(err, nvml.NVMLError):
                raise
            if _name(err) not in ("NVMLError_NotSupported", "NVMLError_FunctionNotFound",
                                  _MISMATCH):
                raise
            self._log_once(f"procs:{uuid}:{name}", "%s on %s: %s", name, uuid, err)
            return []


def _bytes(value: Any) -> int:
    """A memory figure clamped to [0, 2^63-1]."""
    return min(_MAX_BYTES, max(0, int(value)))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
