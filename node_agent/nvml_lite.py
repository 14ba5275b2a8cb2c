"""The agent's own ctypes binding to ``libnvidia-ml.so.1``: only the calls ``nvml_source`` makes.

Same interface as the ``pynvml`` module (nvidia-ml-py) for that subset: function names,
arguments, return values and the ``NVMLError`` classes (``NVMLError_NotSupported``, ...; the
agent matches on the class name), so ``NvmlSource`` takes either. It imports ``ctypes`` alone:
nvidia-ml-py's 8,000-line module of ctypes classes costs ~15 MiB of RSS before ``nvmlInit``.

Struct layouts are ``nvml.h``'s (and pynvml 13.x's): ``nvmlMemory_t`` {total, free, used},
``nvmlMemory_v2_t`` {version, total, reserved, free, used} with ``version = sizeof | 2 << 24``,
``nvmlProcessInfo_v1_t`` {pid, usedGpuMemory}, ``nvmlProcessInfo_v2_t`` = ``nvmlProcessInfo_t``
{pid, usedGpuMemory, gpuInstanceId, computeInstanceId}. Process lists use NVML's two-call
pattern (count first, ``NVML_ERROR_INSUFFICIENT_SIZE``, then an array of ``2 * count + 5``).

One difference from pynvml 13.x, on purpose: pynvml's ``nvmlDeviceGet*RunningProcesses`` call
the ``_v3`` symbol only (a driver without it raises ``NVMLLibraryMismatchError``, not an
``NVMLError``); here a library without ``_v3`` is asked through ``_v2``, then the unversioned
(v1) symbol, each with its own struct.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import Structure, byref, c_uint, c_ulonglong, c_void_p, create_string_buffer, sizeof
from typing import Any, ClassVar

LIBRARY = "libnvidia-ml.so.1"

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96
NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96
NVML_VALUE_NOT_AVAILABLE_ULONGLONG = 2**64 - 1

# pynvml's texts for str(err); other codes ask the library (nvmlErrorString).
_TEXT = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """An NVML return code. ``NVMLError(code)`` gives the code's subclass, named as pynvml
    names it (``NVML_ERROR_NOT_SUPPORTED`` -> ``NVMLError_NotSupported``)."""

    value: int
    _by_code: ClassVar[dict[int, type[NVMLError]]] = {}

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, NVMLError)
        err = Exception.__new__(cls)
        err.value = value
        return err

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        text = _TEXT.get(self.value)
        if text is None:
            text = _error_string(self.value)
        return text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


def _class_name(constant: str) -> str:
    """``NVML_ERROR_LIB_RM_VERSION_MISMATCH`` -> ``NVMLError_LibRmVersionMismatch``."""
    words = constant.removeprefix("NVML_ERROR_").split("_")
    return "NVMLError_" + "".join(w.capitalize() for w in words)


def _make_error_classes() -> None:
    module = globals()
    for constant, code in list(module.items()):
        if not constant.startswith("NVML_ERROR_"):
            continue

        def new(cls: type[NVMLError], *_args: object, _code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, _code)

        def init(self: NVMLError, *_args: object, _code: int = code) -> None:
            Exception.__init__(self, _code)

        sub = type(_class_name(constant), (NVMLError,), {"__new__": new, "__init__": init})
        sub.__module__ = __name__
        module[sub.__name__] = sub
        NVMLError._by_code[code] = sub


_make_error_classes()


def error_class(code: int) -> type[NVMLError]:
    """The subclass raised for ``code`` (``NVMLError`` itself for a code NVML added later)."""
    return NVMLError._by_code.get(code, NVMLError)


# -- structs (nvml.h) ------------------------------------------------------------------------

class c_nvmlMemory_t(Structure):  # nvml.h's name, as pynvml spells it
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class c_nvmlMemory_v2_t(Structure):
    _fields_ = [("version", c_uint), ("total", c_ulonglong), ("reserved", c_ulonglong),
                ("free", c_ulonglong), ("used", c_ulonglong)]


nvmlMemory_v2 = sizeof(c_nvmlMemory_v2_t) | 2 << 24  # 0x02000028, nvml.h's NVML_STRUCT_VERSION


class c_nvmlProcessInfo_v1_t(Structure):
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong)]


class c_nvmlProcessInfo_t(Structure):  # _v2 and _v3 share this layout
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong),
                ("gpuInstanceId", c_uint), ("computeInstanceId", c_uint)]


class ProcessInfo:
    """One process as pynvml returns it: ``usedGpuMemory`` is None where NVML has no figure
    (``NVML_VALUE_NOT_AVAILABLE``); the instance ids are None from the v1 call, which has none."""

    __slots__ = ("computeInstanceId", "gpuInstanceId", "pid", "usedGpuMemory")

    def __init__(self, pid: int, used: int | None, gpu_instance: int | None,
                 compute_instance: int | None) -> None:
        self.pid = pid
        self.usedGpuMemory = used
        self.gpuInstanceId = gpu_instance
        self.computeInstanceId = compute_instance

    def __repr__(self) -> str:
        return (f"ProcessInfo(pid={self.pid}, usedGpuMemory={self.usedGpuMemory}, "
                f"gpuInstanceId={self.gpuInstanceId}, "
                f"computeInstanceId={self.computeInstanceId})")


# -- the library -----------------------------------------------------------------------------

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_functions: dict[str, Any] = {}
_missing: set[str] = set()

# Called on every pass: a library without one of these is refused at nvmlInit, where the agent
# decides which binding to use, rather than failing every GPU on every pass.
REQUIRED = ("nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
            "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo")


def _check(ret: int) -> None:
    if ret != NVML_SUCCESS:
        raise NVMLError(ret)


def _load() -> ctypes.CDLL:
    global _lib
    with _lock:
        if _lib is None:
            try:
                _lib = ctypes.CDLL(LIBRARY)
            except OSError:
                raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND) from None
        return _lib


def _fn(name: str) -> Any:
    """The library's function ``name`` (looked up once; a missing one is remembered too)."""
    fn = _functions.get(name)
    if fn is not None:
        return fn
    if _lib is None:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if name in _missing:
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    try:
        fn = getattr(_lib, name)
    except AttributeError:
        _missing.add(name)
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND) from None
    _functions[name] = fn
    return fn


def _error_string(code: int) -> str:
    try:
        fn = _fn("nvmlErrorString")
    except NVMLError:
        return f"NVML Error with code {code}"
    fn.restype = ctypes.c_char_p
    text = fn(code)
    return text.decode(errors="replace") if text else f"NVML Error with code {code}"


def _text(buffer: ctypes.Array[ctypes.c_char]) -> str:
    return buffer.value.decode(errors="replace")


def nvmlInit() -> None:
    """Load the library, check that it has every call made on each pass, initialise."""
    lib = _load()
    for name in REQUIRED:
        if not hasattr(lib, name):
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    _check(_fn("nvmlInit_v2")())


def nvmlShutdown() -> None:
    _check(_fn("nvmlShutdown")())


def nvmlDeviceGetCount() -> int:
    count = c_uint()
    _check(_fn("nvmlDeviceGetCount_v2")(byref(count)))
    return count.value


def nvmlDeviceGetHandleByIndex(index: int) -> c_void_p:
    handle = c_void_p()
    _check(_fn("nvmlDeviceGetHandleByIndex_v2")(c_uint(index), byref(handle)))
    return handle


def nvmlDeviceGetUUID(handle: c_void_p) -> str:
    buf = create_string_buffer(NVML_DEVICE_UUID_V2_BUFFER_SIZE)
    _check(_fn("nvmlDeviceGetUUID")(handle, buf, c_uint(NVML_DEVICE_UUID_V2_BUFFER_SIZE)))
    return _text(buf)


def nvmlDeviceGetName(handle: c_void_p) -> str:
    buf = create_string_buffer(NVML_DEVICE_NAME_V2_BUFFER_SIZE)
    _check(_fn("nvmlDeviceGetName")(handle, buf, c_uint(NVML_DEVICE_NAME_V2_BUFFER_SIZE)))
    return _text(buf)


def nvmlDeviceGetMemoryInfo(handle: c_void_p,
                            version: int | None = None) -> c_nvmlMemory_t | c_nvmlMemory_v2_t:
    """v1 (total, free, used) without ``version``; with it (``nvmlMemory_v2``), the v2 struct
    and its ``reserved`` figure."""
    if not version:
        memory: c_nvmlMemory_t | c_nvmlMemory_v2_t = c_nvmlMemory_t()
        fn = _fn("nvmlDeviceGetMemoryInfo")
    else:
        memory = c_nvmlMemory_v2_t()
        memory.version = version
        fn = _fn("nvmlDeviceGetMemoryInfo_v2")
    _check(fn(handle, byref(memory)))
    return memory


def nvmlDeviceGetMigMode(handle: c_void_p) -> list[int]:
    current, pending = c_uint(), c_uint()
    _check(_fn("nvmlDeviceGetMigMode")(handle, byref(current), byref(pending)))
    return [current.value, pending.value]


def nvmlDeviceGetMaxMigDeviceCount(handle: c_void_p) -> int:
    count = c_uint()
    _check(_fn("nvmlDeviceGetMaxMigDeviceCount")(handle, byref(count)))
    return count.value


def nvmlDeviceGetMigDeviceHandleByIndex(handle: c_void_p, index: int) -> c_void_p:
    mig = c_void_p()
    _check(_fn("nvmlDeviceGetMigDeviceHandleByIndex")(handle, c_uint(index), byref(mig)))
    return mig


def nvmlDeviceGetGpuInstanceId(handle: c_void_p) -> int:
    gi = c_uint()
    _check(_fn("nvmlDeviceGetGpuInstanceId")(handle, byref(gi)))
    return gi.value


_PROCESS_VERSIONS = (("_v3", c_nvmlProcessInfo_t), ("_v2", c_nvmlProcessInfo_t),
                     ("", c_nvmlProcessInfo_v1_t))


def _running_processes(handle: c_void_p, base: str) -> list[ProcessInfo]:
    for suffix, struct in _PROCESS_VERSIONS:
        try:
            fn = _fn(base + suffix)
        except NVMLError as err:
            if err.value != NVML_ERROR_FUNCTION_NOT_FOUND:
                raise
            continue
        return _list_processes(fn, handle, struct)
    raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)


def _list_processes(fn: Any, handle: c_void_p, struct: type[Structure]) -> list[ProcessInfo]:
    count = c_uint(0)
    ret = fn(handle, byref(count), None)  # how many
    if ret == NVML_SUCCESS:
        return []
    if ret != NVML_ERROR_INSUFFICIENT_SIZE:
        raise NVMLError(ret)
    count.value = count.value * 2 + 5  # room for processes started since the first call
    array = (struct * count.value)()
    _check(fn(handle, byref(count), array))
    full = struct is c_nvmlProcessInfo_t
    out = []
    for p in array[:count.value]:
        used = p.usedGpuMemory
        out.append(ProcessInfo(p.pid, None if used == NVML_VALUE_NOT_AVAILABLE_ULONGLONG else used,
                               p.gpuInstanceId if full else None,
                               p.computeInstanceId if full else None))
    return out


def nvmlDeviceGetComputeRunningProcesses(handle: c_void_p) -> list[ProcessInfo]:
    return _running_processes(handle, "nvmlDeviceGetComputeRunningProcesses")


def nvmlDeviceGetMPSComputeRunningProcesses(handle: c_void_p) -> list[ProcessInfo]:
    return _running_processes(handle, "nvmlDeviceGetMPSComputeRunningProcesses")
