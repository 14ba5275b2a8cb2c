"""When the operator tries again: attempts per key, their back-off, and the schedule.

kopf never retries an event handler, and a terminated pod sends no more events, so the OOM path
and the sharing path schedule their own later attempts (`retrytimer.RetryTimer` runs them). A key
is a termination (pod UID, `<container>/<restartCount>`) or a pod of a node report (node, pod
UID); it is done (final: written, no OOM, a forbidden log, a failed diagnosis) or has failed
attempts, each scheduling the next after `RETRY_DELAYS`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from gpu_auditor.controller.lru import Lru

RETRY_DELAYS = (5.0, 15.0, 45.0, 120.0, *(300.0,) * 8)
"""Seconds before each new attempt at a termination whose log read or write failed, or at a
pod of a node report whose write failed (a kubelet or kwok answering 400/5xx, the API server
restarting, a 403): about 45 minutes in all, then the termination waits for an operator restart
and the report for its next change."""

Schedule = Callable[[float, Callable[[], None]], bool]
"""Called as schedule(delay, callback) (`retrytimer.RetryTimer`; tests record the calls)."""


class Attempts:
    """Done keys and failed attempts, bounded; schedules the next attempt of a failed key."""

    def __init__(self, schedule: Schedule, capacity: int = 50_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.schedule = schedule
        self.memory = Lru(capacity)
        """key -> True (done), or (monotonic time of the last failed attempt, attempts)."""
        self._clock = clock

    def done(self, key: Hashable) -> None:
        self.memory.add(key)

    def forget(self, key: Hashable) -> None:
        self.memory.pop(key)

    def due(self, key: Hashable) -> bool:
        """Not done, and no failed attempt whose back-off is still running."""
        seen = self.memory.get(key)
        if seen is None:
            return True
        if not isinstance(seen, tuple):
            return False
        at, attempts = seen
        delay = RETRY_DELAYS[min(attempts, len(RETRY_DELAYS)) - 1]
        return bool(self._clock() - at >= delay)

    def failed(self, key: Hashable, again: Callable[[], None]) -> int:
        """Record a failed attempt and schedule `again` after its back-off (until the delays
        run out); the number of attempts so far."""
        seen = self.memory.get(key)
        attempts = seen[1] + 1 if isinstance(seen, tuple) else 1
        self.memory.add(key, (self._clock(), attempts))
        if attempts <= len(RETRY_DELAYS):
            self.schedule(RETRY_DELAYS[attempts - 1], again)
        return attempts
