"""What mutation testing found loose in the leak rules (``scripts/mutation.py --modules leak``):
the cases test_boundaries_leak.py did not pin, literal figures, each limit from both sides.
"""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis.leak import (
    detect_growth,
    growth_from_rate,
    growth_from_samples,
    memory_figures,
    printed_series,
)
from gpu_auditor.diagnosis.model import Growth, MemorySample

pytestmark = pytest.mark.unit

G = 2**30
M = 2**20


def rising(times: list[float]) -> list[MemorySample]:
    """64 MiB more at each time, from 10 GiB."""
    return [MemorySample(t, 10 * G + i * 64 * M) for i, t in enumerate(times)]


# -- the Growth each source makes -----------------------------------------------------------------


def test_the_nodes_rate_is_a_growth_of_its_own_kind() -> None:
    assert growth_from_rate(2.0 * M) == Growth("node-rate", 0, 0, 0, 2.0 * M)


def test_samples_make_a_growth_from_samples() -> None:
    g = growth_from_samples(rising([float(t) for t in range(10)]))
    assert g == Growth("samples", 10, 10 * G, 10 * G + 9 * 64 * M, 64.0 * M)


# -- the line fit ---------------------------------------------------------------------------------


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


# -- reading figures ------------------------------------------------------------------------------


def test_a_figure_of_zero_is_read_and_16_pib_is_not() -> None:
    assert memory_figures("mem 0 GiB") == [("mem", 0)]
    assert memory_figures("mem 16383 TiB") == [("mem", 16383 * 2**40)]
    assert memory_figures("mem 16384 TiB") == []  # 2**54 bytes: a "no limit" value, not memory


def test_a_line_gives_at_most_64_figures() -> None:
    line = "  ".join(f"x{chr(97 + i // 26)}{chr(97 + i % 26)} mem {i + 1} GiB" for i in range(65))
    found = memory_figures(line)
    assert len(found) == 64 and found[-1] == ("xcl mem", 64 * G)


# -- grouping printed series ----------------------------------------------------------------------


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
