"""The annotations and Events the operator writes: pure builders from typed values, no API
calls.

Every value has a byte limit (`LIMITS`) and the sum of all of them, keys included, stays under
`BUDGET` (16 KiB; the API server allows 256 KiB for all of an object's annotations, most of
them the owner's). JSON values are cut at whole items and still parse. The evidence is built
from the typed `Diagnosis` and `Termination`, in camelCase like every field of the Kubernetes
API (the CLI's `--json` keeps its snake_case keys: a contract that only grows).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpu_auditor.base import names
from gpu_auditor.base.contract import (
    DEFAULT_ANNOTATION_PREFIX,
    PROBLEM_FINDINGS,
    Annotation,
    EventReason,
)
from gpu_auditor.base.nodereport import Finding
from gpu_auditor.base.timestamps import parse_time, stamp
from gpu_auditor.controller import bounded
from gpu_auditor.controller.pod import AllocConf, DiagnosedKeys, Pod, Termination, recorded
from gpu_auditor.controller.probe import ProbeUse
from gpu_auditor.diagnosis import ALLOC_CONF_ENV, Diagnosis, DiagnosisKind, Figures, NodeEvidence

DEFAULT_PREFIX = DEFAULT_ANNOTATION_PREFIX
MAX_PREFIX = 64
"""Characters of `--annotation-prefix` at most (keys count against the budget too)."""
BUDGET = 16 * 1024
"""Bytes all of the operator's annotations on one object take at most, keys included."""
LIMITS: dict[Annotation, int] = {
    Annotation.DIAGNOSIS: 64,
    Annotation.SUMMARY: 1024,
    Annotation.RECOMMENDED_ALLOC_CONF: 1024,
    Annotation.ACTIONS: 4096,
    Annotation.EVIDENCE: 5120,
    Annotation.DIAGNOSED_AT: 32,
    Annotation.DIAGNOSED_KEY: 1280,
    Annotation.DIAGNOSIS_FAILED: 512,
    Annotation.DIAGNOSED_POD: 320,
    Annotation.GPU_SHARED_WITH: 1024,
    Annotation.SHARING_FINDING: 128,
    Annotation.SHARING_GPU: 512,
}
"""Bytes per value. Their sum (15,136) plus the twelve keys (914 bytes with a 64-character
prefix) stays under BUDGET."""
ITEM_LIMIT = 1024
"""Bytes of one action or one string in the evidence."""
EVIDENCE_LIST_LIMIT = 1536
"""Bytes of one list in the evidence (other pods on the GPU, problems of the current setting)."""
EVENT_MESSAGE_LIMIT = 1024
OWNER_KEEPS = (Annotation.DIAGNOSIS, Annotation.SUMMARY, Annotation.RECOMMENDED_ALLOC_CONF,
               Annotation.ACTIONS, Annotation.DIAGNOSED_AT)
"""What the owning workload gets of a pod's diagnosis (plus `diagnosed-pod`): each one, set or
cleared, so that none is left over from the diagnosis of another pod."""
CLEARED = (Annotation.RECOMMENDED_ALLOC_CONF, Annotation.DIAGNOSIS_FAILED)
"""Annotations of an earlier diagnosis that a new one removes when it has none."""


@dataclass(frozen=True)
class Written:
    """A diagnosis ready to write: the annotation patch and the Event."""

    annotations: dict[str, str | None]
    event_reason: EventReason
    event_message: str
    event_name: str
    owner_annotations: dict[str, str | None]
    """Every one of OWNER_KEEPS and `diagnosed-pod`; None (cleared) for one this diagnosis has
    not (`recommended-alloc-conf`)."""


def event_name(pod_name: str, *parts: str) -> str:
    """A deterministic Event name: a second create of the same Event is a 409, not a duplicate.
    Always a valid object name: the pod's name cut at a label boundary, then our suffix."""
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "replace")).hexdigest()[:12]
    stem = pod_name[:200].rstrip(".-") if names.is_subdomain(pod_name) else "pod"
    return f"{stem or 'pod'}.gpu-auditor.{digest}"


def event_reason(diagnosis: Diagnosis) -> EventReason:
    return _reason_of(diagnosis.kind)


def _reason_of(kind: str) -> EventReason:
    if kind == DiagnosisKind.HOST_OOM_KILLED:
        return EventReason.OOM_KILLED
    return EventReason.CUDA_OUT_OF_MEMORY


def value(name: Annotation, text: str) -> str:
    """`text` cut to the limit of annotation `name`."""
    return bounded.clip(text, LIMITS[name])


def figures_evidence(f: Figures) -> dict[str, Any]:
    """The figures of a diagnosis, in bytes, camelCase."""
    return {
        "requestedBytes": f.requested_bytes,
        "totalBytes": f.total_bytes,
        "freeBytes": f.free_bytes,
        "processBytes": f.process_bytes,
        "allocatedBytes": f.allocated_bytes,
        "reservedUnallocatedBytes": f.reserved_unallocated_bytes,
        "allowedBytes": f.allowed_bytes,
        "otherProcesses": [
            {"pid": p.pid, "bytes": p.bytes, "namespace": p.namespace, "pod": p.pod}
            for p in f.other_processes
        ],
    }


def diagnosis_annotations(
    diagnosis: Diagnosis,
    termination: Termination,
    pod: Pod,
    *,
    prefix: str,
    previous_keys: DiagnosedKeys | Sequence[str],
    source: str,
    now: dt.datetime,
    node: NodeEvidence | None = None,
    alloc_conf: AllocConf | None = None,
    samples: int = 0,
    probe: ProbeUse | None = None,
) -> Written:
    """The annotation patch, the owner's annotations and the Event for one diagnosed
    termination, from the typed diagnosis. The problems of the job's current setting are the
    core's (checked against the release and backend the core settled on). `samples`: points of
    the node's memory series the diagnosis had; `probe`: what it did with a probe record;
    `previous_keys`: what the pod's `diagnosed-key` records (or its keys)."""
    recommendation = diagnosis.recommendation
    other_pods = [f"{p.namespace}/{p.pod}" for p in (node.other_pods if node else ()) if p.pod]
    fields: list[tuple[str, Any]] = [
        ("container", termination.container),
        ("restartCount", termination.restart_count),
        ("exitCode", termination.exit_code),
        ("terminationReason", termination.reason),
        ("source", source),
        ("figures", figures_evidence(diagnosis.figures)),
        ("framework", diagnosis.framework),
        ("torchVersionHint", diagnosis.torch_version_hint),
        ("oomCount", diagnosis.oom_count),
        ("contributing", list(diagnosis.contributing)),
        ("otherPodsOnGPU", other_pods),
    ]
    if samples:
        fields.append(("memorySeriesPoints", samples))
    if diagnosis.growth is not None:
        g = diagnosis.growth
        fields.append(("growth", {"source": g.source, "points": g.points,
                                  "firstBytes": g.first_bytes, "lastBytes": g.last_bytes}))
    if probe is not None:
        fields.append(("probe", probe.evidence()))
    if alloc_conf is not None and alloc_conf.ignored:
        fields.append(("currentAllocConf", alloc_conf.ignored))
    if diagnosis.alloc_conf_problems:
        fields.append(("currentAllocConfProblems", list(diagnosis.alloc_conf_problems)))
    recommended = recommendation.alloc_conf or ""
    limit = LIMITS[Annotation.RECOMMENDED_ALLOC_CONF]
    if bounded.size(recommended) > limit:
        fields.append(("recommendedAllocConf", f"left out: {len(recommended)} characters, over "
                       f"the {limit}-byte limit"))
        recommended = ""
    written: dict[Annotation, str] = {
        Annotation.DIAGNOSIS: value(Annotation.DIAGNOSIS, diagnosis.kind),
        Annotation.SUMMARY: value(Annotation.SUMMARY, diagnosis.summary),
        Annotation.ACTIONS: bounded.json_list(
            list(recommendation.actions), LIMITS[Annotation.ACTIONS], item_limit=ITEM_LIMIT,
            what="actions"),
        Annotation.EVIDENCE: bounded.json_object(
            fields, LIMITS[Annotation.EVIDENCE], string_limit=ITEM_LIMIT,
            list_limit=EVIDENCE_LIST_LIMIT),
        Annotation.DIAGNOSED_AT: stamp(now),
        Annotation.DIAGNOSED_KEY: diagnosed_key(previous_keys, termination),
    }
    if recommended:
        written[Annotation.RECOMMENDED_ALLOC_CONF] = recommended
    reason = event_reason(diagnosis)
    message = _event_message(termination.container, diagnosis.summary, recommended,
                             recommendation.env or ALLOC_CONF_ENV)
    owner: dict[str, str | None] = {f"{prefix}{k}": written.get(k) for k in OWNER_KEEPS}
    owner[f"{prefix}{Annotation.DIAGNOSED_POD}"] = value(Annotation.DIAGNOSED_POD, pod.ref)
    return Written(
        annotations=_patch(written, pod, prefix),
        event_reason=reason,
        event_message=bounded.clip(message, EVENT_MESSAGE_LIMIT),
        event_name=event_name(pod.name, pod.uid, termination.key, reason),
        owner_annotations=owner,
    )


def _event_message(container: str, summary: str, recommended: str, env: str) -> str:
    message = f"[{container}] {summary}"
    if recommended:
        message += f" Recommended: {env}={recommended}"
    return message


@dataclass(frozen=True)
class WrittenEvent:
    """An Event as `diagnosis_annotations` built it, rebuilt from what the pod carries."""

    name: str
    reason: EventReason
    message: str


def event_from_annotations(pod: Pod, termination: Termination) -> WrittenEvent | None:
    """The Event of the diagnosis the pod's annotations hold for `termination`, or None when
    they may hold another's: only for the pod's latest termination (older ones are diagnosed
    first, so the last diagnosis written is the latest's), done, diagnosed after it finished,
    and not a failed diagnosis. The same name, reason and message as when it was first built,
    so posting it again is a 409 if it was posted."""
    ours = dict(pod.annotations)
    kind, summary = ours.get(Annotation.DIAGNOSIS), ours.get(Annotation.SUMMARY)
    at = parse_time(ours.get(Annotation.DIAGNOSED_AT))
    finished = [t.finished_at for t in pod.terminations if t.finished_at is not None]
    if (kind is None or summary is None or Annotation.DIAGNOSIS_FAILED in ours
            or not pod.diagnosed_keys.done(termination) or termination.finished_at is None
            or termination.finished_at != max(finished) or at is None
            or at < termination.finished_at):
        return None
    reason = _reason_of(kind)
    recommended = ours.get(Annotation.RECOMMENDED_ALLOC_CONF, "")
    message = _event_message(termination.container, summary, recommended, ALLOC_CONF_ENV)
    return WrittenEvent(
        name=event_name(pod.name, pod.uid, termination.key, reason),
        reason=reason,
        message=bounded.clip(message, EVENT_MESSAGE_LIMIT),
    )


def _patch(written: dict[Annotation, str], pod: Pod, prefix: str) -> dict[str, str | None]:
    """A merge patch of `written` that also clears an older `recommended-alloc-conf` or
    `diagnosis-failed` the new diagnosis does not carry."""
    out: dict[str, str | None] = {f"{prefix}{k}": v for k, v in written.items()}
    for name in CLEARED:
        if name not in written and name in pod.our_annotations:
            out[f"{prefix}{name}"] = None
    return out


def failure_annotations(
    termination: Termination, *, prefix: str, previous_keys: DiagnosedKeys | Sequence[str],
    reason: str, detail: str, now: dt.datetime,
) -> dict[str, str]:
    """A diagnosis that failed (raised, ran over its budget): said once on the pod, and the
    termination recorded as done so that no later event starts it again."""
    return {
        f"{prefix}{Annotation.DIAGNOSIS_FAILED}": value(
            Annotation.DIAGNOSIS_FAILED, f"{termination.key}: {reason}: {detail}"),
        f"{prefix}{Annotation.DIAGNOSED_AT}": stamp(now),
        f"{prefix}{Annotation.DIAGNOSED_KEY}": diagnosed_key(previous_keys, termination),
    }


def sharing_annotations(prefix: str, findings: Sequence[Finding], ref: str) -> dict[str, str]:
    """One set of annotations for all of a pod's findings (a pod on a GPU it did not request,
    shared with another pod, has two): each value lists them sorted, so it is stable."""
    others = sorted({p for f in findings for p in f.pods if p != ref})
    return {
        f"{prefix}{Annotation.GPU_SHARED_WITH}":
            _joined(others, Annotation.GPU_SHARED_WITH) or "(host processes)",
        f"{prefix}{Annotation.SHARING_FINDING}":
            _joined(sorted({f.kind.value for f in findings}), Annotation.SHARING_FINDING),
        f"{prefix}{Annotation.SHARING_GPU}":
            _joined(sorted({f.gpu_uuid for f in findings}), Annotation.SHARING_GPU),
    }


def sharing_event_reason(finding: Finding) -> EventReason:
    return PROBLEM_FINDINGS[finding.kind]


def sharing_message(finding: Finding, ref: str) -> str:
    others = sorted(p for p in finding.pods if p != ref)
    text = finding.message or finding.kind.value
    if others:
        text += f" (shared with {', '.join(others)})"
    return bounded.clip(text, EVENT_MESSAGE_LIMIT)


def diagnosed_key(previous: DiagnosedKeys | Sequence[str], termination: Termination) -> str:
    """`diagnosed-key`: the record with `termination` done, per container its highest restart
    count, within the limit: while it is over, the lowest entry is folded into `*/<N>` (every
    container done up to N), so what is left out reads as done, never as to do again."""
    done = previous if isinstance(previous, DiagnosedKeys) else recorded(previous)
    done = done.added(termination)
    lowest_first = sorted(done.counts.items(), key=lambda entry: (entry[1], entry[0]))
    floor = done.floor
    size = sum(len(c) + len(str(n)) + 2 for c, n in lowest_first) - 1  # "c/n", commas between
    limit = LIMITS[Annotation.DIAGNOSED_KEY]
    dropped = 0
    while size + _floor_size(floor) > limit:  # ends before the list: `*/N` alone is <= 12 bytes
        container, count = lowest_first[dropped]
        size -= len(container) + len(str(count)) + 2
        floor = max(count, count if floor is None else floor)
        dropped += 1
    return ",".join(DiagnosedKeys(dict(lowest_first[dropped:]), floor).keys())


def _floor_size(floor: int | None) -> int:
    """Bytes `*/<floor>` adds to the value, with its comma."""
    return 0 if floor is None else len(str(floor)) + 3


def _joined(items: list[str], name: Annotation) -> str:
    """Comma-separated whole items within the limit of `name`; "(+N more)" when some are cut."""
    limit = LIMITS[name]
    whole = ",".join(items)
    if bounded.size(whole) <= limit:
        return whole
    kept: list[str] = []
    for item in items:
        left = len(items) - len(kept) - 1
        if bounded.size(",".join([*kept, item, f"(+{left} more)"])) > limit:
            break
        kept.append(item)
    return ",".join([*kept, f"(+{len(items) - len(kept)} more)"])
