"""The node agent's GPUNodeReport: parsed once at the edge into a typed, bounded value.

A report is tenant-controlled input: any holder of an agent's ServiceAccount can write any
node's report. `parse_report` keeps only entries of the documented shape, within bounds, and
says what it dropped; nothing downstream reads the raw mapping. Which pods a finding may touch is
decided here too (`targets`): only pods the report itself lists on the finding's GPU, with their
UID; the service then checks the live pod's UID and node before writing.

A failed pod's process is usually gone from the report by the time the operator looks (the
process died with the OOM), so the operator remembers where each pod was last seen
(`PodSightings`, by pod UID) and reads the GPU's other pods from the report as it is now.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_auditor.controller import names
from gpu_auditor.diagnosis import NodeEvidence, OtherPod

GROUP, VERSION, PLURAL = "gpu-auditor.io", "v1alpha1", "gpunodereports"
UNINTENDED_FINDINGS = {"unintended-sharing": "UnintendedGPUSharing",
                       "unrequested-gpu-use": "UnrequestedGPUUse"}
"""Finding kinds that are a problem, with the Event reason posted for each."""
FINDING_KINDS = (*UNINTENDED_FINDINGS, "intended-sharing")

MAX_GPUS = 128
"""GPUs (and MIG instances) kept per report: 16 GPUs with 7 MIG instances each fit twice."""
MAX_PODS_PER_GPU = 256
MAX_FINDINGS = 256
MAX_PODS_PER_FINDING = 64
MAX_UUID = 128
MAX_MODEL = 128
MAX_MESSAGE = 1024
MAX_PIDS = 64
MAX_BYTES = 2**63 - 1


class InvalidReport(ValueError):
    """A report that cannot be used at all; `reason` labels the metric."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class PodEntry:
    """One container of a pod seen on a GPU. `namespace` and `pod` are empty when the agent
    knew only the UID."""

    namespace: str
    pod: str
    uid: str
    container: str
    allocated: bool | None
    bytes: int
    pids: tuple[int, ...]
    growth_bytes_per_second: float | None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.pod}" if self.pod else ""


@dataclass(frozen=True)
class Gpu:
    uuid: str
    total_bytes: int | None
    free_bytes: int | None
    pods: tuple[PodEntry, ...]


@dataclass(frozen=True)
class Finding:
    kind: str
    gpu_uuid: str
    pods: tuple[str, ...]
    """`namespace/pod` refs, each a valid namespace and pod name."""
    message: str


@dataclass(frozen=True)
class NodeReport:
    node: str
    gpus: tuple[Gpu, ...]
    findings: tuple[Finding, ...]
    dropped: Counter[str] = field(default_factory=Counter, compare=False)
    """What parsing left out, by reason (the caller counts it)."""

    def gpu(self, uuid: str) -> Gpu | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)


@dataclass(frozen=True)
class Target:
    """A pod a finding of the report may annotate: named by the finding, listed with its UID on
    the finding's GPU in the same report."""

    namespace: str
    name: str
    uid: str
    findings: tuple[Finding, ...]

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


# -- parsing -------------------------------------------------------------------------------------


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
    gpus = tuple(g for g in (_gpu(raw, dropped) for raw in _items(spec.get("gpus"), MAX_GPUS,
                                                                   dropped)) if g)
    findings = tuple(f for f in (_finding(raw, dropped)
                                 for raw in _items(spec.get("findings"), MAX_FINDINGS, dropped))
                     if f)
    return NodeReport(node=str(node), gpus=gpus, findings=findings, dropped=dropped)


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


def _gpu(raw: Mapping[str, Any], dropped: Counter[str]) -> Gpu | None:
    uuid = raw.get("uuid")
    if not _short_str(uuid, MAX_UUID) or not uuid:
        dropped["malformed-entry"] += 1
        return None
    pods = tuple(p for p in (_pod(e, dropped) for e in _items(raw.get("pods"), MAX_PODS_PER_GPU,
                                                              dropped)) if p)
    return Gpu(uuid=str(uuid), total_bytes=_size(raw.get("memoryTotalBytes")),
               free_bytes=_size(raw.get("memoryFreeBytes")), pods=pods)


def _pod(raw: Mapping[str, Any], dropped: Counter[str]) -> PodEntry | None:
    namespace, pod, uid = raw.get("namespace") or "", raw.get("pod") or "", raw.get("podUID")
    container = raw.get("container") or ""
    named = (names.is_label(namespace) and names.is_subdomain(pod)) or (not namespace and not pod)
    size = _size(raw.get("bytes"))
    allocated = raw.get("allocated")
    if (not names.is_uid(uid) or not named or size is None
            or not (container == "" or names.is_label(container))
            or not (allocated is None or isinstance(allocated, bool))):
        dropped["malformed-entry"] += 1
        return None
    pids = raw.get("pids")
    growth = raw.get("growthBytesPerSecond")
    return PodEntry(
        namespace=str(namespace), pod=str(pod), uid=str(uid), container=str(container),
        allocated=allocated, bytes=size,
        pids=tuple(p for p in pids[:MAX_PIDS] if _size(p) is not None)
        if isinstance(pids, list) else (),
        growth_bytes_per_second=float(growth) if isinstance(growth, int | float) and _finite(growth)
        else None,
    )


def _finding(raw: Mapping[str, Any], dropped: Counter[str]) -> Finding | None:
    kind, gpu_uuid, message = raw.get("kind"), raw.get("gpuUUID"), raw.get("message") or ""
    pods = raw.get("pods")
    if (kind not in FINDING_KINDS or not _short_str(gpu_uuid, MAX_UUID)
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
    return Finding(kind=str(kind), gpu_uuid=str(gpu_uuid), pods=tuple(dict.fromkeys(refs)),
                   message=text)


def _is_ref(ref: object) -> bool:
    if not isinstance(ref, str) or ref.count("/") != 1:
        return False
    namespace, _, name = ref.partition("/")
    return names.is_label(namespace) and names.is_subdomain(name)


def _short_str(value: object, limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit


def _size(value: object) -> int | None:
    """A byte count or pid: a non-negative int below 2**63 (JSON has no other integers)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BYTES:
        return None
    return value


def _finite(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and abs(value) < 1e18)


# -- findings -> pods --------------------------------------------------------------------------


def targets(report: NodeReport) -> tuple[list[Target], Counter[str]]:
    """The pods the report's unintended findings may annotate, each with all its findings, and
    what was left out by reason (`not-in-report`: a finding names a pod that the report does not
    list on that GPU with a UID)."""
    by_pod: dict[tuple[str, str], list[Finding]] = {}
    ignored: Counter[str] = Counter()
    for finding in report.findings:
        if finding.kind not in UNINTENDED_FINDINGS:
            continue
        gpu = report.gpu(finding.gpu_uuid)
        for ref in finding.pods:
            uids = {p.uid for p in (gpu.pods if gpu else ()) if p.ref == ref}
            if len(uids) != 1:
                ignored["not-in-report"] += 1
                continue
            by_pod.setdefault((ref, uids.pop()), []).append(finding)
    found = []
    for (ref, uid), findings in by_pod.items():
        namespace, _, name = ref.partition("/")
        found.append(Target(namespace=namespace, name=name, uid=uid, findings=tuple(findings)))
    return found, ignored


# -- evidence for a failed pod ------------------------------------------------------------------


@dataclass(frozen=True)
class Sighting:
    """A pod's container seen on a GPU in a report."""

    node: str
    gpu_uuid: str
    container: str
    bytes: int
    allocated: bool | None
    growth_bytes_per_second: float | None


def pod_entries(report: NodeReport) -> Iterator[tuple[Gpu, PodEntry]]:
    for gpu in report.gpus:
        for entry in gpu.pods:
            yield gpu, entry


def sightings(report: NodeReport) -> dict[str, Sighting]:
    """Pod UID → where the report sees it (the GPU where it holds the most memory)."""
    seen: dict[str, Sighting] = {}
    for gpu, entry in pod_entries(report):
        sighting = Sighting(
            node=report.node, gpu_uuid=gpu.uuid, container=entry.container, bytes=entry.bytes,
            allocated=entry.allocated, growth_bytes_per_second=entry.growth_bytes_per_second,
        )
        if entry.uid not in seen or sighting.bytes > seen[entry.uid].bytes:
            seen[entry.uid] = sighting
    return seen


class PodSightings:
    """Bounded memory of the last place each pod (by UID) was seen on a GPU."""

    def __init__(self, capacity: int = 20_000) -> None:
        self._capacity = capacity
        self._items: OrderedDict[str, Sighting] = OrderedDict()

    def update(self, report: NodeReport) -> None:
        for uid, sighting in sightings(report).items():
            self._items[uid] = sighting
            self._items.move_to_end(uid)
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)

    def get(self, uid: str) -> Sighting | None:
        return self._items.get(uid)


def evidence(
    report: NodeReport | None, uid: str, ref: str, remembered: Sighting | None
) -> NodeEvidence | None:
    """What the report of the pod's node says about the GPU the pod (`uid`, `namespace/name`
    `ref`) used, or None. Entries of the pod itself (its UID, or an earlier pod of its name)
    are not "other pods"."""
    if report is None:
        return None
    if remembered is not None and remembered.node != report.node:
        remembered = None  # seen on another node: not evidence about this one
    sighting = sightings(report).get(uid) or remembered
    gpu: Gpu | None = None
    if sighting:
        gpu = report.gpu(sighting.gpu_uuid)
    elif len(report.gpus) == 1:
        gpu = report.gpus[0]  # a one-GPU node: no doubt which GPU the pod used
    if gpu is None:
        return None
    others = tuple(
        OtherPod(namespace=e.namespace or None, pod=e.pod or None, bytes=e.bytes,
                 pid=e.pids[0] if e.pids else None)
        for e in gpu.pods if e.uid != uid and e.ref != ref
    )
    return NodeEvidence(
        gpu_uuid=gpu.uuid,
        gpu_total_bytes=gpu.total_bytes,
        gpu_free_bytes=gpu.free_bytes,
        other_pods=others,
        allocated=sighting.allocated if sighting else None,
        growth_bytes_per_second=sighting.growth_bytes_per_second if sighting else None,
        process_bytes=sighting.bytes if sighting else None,
    )
