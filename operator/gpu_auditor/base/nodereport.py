"""The GPUNodeReport, defined once: its names, its raw body (TypedDicts, as the API serves it),
and the typed, frozen value both wings use. The agent writes it (`to_body`), the operator reads
it (`parse_report`); `parse_report(to_body(r)) == r` for every report the agent can write.

A report is tenant-controlled input: any holder of an agent's ServiceAccount can write any
node's report. `parse_report` keeps only entries of the documented shape, within bounds, and
says what it dropped (`NodeReport.dropped`, by reason); nothing downstream reads the raw body.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NotRequired, TypedDict

from gpu_auditor.base import names
from gpu_auditor.base.contract import (
    MANAGED_BY_LABEL,
    REPORT_MANAGER,
    Allocated,
    FindingKind,
    SharingStrategy,
)

GROUP: Final = "gpu-auditor.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "gpunodereports"
KIND: Final = "GPUNodeReport"
SHORT_NAME: Final = "gnr"
API_VERSION: Final = f"{GROUP}/{VERSION}"

MAX_GPUS = 128
"""GPUs (and MIG instances) kept per report: 16 GPUs with 7 MIG instances each fit twice."""
MAX_PODS_PER_GPU = 256
MAX_FINDINGS = 256
MAX_PODS_PER_FINDING = 64
MAX_UUID = 128
MAX_MODEL = 128
MAX_MESSAGE = 1024
MAX_PIDS = 64
"""Pids listed per container (lowest first): a tenant decides how many processes it runs."""
MAX_BYTES = 2**63 - 1
MAX_SERIES_POINTS = 32
"""Points of one container's memory series (`pods[].memorySeries`) at most: the agent keeps 32
and halves the older ones as the series grows, so they span the container's life."""
MAX_REPORT_SERIES_POINTS = 8192
"""Series points in one report at most (about 220 KB of JSON): past it the agent gives each
series fewer points, then series only to the containers holding the most memory."""
MAX_SERIES_TIME = 2.0**34
"""A series time is seconds since the epoch, below 2**34 (the year 2514)."""
MAX_REPLICAS = 4096
MAX_GENERATED_AT = 64
REPORT_ALLOCATED = (Allocated.TRUE, Allocated.FALSE, Allocated.UNKNOWN)
"""`allocated` values a report carries (host processes are not listed)."""


# -- the raw body ----------------------------------------------------------------------------


class SeriesBody(TypedDict):
    times: list[float]  # seconds since the epoch on the node's clock, strictly increasing
    bytes: list[int]  # the container's GPU memory on this GPU at each time


class PodEntryBody(TypedDict):
    namespace: str
    pod: str
    podUID: str
    container: str
    allocated: str  # true | false | unknown
    bytes: int
    pids: list[int]
    growthBytesPerSecond: float | None
    memorySeries: NotRequired[SeriesBody]


class GpuBody(TypedDict):
    uuid: str
    index: int
    model: str
    memoryTotalBytes: int
    memoryUsedBytes: int
    memoryFreeBytes: int
    pods: list[PodEntryBody]


class FindingBody(TypedDict):
    kind: str
    gpuUUID: str
    pods: list[str]
    message: str


class SpecBody(TypedDict):
    nodeName: str
    generatedAt: str
    sharingStrategy: str
    replicas: int
    nvmlUp: bool
    kubeletUp: bool
    gpus: list[GpuBody]
    findings: list[FindingBody]


class MetadataBody(TypedDict, total=False):
    name: str
    labels: dict[str, str]
    resourceVersion: str


class ReportBody(TypedDict):
    apiVersion: str
    kind: str
    metadata: MetadataBody
    spec: SpecBody


# -- the typed value ------------------------------------------------------------------------


@dataclass(frozen=True)
class PodEntry:
    """One container of a pod seen on a GPU. `namespace` and `pod` are empty when the agent
    knew only the UID."""

    namespace: str
    pod: str
    uid: str
    container: str
    allocated: Allocated
    bytes: int
    pids: tuple[int, ...] = ()
    growth_bytes_per_second: float | None = None
    memory_series: tuple[tuple[float, int], ...] = ()
    """(seconds since the epoch, bytes) of the container on this GPU, oldest first, at most
    MAX_SERIES_POINTS; empty when the agent sent none or it was not valid."""

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.pod}" if self.pod else ""


@dataclass(frozen=True)
class Gpu:
    uuid: str
    index: int | None = None
    model: str = ""
    total_bytes: int | None = None
    used_bytes: int | None = None
    free_bytes: int | None = None
    pods: tuple[PodEntry, ...] = ()


@dataclass(frozen=True)
class Finding:
    kind: FindingKind
    gpu_uuid: str
    pods: tuple[str, ...]
    """`namespace/pod` refs, each a valid namespace and pod name."""
    message: str


@dataclass(frozen=True)
class NodeReport:
    node: str
    gpus: tuple[Gpu, ...] = ()
    findings: tuple[Finding, ...] = ()
    generated_at: str = ""
    sharing_strategy: SharingStrategy = SharingStrategy.NONE
    replicas: int = 1
    nvml_up: bool = False
    kubelet_up: bool = False
    dropped: Counter[str] = field(default_factory=Counter, compare=False)
    """What parsing left out, by reason (the reader counts it)."""

    def gpu(self, uuid: str) -> Gpu | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)

    def pod_entries(self) -> Iterator[tuple[Gpu, PodEntry]]:
        for gpu in self.gpus:
            for entry in gpu.pods:
                yield gpu, entry


class InvalidReport(ValueError):
    """A report that cannot be used at all; `reason` labels the metric."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


# -- the writer ---------------------------------------------------------------------------


def to_spec(report: NodeReport) -> SpecBody:
    """The `spec` of the report's object."""
    return {
        "nodeName": report.node,
        "generatedAt": report.generated_at,
        "sharingStrategy": report.sharing_strategy.value,
        "replicas": report.replicas,
        "nvmlUp": report.nvml_up,
        "kubeletUp": report.kubelet_up,
        "gpus": [_gpu_body(g) for g in report.gpus],
        "findings": [{"kind": f.kind.value, "gpuUUID": f.gpu_uuid, "pods": list(f.pods),
                      "message": f.message} for f in report.findings],
    }


def _gpu_body(g: Gpu) -> GpuBody:
    return {
        "uuid": g.uuid, "index": g.index or 0, "model": g.model,
        "memoryTotalBytes": g.total_bytes or 0, "memoryUsedBytes": g.used_bytes or 0,
        "memoryFreeBytes": g.free_bytes or 0,
        "pods": [_pod_body(p) for p in g.pods],
    }


def _pod_body(p: PodEntry) -> PodEntryBody:
    body: PodEntryBody = {
        "namespace": p.namespace, "pod": p.pod, "podUID": p.uid, "container": p.container,
        "allocated": p.allocated.value, "bytes": p.bytes, "pids": list(p.pids[:MAX_PIDS]),
        "growthBytesPerSecond": p.growth_bytes_per_second,
    }
    if p.memory_series:  # left out when empty: most entries of a young report have none
        points = p.memory_series[-MAX_SERIES_POINTS:]
        body["memorySeries"] = {"times": [t for t, _ in points], "bytes": [b for _, b in points]}
    return body


def to_body(spec: SpecBody) -> ReportBody:
    """A whole GPUNodeReport object named after its node."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": spec["nodeName"], "labels": {MANAGED_BY_LABEL: REPORT_MANAGER}},
        "spec": spec,
    }


# -- the reader ---------------------------------------------------------------------------


def parse_report(obj: object) -> NodeReport:
    """The typed report of a GPUNodeReport object; raises InvalidReport when it is unusable
    (not the documented shape, or `spec.nodeName` is not the object's own name)."""
    if not isinstance(obj, Mapping):
        raise InvalidReport("malformed-report", "not an object")
    meta, spec = obj.get("metadata"), obj.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        raise InvalidReport("malformed-report", "no metadata or spec")
    node = spec.get("nodeName")
    if not names.is_subdomain(node):
        raise InvalidReport("malformed-report", "spec.nodeName is not a node name")
    if meta.get("name") != node:
        raise InvalidReport("name-mismatch", f"report {str(meta.get('name'))[:80]!r} "
                                             f"claims node {node!r}")
    dropped: Counter[str] = Counter()
    budget = [MAX_REPORT_SERIES_POINTS]
    gpus = tuple(g for g in (_gpu(raw, dropped, budget)
                             for raw in _items(spec.get("gpus"), MAX_GPUS, dropped)) if g)
    findings = tuple(f for f in (_finding(raw, dropped)
                                 for raw in _items(spec.get("findings"), MAX_FINDINGS, dropped))
                     if f)
    strategy = spec.get("sharingStrategy")
    replicas = _size(spec.get("replicas"))
    generated = spec.get("generatedAt")
    return NodeReport(
        node=str(node), gpus=gpus, findings=findings,
        generated_at=str(generated) if _short_str(generated, MAX_GENERATED_AT) else "",
        sharing_strategy=(SharingStrategy(strategy) if strategy in tuple(SharingStrategy)
                          else SharingStrategy.NONE),
        replicas=replicas if replicas is not None and 1 <= replicas <= MAX_REPLICAS else 1,
        nvml_up=spec.get("nvmlUp") is True, kubelet_up=spec.get("kubeletUp") is True,
        dropped=dropped,
    )


def _items(value: object, limit: int, dropped: Counter[str]) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        if value is not None:
            dropped["malformed-entry"] += 1
        return []
    if len(value) > limit:
        dropped["too-many"] += len(value) - limit
    kept = []
    for item in value[:limit]:
        if isinstance(item, Mapping):
            kept.append(item)
        else:
            dropped["malformed-entry"] += 1
    return kept


def _gpu(raw: Mapping[str, Any], dropped: Counter[str], budget: list[int]) -> Gpu | None:
    uuid = raw.get("uuid")
    if not _short_str(uuid, MAX_UUID) or not uuid:
        dropped["malformed-entry"] += 1
        return None
    pods = tuple(p for p in (_pod(e, dropped, budget)
                             for e in _items(raw.get("pods"), MAX_PODS_PER_GPU, dropped)) if p)
    model = raw.get("model")
    return Gpu(uuid=str(uuid), index=_size(raw.get("index")),
               model="".join(c if c.isprintable() else "?" for c in str(model))
               if _short_str(model, MAX_MODEL) else "",
               total_bytes=_size(raw.get("memoryTotalBytes")),
               used_bytes=_size(raw.get("memoryUsedBytes")),
               free_bytes=_size(raw.get("memoryFreeBytes")), pods=pods)


def _allocated(value: object) -> Allocated | None:
    """`true`/`false`/`unknown`, or the booleans and null of reports written before 0.2."""
    if value is True:
        return Allocated.TRUE
    if value is False:
        return Allocated.FALSE
    if value is None:
        return Allocated.UNKNOWN
    return Allocated(str(value)) if value in REPORT_ALLOCATED else None


def _pod(raw: Mapping[str, Any], dropped: Counter[str], budget: list[int]) -> PodEntry | None:
    namespace, pod, uid = raw.get("namespace") or "", raw.get("pod") or "", raw.get("podUID")
    container = raw.get("container") or ""
    named = (names.is_label(namespace) and names.is_subdomain(pod)) or (not namespace and not pod)
    size = _size(raw.get("bytes"))
    allocated = _allocated(raw.get("allocated"))
    if (not names.is_uid(uid) or not named or size is None or allocated is None
            or not (container == "" or names.is_label(container))):
        dropped["malformed-entry"] += 1
        return None
    pids = raw.get("pids")
    growth = raw.get("growthBytesPerSecond")
    return PodEntry(
        namespace=str(namespace), pod=str(pod), uid=str(uid), container=str(container),
        allocated=allocated, bytes=size,
        pids=tuple(p for p in pids[:MAX_PIDS] if _size(p) is not None)
        if isinstance(pids, list) else (),
        growth_bytes_per_second=float(growth) if isinstance(growth, int | float) and _finite(
            growth) else None,
        memory_series=_memory_series(raw.get("memorySeries"), dropped, budget),
    )


def _memory_series(value: object, dropped: Counter[str],
                   budget: list[int]) -> tuple[tuple[float, int], ...]:
    """A container's series, whole or not at all: `times` and `bytes` lists of one length (at
    most MAX_SERIES_POINTS), finite times in 0..2**34 strictly increasing, byte counts. A series
    past the report's MAX_REPORT_SERIES_POINTS (`budget[0]` left) is dropped as `too-many`."""
    if value is None:
        return ()
    times = value.get("times") if isinstance(value, Mapping) else None
    sizes = value.get("bytes") if isinstance(value, Mapping) else None
    if (not isinstance(times, list) or not isinstance(sizes, list)
            or len(times) != len(sizes) or len(times) > MAX_SERIES_POINTS):
        dropped["malformed-series"] += 1
        return ()
    points: list[tuple[float, int]] = []
    for t, b in zip(times, sizes, strict=True):
        size = _size(b)
        if (size is None or not _finite(t) or not 0 <= t < MAX_SERIES_TIME
                or (points and t <= points[-1][0])):
            dropped["malformed-series"] += 1
            return ()
        points.append((float(t), size))
    if len(points) > budget[0]:
        dropped["too-many"] += 1
        return ()
    budget[0] -= len(points)
    return tuple(points)


def _finding(raw: Mapping[str, Any], dropped: Counter[str]) -> Finding | None:
    kind, gpu_uuid, message = raw.get("kind"), raw.get("gpuUUID"), raw.get("message") or ""
    pods = raw.get("pods")
    if (kind not in tuple(FindingKind) or not _short_str(gpu_uuid, MAX_UUID)
            or not isinstance(pods, list) or not isinstance(message, str)):
        dropped["malformed-finding"] += 1
        return None
    refs = []
    for ref in pods[:MAX_PODS_PER_FINDING]:
        if _is_ref(ref):
            refs.append(str(ref))
        else:  # a bare UID (a pod the agent could not name) or garbage: never a request path
            dropped["malformed-pod-ref"] += 1
    if len(pods) > MAX_PODS_PER_FINDING:
        dropped["too-many"] += len(pods) - MAX_PODS_PER_FINDING
    text = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"
    text = "".join(c if c.isprintable() else " " for c in text)  # no forged log lines
    return Finding(kind=FindingKind(kind), gpu_uuid=str(gpu_uuid),
                   pods=tuple(dict.fromkeys(refs)), message=text)


def _is_ref(ref: object) -> bool:
    if not isinstance(ref, str) or ref.count("/") != 1:
        return False
    namespace, _, name = ref.partition("/")
    return names.is_label(namespace) and names.is_subdomain(name)


def _short_str(value: object, limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit


def _size(value: object) -> int | None:
    """A byte count, pid or index: a non-negative int below 2**63 (JSON has no other
    integers)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BYTES:
        return None
    return value


def _finite(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and abs(value) < 1e18)
