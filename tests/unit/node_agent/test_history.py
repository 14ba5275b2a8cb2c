"""Per-process history: a growth rate once enough points exist, bounded in size."""

from __future__ import annotations

import itertools

import pytest

from node_agent.history import History, MemorySeriesBook, slope, thin

from .agent_helpers import GIB

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


# Each container's memory series (MemorySeriesBook): kept bounded by the agent.

KEY = ("uid-a", "main", "GPU-0")


def test_a_series_keeps_every_point_until_it_is_full() -> None:
    book = MemorySeriesBook(max_points=8)
    for t in range(8):
        series = book.observe(KEY, float(t), t * GIB)
    assert series == tuple((float(t), t * GIB) for t in range(8))


def test_a_full_series_halves_its_points_keeping_the_oldest_and_the_newest() -> None:
    book = MemorySeriesBook(max_points=8)
    seen = [book.observe(KEY, float(t), t) for t in range(10)]
    # 0..7 fill it; at 8 every other point stays (spacing 2); 9 is shown as the newest
    assert [t for t, _ in seen[8]] == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert [t for t, _ in seen[9]] == [0.0, 2.0, 4.0, 6.0, 8.0, 9.0]


def test_a_long_life_is_spanned_evenly_within_the_point_limit() -> None:
    book = MemorySeriesBook(max_points=32)
    for t in range(1000):
        series = book.observe(KEY, float(t), t)
    times = [t for t, _ in series]
    assert len(times) <= 32 and times[0] == 0.0 and times[-1] == 999.0
    steps = {b - a for a, b in itertools.pairwise(times[:-1])}
    assert steps == {64.0}  # one spacing for all but the newest point


def test_points_older_than_the_window_are_dropped() -> None:
    book = MemorySeriesBook(max_points=32, max_age_seconds=100)
    for t in (0.0, 50.0, 120.0, 130.0):
        series = book.observe(KEY, t, 1)
    assert [t for t, _ in series] == [50.0, 120.0, 130.0]


def test_a_clock_stepped_back_starts_the_series_afresh_and_a_repeated_time_is_ignored() -> None:
    book = MemorySeriesBook()
    book.observe(KEY, 100.0, 1)
    assert book.observe(KEY, 100.0, 2) == ((100.0, 1),)
    assert book.observe(KEY, 90.0, 3) == ((90.0, 3),)


def test_the_store_is_bounded_and_forgets_containers_not_seen() -> None:
    book = MemorySeriesBook(max_series=2)
    book.observe(("a", "main", "g"), 1.0, 1)
    book.observe(("b", "main", "g"), 1.0, 1)
    assert book.observe(("c", "main", "g"), 1.0, 1) == ()
    book.forget_all_but([("b", "main", "g")])
    assert len(book) == 1
    assert book.observe(("a", "main", "g"), 2.0, 5) == ((2.0, 5),)  # a fresh series


def test_thin_spreads_the_kept_points_and_keeps_the_newest() -> None:
    points = [(float(t), t) for t in range(10)]
    assert [t for t, _ in thin(points, 4)] == [0.0, 3.0, 6.0, 9.0]
    assert thin(points, 1) == ((9.0, 9),) and thin(points, 0) == ()
    assert thin(points, 20) == tuple(points)
