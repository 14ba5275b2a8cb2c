"""A short, bounded history of each process's GPU memory, giving a growth rate (leak evidence).

Keyed by (pid, start time, GPU UUID) so a reused pid starts a fresh history. At most
``max_samples`` points per process and ``max_processes`` processes; processes not seen in a pass
are forgotten.
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
