"""The agent's metric families, built afresh from the latest Snapshot each time they are collected.

Scrapes never call NVML or read ``/proc``; they only read the snapshot the sampling thread
left. Label sets follow docs/contracts.md exactly; docs/metrics.md explains each metric.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields

from gpu_auditor.base.contract import Subsystem, metric_name
from node_agent.exposition import COUNTER, GAUGE, Family
from node_agent.model import ERROR_SOURCES, PodRef, ProcessUsage, Snapshot
from node_agent.series import (
    CAPPED_METRICS,
    CONTAINER_METRIC,
    DEFAULT_MAX_SERIES_PER_GPU,
    FINDING_METRIC,
    PROCESS_METRIC,
    finding_series,
    memory_series,
)

log = logging.getLogger(__name__)

AGENT = Subsystem.AGENT
CONTAINER_LABELS = ["node", "gpu", "uuid", "namespace", "pod", "container", "pod_uid",
                    "allocated"]
PROCESS_LABELS = [*CONTAINER_LABELS, "pid", "process"]
GPU_LABELS = ["node", "gpu", "uuid", "model"]
FINDING_LABELS = ["node", "gpu", "uuid", "namespace", "pod", "kind"]


def _gauge(name: str, doc: str, labels: list[str], subsystem: Subsystem | None = None) -> Family:
    return Family(metric_name(name, subsystem), doc, GAUGE, tuple(labels))


def _counter(name: str, doc: str, labels: list[str], subsystem: Subsystem | None = None) -> Family:
    return Family(metric_name(name, subsystem) + "_total", doc, COUNTER, tuple(labels))


@dataclass(frozen=True, slots=True)
class _Families:
    container: Family
    process: Family | None
    total: Family
    used: Family
    free: Family
    reserved: Family
    pods: Family
    finding: Family
    nvml_up: Family
    kubelet_up: Family
    duration: Family
    errors: Family
    dropped: Family

    @classmethod
    def new(cls, process_labels: bool) -> _Families:
        return cls(
            container=_gauge("container_gpu_memory_bytes", "GPU memory used by a container's "
                             "processes, summed per GPU, pod and container", CONTAINER_LABELS),
            process=_gauge("process_gpu_memory_bytes", "GPU memory used by one process "
                           "(--process-labels)", PROCESS_LABELS) if process_labels else None,
            total=_gauge("gpu_memory_total_bytes", "Total GPU memory", GPU_LABELS),
            used=_gauge("gpu_memory_used_bytes", "Used GPU memory (NVML memory v2: without "
                        "driver-reserved memory)", GPU_LABELS),
            free=_gauge("gpu_memory_free_bytes", "Free GPU memory", GPU_LABELS),
            reserved=_gauge("gpu_memory_reserved_bytes", "GPU memory reserved by the driver",
                            GPU_LABELS),
            pods=_gauge("gpu_pods", "Pods with a process on the GPU", ["node", "gpu", "uuid"]),
            finding=_gauge("sharing_finding", "1 per pod in a sharing finding", FINDING_LABELS),
            nvml_up=_gauge("nvml_up", "1 when NVML answered in the last pass", ["node"], AGENT),
            kubelet_up=_gauge("kubelet_up", "1 when the kubelet pod-resources API answered in "
                              "the last pass", ["node"], AGENT),
            duration=_gauge("collect_duration_seconds", "Duration of the last sampling pass",
                            ["node"], AGENT),
            errors=_counter("errors", "Errors by source since the agent started",
                            ["node", "source"], AGENT),
            dropped=_counter("series_dropped", "Series left out of a metric by "
                             "--max-series-per-gpu, summed over sampling passes",
                             ["node", "metric"], AGENT),
        )

    def all(self) -> list[Family]:
        found = (getattr(self, f.name) for f in fields(self))
        return [family for family in found if family is not None]


def _pod_order(pod: PodRef | None) -> list[str]:
    """namespace, pod, container, pod_uid: the order of CONTAINER_LABELS."""
    if pod is None:
        return ["", "", "", ""]
    return [pod.namespace, pod.pod, pod.container, pod.pod_uid]


class AgentCollector:
    """Families from the latest snapshot. The per-pod families are capped per GPU
    (``max_series_per_gpu``, see series.py); what each snapshot left out is added to
    ``gpu_auditor_agent_series_dropped_total`` once, however often that snapshot is collected."""

    def __init__(self, latest: Callable[[], Snapshot | None], node: str,
                 process_labels: bool = False,
                 max_series_per_gpu: int = DEFAULT_MAX_SERIES_PER_GPU) -> None:
        self._latest = latest
        self._node = node
        self._process_labels = process_labels
        self._cap = max_series_per_gpu
        self._lock = threading.Lock()
        self._dropped = dict.fromkeys(CAPPED_METRICS, 0)
        self._counted: Snapshot | None = None

    def describe(self) -> list[Family]:
        """The families without samples."""
        return _Families.new(self._process_labels).all()

    def collect(self) -> list[Family]:
        f = _Families.new(self._process_labels)
        try:
            snapshot = self._latest()
            if snapshot is not None:
                self._fill(f, snapshot)
        except Exception:  # never crash the scrape: serve what was filled
            log.exception("building metrics from the snapshot failed")
        return f.all()

    def _fill(self, f: _Families, s: Snapshot) -> None:
        node = self._node
        dropped = dict.fromkeys(CAPPED_METRICS, 0)
        for u in s.gpus:
            g = u.gpu
            gl = [node, g.gpu, g.uuid, g.model]
            f.total.add(gl, g.total_bytes)
            f.used.add(gl, g.used_bytes)
            f.free.add(gl, g.free_bytes)
            f.reserved.add(gl, g.reserved_bytes)
            f.pods.add([node, g.gpu, g.uuid], len(u.pod_keys))
            shown, left_out = memory_series(u, False, self._cap)
            dropped[CONTAINER_METRIC] += left_out
            for item in shown:
                f.container.add(
                    [node, g.gpu, g.uuid, *_pod_order(item.pod), item.allocated.value],
                    item.used_bytes or 0)
            if f.process is not None:
                shown, left_out = memory_series(u, True, self._cap)
                dropped[PROCESS_METRIC] += left_out
                for item in shown:
                    assert isinstance(item, ProcessUsage)
                    f.process.add(
                        [node, g.gpu, g.uuid, *_pod_order(item.pod), item.allocated.value,
                         str(item.pid), item.comm], item.used_bytes or 0)
            findings, left_out = finding_series(u, s.findings, self._cap)
            dropped[FINDING_METRIC] += left_out
            for fs in findings:
                f.finding.add([node, fs.finding.gpu, fs.finding.gpu_uuid, fs.namespace,
                                      fs.pod, fs.finding.kind], 1)
        f.nvml_up.add([node], 1 if s.nvml_up else 0)
        f.kubelet_up.add([node], 1 if s.kubelet_up else 0)
        f.duration.add([node], s.duration_seconds)
        for source in ERROR_SOURCES:
            f.errors.add([node, source], s.errors.get(source, 0))
        with self._lock:
            if self._counted is not s:
                self._counted = s
                for metric, n in dropped.items():
                    self._dropped[metric] += n
            totals = dict(self._dropped)
        for metric, total in totals.items():
            f.dropped.add([node, metric], total)
