"""The node's GPUNodeReport from a Snapshot (pure), and the test for a material change.

The report's names, shape and typed value are defined once in `gpu_auditor.base.nodereport`
(the operator reads it with the same module); this builds that value from what one sampling
pass saw and hands it to the shared writer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from gpu_auditor.base.nodereport import (
    MAX_PIDS,
    MAX_REPORT_SERIES_POINTS,
    MAX_SERIES_POINTS,
    Finding,
    Gpu,
    NodeReport,
    PodEntry,
    ReportBody,
    SpecBody,
    to_body,
    to_spec,
)
from node_agent.history import thin
from node_agent.model import Allocated, ContainerUsage, GpuUsage, Snapshot

# A pod's (or GPU's) bytes changed materially when it moved by more than both of these.
MATERIAL_BYTES = 256 * 2**20
MATERIAL_RATIO = 0.10
MAX_PIDS_PER_ENTRY = MAX_PIDS
"""A container's pids in the report, lowest first: a tenant decides how many processes it runs."""
SERIES_NEW_HIGH_BYTES = 256 * 2**20
"""A container whose bytes top everything its last written series showed by this much makes
the report worth a write, whatever the 10 % rule says: a slow leak on a big job must reach the
operator before the job dies. Smaller rises cannot make a leak (leak.LEAK_MIN_GROWTH_BYTES)."""
MIN_SHARED_SERIES_POINTS = 8
"""Points each series keeps at least when a report has more series points than it may carry."""


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _pod_entry(c: ContainerUsage, points: int) -> PodEntry:
    assert c.pod is not None
    growth = c.growth_bytes_per_second
    return PodEntry(
        namespace=c.pod.namespace, pod=c.pod.pod, uid=c.pod.pod_uid, container=c.pod.container,
        allocated=c.allocated if c.allocated is not Allocated.HOST else Allocated.UNKNOWN,
        bytes=c.used_bytes, pids=tuple(c.pids[:MAX_PIDS_PER_ENTRY]),
        growth_bytes_per_second=round(growth, 3) if growth is not None else None,
        memory_series=_wire_series(thin(c.memory_series, points)),
    )


def _wire_series(points: tuple[tuple[float, int], ...]) -> tuple[tuple[float, int], ...]:
    """Times to the millisecond, still strictly increasing (the reader drops a series that is
    not): a point that rounds onto its predecessor's time is left out."""
    out: list[tuple[float, int]] = []
    for t, b in points:
        rounded = round(t, 3)
        if not out or rounded > out[-1][0]:
            out.append((rounded, b))
    return tuple(out)


def series_points(usages: tuple[GpuUsage, ...]) -> dict[int, int]:
    """How many series points each pod container (by ``id``) may carry in the report: all (at
    most MAX_SERIES_POINTS) while the report stays within MAX_REPORT_SERIES_POINTS; else an
    equal share; if a share would be under MIN_SHARED_SERIES_POINTS, that many for the
    containers holding the most memory and none for the rest."""
    entries = [c for u in usages for c in u.containers if c.pod is not None]
    wanted = {id(c): min(len(c.memory_series), MAX_SERIES_POINTS) for c in entries}
    if sum(wanted.values()) <= MAX_REPORT_SERIES_POINTS:
        return wanted
    share = MAX_REPORT_SERIES_POINTS // max(1, sum(1 for n in wanted.values() if n))
    if share >= MIN_SHARED_SERIES_POINTS:
        return {k: min(n, share) for k, n in wanted.items()}
    ranked = sorted((c for c in entries if wanted[id(c)]),
                    key=lambda c: (-c.used_bytes, c.pod.key if c.pod else ""))
    kept = MAX_REPORT_SERIES_POINTS // MIN_SHARED_SERIES_POINTS
    chosen = {id(c) for c in ranked[:kept]}
    return {k: min(n, MIN_SHARED_SERIES_POINTS) if k in chosen else 0
            for k, n in wanted.items()}


def _gpu(u: GpuUsage, points: dict[int, int]) -> Gpu:
    g = u.gpu
    pods = sorted((_pod_entry(c, points.get(id(c), 0)) for c in u.containers
                   if c.pod is not None),
                  key=lambda p: (p.namespace, p.pod, p.uid, p.container))
    return Gpu(uuid=g.uuid, index=g.index, model=g.model, total_bytes=g.total_bytes,
               used_bytes=g.used_bytes, free_bytes=g.free_bytes, pods=tuple(pods))


def report_of(s: Snapshot) -> NodeReport:
    """The node's report: host processes are not listed (no pod)."""
    points = series_points(s.gpus)
    return NodeReport(
        node=s.node,
        generated_at=rfc3339(s.taken_at),
        sharing_strategy=s.strategy.kind,
        replicas=s.strategy.replicas,
        nvml_up=s.nvml_up,
        kubelet_up=s.kubelet_up,
        gpus=tuple(_gpu(u, points)
                   for u in sorted(s.gpus, key=lambda u: (u.gpu.index, u.gpu.gpu))),
        findings=tuple(Finding(kind=f.kind, gpu_uuid=f.gpu_uuid, pods=f.pods, message=f.message)
                       for f in s.findings),
    )


def build_spec(s: Snapshot) -> SpecBody:
    """The `spec` of the node's GPUNodeReport."""
    return to_spec(report_of(s))


def build_body(spec: SpecBody) -> ReportBody:
    """A whole GPUNodeReport object named after the node."""
    return to_body(spec)


def _essence(spec: Mapping[str, Any]) -> Any:
    """Everything but the figures that move all the time (times, bytes, rates, messages)."""
    gpus = [
        (g["uuid"], g["index"], g["model"], g["memoryTotalBytes"],
         tuple((p["namespace"], p["pod"], p["podUID"], p["container"], p["allocated"])
               for p in g["pods"]))
        for g in spec.get("gpus", [])
    ]
    findings = [(f["kind"], f["gpuUUID"], tuple(f["pods"])) for f in spec.get("findings", [])]
    return (spec.get("nodeName"), spec.get("sharingStrategy"), spec.get("replicas"),
            spec.get("nvmlUp"), spec.get("kubeletUp"), gpus, findings)


def _moved(old: int, new: int) -> bool:
    delta = abs(new - old)
    return delta > MATERIAL_BYTES and delta > MATERIAL_RATIO * max(old, 1)


def _new_high(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The container's bytes top the highest point of its last written entry by
    SERIES_NEW_HIGH_BYTES (a rise the written series does not show yet)."""
    written = old.get("memorySeries")
    highest = max([old["bytes"], *(written or {}).get("bytes", [])])
    return bool(new["bytes"] - highest >= SERIES_NEW_HIGH_BYTES)


def material_change(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """True when the report says something new: other GPUs, pods, allocations, findings or
    health, a GPU's / pod's bytes moved by more than 256 MiB and 10 %, or a pod reached a new
    high 256 MiB above its written series (a leak the operator should see)."""
    if old is None or _essence(old) != _essence(new):
        return True
    for g_old, g_new in zip(old["gpus"], new["gpus"], strict=True):
        if _moved(g_old["memoryUsedBytes"], g_new["memoryUsedBytes"]):
            return True
        for p_old, p_new in zip(g_old["pods"], g_new["pods"], strict=True):
            if _moved(p_old["bytes"], p_new["bytes"]) or _new_high(p_old, p_new):
                return True
    return False
