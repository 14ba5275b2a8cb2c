"""Give freed heap memory back to the OS on glibc.

kopf's initial listing parses every pod in the cluster; Python frees those objects, but glibc keeps
the pages in its arenas, so the operator's RSS stays at the listing's level. `malloc_trim(0)`
returns them: measured at 5,000 pods, about 12 MiB (bench/results/operator_scale.md). A daemon
thread trims often in the first minute (the listing) and then once a minute; elsewhere (musl,
macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger("gpu_auditor.operator")


def _malloc_trim() -> Callable[[], object] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


def schedule() -> Iterator[float]:
    """Seconds to wait before each trim: 5, 10, 20, 40, then every 60."""
    yield from (5.0, 5.0, 10.0, 20.0)
    while True:
        yield 60.0


def start_trimming(stop: threading.Event | None = None) -> threading.Thread | None:
    trim = _malloc_trim()
    if trim is None:
        log.debug("malloc_trim not available: heap memory is left to the allocator")
        return None
    stop = stop or threading.Event()

    def loop() -> None:
        for delay in schedule():
            if stop.wait(delay):
                return
            trim()

    thread = threading.Thread(target=loop, name="malloc-trim", daemon=True)
    thread.start()
    return thread
