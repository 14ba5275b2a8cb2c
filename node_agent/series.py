"""Which per-pod series a scrape shows when a GPU has more than the cap (pure).

Tenants decide how many processes and pods run on a GPU, so the per-pod families
(``gpu_auditor_container_gpu_memory_bytes``, ``gpu_auditor_process_gpu_memory_bytes`` with
``--process-labels``, and ``gpu_auditor_sharing_finding``) are capped per GPU at
``--max-series-per-gpu``: the series of the containers (or processes) holding the most memory
on that GPU are kept, the rest left out and counted. What a
GPU's own series say is not capped: ``gpu_auditor_gpu_pods`` still counts every pod, and the
memory figures come from NVML. The report (``GPUNodeReport``) is not capped here: the operator
needs every pod in it, and the API server bounds the pods of a node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpu_auditor.base.contract import metric_name
from node_agent.model import ContainerUsage, Finding, FindingKind, GpuUsage, PodRef, ProcessUsage

DEFAULT_MAX_SERIES_PER_GPU = 256
CONTAINER_METRIC = metric_name("container_gpu_memory_bytes")
PROCESS_METRIC = metric_name("process_gpu_memory_bytes")
FINDING_METRIC = metric_name("sharing_finding")
CAPPED_METRICS = (CONTAINER_METRIC, PROCESS_METRIC, FINDING_METRIC)
_KIND_ORDER = {FindingKind.UNREQUESTED_GPU_USE: 0, FindingKind.UNINTENDED_SHARING: 1,
               FindingKind.INTENDED_SHARING: 2}


@dataclass(frozen=True, slots=True)
class FindingSeries:
    """One ``gpu_auditor_sharing_finding`` series: a pod (``namespace/pod``, or its UID when
    unnamed) in a finding."""

    finding: Finding
    key: str

    @property
    def namespace(self) -> str:
        return self.key.rpartition("/")[0]

    @property
    def pod(self) -> str:
        return self.key.rpartition("/")[2]


def _pod_sort(pod: PodRef | None) -> tuple[str, str, str, str]:
    return ("", "", "", "") if pod is None else (pod.namespace, pod.pod, pod.container,
                                                 pod.pod_uid)


def memory_series(usage: GpuUsage, per_process: bool,
                  cap: int) -> tuple[Sequence[ContainerUsage | ProcessUsage], int]:
    """The memory series of one GPU to show (largest first) and how many were left out."""
    items: list[ContainerUsage | ProcessUsage]
    if per_process:
        procs = [p for p in usage.processes if p.used_bytes is not None]
        procs.sort(key=lambda p: (-(p.used_bytes or 0), p.pid))
        items = list(procs)
    else:
        containers = sorted(usage.containers, key=lambda c: (-c.used_bytes, _pod_sort(c.pod),
                                                             c.allocated.value))
        items = list(containers)
    return items[:cap], max(0, len(items) - cap)


def finding_series(usage: GpuUsage, findings: Iterable[Finding],
                   cap: int) -> tuple[list[FindingSeries], int]:
    """The finding series of one GPU to show and how many were left out: pods holding the most
    memory on the GPU first, an unrequested use before a sharing finding of the same pod."""
    bytes_by_pod: dict[str, int] = {}
    for c in usage.containers:
        if c.pod is not None:
            bytes_by_pod[c.pod.key] = bytes_by_pod.get(c.pod.key, 0) + c.used_bytes
    series: list[FindingSeries] = []
    for finding in findings:
        if finding.gpu_uuid != usage.gpu.uuid:
            continue
        series.extend(FindingSeries(finding, key) for key in finding.pods)
    series.sort(key=lambda s: (-bytes_by_pod.get(s.key, 0), _KIND_ORDER.get(s.finding.kind, 9),
                               s.key))
    return series[:cap], max(0, len(series) - cap)
