"""One sampling pass: GPUs and their processes → pods → findings, as a Snapshot.

The sources are passed in (NVML or the fake, a ProcReader, a pod source), so a test drives a
pass with fakes. A pass never raises because of one bad GPU, pid or socket.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Protocol

from node_agent.history import History, Key, MemorySeriesBook, SeriesKey
from node_agent.model import (
    ERROR_SOURCES,
    Allocated,
    CgroupIdentity,
    ContainerUsage,
    GpuSample,
    GpuUsage,
    NoPod,
    NvmlReading,
    PodRef,
    ProcessUsage,
    ProcInfo,
    Snapshot,
)
from node_agent.pods import PodSource, PodView, allocation_of
from node_agent.sharing import findings

MAX_BYTES = 2**63 - 1  # the report's int64: a sum over thousands of processes stays inside


class GpuSource(Protocol):
    def sample(self) -> NvmlReading: ...


class ProcSource(Protocol):
    errors: int

    def read(self, pid: int) -> ProcInfo | None: ...

    def forget_all_but(self, live: Iterable[int]) -> None: ...


def attribute(info: ProcInfo | None, gpu_uuid: str, view: PodView) -> tuple[PodRef | None,
                                                                            Allocated]:
    """The pod of one process and whether that pod was allocated this GPU."""
    if info is None or info.cgroup is NoPod.UNKNOWN:
        return None, Allocated.UNKNOWN  # vanished, unreadable or ambiguous: unknown pod
    if info.cgroup is NoPod.HOST:
        return None, Allocated.HOST
    pod = view.resolve(info.cgroup)
    return pod, allocation_of(pod, gpu_uuid, view.allocations)


def sum_containers(processes: Iterable[ProcessUsage]) -> tuple[ContainerUsage, ...]:
    """Processes summed per (pod, container, allocated); host and unknown ones per kind."""
    groups: dict[tuple[PodRef | None, Allocated], list[ProcessUsage]] = {}
    for p in processes:
        groups.setdefault((p.pod, p.allocated), []).append(p)
    out: list[ContainerUsage] = []
    for (pod, allocated), procs in groups.items():
        rates = [p.growth_bytes_per_second for p in procs if p.growth_bytes_per_second is not None]
        out.append(ContainerUsage(
            pod=pod,
            allocated=allocated,
            used_bytes=min(MAX_BYTES, sum(p.used_bytes or 0 for p in procs)),
            pids=tuple(sorted(p.pid for p in procs)),
            growth_bytes_per_second=sum(rates) if rates else None,
        ))
    return tuple(out)


class Sampler:
    def __init__(self, node: str, gpus: GpuSource, procs: ProcSource, pods: PodSource,
                 history: History | None = None, *,
                 series: MemorySeriesBook | None = None,
                 wall_clock: Callable[[], float] = time.time,
                 timer: Callable[[], float] = time.perf_counter) -> None:
        self.node = node
        self._gpus = gpus
        self._procs = procs
        self._pods = pods
        self._history = history if history is not None else History()
        self._series = series if series is not None else MemorySeriesBook()
        self._wall_clock = wall_clock
        self._timer = timer
        self.errors: dict[str, int] = dict.fromkeys(ERROR_SOURCES, 0)

    def sample(self) -> Snapshot:
        started = self._timer()
        now = self._wall_clock()
        reading = self._gpus.sample()
        self.errors["nvml"] += reading.errors

        proc_errors_before = self._procs.errors
        infos: dict[int, ProcInfo | None] = {}
        for gpu in reading.gpus:
            for p in gpu.processes:
                if p.pid not in infos:
                    infos[p.pid] = self._procs.read(p.pid)
        self._procs.forget_all_but(infos)
        self.errors["proc"] += self._procs.errors - proc_errors_before

        wanted = {i.cgroup.pod_uid for i in infos.values()
                  if i is not None and isinstance(i.cgroup, CgroupIdentity)}
        view = self._pods.view(wanted)
        for source, n in view.errors.items():
            self.errors[source] = self.errors.get(source, 0) + n

        live: list[Key] = []
        usages = tuple(self._gpu_usage(gpu, infos, view, now, live) for gpu in reading.gpus)
        self._history.forget_all_but(live)
        usages = self._with_series(usages, now)
        return Snapshot(
            node=self.node,
            taken_at=now,
            duration_seconds=self._timer() - started,
            nvml_up=reading.up,
            kubelet_up=view.kubelet_up,
            strategy=view.strategy,
            gpus=usages,
            findings=findings(usages, view.strategy, view.allocations),
            errors=dict(self.errors),
        )

    def _with_series(self, usages: tuple[GpuUsage, ...], now: float) -> tuple[GpuUsage, ...]:
        """Each pod container's memory series on each GPU (the report's ``memorySeries``)."""
        live: list[SeriesKey] = []
        out = []
        for u in usages:
            containers = []
            for c in u.containers:
                if c.pod is not None:
                    key = (c.pod.pod_uid, c.pod.container, u.gpu.uuid)
                    live.append(key)
                    c = replace(c, memory_series=self._series.observe(key, now, c.used_bytes))
                containers.append(c)
            out.append(replace(u, containers=tuple(containers)))
        self._series.forget_all_but(live)
        return tuple(out)

    def _gpu_usage(self, gpu: GpuSample, infos: dict[int, ProcInfo | None], view: PodView,
                   now: float, live: list[Key]) -> GpuUsage:
        processes: list[ProcessUsage] = []
        for p in gpu.processes:
            info = infos.get(p.pid)
            pod, allocated = attribute(info, gpu.uuid, view)
            growth = None
            if info is not None and p.used_bytes is not None:
                key = (p.pid, info.start_time, gpu.uuid)
                live.append(key)
                growth = self._history.observe(key, now, p.used_bytes)
            processes.append(ProcessUsage(
                pid=p.pid,
                comm=info.comm if info is not None else "",
                used_bytes=p.used_bytes,
                pod=pod,
                allocated=allocated,
                growth_bytes_per_second=growth,
            ))
        return GpuUsage(gpu=gpu, processes=tuple(processes),
                        containers=sum_containers(processes))
