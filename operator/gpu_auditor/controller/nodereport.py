"""Read the node agent's GPUNodeReport: pure functions over its `spec` mapping.

A failed pod's process is usually gone from the report by the time the operator looks (the
process died with the OOM), so the operator remembers where each pod was last seen
(`PodSightings`) and reads the GPU's other pods from the report as it is now.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_auditor.diagnosis import NodeEvidence, OtherPod

GROUP, VERSION, PLURAL = "gpu-auditor.io", "v1alpha1", "gpunodereports"
UNINTENDED_FINDINGS = {"unintended-sharing": "UnintendedGPUSharing",
                       "unrequested-gpu-use": "UnrequestedGPUUse"}
"""Finding kinds that are a problem, with the Event reason posted for each."""


@dataclass(frozen=True)
class Sighting:
    """A pod's container seen on a GPU in a report."""

    node: str
    gpu_uuid: str
    container: str
    bytes: int
    allocated: bool | None
    growth_bytes_per_second: float | None


def pod_entries(spec: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(gpu, pod entry) pairs of a report."""
    for gpu in spec.get("gpus") or []:
        for entry in gpu.get("pods") or []:
            yield gpu, entry


def sightings(spec: Mapping[str, Any]) -> dict[str, Sighting]:
    """`namespace/pod` → where the report sees it (the GPU where it holds the most memory)."""
    seen: dict[str, Sighting] = {}
    node = str(spec.get("nodeName") or "")
    for gpu, entry in pod_entries(spec):
        if not entry.get("pod"):
            continue  # host processes
        ref = f"{entry.get('namespace')}/{entry.get('pod')}"
        sighting = Sighting(
            node=node, gpu_uuid=str(gpu.get("uuid")), container=str(entry.get("container") or ""),
            bytes=int(entry.get("bytes") or 0), allocated=entry.get("allocated"),
            growth_bytes_per_second=entry.get("growthBytesPerSecond"),
        )
        if ref not in seen or sighting.bytes > seen[ref].bytes:
            seen[ref] = sighting
    return seen


class PodSightings:
    """Bounded memory of the last place each pod was seen on a GPU."""

    def __init__(self, capacity: int = 20_000) -> None:
        self._capacity = capacity
        self._items: OrderedDict[str, Sighting] = OrderedDict()

    def update(self, spec: Mapping[str, Any]) -> None:
        for ref, sighting in sightings(spec).items():
            self._items[ref] = sighting
            self._items.move_to_end(ref)
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)

    def get(self, ref: str) -> Sighting | None:
        return self._items.get(ref)


def evidence(
    spec: Mapping[str, Any] | None, ref: str, remembered: Sighting | None
) -> NodeEvidence | None:
    """What the node report says about the GPU the pod `ref` used, or None when unknown."""
    if not spec:
        return None
    current = sightings(spec).get(ref)
    sighting = current or remembered
    gpus = list(spec.get("gpus") or [])
    gpu: Mapping[str, Any] | None = None
    if sighting:
        gpu = next((g for g in gpus if g.get("uuid") == sighting.gpu_uuid), None)
    elif len(gpus) == 1:
        gpu = gpus[0]  # a one-GPU node: no doubt which GPU the pod used
    if gpu is None:
        return None
    others = tuple(
        OtherPod(namespace=e.get("namespace") or None, pod=e.get("pod") or None,
                 bytes=int(e.get("bytes") or 0), pid=(e.get("pids") or [None])[0])
        for e in gpu.get("pods") or []
        if f"{e.get('namespace')}/{e.get('pod')}" != ref
    )
    return NodeEvidence(
        gpu_uuid=str(gpu.get("uuid")),
        gpu_total_bytes=_int(gpu.get("memoryTotalBytes")),
        gpu_free_bytes=_int(gpu.get("memoryFreeBytes")),
        other_pods=others,
        allocated=sighting.allocated if sighting else None,
        growth_bytes_per_second=sighting.growth_bytes_per_second if sighting else None,
        process_bytes=sighting.bytes if sighting else None,
    )


def findings_for_pods(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(`namespace/pod`, finding) for every pod named in an unintended sharing finding."""
    for finding in spec.get("findings") or []:
        if finding.get("kind") not in UNINTENDED_FINDINGS:
            continue
        for ref in finding.get("pods") or []:
            yield str(ref), finding


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) else None
