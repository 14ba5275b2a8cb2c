"""A leak after a load: a job's weights (a cache, a ballast) arrive in one step, then memory
grows steadily until the failure. A straight line through the load fits neither part, so the
rules are tried again on the points after the largest single rise when it is at least half the
series' growth (found on the H200: held-out set C's forward-hook leak, sampled by the agent's
NVML source, read as capacity; `evaluation/results/gpu-series-heldout-c.json`)."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.leak import _after_load, detect_growth
from gpu_auditor.diagnosis.model import MemorySample

pytestmark = pytest.mark.unit

MiB = 1024**2
GiB = 1024**3


def series(values_mib: list[int]) -> list[tuple[float, int]]:
    return [(float(t), v * MiB) for t, v in enumerate(values_mib)]


LOAD_THEN_LEAK = [0, 10000, 10100, 10200, 10300, 10400, 10500, 10600, 10700, 10800]
LOAD_THEN_FLAT = [0, 10000, 10000, 10001, 10000, 10001, 10001, 10001, 10001, 10001]
LOAD_THEN_WARMUP = [0, 10000, 10400, 10700, 10800, 10800, 10800, 10800, 10800, 10800]


def test_a_steady_rise_after_a_load_is_a_leak_and_the_load_is_not_counted() -> None:
    assert detect_growth(series(LOAD_THEN_LEAK[2:]), "samples") is not None  # the tail alone
    growth = detect_growth(series(LOAD_THEN_LEAK), "samples")
    assert growth is not None
    # from the first point after the load (10000 MiB) on
    assert (growth.first_bytes, growth.last_bytes) == (10000 * MiB, 10800 * MiB)
    assert growth.points == 9
    assert growth.per_unit == pytest.approx(100 * MiB)


@pytest.mark.parametrize("values", [LOAD_THEN_FLAT, LOAD_THEN_WARMUP])
def test_a_load_then_flat_or_a_warm_up_that_levels_off_is_not_a_leak(values: list[int]) -> None:
    assert detect_growth(series(values), "samples") is None


def test_the_load_is_the_largest_rise_and_at_least_half_the_growth() -> None:
    # growth 1000: a 500 jump is a load (exactly half), a 499 one is not
    half = series([0, 500, 500, 600, 700, 800, 900, 1000])
    assert _after_load(half) == half[1:]
    under = series([0, 1, 500, 600, 700, 800, 900, 1000])  # largest rise 499, growth 1000
    assert _after_load(under) is None
    # six points are enough to look for a load, five are not
    assert _after_load(series([0, 900, 920, 940, 960, 980])) is not None
    assert _after_load(series([0, 900, 920, 940, 960])) is None
    # a series that ends lower than it began has no load, whatever its rises
    assert _after_load(series([900, 800, 700, 600, 500, 400])) is None
    assert _after_load(series([9000, 0, 64, 128, 192, 256, 320])) is None


def test_the_diagnosis_names_the_leak_after_a_load_from_the_nodes_series() -> None:
    message = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB. GPU 0 has a "
        "total capacity of 139.80 GiB of which 15.12 MiB is free. Including non-PyTorch memory, "
        "this process has 139.78 GiB memory in use. Of the allocated memory 138.71 GiB is "
        "allocated by PyTorch, and 332.65 MiB is reserved by PyTorch but unallocated.\n"
    )
    # the shape of the H200 series: 1.2 GiB context, a 128.6 GiB load, then ~1 GiB a second
    gib = [0.01, 1.2, 1.2, 1.2, 129.79, 129.96, 131.07, 132.57, 134.4, 136.28, 138.15, 139.78]
    samples = [MemorySample(t * 0.5, int(g * GiB)) for t, g in enumerate(gib)]
    assert diagnose(message).kind == "capacity"
    result = diagnose(message, samples=samples)
    assert result.kind == "leak"
    assert result.growth is not None and result.growth.first_bytes == int(129.79 * GiB)
    assert result.growth.points == 8


def test_a_load_needs_the_series_to_end_higher_than_it_began() -> None:
    # a dip, then a steady rise back to exactly where it began: growth 0, no load, no leak;
    # one byte higher and the rise after the 600 MiB jump is read
    flat = [
        (float(t), v)
        for t, v in enumerate(
            [1000 * MiB, 0, 600 * MiB, 700 * MiB, 800 * MiB, 900 * MiB, 1000 * MiB]
        )
    ]
    assert _after_load(flat) is None and detect_growth(flat, "samples") is None
    higher = [*flat[:-1], (6.0, 1000 * MiB + 1)]
    assert _after_load(higher) == higher[2:]
    assert detect_growth(higher, "samples") is not None


def test_the_share_is_of_the_growth_from_the_first_point() -> None:
    # growth 600 from 400: the 500 jump is a load (the sum 1400 would make it none)
    assert _after_load(series([400, 900, 920, 940, 960, 980, 1000])) is not None
    # growth 1000 from 0: a 400 jump is not half of it (counted from the second point, 300,
    # the growth would be 700 and the jump more than half)
    rest = list(range(720, 1001, 20))
    assert _after_load(series([0, 300, 300, 700, *rest])) is None


def test_a_leak_after_a_load_keeps_its_source() -> None:
    growth = detect_growth(series(LOAD_THEN_LEAK), "samples")
    assert growth is not None and growth.source == "samples"
    assert growth.to_json_dict()["source"] == "samples"
