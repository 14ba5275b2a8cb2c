"""``leak``: memory that rises steadily, from samples over time or from figures the job printed.

A series counts as a leak when, over its last ``LEAK_MAX_POINTS`` points - or over the points
after a load (one rise of at least ``LEAK_LOAD_JUMP_SHARE``, half, of the series' growth: the
job's weights or cache arriving at once, before the steady part) when the whole series fails:

- it has at least ``LEAK_MIN_POINTS`` (5) points;
- it rose at least ``LEAK_MIN_RISES`` (3) separate times (one jump, such as optimizer state
  created at the first step, is not a leak);
- at most ``LEAK_MAX_FALLING_SHARE`` (0.25) of the steps between consecutive points go down
  (memory that oscillates with the batch shape fails this; memory that rises only every few
  steps, a staircase, passes);
- the later half of the series carries at least ``LEAK_MIN_LATE_SHARE`` (0.25) of the rise
  (a warm-up ramp that then levels off fails this);
- a straight line fits it with R² >= ``LEAK_MIN_R2`` (0.8): steady, not one jump;
- it grew by at least ``LEAK_MIN_GROWTH_BYTES`` (256 MiB); whether it grew by enough to be the
  cause - at least what the failing request lacked - is the classifier's test (``classify.py``),
  which knows the failure's figures. (A share of the series' last value was the test before; a
  job leaking 1.3 GB on a GPU its weights fill grows by under 1 % of its total.)

Job-printed figures: jobs print memory in many ways - ``step 10 mem 12.3 GiB``,
``gpu_alloc_mb=131072``, JSON records ``{"gpu_mem_gb": 12.3}``, tqdm postfixes ``mem=12.3G``,
``torch.cuda.memory_allocated()`` as a bare byte count. Every number on a line is read with the
label printed just before it (``_LABEL_CHARS`` characters at most, back to the previous number or
separator). A number is a memory figure when its label names GPU memory (``_MEMORY_WORDS``) and
nothing else (``_NOT_GPU_MEMORY_WORDS``: host memory, utilisation, free/total/limit figures, rates,
loss, learning rate...). Its unit is the one printed after it, else a unit word at the end of the
label (``_mb``, ``(GiB)``), else bytes for a whole number of at least ``MIN_BARE_BYTES`` (1 MiB);
anything else is ambiguous and skipped. Figures are grouped into series by label (and the line's
first word, so ``train``/``eval`` stay apart); the leak is the first series, allocated memory
before reserved, that passes the rules above.

The node agent's ``growthBytesPerSecond`` alone is not a series (it cannot tell a warm-up from a
leak): at ``LEAK_MIN_RATE_BYTES_PER_SECOND`` (1 MiB/s) or more it makes ``leak`` a contributing
kind only.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from .logtext import normalize_text
from .model import Growth, MemorySample
from .sizes import NO_LIMIT_TOLERANCE, unit_bytes

LEAK_MIN_POINTS: Final = 5
LEAK_MAX_POINTS: Final = 200
LEAK_MIN_RISES: Final = 3
LEAK_MAX_FALLING_SHARE: Final = 0.25
LEAK_MIN_LATE_SHARE: Final = 0.25
LEAK_MIN_R2: Final = 0.8
LEAK_MIN_GROWTH_BYTES: Final = 256 * 1024**2
LEAK_MIN_RATE_BYTES_PER_SECOND: Final = 1024.0**2
LEAK_LOAD_JUMP_SHARE: Final = 0.5
"""One rise that is at least this share of a series' growth is a load, not part of a leak: the
rules are tried again on the points after it (held-out set C's forward-hook leak on the H200:
a 128.6 GiB ballast load, then 10 GiB of steady growth)."""

MIN_BARE_BYTES: Final = 1024**2
"""A whole number with no unit anywhere is read as bytes from this size up (a byte count from
``torch.cuda.memory_allocated()``); smaller bare numbers (``mem=12.3``) are ambiguous."""

_LABEL_CHARS: Final = 48
_MAX_SERIES: Final = 64
_MAX_NUMBERS_PER_LINE: Final = 64

# A number (at most 20 digits and 12 decimals: bounded, so no run of digits makes it slow or
# huge), an optional exponent, and an optional unit right after it.
_NUMBER_RE: Final = re.compile(
    r"(?<![\w.])(?P<num>\d{1,20}(?:\.\d{1,12})?(?:[eE][+]?\d{1,2})?)"
    r"(?:\s?(?P<unit>[KMGTkmgt]i?[Bb]|[KMGT]|bytes|B)(?![A-Za-z]))?"
)
_SEPARATORS: Final = re.compile(r"[,;|{}\t]|\s{2,}")
_LABEL_STRIP: Final = " \t=:\"'[](){}/"
_WORDS: Final = re.compile(r"[a-z]+")
_CAMEL: Final = re.compile(r"(?<=[a-z])(?=[A-Z])")

_MEMORY_WORDS: Final = frozenset(
    {
        "mem",
        "memory",
        "vram",
        "hbm",
        "alloc",
        "allocated",
        "reserved",
        "malloc",
        "gpumem",
        "cudamem",
        "memalloc",
        "memreserved",
    }
)
_NOT_GPU_MEMORY_WORDS: Final = frozenset(
    {
        "cpu",
        "host",
        "rss",
        "ram",
        "sys",
        "system",
        "swap",
        "shm",
        "disk",
        "pinned",
        "util",
        "utilization",
        "utilisation",
        "percent",
        "pct",
        "frac",
        "fraction",
        "ratio",
        "bw",
        "bandwidth",
        "free",
        "total",
        "limit",
        "capacity",
        "avail",
        "available",
        "budget",
        "loss",
        "lr",
        "rate",
        "throughput",
        "speed",
        "tokens",
        "samples",
        "it",
        "s",
        "sec",
        "time",
        "step",
        "epoch",
        "batch",
        "bs",
        "size",
        "len",
        "count",
        "num",
        "grad",
        "norm",
        "dataset",
        "data",
        "files",
        "params",
        "parameters",
    }
)
_UNIT_WORDS: Final = {
    "b": "B",
    "bytes": "bytes",
    "byte": "bytes",
    "kb": "KB",
    "kib": "KiB",
    "mb": "MB",
    "mib": "MiB",
    "gb": "GB",
    "gib": "GiB",
    "tb": "TB",
    "tib": "TiB",
}
_ALLOCATED_WORDS: Final = frozenset({"alloc", "allocated", "malloc", "memalloc"})
_NOT_PROGRESS: Final = (
    "out of memory",
    "Tried to allocate",
    "Out of memory",
    "OOM ",
    "gpu-auditor-probe-record",  # the probe's record: allocator state at a failure, not progress
)


def detect_growth(points: Sequence[tuple[float, int]], source: str) -> Growth | None:
    """A Growth when ``points`` (time or step, bytes) rise steadily enough to be a leak: the
    whole series, or the part after a load that dominates it (``_after_load``)."""
    series = sorted(points)[-LEAK_MAX_POINTS:]
    found = _steady_rise(series, source)
    if found is None:
        after = _after_load(series)
        if after is not None:
            found = _steady_rise(after, source)
    return found


def _after_load(series: list[tuple[float, int]]) -> list[tuple[float, int]] | None:
    """The points from the largest single rise on, when that rise is at least
    ``LEAK_LOAD_JUMP_SHARE`` of the series' growth: a job loads its weights (a cache, a
    ballast) in one step and then leaks, and a straight line through the load fits neither."""
    values = [v for _, v in series]
    if len(values) < LEAK_MIN_POINTS + 1:
        return None
    growth = values[-1] - values[0]
    jumps = [b - a for a, b in itertools.pairwise(values)]
    at = max(range(len(jumps)), key=jumps.__getitem__)
    if growth <= 0 or jumps[at] < LEAK_LOAD_JUMP_SHARE * growth:
        return None
    return series[at + 1 :]


def _steady_rise(series: list[tuple[float, int]], source: str) -> Growth | None:
    if len(series) < LEAK_MIN_POINTS:
        return None
    values = [float(v) for _, v in series]
    steps = list(itertools.pairwise(values))
    rises = sum(1 for a, b in steps if b > a)
    falls = sum(1 for a, b in steps if b < a)
    if rises < LEAK_MIN_RISES or falls > LEAK_MAX_FALLING_SHARE * len(steps):
        return None
    first, last = values[0], values[-1]
    growth = last - first
    if growth < LEAK_MIN_GROWTH_BYTES:
        return None
    middle = values[len(values) // 2]
    if last - middle < LEAK_MIN_LATE_SHARE * growth:
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
    if rate is None or rate != rate or rate < LEAK_MIN_RATE_BYTES_PER_SECOND:
        return None
    return Growth("node-rate", 0, 0, 0, rate)


@dataclass(frozen=True)
class PrintedSeries:
    """Memory figures one label took, in the order the job printed them."""

    name: str
    values: tuple[int, ...]

    @property
    def allocated(self) -> bool:
        return bool(_ALLOCATED_WORDS & set(_words(self.name)))


def _words(label: str) -> list[str]:
    return _WORDS.findall(_CAMEL.sub("_", label).lower())


def _label(line: str, start: int, floor: int) -> str:
    """The text printed just before a number: back to the previous number or a separator."""
    text = line[max(floor, start - _LABEL_CHARS) : start]
    for part in reversed(_SEPARATORS.split(text)):
        label = part.strip(_LABEL_STRIP)
        if label:
            return label
    return ""


def _unit_of(label_words: list[str], unit: str | None) -> str | None:
    if unit:
        return unit
    binary = "".join(label_words[-2:])  # the camelCase split cuts "MiB" in two: "mi", "b"
    if len(label_words) >= 2 and binary in ("kib", "mib", "gib", "tib"):
        return _UNIT_WORDS[binary]
    if label_words and label_words[-1] in _UNIT_WORDS:
        return _UNIT_WORDS[label_words[-1]]
    return None


_DEEPSPEED: Final = re.compile(
    r"\bMA ([\d.]{1,24}) GB\s{1,64}Max_MA [\d.]{1,24} GB\s{1,64}CA ([\d.]{1,24}) GB\b"
)
"""DeepSpeed's ``see_memory_usage``: memory_allocated() and memory_reserved() divided by 1024**3
and labelled "GB" (deepspeed/runtime/utils.py)."""


def memory_figures(line: str) -> list[tuple[str, int]]:
    """(label, bytes) for each GPU memory figure printed on ``line``."""
    deepspeed = _DEEPSPEED.search(line)
    if deepspeed is not None:
        allocated = _figure(deepspeed.group(1), "GiB")
        reserved = _figure(deepspeed.group(2), "GiB")
        return [
            (label, value)
            for label, value in (("allocated", allocated), ("reserved", reserved))
            if value is not None
        ]
    out: list[tuple[str, int]] = []
    floor = 0
    for count, match in enumerate(_NUMBER_RE.finditer(line)):
        if count >= _MAX_NUMBERS_PER_LINE:
            break
        label = _label(line, match.start(), floor)
        floor = match.end()
        words = _words(label)
        if not (_MEMORY_WORDS & set(words)) or _NOT_GPU_MEMORY_WORDS & set(words):
            continue
        value = _figure(match.group("num"), _unit_of(words, match.group("unit")))
        if value is not None:
            out.append((label, value))
    return out


def _figure(number: str, unit: str | None) -> int | None:
    try:
        value = float(number)
    except ValueError:
        return None
    if unit is None:
        if value != int(value) or value < MIN_BARE_BYTES:
            return None
        factor = 1
    else:
        found = unit_bytes(unit)
        if found is None:
            return None
        factor = found
    result = value * factor
    if not 0 <= result < NO_LIMIT_TOLERANCE:
        return None
    return round(result)


def printed_series(text: str) -> list[PrintedSeries]:
    """Every memory series the job printed, most points first, allocated before reserved."""
    groups: dict[str, list[int]] = {}
    for line in normalize_text(text):
        for refresh in line.text.split("\r"):  # a progress bar redraws itself with \r
            _collect(refresh, groups)
    found = [PrintedSeries(key.partition(":")[2], tuple(v)) for key, v in groups.items()]
    return sorted(found, key=lambda s: (not s.allocated, -len(s.values)))


def _collect(text: str, groups: dict[str, list[int]]) -> None:
    if not text or any(marker in text for marker in _NOT_PROGRESS):
        return
    head = _WORDS.findall(text[:24].lower())
    first = head[0] if head else ""
    for label, value in memory_figures(text):
        key = f"{first}:{'_'.join(_words(label))}"
        series = groups.get(key)
        if series is None:
            if len(groups) >= _MAX_SERIES:
                continue
            series = groups[key] = []
        series.append(value)
        if len(series) > 2 * LEAK_MAX_POINTS:
            del series[:LEAK_MAX_POINTS]


def growth_from_log(text: str) -> Growth | None:
    """The first printed series that is a leak, allocated memory before reserved."""
    for series in printed_series(text):
        growth = detect_growth([(float(i), v) for i, v in enumerate(series.values)], "log")
        if growth is not None:
            return growth
    return None
