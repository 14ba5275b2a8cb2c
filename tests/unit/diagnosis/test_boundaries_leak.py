"""Boundary table for the leak rules and the printed-series reader, literal numbers only.

Each pair passes every rule but one, and that one from both sides: the comment says what the
other rules see (rises, falls, growth, late share, R²) so a reader can check it by hand.
"""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis.leak import (
    detect_growth,
    growth_from_log,
    growth_from_rate,
    memory_figures,
    printed_series,
)

pytestmark = pytest.mark.unit

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


# -- the printed-series reader ---------------------------------------------------------------


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
