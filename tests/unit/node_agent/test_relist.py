"""When a list is read again (``node_agent.relist.Relist``, for the pod list and the
ResourceSlices alike), and how a failing one is told: once, until it works again."""

from __future__ import annotations

import logging

import pytest

from node_agent.relist import Relist

pytestmark = pytest.mark.unit


def test_listed_first_then_at_max_age_and_when_something_is_missing_after_min_refresh() -> None:
    now = [0.0]
    relist = Relist("listing x", min_refresh=15, max_age=300, clock=lambda: now[0])
    asked: list[float] = []

    def missing() -> bool:
        asked.append(now[0])
        return True

    assert relist.due(lambda: False)  # never listed
    relist.refresh(lambda: False, lambda: None)
    now[0] = 10.0
    assert not relist.due(missing) and asked == []  # too soon: not even asked
    now[0] = 16.0
    assert not relist.due(lambda: False)  # old enough, nothing missing
    assert relist.due(missing) and asked == [16.0]
    now[0] = 300.0
    assert relist.due(lambda: False)  # max age
    assert relist.lists == 1


def test_a_failure_keeps_nothing_counts_one_error_and_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    relist = Relist("listing x", min_refresh=15, max_age=300, clock=lambda: now[0])
    kept: list[int] = []

    def broken() -> None:
        raise RuntimeError("503")

    with caplog.at_level(logging.WARNING):
        errors = []
        for step in range(3):
            now[0] = step * 300.0
            errors.append(relist.refresh(lambda: False, broken))
        now[0] = 900.0
        errors.append(relist.refresh(lambda: False, lambda: kept.append(1)))
        now[0] = 1200.0
        errors.append(relist.refresh(lambda: False, broken))
    assert errors == [1, 1, 1, 0, 1]
    assert kept == [1] and relist.lists == 5
    assert caplog.text.count("listing x failed") == 2  # once, and once more after it worked
    assert caplog.text.count("listing x works again") == 1
