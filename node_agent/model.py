"""Plain data shared by every part of the agent: what one sampling pass saw.

Frozen dataclasses, no behaviour beyond small derived values, no I/O. The sources (NVML, the
fake source, ``/proc``, the kubelet, the API server) produce these; the pure core (sharing
findings, report building) and the shells (collector, publisher) consume them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpu_auditor.base.contract import Allocated, FindingKind, SharingStrategy

__all__ = ["ERROR_SOURCES", "Allocated", "FindingKind", "SharingStrategy"]

ERROR_SOURCES = ("nvml", "kubelet", "proc", "apiserver")


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process on one GPU as NVML reports it. ``used_bytes`` is None when NVML has no value."""

    pid: int
    used_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU (or one MIG instance) and the processes on it.

    ``gpu`` is the metric label: the index (``"0"``) for a full GPU, ``"<index>/<gpu instance
    id>"`` for a MIG instance, whose ``uuid`` is its ``MIG-...`` UUID.
    """

    gpu: str
    index: int
    uuid: str
    model: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    reserved_bytes: int
    processes: tuple[ProcessSample, ...] = ()
    mig: bool = False


@dataclass(frozen=True, slots=True)
class NvmlReading:
    """A pass over every GPU. ``up`` is False when NVML could not be initialised at all;
    ``errors`` counts GPUs (or calls) that failed and were dropped from ``gpus``."""

    up: bool
    gpus: tuple[GpuSample, ...] = ()
    errors: int = 0


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """What a ``/proc/<pid>/cgroup`` file says about the pod a process runs in."""

    pod_uid: str
    container_id: str | None = None


class NoPod(StrEnum):
    """What a ``/proc/<pid>/cgroup`` file says when it names no pod."""

    HOST = "host"  # positively a host (non-kubepods) cgroup: a process in no pod
    UNKNOWN = "unknown"  # empty, garbage, or ambiguous: we cannot tell, so we do not guess


Placement = CgroupIdentity | NoPod


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """What ``/proc/<pid>`` says about a process: its pod, or that it is in none (``NoPod``).
    ``comm`` is already cleaned for use as a label (printable, at most 64 characters)."""

    pid: int
    start_time: int
    comm: str
    cgroup: Placement


@dataclass(frozen=True, slots=True)
class PodRef:
    """A container of a pod. ``namespace``/``pod``/``container`` are empty when only the
    pod UID (from the cgroup) is known."""

    namespace: str
    pod: str
    pod_uid: str
    container: str

    @property
    def key(self) -> str:
        """``namespace/pod`` as findings and reports name a pod (the UID when unnamed)."""
        return f"{self.namespace}/{self.pod}" if self.pod else self.pod_uid


@dataclass(frozen=True, slots=True)
class NodeSharing:
    """How the node shares GPUs, from its labels (or guessed from the allocations)."""

    kind: SharingStrategy = SharingStrategy.NONE
    replicas: int = 1

    @property
    def allows_sharing(self) -> bool:
        return self.kind in (SharingStrategy.TIME_SLICING, SharingStrategy.MPS)


@dataclass(frozen=True, slots=True)
class Allocations:
    """GPU device IDs the kubelet allocated, by pod (``namespace/name``): a device plugin's
    devices and, through this node's ResourceSlices, the GPUs of the pod's ResourceClaims.

    IDs are normalised: time-slicing replicas ``<UUID>::<n>`` become ``<UUID>``; MIG ids stay
    ``MIG-...``. ``replicated`` / ``mig`` tell whether such IDs were seen at all.
    ``unresolved``: pods with a claimed device whose GPU is unknown (no slice, no ``uuid``
    attribute): a GPU such a pod uses outside ``by_pod`` is *unknown*, not unallocated.
    ``claims``: (pod, GPU UUID) → the ResourceClaims (``namespace/name``) that gave it.
    """

    by_pod: Mapping[str, frozenset[str]] = field(default_factory=dict)
    replicated: bool = False
    mig: bool = False
    unresolved: frozenset[str] = frozenset()
    claims: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """One process on one GPU after attribution."""

    pid: int
    comm: str
    used_bytes: int | None
    pod: PodRef | None  # None: host process, or a process that could not be read
    allocated: Allocated
    growth_bytes_per_second: float | None = None


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    """Processes of one container (or the host, or unknown) on one GPU, summed."""

    pod: PodRef | None
    allocated: Allocated
    used_bytes: int
    pids: tuple[int, ...]
    growth_bytes_per_second: float | None
    memory_series: tuple[tuple[float, int], ...] = ()
    """(wall-clock seconds, bytes) of this container on this GPU, oldest first (history.py)."""


@dataclass(frozen=True, slots=True)
class GpuUsage:
    gpu: GpuSample
    processes: tuple[ProcessUsage, ...]
    containers: tuple[ContainerUsage, ...]

    @property
    def pod_keys(self) -> tuple[str, ...]:
        """Distinct pods with a process on this GPU, sorted."""
        return tuple(sorted({c.pod.key for c in self.containers if c.pod is not None}))


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    gpu: str
    gpu_uuid: str
    pods: tuple[str, ...]  # namespace/pod
    message: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one sampling pass learned. The collector and the publisher read only this."""

    node: str
    taken_at: float  # wall clock, seconds since the epoch
    duration_seconds: float
    nvml_up: bool
    kubelet_up: bool
    strategy: NodeSharing
    gpus: tuple[GpuUsage, ...]
    findings: tuple[Finding, ...]
    errors: Mapping[str, int]  # cumulative, by source
