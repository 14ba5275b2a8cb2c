"""Bounded histories of GPU memory, the agent's leak evidence: each process's growth rate
(``History``) and each container's memory series per GPU (``MemorySeriesBook``).

``History`` is keyed by (pid, start time, GPU UUID) so a reused pid starts a fresh history. At
most ``max_samples`` points per process and ``max_processes`` processes; processes not seen in a
pass are forgotten.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

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


class MemorySeriesBook:
    """Each container's GPU memory over its life, per GPU: the report's ``memorySeries``.

    At most ``max_points`` points a series. When a series is full, every other point is dropped,
    the newest kept: the series then spans the container's whole life (up to ``max_age_seconds``)
    at twice the step, while new points keep arriving at the sampling interval. A leak is a rise
    over minutes or hours, so the older points matter as much as the newest. A point whose time
    is not after the last one's starts the series afresh (the wall clock was stepped back); a
    point at the same time is ignored. At most ``max_series`` series; those not seen in a pass
    are forgotten (`forget_all_but`).
    """

    def __init__(self, max_points: int = 32, max_age_seconds: float = 1800.0,
                 max_series: int = 8192) -> None:
        if max_points < 2 or max_age_seconds <= 0:
            raise ValueError("need max_points >= 2 and max_age_seconds > 0")
        self._max_points = max_points
        self._max_age = max_age_seconds
        self._max_series = max_series
        self._series: dict[SeriesKey, list[Point]] = {}

    def __len__(self) -> int:
        return len(self._series)

    def observe(self, key: SeriesKey, t: float, used_bytes: int) -> tuple[Point, ...]:
        """Record the container's bytes at ``t`` (seconds); its series, oldest first."""
        points = self._series.get(key)
        if points is None:
            if len(self._series) >= self._max_series:
                return ()
            points = self._series[key] = []
        if points and t == points[-1][0]:
            return tuple(points)
        if points and t < points[-1][0]:
            points.clear()
        while points and points[0][0] < t - self._max_age:
            del points[0]
        if len(points) >= self._max_points:
            points[:] = points[len(points) - 1 :: -2][::-1]
        points.append((t, int(used_bytes)))
        return tuple(points)

    def forget_all_but(self, live: Iterable[SeriesKey]) -> None:
        keep = set(live)
        for key in [k for k in self._series if k not in keep]:
            del self._series[key]
