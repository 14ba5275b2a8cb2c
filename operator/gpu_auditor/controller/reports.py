"""What the operator keeps of the GPUNodeReports (parsed once by `base.nodereport`): the latest
report of each node, where each pod was last seen, which pods a finding may touch, and the node
evidence of a failed pod.

Which pods a finding may touch is decided here (`targets`): only pods the report itself lists
on the finding's GPU, with their UID; the sharing path then checks the live pod's UID and node
before writing. A failed pod's process is usually gone from the report by the time the operator
looks (the process died with the OOM), so the operator remembers where each pod was last seen
(`PodSightings`, by pod UID) and reads the GPU's other pods from the report as it is now.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gpu_auditor.base.contract import PROBLEM_FINDINGS, Allocated
from gpu_auditor.base.nodereport import (
    Finding,
    Gpu,
    InvalidReport,
    NodeReport,
    parse_report,
)
from gpu_auditor.controller import metrics
from gpu_auditor.controller.lru import Lru
from gpu_auditor.controller.memoryseries import SeriesMemory, samples_for
from gpu_auditor.controller.pod import Termination
from gpu_auditor.diagnosis import MemorySample, NodeEvidence, OtherPod

log = logging.getLogger("gpu_auditor.operator")

MAX_NODES = 10_000
"""Node reports kept in memory (any agent can write reports under any name)."""


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


def count_ignored(reasons: Counter[str]) -> None:
    for reason, n in reasons.items():
        metrics.REPORT_ITEMS_IGNORED.labels(reason).inc(n)


# -- findings -> pods --------------------------------------------------------------------------


def targets(report: NodeReport) -> tuple[list[Target], Counter[str]]:
    """The pods the report's unintended findings may annotate, each with all its findings, and
    what was left out by reason (`not-in-report`: a finding names a pod that the report does not
    list on that GPU with a UID)."""
    by_pod: dict[tuple[str, str], list[Finding]] = {}
    ignored: Counter[str] = Counter()
    for finding in report.findings:
        if finding.kind not in PROBLEM_FINDINGS:
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
    allocated: Allocated
    growth_bytes_per_second: float | None


def sightings(report: NodeReport) -> dict[str, Sighting]:
    """Pod UID → where the report sees it (the GPU where it holds the most memory)."""
    seen: dict[str, Sighting] = {}
    for gpu, entry in report.pod_entries():
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
        allocated=_allocated(sighting.allocated) if sighting else None,
        growth_bytes_per_second=sighting.growth_bytes_per_second if sighting else None,
        process_bytes=sighting.bytes if sighting else None,
    )


def _allocated(value: Allocated) -> bool | None:
    return True if value is Allocated.TRUE else False if value is Allocated.FALSE else None


class NodeReports:
    """The latest report of each node, where each pod was last seen and each pod container's
    last memory series; a node's report is read on demand (`read`: the API's GET of the raw
    object) when none came by the watch yet."""

    def __init__(self, read: Callable[[str], object | None]) -> None:
        self._read = read
        self.latest = Lru(MAX_NODES)
        self.sightings = PodSightings()
        self.series = SeriesMemory()

    def note(self, report: NodeReport) -> None:
        if report.dropped:  # counted by the caller (count_ignored); said here once a report
            log.info("GPUNodeReport %s: parts left out: %s", report.node,
                     ", ".join(f"{reason} x{n}" for reason, n in sorted(report.dropped.items())))
        self.latest.add(report.node, report)
        self.sightings.update(report)
        self.series.update(report)

    def get(self, node: str) -> NodeReport | None:
        report: NodeReport | None = self.latest.get(node)
        return report

    def of_node(self, node: str) -> NodeReport | None:
        """The node's report: remembered, else read (and parsed) now; None when absent or
        unusable."""
        report = self.get(node)
        if report is not None or not node:
            return report
        raw = self._read(node)
        if raw is None:
            return None
        try:
            report = parse_report(raw)
        except InvalidReport as exc:
            metrics.REPORT_ITEMS_IGNORED.labels(exc.reason).inc()
            log.warning("GPUNodeReport %s ignored: %s", node, exc)
            return None
        count_ignored(report.dropped)
        self.note(report)
        return report

    def evidence(self, node: str, uid: str, ref: str) -> NodeEvidence | None:
        """What the report of the pod's own node says about the GPU it used."""
        return evidence(self.of_node(node), uid, ref, self.sightings.get(uid))

    def samples(self, node: str, uid: str, t: Termination) -> tuple[MemorySample, ...]:
        """The failed run's memory series from the pod's own node (`memoryseries.py`)."""
        self.of_node(node)
        return samples_for(self.series.get(node, uid, t.container), node,
                           started_at=t.started_at, finished_at=t.finished_at,
                           previous=t.previous)
