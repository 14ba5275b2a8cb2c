"""Our own retries: one thread, callbacks in time order, a bounded queue."""

from __future__ import annotations

import threading

import pytest

from gpu_auditor.controller.retrytimer import RetryTimer

pytestmark = pytest.mark.unit


def test_callbacks_run_in_time_order_and_a_failing_one_stops_nothing() -> None:
    scheduler = RetryTimer(workers=1)
    ran: list[str] = []
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    scheduler(0.2, lambda: (ran.append("late"), done.set()))
    scheduler(0.0, boom)
    scheduler(0.05, lambda: ran.append("early"))
    assert done.wait(10)
    scheduler.stop()
    assert ran == ["early", "late"]


def test_the_queue_is_bounded() -> None:
    scheduler = RetryTimer(capacity=3)
    accepted = [scheduler(3600, lambda: None) for _ in range(5)]
    assert accepted == [True, True, True, False, False]
    assert scheduler.pending() == 3
    scheduler.stop()
    assert scheduler(0, lambda: None) is False
