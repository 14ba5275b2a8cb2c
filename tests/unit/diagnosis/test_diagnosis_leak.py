"""Leak series: from samples and from figures the job printed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_auditor.diagnosis import MemorySample
from gpu_auditor.diagnosis.leak import (
    LEAK_MIN_GROWTH_BYTES,
    LEAK_MIN_POINTS,
    detect_growth,
    growth_from_log,
    growth_from_samples,
    printed_series,
)

pytestmark = pytest.mark.unit
GIB = 2**30


def test_steady_rise_is_a_leak() -> None:
    growth = growth_from_samples([MemorySample(t * 5.0, (10 + t) * GIB) for t in range(10)])
    assert growth is not None
    assert growth.growth_bytes == 9 * GIB
    assert growth.per_unit == pytest.approx(GIB / 5)


def test_warm_up_then_plateau_is_not_a_leak() -> None:
    values = [5, 20, 35, 40, 40, 40, 40, 40, 40, 40, 40, 40]
    assert (
        growth_from_samples([MemorySample(float(t), v * GIB) for t, v in enumerate(values)]) is None
    )


def test_one_jump_is_not_a_leak() -> None:
    values = [10] * 6 + [30] * 6
    assert detect_growth([(float(t), v * GIB) for t, v in enumerate(values)], "samples") is None


def test_too_few_points_are_not_a_leak() -> None:
    points = [(float(t), (1 + t) * GIB) for t in range(LEAK_MIN_POINTS - 1)]
    assert detect_growth(points, "samples") is None


def test_printed_figures_form_one_series_per_label() -> None:
    text = "".join(f"step {i} mem {10 + i * 0.5:.1f} GiB\nallocated: 123 MB\n" for i in range(8))
    series = {s.name: s.values for s in printed_series(text)}
    assert series["mem"][:2] == (10 * GIB, round(10.5 * GIB))
    assert series["allocated"] == (123_000_000,) * 8
    growth = growth_from_log(text)
    assert growth is not None and growth.source == "log" and growth.points == 8


def test_flat_printed_figures_are_not_a_leak() -> None:
    text = "".join(f"step {i} | allocated: 1234 MB\n" for i in range(50))
    assert growth_from_log(text) is None


@given(st.lists(st.integers(min_value=0, max_value=2**40), max_size=60))
def test_constant_or_arbitrary_series_never_raise(values: list[int]) -> None:
    growth = detect_growth([(float(i), v) for i, v in enumerate(values)], "samples")
    if growth is not None:
        assert growth.growth_bytes >= LEAK_MIN_GROWTH_BYTES
        assert len(values) >= LEAK_MIN_POINTS


@given(
    st.integers(min_value=LEAK_MIN_POINTS, max_value=100),
    st.integers(min_value=LEAK_MIN_GROWTH_BYTES, max_value=2**33),
)
def test_any_linear_rise_big_enough_is_a_leak(points: int, step: int) -> None:
    assert detect_growth([(float(i), 2**30 + i * step) for i in range(points)], "samples")


def test_the_probes_records_are_not_read_as_a_printed_series() -> None:
    # a job that catches its OOMs prints one record per failure, each with allocated_bytes
    record = (
        'gpu-auditor-probe-record {{"probe":"gpu-auditor","v":1,"status":"ok",'
        '"allocated_bytes":{b},"reserved_bytes":{b}}}\n'
    )
    text = "".join(record.format(b=(100 + 2 * i) * GIB) for i in range(20))
    assert printed_series(text) == []
    assert growth_from_log(text) is None
