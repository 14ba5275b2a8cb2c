"""The running agent: a sampling thread that keeps the latest Snapshot and publishes reports."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable

from node_agent.model import Snapshot
from node_agent.publisher import ReportPublisher
from node_agent.sampler import Sampler

log = logging.getLogger(__name__)


def heap_trimmer() -> Callable[[Snapshot], None] | None:
    """glibc's ``malloc_trim(0)`` as a snapshot listener, where a C library allocates in this
    process (NVML through ctypes): it hands freed heap pages back to the kernel after each pass
    instead of keeping them in RSS. None where ctypes is not loaded already (the fake node loads
    no C library whose heap would need it) or the C library is not glibc."""
    if "ctypes" not in sys.modules:
        return None
    import ctypes

    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]

    def after_pass(_: Snapshot) -> None:
        trim(0)

    return after_pass


class Agent:
    def __init__(self, sampler: Sampler, interval: float,
                 publisher: ReportPublisher | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 listeners: Iterable[Callable[[Snapshot], None]] = ()) -> None:
        self.sampler = sampler
        self.interval = interval
        self.publisher = publisher
        self._clock = clock
        self.listeners = list(listeners)  # called with each new snapshot, in the sampling thread
        self._latest: Snapshot | None = None
        self._last_pass: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def latest(self) -> Snapshot | None:
        return self._latest

    def run_once(self, *, force_publish: bool = False) -> Snapshot | None:
        """One pass; an unexpected failure is logged and the previous snapshot kept."""
        try:
            snapshot = self.sampler.sample()
        except Exception:
            log.exception("sampling pass failed; keeping the previous snapshot")
            return self._latest
        self._latest = snapshot
        self._last_pass = self._clock()
        for listener in self.listeners:
            try:
                listener(snapshot)
            except Exception:
                log.exception("snapshot listener failed")
        if self.publisher is not None:
            self.publisher.maybe_publish(snapshot, force=force_publish)
        return snapshot

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)

    def _loop(self) -> None:
        """A pass every ``interval`` s, the first one ``interval`` s after start (the caller
        ran one already, so the first scrape has data)."""
        started = self._clock()
        while not self._stop.wait(max(0.0, self.interval - (self._clock() - started))):
            started = self._clock()
            self.run_once()

    def health(self) -> tuple[bool, str]:
        """Healthy while passes keep finishing (NVML or kubelet being down is not unhealthy:
        the agent still serves and says so in its metrics)."""
        if self._last_pass is None:
            return False, "no sampling pass finished yet"
        age = self._clock() - self._last_pass
        limit = max(3 * self.interval, 30.0)
        if self._thread is not None and not self._thread.is_alive():
            return False, "sampling thread stopped"
        if age > limit:
            return False, f"last sampling pass {age:.0f} s ago (limit {limit:.0f} s)"
        return True, "ok"
