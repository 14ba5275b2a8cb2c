"""``leak``: memory that rises steadily, from samples over time or from figures the job printed.

A series counts as a leak when, over its last ``LEAK_MAX_POINTS`` points:

- it has at least ``LEAK_MIN_POINTS`` (5) points;
- at least ``LEAK_MIN_RISING_SHARE`` (0.7) of the steps between consecutive points go up
  (a warm-up ramp that then levels off, or memory that oscillates every step, fails this);
- a straight line fits it with R² >= ``LEAK_MIN_R2`` (0.8): steady, not one jump;
- it grew by at least ``LEAK_MIN_GROWTH_BYTES`` (256 MiB) and by at least
  ``LEAK_MIN_GROWTH_SHARE`` (5 %) of its last value.

Job-printed figures are lines such as ``step 10 mem 12.3 GiB`` or ``allocated: 1234 MB`` before
the failure: a memory word, then within ``_GAP`` characters a size with a unit. Lines are grouped
by their shape (digits masked); the largest group is the series, one point per line.

The node agent's ``growthBytesPerSecond`` alone is not a series (it cannot tell a warm-up from a
leak): at ``LEAK_MIN_RATE_BYTES_PER_SECOND`` (1 MiB/s) or more it makes ``leak`` a contributing
kind only.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Final

from .logtext import normalize_text
from .model import Growth, MemorySample
from .sizes import to_bytes

LEAK_MIN_POINTS: Final = 5
LEAK_MAX_POINTS: Final = 200
LEAK_MIN_RISING_SHARE: Final = 0.7
LEAK_MIN_R2: Final = 0.8
LEAK_MIN_GROWTH_BYTES: Final = 256 * 1024**2
LEAK_MIN_GROWTH_SHARE: Final = 0.05
LEAK_MIN_RATE_BYTES_PER_SECOND: Final = 1024.0**2

_GAP: Final = 24
_FIGURE_RE: Final = re.compile(
    r"(?i:\b(?:max_memory_allocated|memory_allocated|memory_reserved|gpu_mem|cuda_mem|vram|"
    r"memory|mem|allocated|reserved))\b"
    rf"[^0-9\n]{{0,{_GAP}}}?"
    r"(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]iB|[KMGT]B|[KMGT]|bytes)\b"
)
_DIGITS: Final = re.compile(r"\d+(?:\.\d+)?")
_NOT_PROGRESS: Final = ("out of memory", "Tried to allocate", "Out of memory", "OOM ")


def detect_growth(points: Sequence[tuple[float, int]], source: str) -> Growth | None:
    """A Growth when ``points`` (time or step, bytes) rise steadily enough to be a leak."""
    series = sorted(points)[-LEAK_MAX_POINTS:]
    if len(series) < LEAK_MIN_POINTS:
        return None
    values = [float(v) for _, v in series]
    rising = sum(1 for a, b in itertools.pairwise(values) if b > a)
    if rising < LEAK_MIN_RISING_SHARE * (len(values) - 1):
        return None
    first, last = values[0], values[-1]
    growth = last - first
    if growth < LEAK_MIN_GROWTH_BYTES or growth < LEAK_MIN_GROWTH_SHARE * last:
        return None
    slope, r2 = _fit([float(t) for t, _ in series], values)
    if slope <= 0 or r2 < LEAK_MIN_R2:
        return None
    return Growth(source, len(series), int(first), int(last), slope)


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and R² (0 when x or y does not vary)."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    syy = sum((y - mean_y) ** 2 for y in ys)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    if sxx <= 0 or syy <= 0:
        return 0.0, 0.0
    return sxy / sxx, (sxy * sxy) / (sxx * syy)


def growth_from_samples(samples: Sequence[MemorySample]) -> Growth | None:
    return detect_growth([(s.t_seconds, s.bytes) for s in samples], "samples")


def growth_from_rate(rate: float | None) -> Growth | None:
    if rate is None or rate < LEAK_MIN_RATE_BYTES_PER_SECOND:
        return None
    return Growth("node-rate", 0, 0, 0, rate)


def printed_series(text: str) -> list[int]:
    """The memory figures the job printed, in order, from its most frequent line shape."""
    groups: dict[str, list[int]] = {}
    for line in normalize_text(text):
        if any(marker in line.text for marker in _NOT_PROGRESS):
            continue
        match = _FIGURE_RE.search(line.text)
        if match is None:
            continue
        value = to_bytes(match.group("num"), match.group("unit"))
        if value is None:
            continue
        shape = _DIGITS.sub("#", line.text.strip())[:120]
        groups.setdefault(shape, []).append(value)
    if not groups:
        return []
    return max(groups.values(), key=len)


def growth_from_log(text: str) -> Growth | None:
    values = printed_series(text)
    return detect_growth([(float(i), v) for i, v in enumerate(values)], "log")
