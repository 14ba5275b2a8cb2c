"""A failed container's memory series from the node reports, as samples for the diagnosis (pure).

The agent publishes each pod container's GPU memory over its life (`pods[].memorySeries`,
validated by `base.nodereport`). The process of a pod that ran out of memory is gone from the
report by the time the operator looks, so the series is remembered (`SeriesMemory`, bounded,
by node, pod UID and container) from the last report that listed it.

A series is evidence only about its own node: it is looked up under the pod's own node and UID,
so a report of another node naming the pod (any agent's token can write any report) neither is
used nor displaces the series of the pod's node. Of the series, only the
points of the failed run are used: none after the termination (`finishedAt`, the kubelet's
clock on the same node, whole seconds) nor before the run started (`startedAt`); points of the
next run, after a restart, would otherwise read as memory falling to nothing.

No kopf, no metrics: the GPU demo (evaluation/gpu/series_demo.py) runs this without the operator.
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from gpu_auditor.base.nodereport import NodeReport
from gpu_auditor.diagnosis import MemorySample

CLOCK_SLACK_SECONDS: Final = 1.0
"""`startedAt`/`finishedAt` are whole seconds: a point within this of either still counts."""
DEFAULT_CAPACITY: Final = 20_000
"""(node, pod UID, container) series remembered at most (32 points each: about 1.5 KiB)."""


@dataclass(frozen=True)
class SeenSeries:
    """A container's series as the last report that listed it showed it."""

    node: str
    gpu_uuid: str
    bytes: int
    points: tuple[tuple[float, int], ...]


def series_of(report: NodeReport) -> dict[tuple[str, str], SeenSeries]:
    """(pod UID, container) → its series in the report, from the GPU where the container holds
    the most memory (a multi-GPU container: the same GPU the node evidence describes). Entries
    without a container name or a series are left out."""
    found: dict[tuple[str, str], SeenSeries] = {}
    for gpu, entry in report.pod_entries():
        if not entry.container or not entry.memory_series:
            continue
        key = (entry.uid, entry.container)
        seen = SeenSeries(report.node, gpu.uuid, entry.bytes, entry.memory_series)
        if key not in found or seen.bytes > found[key].bytes:
            found[key] = seen
    return found


def samples_for(
    seen: SeenSeries | None, node: str, *, started_at: dt.datetime | None,
    finished_at: dt.datetime | None, previous: bool,
) -> tuple[MemorySample, ...]:
    """The series' points of the failed run as diagnosis samples (seconds from the first), or
    none: no series, a series from another node, or a restarted container's run whose end is
    not known (its series may hold the next run)."""
    if seen is None or not node or seen.node != node:
        return ()
    if finished_at is None and previous:
        return ()
    end = finished_at.timestamp() + CLOCK_SLACK_SECONDS if finished_at else None
    start = started_at.timestamp() - CLOCK_SLACK_SECONDS if started_at else None
    points = [(t, b) for t, b in seen.points
              if (end is None or t <= end) and (start is None or t >= start)]
    if not points:
        return ()
    t0 = points[0][0]
    return tuple(MemorySample(t_seconds=round(t - t0, 3), bytes=b) for t, b in points)


class SeriesMemory:
    """The last series each node's report showed of each (pod UID, container), bounded (the
    least recently seen go first)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._capacity = capacity
        self._items: OrderedDict[tuple[str, str, str], SeenSeries] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def update(self, report: NodeReport) -> None:
        for (uid, container), seen in series_of(report).items():
            key = (report.node, uid, container)
            self._items[key] = seen
            self._items.move_to_end(key)
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)

    def get(self, node: str, uid: str, container: str) -> SeenSeries | None:
        return self._items.get((node, uid, container))
