"""Bounded histories of GPU memory, the agent's leak evidence: each process's growth rate
(``History``) and each container's memory series per GPU (``MemorySeriesBook``).

``History`` is keyed by (pid, start time, GPU UUID) so a reused pid starts a fresh history. At
most ``max_samples`` points per process and ``max_processes`` processes; processes not seen in a
pass are forgotten.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

Key = tuple[int, int, str]


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope (bytes per second) of (time, bytes) points; None if undefined."""
    n = len(points)
    if n < 2:
        return None
    t0, b0 = points[0]
    st = sb = stt = stb = 0.0
    for t, b in points:  # one pass, relative to the first point (epoch seconds squared
        t -= t0  # would lose precision)
        b -= b0
        st += t
        sb += b
        stt += t * t
        stb += t * b
    var = n * stt - st * st
    if var <= 0:
        return None
    return (n * stb - st * sb) / var


class History:
    def __init__(self, max_samples: int = 12, min_samples: int = 3,
                 max_processes: int = 8192) -> None:
        if max_samples < min_samples or min_samples < 2:
            raise ValueError("need max_samples >= min_samples >= 2")
        self._max_samples = max_samples
        self._min_samples = min_samples
        self._max_processes = max_processes
        self._series: dict[Key, deque[tuple[float, float]]] = {}

    def __len__(self) -> int:
        return len(self._series)

    def observe(self, key: Key, t: float, used_bytes: int) -> float | None:
        """Record a point; the growth rate in bytes/s once ``min_samples`` points exist."""
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= self._max_processes:
                return None
            series = self._series[key] = deque(maxlen=self._max_samples)
        series.append((t, float(used_bytes)))
        if len(series) < self._min_samples:
            return None
        return slope(series)

    def forget_all_but(self, live: Iterable[Key]) -> None:
        keep = set(live)
        for key in [k for k in self._series if k not in keep]:
            del self._series[key]


SeriesKey = tuple[str, str, str]
"""(pod UID, container, GPU UUID): one container's memory on one GPU."""
Point = tuple[float, int]


def thin(points: Sequence[Point], keep: int) -> tuple[Point, ...]:
    """``keep`` points spread evenly over ``points`` by position, the newest always kept."""
    n = len(points)
    if n <= keep:
        return tuple(points)
    if keep <= 0:
        return ()
    if keep == 1:
        return (points[-1],)
    return tuple(points[round(i * (n - 1) / (keep - 1))] for i in range(keep))


@dataclass(slots=True)
class _Series:
    kept: list[Point] = field(default_factory=list)
    """Points at least ``step`` seconds apart, oldest first."""
    step: float = 0.0
    tail: Point | None = None
    """The newest point when it came sooner than ``step`` after the last kept one."""

    def points(self) -> tuple[Point, ...]:
        return (*self.kept, self.tail) if self.tail is not None else tuple(self.kept)


class MemorySeriesBook:
    """Each container's GPU memory over its life, per GPU: the report's ``memorySeries``.

    At most ``max_points`` points a series, evenly spread over the container's life (up to
    ``max_age_seconds``), and the newest point: every point is kept until the series is full;
    then every other one is dropped (the oldest stays) and only points at least the new spacing
    apart are kept after them, while the newest point is always shown. A leak is a rise over
    minutes or hours, so the older points matter as much as the newest. A point whose time is
    before the last one's starts the series afresh (the wall clock was stepped back); one at the
    same time is ignored. At most ``max_series`` series; those not seen in a pass are forgotten
    (``forget_all_but``).
    """

    def __init__(self, max_points: int = 32, max_age_seconds: float = 1800.0,
                 max_series: int = 8192) -> None:
        if max_points < 3 or max_age_seconds <= 0:
            raise ValueError("need max_points >= 3 and max_age_seconds > 0")
        self._max_points = max_points
        self._max_age = max_age_seconds
        self._max_series = max_series
        self._series: dict[SeriesKey, _Series] = {}

    def __len__(self) -> int:
        return len(self._series)

    def observe(self, key: SeriesKey, t: float, used_bytes: int) -> tuple[Point, ...]:
        """Record the container's bytes at ``t`` (seconds); its series, oldest first."""
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= self._max_series:
                return ()
            series = self._series[key] = _Series()
        last = series.tail or (series.kept[-1] if series.kept else None)
        if last is not None and t == last[0]:
            return series.points()
        if last is not None and t < last[0]:
            series.kept.clear()
            series.step, series.tail = 0.0, None
        point = (t, int(used_bytes))
        while series.kept and series.kept[0][0] < t - self._max_age:
            del series.kept[0]
        if len(series.kept) >= self._max_points:
            series.kept[:] = series.kept[::2]
            series.step = series.kept[1][0] - series.kept[0][0]
        if series.kept and t - series.kept[-1][0] < series.step:
            series.tail = point
        else:
            series.kept.append(point)
            series.tail = None
        return series.points()

    def forget_all_but(self, live: Iterable[SeriesKey]) -> None:
        keep = set(live)
        for key in [k for k in self._series if k not in keep]:
            del self._series[key]
