"""Returning the initial listing's freed heap to the OS."""

from __future__ import annotations

import itertools
import threading

import pytest

from gpu_auditor.controller import malloctrim

pytestmark = pytest.mark.unit


def test_trims_often_during_the_first_minute_then_once_a_minute() -> None:
    assert list(itertools.islice(malloctrim.schedule(), 7)) == [5, 5, 10, 20, 60, 60, 60]


def test_the_trimming_thread_stops_when_asked() -> None:
    stop = threading.Event()
    thread = malloctrim.start_trimming(stop)
    if thread is None:
        pytest.skip("no glibc malloc_trim on this platform")
    stop.set()
    thread.join(timeout=2)
    assert not thread.is_alive()
