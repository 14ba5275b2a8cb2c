"""Our own retries: one thread that runs callbacks when their time comes.

kopf never retries an event handler, and a terminated pod sends no more events, so the operator
schedules its own later attempts (a log read that failed, a write the API server refused). One
timer thread for all of them (not a thread per retry), a bounded queue, and a small pool that
runs the callbacks so a slow one (a log read, a diagnosis) does not hold the others.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("gpu_auditor.operator")

CAPACITY = 10_000
"""Pending retries kept at most; beyond, a new one is dropped (logged) until some have run."""


class RetryTimer:
    def __init__(self, capacity: int = CAPACITY, workers: int = 4) -> None:
        self.capacity = capacity
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="retry")
        self._stopped = False

    def __call__(self, delay: float, callback: Callable[[], None]) -> bool:
        """Run `callback` in `delay` seconds; False when the queue is full (dropped)."""
        with self._wake:
            if self._stopped:
                return False
            if len(self._heap) >= self.capacity:
                log.warning("retry queue full (%d): one retry dropped", self.capacity)
                return False
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._order), callback))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="retries", daemon=True)
                self._thread.start()
            self._wake.notify()
        return True

    def pending(self) -> int:
        with self._wake:
            return len(self._heap)

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._heap.clear()
            self._wake.notify()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and (
                        not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._wake.wait(timeout)
                if self._stopped:
                    return
                _, _, callback = heapq.heappop(self._heap)
            self._pool.submit(self._run, callback)

    @staticmethod
    def _run(callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:  # a retry must never end the retries
            log.exception("a scheduled retry failed")
