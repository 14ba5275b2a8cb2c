"""The node's memory series of a failed container: the points of the failed run only, of this
node and of the GPU where it held the most; remembered within a bound."""

from __future__ import annotations

import copy
import datetime as dt

import pytest

from gpu_auditor.base.nodereport import parse_report
from gpu_auditor.controller.memoryseries import SeenSeries, SeriesMemory, samples_for, series_of

from .controller_helpers import END, FINISHED, GIB, flat, report_with, rising

pytestmark = pytest.mark.unit


def _seen(*points: tuple[float, int], node: str = "gpu-1") -> SeenSeries:
    return SeenSeries(node=node, gpu_uuid="GPU-h200", bytes=GIB, points=points)


def test_only_points_of_the_failed_run_become_samples_in_seconds_from_the_first() -> None:
    seen = _seen((END - 100, 1), (END - 60, 2), (END - 30, 3), (END + 0.5, 4), (END + 1.5, 5))
    samples = samples_for(seen, "gpu-1", started_at=FINISHED - dt.timedelta(seconds=59),
                          finished_at=FINISHED, previous=False)
    # before the start (END-60 is within the 1 s slack of END-59; END-100 is not), after the end
    assert [(s.t_seconds, s.bytes) for s in samples] == [(0.0, 2), (30.0, 3), (60.5, 4)]


def test_a_series_from_another_node_is_no_evidence() -> None:
    seen = _seen((END - 10, 1), (END - 5, 2), node="gpu-9")
    assert samples_for(seen, "gpu-1", started_at=None, finished_at=FINISHED,
                       previous=False) == ()


def test_a_restarted_containers_run_without_an_end_time_gets_no_samples() -> None:
    seen = _seen((END - 10, 1), (END - 5, 2))
    assert samples_for(seen, "gpu-1", started_at=None, finished_at=None, previous=True) == ()
    assert len(samples_for(seen, "gpu-1", started_at=None, finished_at=None,
                           previous=False)) == 2


def test_a_multi_gpu_container_gives_the_series_of_the_gpu_where_it_holds_the_most() -> None:
    raw = report_with(rising())
    small = copy.deepcopy(raw["spec"]["gpus"][0])
    small.update(uuid="GPU-other", index=1)
    small["pods"][0].update(bytes=GIB, memorySeries=flat())
    raw["spec"]["gpus"].append(small)
    found = series_of(parse_report(raw))
    assert found[("uid-1", "main")].gpu_uuid == "GPU-h200"


def test_the_remembered_series_are_bounded() -> None:
    memory = SeriesMemory(capacity=2)
    for uid in ("uid-a", "uid-b", "uid-c"):
        memory.update(parse_report(report_with(rising(), uid=uid)))
    assert len(memory) == 2 and memory.get("gpu-1", "uid-a", "main") is None
    assert memory.get("gpu-1", "uid-c", "main") is not None
