"""Per-process history: a growth rate once enough points exist, bounded in size."""

from __future__ import annotations

import pytest

from node_agent.history import History, slope

pytestmark = pytest.mark.unit


def test_slope_of_a_steady_leak() -> None:
    assert slope([(0, 0), (10, 100), (20, 200)]) == pytest.approx(10.0)


def test_slope_is_undefined_for_one_point_or_one_instant() -> None:
    assert slope([(0, 5)]) is None
    assert slope([(3, 5), (3, 9)]) is None


def test_growth_appears_after_min_samples() -> None:
    h = History(max_samples=5, min_samples=3)
    key = (1, 100, "GPU-0")
    assert h.observe(key, 0, 1000) is None
    assert h.observe(key, 10, 2000) is None
    assert h.observe(key, 20, 3000) == pytest.approx(100.0)


def test_a_reused_pid_starts_a_fresh_history() -> None:
    h = History(max_samples=5, min_samples=2)
    h.observe((1, 100, "GPU-0"), 0, 0)
    h.observe((1, 100, "GPU-0"), 10, 10_000)
    assert h.observe((1, 999, "GPU-0"), 20, 0) is None  # new start time: new process


def test_history_is_bounded_in_points_and_processes() -> None:
    h = History(max_samples=3, min_samples=2, max_processes=2)
    key = (1, 1, "g")
    for t, used in enumerate([0, 0, 0, 0, 0, 0, 0, 100, 200]):
        rate = h.observe(key, t, used)
    assert rate == pytest.approx(100.0)  # the last 3 points only: 0, 100, 200
    h.observe((2, 1, "g"), 0, 0)
    assert h.observe((3, 1, "g"), 0, 0) is None and len(h) == 2


def test_forget_drops_processes_not_seen() -> None:
    h = History()
    h.observe((1, 1, "g"), 0, 0)
    h.observe((2, 1, "g"), 0, 0)
    h.forget_all_but([(2, 1, "g")])
    assert len(h) == 1
