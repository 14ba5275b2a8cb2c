"""Each container's memory series: kept bounded by the agent, carried in the report, and a new
high making the report worth a write."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import pytest
from agent_helpers import (
    CID_A,
    CID_B,
    GIB,
    GPU0,
    UID_A,
    UID_B,
    fake_pods,
    gpu,
    pod_cgroup,
    write_proc,
)

from gpu_auditor.base.nodereport import parse_report
from node_agent.history import MemorySeriesBook, thin
from node_agent.model import Allocated, ContainerUsage, GpuUsage, NodeSharing, PodRef, Snapshot
from node_agent.procfs import ProcReader
from node_agent.report import build_body, build_spec, material_change, series_points
from node_agent.sampler import Sampler

pytestmark = pytest.mark.unit

KEY = ("uid-a", "main", "GPU-0")


# -- the store ----------------------------------------------------------------------------------


def test_a_series_keeps_every_point_until_it_is_full() -> None:
    book = MemorySeriesBook(max_points=8)
    for t in range(8):
        series = book.observe(KEY, float(t), t * GIB)
    assert series == tuple((float(t), t * GIB) for t in range(8))


def test_a_full_series_halves_its_points_keeping_the_oldest_and_the_newest() -> None:
    book = MemorySeriesBook(max_points=8)
    seen = [book.observe(KEY, float(t), t) for t in range(10)]
    # 0..7 fill it; at 8 every other point stays (spacing 2); 9 is shown as the newest
    assert [t for t, _ in seen[8]] == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert [t for t, _ in seen[9]] == [0.0, 2.0, 4.0, 6.0, 8.0, 9.0]


def test_a_long_life_is_spanned_evenly_within_the_point_limit() -> None:
    book = MemorySeriesBook(max_points=32)
    for t in range(1000):
        series = book.observe(KEY, float(t), t)
    times = [t for t, _ in series]
    assert len(times) <= 32 and times[0] == 0.0 and times[-1] == 999.0
    steps = {b - a for a, b in itertools.pairwise(times[:-1])}
    assert steps == {64.0}  # one spacing for all but the newest point


def test_points_older_than_the_window_are_dropped() -> None:
    book = MemorySeriesBook(max_points=32, max_age_seconds=100)
    for t in (0.0, 50.0, 120.0, 130.0):
        series = book.observe(KEY, t, 1)
    assert [t for t, _ in series] == [50.0, 120.0, 130.0]


def test_a_clock_stepped_back_starts_the_series_afresh_and_a_repeated_time_is_ignored() -> None:
    book = MemorySeriesBook()
    book.observe(KEY, 100.0, 1)
    assert book.observe(KEY, 100.0, 2) == ((100.0, 1),)
    assert book.observe(KEY, 90.0, 3) == ((90.0, 3),)


def test_the_store_is_bounded_and_forgets_containers_not_seen() -> None:
    book = MemorySeriesBook(max_series=2)
    book.observe(("a", "main", "g"), 1.0, 1)
    book.observe(("b", "main", "g"), 1.0, 1)
    assert book.observe(("c", "main", "g"), 1.0, 1) == ()
    book.forget_all_but([("b", "main", "g")])
    assert len(book) == 1
    assert book.observe(("a", "main", "g"), 2.0, 5) == ((2.0, 5),)  # a fresh series


def test_thin_spreads_the_kept_points_and_keeps_the_newest() -> None:
    points = [(float(t), t) for t in range(10)]
    assert [t for t, _ in thin(points, 4)] == [0.0, 3.0, 6.0, 9.0]
    assert thin(points, 1) == ((9.0, 9),) and thin(points, 0) == ()
    assert thin(points, 20) == tuple(points)


# -- the sampler and the report -----------------------------------------------------------------


def test_each_pod_container_gets_its_series_in_the_report(proc_root: Path) -> None:
    write_proc(proc_root, 1, cgroup=pod_cgroup(UID_A, CID_A))
    write_proc(proc_root, 2, cgroup=pod_cgroup(UID_B, CID_B))
    write_proc(proc_root, 3)  # a host process: no entry, no series
    clock = iter([1000.0, 1010.0, 1020.0])
    source = _Gpus()
    sampler = Sampler("node-1", source, ProcReader(proc_root), fake_pods(),
                      wall_clock=lambda: next(clock))
    for used in (10, 11, 13):
        source.now = gpu(0, GPU0, [(1, used * GIB), (2, 2 * GIB), (3, GIB)])
        spec = build_spec(sampler.sample())
    a, b = spec["gpus"][0]["pods"]
    assert a["memorySeries"] == {"times": [1000.0, 1010.0, 1020.0],
                                 "bytes": [10 * GIB, 11 * GIB, 13 * GIB]}
    assert b["memorySeries"]["bytes"] == [2 * GIB] * 3
    report = parse_report(build_body(spec))
    assert not report.dropped
    assert [e.memory_series[-1] for _, e in report.pod_entries()] == [(1020.0, 13 * GIB),
                                                                      (1020.0, 2 * GIB)]


class _Gpus:
    now = gpu(0, GPU0)

    def sample(self):  # type: ignore[no-untyped-def]
        from node_agent.model import NvmlReading

        return NvmlReading(up=True, gpus=(self.now,))


def _snapshot(n_containers: int, points: int) -> Snapshot:
    """Containers p0000.. (p<i> holds i+1 GiB), 250 to a GPU (a GPU lists 256 pods at most)."""
    series = tuple((1000.0 + i, GIB) for i in range(points))
    containers = [
        ContainerUsage(pod=PodRef("ml", f"p{i:04d}", f"uid-{i}", "main"),
                       allocated=Allocated.TRUE, used_bytes=(i + 1) * GIB, pids=(i,),
                       growth_bytes_per_second=None, memory_series=series)
        for i in range(n_containers)]
    gpus = tuple(GpuUsage(gpu(g, f"GPU-{g}"), (), tuple(containers[250 * g: 250 * (g + 1)]))
                 for g in range((n_containers + 249) // 250))
    return Snapshot(node="node-1", taken_at=2000.0, duration_seconds=0.0, nvml_up=True,
                    kubelet_up=True, strategy=NodeSharing(), gpus=gpus, findings=(), errors={})


def _pods(spec: dict) -> list[dict]:
    return [p for g in spec["gpus"] for p in g["pods"]]


def test_a_report_within_the_budget_carries_every_point() -> None:
    spec = build_spec(_snapshot(256, 32))
    assert [len(p["memorySeries"]["times"]) for p in _pods(spec)] == [32] * 256


def test_past_the_budget_each_series_gets_an_equal_share() -> None:
    spec = build_spec(_snapshot(512, 32))
    lengths = {len(p["memorySeries"]["times"]) for p in _pods(spec)}
    assert lengths == {16}
    assert not parse_report(build_body(spec)).dropped


def test_past_a_share_of_8_only_the_largest_containers_keep_a_series() -> None:
    snapshot = _snapshot(1100, 32)
    counts = series_points(snapshot.gpus)
    assert sum(counts.values()) == 8192
    spec = build_spec(snapshot)
    with_series = sorted(int(p["pod"][1:]) for p in _pods(spec) if "memorySeries" in p)
    assert with_series == list(range(1100 - 1024, 1100))  # the 1024 holding the most memory
    assert not parse_report(build_body(spec)).dropped


def test_points_that_round_onto_one_millisecond_are_written_once() -> None:
    snapshot = _snapshot(1, 0)
    usage = snapshot.gpus[0]
    c = usage.containers[0]
    close = ((1000.0001, GIB), (1000.0002, 2 * GIB), (1000.5, 3 * GIB))
    from dataclasses import replace

    snapshot = replace(snapshot, gpus=(replace(usage, containers=(
        replace(c, memory_series=close),)),))
    entry = build_spec(snapshot)["gpus"][0]["pods"][0]
    assert entry["memorySeries"] == {"times": [1000.0, 1000.5], "bytes": [GIB, 3 * GIB]}


def test_a_new_high_256_mib_above_the_written_series_is_material() -> None:
    old = build_spec(_snapshot(1, 5))  # p0000 holds 1 GiB, its series 1 GiB flat
    new = copy.deepcopy(old)
    new["gpus"][0]["pods"][0]["bytes"] = GIB + 256 * 2**20
    assert material_change(old, new)  # 25 % but only 256 MiB: the old rule wanted more
    new["gpus"][0]["pods"][0]["bytes"] = GIB + 255 * 2**20
    assert not material_change(old, new)


def test_a_rise_that_only_returns_to_an_earlier_high_is_not_material() -> None:
    old = build_spec(_snapshot(1, 5))
    old["gpus"][0]["pods"][0]["memorySeries"]["bytes"][1] = 40 * GIB  # was at 40 GiB before
    old["gpus"][0]["pods"][0]["bytes"] = 39 * GIB
    new = copy.deepcopy(old)
    new["gpus"][0]["pods"][0]["bytes"] = 40 * GIB
    assert not material_change(old, new)
