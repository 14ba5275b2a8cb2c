"""The report's `memorySeries`: written by the agent, read back whole or not at all.

A report is hostile input (any holder of an agent's token can write any node's report): a series
of the wrong shape, with times that do not rise, non-finite numbers or too many points is dropped
and counted, and the entry itself is kept.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from gpu_auditor.base.contract import Allocated
from gpu_auditor.base.nodereport import (
    Gpu,
    NodeReport,
    PodEntry,
    parse_report,
    to_body,
    to_spec,
)

pytestmark = pytest.mark.unit

GIB = 2**30
T0 = 1_764_560_000.0
EMPTY: dict[str, Any] = {"index": 0, "total_bytes": 0, "used_bytes": 0, "free_bytes": 0}
"""What the writer puts for a GPU's unknown figures (so the value round-trips)."""


def _body(*series: Any) -> dict[str, Any]:
    pods = []
    for i, s in enumerate(series):
        entry: dict[str, Any] = {"namespace": "ml", "pod": f"p{i}", "podUID": f"uid-{i}",
                                 "container": "main", "allocated": "true", "bytes": GIB,
                                 "pids": [1]}
        if s is not None:
            entry["memorySeries"] = s
        pods.append(entry)
    return {"metadata": {"name": "gpu-1"},
            "spec": {"nodeName": "gpu-1", "gpus": [{"uuid": "GPU-a", "index": 0,
                                                    "pods": pods}]}}


def _series(n: int, start: float = T0, step: float = 10.0) -> dict[str, list[Any]]:
    return {"times": [start + step * i for i in range(n)],
            "bytes": [GIB * (i + 1) for i in range(n)]}


def test_a_series_round_trips_through_the_writer_and_the_reader() -> None:
    points = tuple((T0 + 10.5 * i, GIB * i) for i in range(32))
    report = NodeReport(node="gpu-1", gpus=(Gpu(uuid="GPU-a", **EMPTY, pods=(PodEntry(
        namespace="ml", pod="p", uid="uid-p", container="main", allocated=Allocated.TRUE,
        bytes=GIB, memory_series=points),)),))
    body = to_body(to_spec(report))
    assert body["spec"]["gpus"][0]["pods"][0]["memorySeries"]["times"][:2] == [T0, T0 + 10.5]
    assert parse_report(body) == report


def test_an_entry_without_a_series_is_written_without_the_key() -> None:
    report = NodeReport(node="gpu-1", gpus=(Gpu(uuid="GPU-a", **EMPTY, pods=(PodEntry(
        namespace="ml", pod="p", uid="uid-p", container="main", allocated=Allocated.TRUE,
        bytes=GIB),)),))
    assert "memorySeries" not in to_spec(report)["gpus"][0]["pods"][0]
    assert parse_report(to_body(to_spec(report))) == report


def test_32_points_are_read_and_33_are_not() -> None:
    report = parse_report(_body(_series(32), _series(33)))
    first, second = (e for _, e in report.pod_entries())
    assert len(first.memory_series) == 32
    assert second.memory_series == () and second.bytes == GIB  # the entry itself is kept
    assert report.dropped["malformed-series"] == 1


@pytest.mark.parametrize("series", [
    "12,13",
    [[T0, GIB]],
    {"times": [T0, T0 + 1], "bytes": [GIB]},
    {"times": [T0 + 10, T0], "bytes": [GIB, GIB]},
    {"times": [T0, T0], "bytes": [GIB, GIB]},
    {"times": [T0, math.nan], "bytes": [GIB, GIB]},
    {"times": [T0, math.inf], "bytes": [GIB, GIB]},
    {"times": [-1.0, T0], "bytes": [GIB, GIB]},
    {"times": [T0, 2.0**34], "bytes": [GIB, GIB]},
    {"times": [T0, True], "bytes": [GIB, GIB]},
    {"times": [T0, "later"], "bytes": [GIB, GIB]},
    {"times": [T0, T0 + 1], "bytes": [GIB, -1]},
    {"times": [T0, T0 + 1], "bytes": [GIB, 1.5]},
    {"times": [T0, T0 + 1], "bytes": [GIB, 2**63]},
    {"times": [T0, T0 + 1], "bytes": [GIB, None]},
    {"times": None, "bytes": None},
], ids=["string", "pairs", "lengths-differ", "time-falls", "time-repeats", "nan", "inf",
        "negative-time", "year-2514", "bool-time", "string-time", "negative-bytes",
        "float-bytes", "bytes-over-int64", "null-bytes", "null-lists"])
def test_a_malformed_series_is_dropped_whole_and_counted(series: Any) -> None:
    report = parse_report(_body(series))
    (_, entry), = report.pod_entries()
    assert entry.memory_series == ()
    assert (entry.pod, entry.bytes) == ("p0", GIB)
    assert report.dropped == {"malformed-series": 1}


def test_a_report_carries_at_most_8192_series_points() -> None:
    # 256 entries of 32 points fill the budget exactly; the 257th series is left out
    gpus = []
    for g in range(2):
        pods = [{"namespace": "ml", "pod": f"p{g}-{i}", "podUID": f"uid-{g}-{i}",
                 "container": "main", "allocated": "true", "bytes": GIB,
                 "memorySeries": _series(32)} for i in range(130 if g == 0 else 127)]
        gpus.append({"uuid": f"GPU-{g}", "index": g, "pods": pods})
    report = parse_report({"metadata": {"name": "gpu-1"},
                           "spec": {"nodeName": "gpu-1", "gpus": gpus}})
    kept = [e for _, e in report.pod_entries() if e.memory_series]
    assert len(kept) == 256 and sum(len(e.memory_series) for e in kept) == 8192
    assert report.dropped == {"too-many": 1}
    assert len(list(report.pod_entries())) == 257
