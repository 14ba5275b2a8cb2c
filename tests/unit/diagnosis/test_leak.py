"""Leak series: from samples and from figures the job printed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_auditor.diagnosis import MemorySample, diagnose
from gpu_auditor.diagnosis.leak import (
    LEAK_MIN_GROWTH_BYTES,
    LEAK_MIN_POINTS,
    _after_load,
    _fit,
    detect_growth,
    growth_from_log,
    growth_from_rate,
    growth_from_samples,
    memory_figures,
    printed_series,
)
from gpu_auditor.diagnosis.model import Growth

from .diagnosis_helpers import torch_oom

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


# Boundary table for the leak rules and the printed-series reader, literal numbers only.

G = 2**30
M = 2**20


def leak(values: list[int]) -> bool:
    return detect_growth([(float(i), v) for i, v in enumerate(values)], "samples") is not None


def test_five_points_are_enough_four_are_not() -> None:
    # straight lines rising 1 GiB a point: 4 and 3 rises, no falls, R² 1, late share 1/2
    assert leak([0, 1 * G, 2 * G, 3 * G, 4 * G])
    assert not leak([0, 1 * G, 2 * G, 3 * G])


def test_three_rises_are_enough_two_are_not() -> None:
    # [0,1,1,2,3] GiB: 3 rises, R² 0.94, middle 1 -> last 3 carries 2/3 of the rise
    assert leak([0, 1 * G, 1 * G, 2 * G, 3 * G])
    # [0,0,1,1,2] GiB: 2 rises, R² 0.89, middle 1 -> last 2 carries 1/2 of the rise
    assert not leak([0, 0, 1 * G, 1 * G, 2 * G])


def test_a_quarter_of_the_steps_may_fall() -> None:
    # 9 points, 8 steps: 2 falls (R² 0.91) pass, 3 falls (R² 0.83) do not; 5 rises in both,
    # growth 7 GiB, the second half carries 3/7 of it
    assert leak([g * G for g in (0, 2, 1, 3, 2, 4, 5, 6, 7)])
    assert not leak([g * G for g in (0, 2, 1, 3, 2, 4, 3, 6, 7)])


def test_the_later_half_must_carry_a_quarter_of_the_rise() -> None:
    # 9 points from 0 to 4 GiB, the middle (index 4) at 3 GiB: the rest carries exactly 1/4;
    # one byte more at the middle and it carries less. Rising throughout, R² > 0.9.
    base = [0, 1 * G, 2 * G, 2 * G + 512 * M, 3 * G, 3 * G + 256 * M, 3 * G + 512 * M,
            3 * G + 768 * M, 4 * G]  # fmt: skip
    assert leak(base)
    assert not leak([*base[:4], 3 * G + 1, *base[5:]])


def test_a_straight_line_must_fit_with_r2_of_0_8() -> None:
    # six flat points, one at v, then 2..6 GiB: 6 rises, no falls, growth 6 GiB, late share 1.
    # v = 192 MiB gives R² 0.80002, v = 191 MiB gives 0.79997.
    def series(v: int) -> list[int]:
        return [0] * 6 + [v] + [g * G for g in range(2, 7)]

    assert leak(series(192 * M))
    assert not leak(series(191 * M))


def test_growth_counts_from_256_mib() -> None:
    # five points 64 MiB apart: a perfect line, 4 rises, late share 1/2
    assert leak([g * 64 * M for g in range(5)])
    assert not leak([0, 64 * M, 128 * M, 192 * M, 256 * M - 1])


def test_only_the_last_200_points_are_read() -> None:
    # a steady rise of 64 MiB a point after one absurd first sample: with 200 rising points
    # after it the window holds only the rise (a leak); with 199 it holds the absurd sample,
    # and the series falls overall
    def series(rising: int) -> list[int]:
        return [100 * G] + [g * 64 * M for g in range(rising)]

    assert leak(series(200))
    assert not leak(series(199))


def test_the_growth_figures() -> None:
    g = detect_growth([(float(t) * 2, (10 + t) * G) for t in range(5)], "samples")
    assert g is not None
    assert (g.source, g.points, g.first_bytes, g.last_bytes) == ("samples", 5, 10 * G, 14 * G)
    assert g.per_unit == pytest.approx(G / 2)


def test_the_node_rate_counts_from_1_mib_per_second() -> None:
    assert growth_from_rate(float(M)) is not None
    assert growth_from_rate(float(M) - 1) is None
    assert growth_from_rate(None) is None
    assert growth_from_rate(float("nan")) is None


@pytest.mark.parametrize(
    ("line", "figures"),
    [
        ("mem 12.5 GiB", [("mem", 12.5 * G)]),
        ("vram: 3 GB", [("vram", 3_000_000_000)]),
        ("hbm 4096 KiB", [("hbm", 4 * M)]),
        ("mem 2e3 MB", [("mem", 2_000_000_000)]),
        ("alloc: 3 GiB reserved: 5 GiB", [("alloc", 3 * G), ("reserved", 5 * G)]),
        ("memAllocated 3GB", [("memAllocated", 3_000_000_000)]),
        ("gpu_mem(GB) 12.5", [("gpu_mem(GB", 12_500_000_000)]),  # unit from the label
        ("mem_mib=512", [("mem_mib", 512 * M)]),
        ("allocatedMB 512", [("allocatedMB", 512_000_000)]),
        ("step 3 | mem 2.0G | loss 0.5", [("mem", 2 * G)]),
    ],
)
def test_memory_figures_read_with_their_unit(line: str, figures: list[tuple[str, float]]) -> None:
    assert memory_figures(line) == [(label, round(b)) for label, b in figures]


@pytest.mark.parametrize(
    "line",
    [
        "loss 12.5 GiB",  # no memory word
        "cpu_mem 12.5 GiB",  # host memory
        "free mem 12 GiB",  # a free figure, not what the job holds
        "mem util 40 GiB",
        "vram 12.5",  # no unit and not a whole byte count
    ],
)
def test_figures_that_are_not_gpu_memory_are_skipped(line: str) -> None:
    assert memory_figures(line) == []


def test_bare_numbers_are_bytes_from_1_mib() -> None:
    assert memory_figures("allocated=1048576") == [("allocated", 1048576)]
    assert memory_figures("allocated=1048575") == []
    assert memory_figures("allocated=1048576.5") == []


def test_the_label_is_at_most_48_characters_back() -> None:
    # "mem " + 43 letters + " " = 48 characters before the number: "mem" is in the label;
    # one letter more pushes the "m" of "mem" out
    assert memory_figures("mem " + "a" * 43 + " 3 GiB") != []
    assert memory_figures("mem " + "a" * 44 + " 3 GiB") == []


@pytest.mark.parametrize(
    ("line", "value"),
    [("mem (GiB): 12.5", 12.5 * G), ("mem_MiB=512", 512 * M), ("memKiB=4096", 4096 * 1024),
     ("mem_TiB=2", 2 * 1024 * G), ("mem_MB=512", 512 * 10**6), ("mem_B=2097152", 2097152)],
)  # fmt: skip
def test_binary_units_at_the_end_of_the_label(line: str, value: float) -> None:
    assert memory_figures(line) == [(line.split("=")[0].split(":")[0].rstrip(")"), round(value))]


def test_series_are_grouped_by_label_and_first_word_allocated_first() -> None:
    text = "".join(
        f"train step {i} reserved {20 + i} GiB alloc {10 + i} GiB\neval mem {5 + i} GiB\n"
        for i in range(6)
    )
    series = printed_series(text)
    assert [s.name for s in series] == ["alloc", "reserved", "eval_mem"]
    assert series[0].values == tuple((10 + i) * G for i in range(6))
    assert series[0].allocated and not series[1].allocated


def test_the_failure_lines_are_not_progress() -> None:
    text = "".join(f"mem {10 + i} GiB\n" for i in range(4))
    text += "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB mem 99 GiB\n"
    assert growth_from_log(text) is None  # four points only: the failure line does not count
    assert growth_from_log(text + "mem 14 GiB\n") is not None


def test_a_progress_bar_redraw_is_one_point_per_refresh() -> None:
    text = "\r".join(f"it {i}: mem={10 + i}G" for i in range(5)) + "\n"
    growth = growth_from_log(text)
    assert growth is not None and (growth.points, growth.source) == (5, "log")


# A leak after a load: a job's weights (a cache, a ballast) arrive in one step, then memory grows
# steadily until the failure. A straight line through the load fits neither part, so the rules are
# tried again on the points after the largest single rise when it is at least half the series'
# growth (found on the H200: held-out set C's forward-hook leak, sampled by the agent's NVML
# source, read as capacity; `evaluation/results/gpu-series-heldout-c.json`).

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


# What mutation testing found loose in the leak rules (``scripts/mutation.py --modules leak``):
# the cases the boundary table above did not pin, literal figures, each limit from both sides.

def rising(times: list[float]) -> list[MemorySample]:
    """64 MiB more at each time, from 10 GiB."""
    return [MemorySample(t, 10 * G + i * 64 * M) for i, t in enumerate(times)]


def test_the_nodes_rate_is_a_growth_of_its_own_kind() -> None:
    assert growth_from_rate(2.0 * M) == Growth("node-rate", 0, 0, 0, 2.0 * M)


def test_samples_make_a_growth_from_samples() -> None:
    g = growth_from_samples(rising([float(t) for t in range(10)]))
    assert g == Growth("samples", 10, 10 * G, 10 * G + 9 * 64 * M, 64.0 * M)


def test_a_rise_of_under_a_byte_a_second_is_still_a_rise() -> None:
    # 576 MiB over 900 million seconds: the slope is 0.67 bytes a second, above 0
    g = growth_from_samples(rising([t * 1e8 for t in range(10)]))
    assert g is not None and 0 < g.per_unit < 1


def test_samples_a_tenth_of_a_second_apart_are_fitted() -> None:
    # the times vary by less than one second squared in total (0.825): still a straight line
    g = growth_from_samples(rising([t * 0.1 for t in range(10)]))
    assert g is not None and g.points == 10


def test_samples_all_at_one_time_are_no_line_and_no_error() -> None:
    assert growth_from_samples(rising([0.0] * 10)) is None


def test_a_figure_of_zero_is_read_and_16_pib_is_not() -> None:
    assert memory_figures("mem 0 GiB") == [("mem", 0)]
    assert memory_figures("mem 16383 TiB") == [("mem", 16383 * 2**40)]
    assert memory_figures("mem 16384 TiB") == []  # 2**54 bytes: a "no limit" value, not memory


def test_a_line_gives_at_most_64_figures() -> None:
    line = "  ".join(f"x{chr(97 + i // 26)}{chr(97 + i % 26)} mem {i + 1} GiB" for i in range(65))
    found = memory_figures(line)
    assert len(found) == 64 and found[-1] == ("xcl mem", 64 * G)


def test_the_same_label_after_another_first_word_is_another_series() -> None:
    text = "".join(f"train  mem {i} GiB\neval  mem {i + 1} GiB\n" for i in range(3))
    assert [(s.name, s.values) for s in printed_series(text)] == [
        ("mem", (0, G, 2 * G)),
        ("mem", (G, 2 * G, 3 * G)),
    ]


def test_the_first_word_is_read_from_the_first_24_characters() -> None:
    pad = "0" * 24  # no letter in the first 24 characters: no first word, one series
    text = "".join(f"{pad}train  mem {i} GiB\n{pad}eval  mem {i + 1} GiB\n" for i in range(3))
    assert [len(s.values) for s in printed_series(text)] == [6]


def test_at_most_64_series_and_the_known_ones_go_on() -> None:
    labels = [f"x{chr(97 + i // 26)}{chr(97 + i % 26)} mem" for i in range(65)]
    text = "".join(f"step  {label} 1 GiB\n" for label in labels[:64])
    text += f"step  {labels[64]} 1 GiB  {labels[0]} 2 GiB\n"  # a 65th label, then a known one
    series = printed_series(text)
    names = [label.replace(" ", "_") for label in labels]
    assert len(series) == 64 and names[64] not in {s.name for s in series}
    assert next(s for s in series if s.name == names[0]).values == (G, 2 * G)


@pytest.mark.parametrize(("prints", "kept"), [(400, 400), (401, 201)])
def test_a_series_keeps_400_figures_then_drops_the_oldest_200(prints: int, kept: int) -> None:
    text = "".join(f"mem {i + 1} MiB\n" for i in range(prints))
    (series,) = printed_series(text)
    assert len(series.values) == kept and series.values[-1] == prints * M


def test_the_longer_series_comes_first() -> None:
    # neither is allocated memory: the one printed more often (eval's) comes first
    text = "".join(f"train  mem {i + 1} GiB\n" for i in range(3))
    text += "".join(f"eval  mem {i + 1} GiB\n" for i in range(5))
    assert [len(s.values) for s in printed_series(text)] == [5, 3]


def test_a_series_with_the_same_times_is_none() -> None:
    assert detect_growth([(1.0, 10 * G + i * 64 * M) for i in range(10)], "samples") is None


# The leak fit's R² threshold at exactly 0.8 (issue 18, mutation survivor): a series whose least-
# squares R² is 0.8 to the last bit of a float is a leak (the rule is R² >= 0.8). Found by search
# over small series: 0, 0, 3, 2, 3, 4 (x 256 MiB) at steps 0..5 has R² = 0.8 exactly (sxy = 14,
# sxx = 17.5, syy = 14 in 256 MiB units: 196 / 245). Literal numbers.

Q = 256 * 2**20  # 256 MiB


def test_r2_of_exactly_0_8_is_a_leak() -> None:
    units = [0, 0, 3, 2, 3, 4]
    points = [(float(t), u * Q) for t, u in enumerate(units)]
    slope, r2 = _fit([t for t, _ in points], [float(v) for _, v in points])
    assert r2 == 0.8 and slope == 0.8 * Q
    growth = detect_growth(points, "samples")
    assert growth is not None
    assert (growth.points, growth.first_bytes, growth.last_bytes) == (6, 0, 4 * Q)


OOM = torch_oom(requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9)


def test_a_leak_series_of_huge_figures_does_not_overflow() -> None:
    # 10^300 GiB is a finite float whose product with 2^30 is infinite: OverflowError in round()
    series = "".join(f"step {i} mem {i}{'9' * 300} GiB\n" for i in range(1, 9))
    diagnosis = diagnose(series + OOM)
    assert diagnosis.detected and diagnosis.growth is None


# -- DeepSpeed's see_memory_usage (issue 24): "GB" there is memory_allocated() / 1024**3 --------

DEEPSPEED = (
    "[2024-05-01 10:00:00,000] [INFO] [utils.py:791:see_memory_usage] MA {ma} GB         "
    "Max_MA {max_ma} GB         CA {ca} GB         Max_CA {max_ca} GB "
)


def test_deepspeeds_gb_are_gib_allocated_and_reserved() -> None:
    line = DEEPSPEED.format(ma="12.5", max_ma="13.01", ca="14.0", max_ca="15")
    assert memory_figures(line) == [("allocated", 12.5 * G), ("reserved", 14 * G)]
    # anywhere else "GB" is 10^9 bytes
    assert memory_figures("vram: 12.5 GB") == [("vram", 12_500_000_000)]


@pytest.mark.parametrize(
    "line",
    [
        "MA 12.5 GB",  # without Max_MA and CA: not DeepSpeed's line (and "MA" is no memory word)
        "MA 12.5 GB Max_MA 13 GB",
        "MA 12.5 GiB         Max_MA 13.01 GiB         CA 14.0 GiB",  # not how DeepSpeed prints it
    ],
)
def test_a_line_short_of_deepspeeds_is_not_read_as_it(line: str) -> None:
    assert memory_figures(line) == []


def test_a_deepspeed_series_rising_a_gib_a_step_is_a_leak_in_gib() -> None:
    text = "".join(
        DEEPSPEED.format(ma=f"{10 + i}.5", max_ma=f"{11 + i}.0", ca=f"{12 + i}.0", max_ca=13 + i)
        + "\n"
        for i in range(8)
    )
    growth = growth_from_log(text)
    assert growth is not None
    assert (growth.source, growth.points, growth.first_bytes, growth.last_bytes) == (
        "log", 8, round(10.5 * G), round(17.5 * G),
    )  # fmt: skip
    assert growth.per_unit == 1 * G
