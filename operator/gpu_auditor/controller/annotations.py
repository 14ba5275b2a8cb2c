"""The annotations and Events the operator writes: pure builders, no API calls.

Every value has a byte limit (`LIMITS`) and the sum of all of them, keys included, stays under
`BUDGET` (16 KiB; the API server allows 256 KiB for all of an object's annotations, most of
them the owner's). JSON values are cut at whole items and still parse.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_auditor.controller import bounded, names
from gpu_auditor.controller.nodereport import Finding
from gpu_auditor.controller.podview import AllocConf, Termination
from gpu_auditor.diagnosis import Diagnosis, NodeEvidence

DEFAULT_PREFIX = "gpu-auditor.io/"
MAX_PREFIX = 64
"""Characters of `--annotation-prefix` at most (keys count against the budget too)."""
KEYS_KEPT = 16
"""How many diagnosed termination keys a pod remembers (a crash-looping pod keeps restarting)."""
BUDGET = 16 * 1024
"""Bytes all of the operator's annotations on one object take at most, keys included."""
LIMITS = {
    "diagnosis": 64,
    "reason": 1024,
    "recommended-alloc-conf": 1024,
    "actions": 4096,
    "evidence": 5120,
    "diagnosed-at": 32,
    "diagnosed-key": 1280,
    "diagnosis-failed": 512,
    "diagnosed-pod": 320,
    "gpu-shared-with": 1024,
    "sharing-finding": 128,
    "sharing-gpu": 512,
}
"""Bytes per value. Their sum (15,136) plus the twelve keys (915 bytes with a 64-character prefix)
stays under BUDGET."""
ITEM_LIMIT = 1024
"""Bytes of one action or one string in the evidence."""
EVIDENCE_LIST_LIMIT = 1536
"""Bytes of one list in the evidence (other pods on the GPU, problems of the current setting)."""
EVENT_MESSAGE_LIMIT = 1024
_KEY = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?/[0-9]{1,10}")


@dataclass(frozen=True)
class Written:
    """A diagnosis ready to write: the annotation patch and the Event."""

    annotations: dict[str, str]
    event_reason: str
    event_message: str
    event_name: str


def diagnosed_keys(annotations: Mapping[str, str] | None, prefix: str) -> list[str]:
    """Termination keys a pod's annotation says were diagnosed (only well-formed ones: the
    annotation is on the tenant's object, and it is copied into our next write)."""
    raw = (annotations or {}).get(f"{prefix}diagnosed-key", "")
    if not isinstance(raw, str):
        return []
    return [key for key in raw[: 4 * LIMITS["diagnosed-key"]].split(",") if _KEY.fullmatch(key)]


def event_name(pod_name: str, *parts: str) -> str:
    """A deterministic Event name: a second create of the same Event is a 409, not a duplicate.
    Always a valid object name: the pod's name cut at a label boundary, then our suffix."""
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "replace")).hexdigest()[:12]
    stem = pod_name[:200].rstrip(".-") if names.is_subdomain(pod_name) else "pod"
    return f"{stem or 'pod'}.gpu-auditor.{digest}"


def event_reason(diagnosis: Diagnosis) -> str:
    return "OOMKilled" if diagnosis.kind == "host-oom-killed" else "CUDAOutOfMemory"


def value(name: str, text: str) -> str:
    """`text` cut to the limit of annotation `name`."""
    return bounded.clip(text, LIMITS[name])


def diagnosis_annotations(
    diagnosis: Diagnosis,
    termination: Termination,
    *,
    pod_uid: str,
    pod_name: str,
    prefix: str,
    previous_keys: list[str],
    source: str,
    now: dt.datetime,
    node: NodeEvidence | None = None,
    alloc_conf: AllocConf | None = None,
    current_alloc_conf_problems: Sequence[str] = (),
) -> Written:
    """The annotation patch and Event for one diagnosed termination."""
    result = diagnosis.to_json_dict()
    recommendation = result.get("recommendation") or {}
    other_pods = [f"{p.namespace}/{p.pod}" for p in (node.other_pods if node else ()) if p.pod]
    fields: list[tuple[str, Any]] = [
        ("container", termination.container),
        ("restartCount", termination.restart_count),
        ("exitCode", termination.exit_code),
        ("terminationReason", termination.reason),
        ("source", source),
        ("figures", result.get("figures")),
        ("framework", result.get("framework")),
        ("torchVersionHint", result.get("torch_version_hint")),
        ("ooms", result.get("oom_count")),
        ("contributing", result.get("contributing")),
        ("otherPodsOnGPU", other_pods),
    ]
    if alloc_conf is not None and alloc_conf.ignored:
        fields.append(("currentAllocConf", alloc_conf.ignored))
    if current_alloc_conf_problems:
        fields.append(("currentAllocConfProblems", list(current_alloc_conf_problems)))
    recommended = str(recommendation.get("alloc_conf") or "")
    if bounded.size(recommended) > LIMITS["recommended-alloc-conf"]:
        fields.append(("recommendedAllocConf", f"left out: {len(recommended)} characters, over "
                       f"the {LIMITS['recommended-alloc-conf']}-byte limit"))
        recommended = ""
    keys = _keys([*previous_keys, termination.key])
    annotations = {
        f"{prefix}diagnosis": value("diagnosis", diagnosis.kind),
        f"{prefix}reason": value("reason", diagnosis.summary),
        f"{prefix}actions": bounded.json_list(
            list(recommendation.get("actions") or []), LIMITS["actions"],
            item_limit=ITEM_LIMIT, what="actions"),
        f"{prefix}evidence": bounded.json_object(
            fields, LIMITS["evidence"], string_limit=ITEM_LIMIT,
            list_limit=EVIDENCE_LIST_LIMIT),
        f"{prefix}diagnosed-at": _timestamp(now),
        f"{prefix}diagnosed-key": keys,
    }
    if recommended:
        annotations[f"{prefix}recommended-alloc-conf"] = recommended
    reason = event_reason(diagnosis)
    message = f"[{termination.container}] {diagnosis.summary}"
    if recommended:
        env = recommendation.get("env") or "PYTORCH_CUDA_ALLOC_CONF"
        message += f" Recommended: {env}={recommended}"
    return Written(
        annotations=annotations,
        event_reason=reason,
        event_message=bounded.clip(message, EVENT_MESSAGE_LIMIT),
        event_name=event_name(pod_name, pod_uid, termination.key, reason),
    )


def failure_annotations(
    termination: Termination, *, prefix: str, previous_keys: list[str], reason: str,
    detail: str, now: dt.datetime,
) -> dict[str, str]:
    """A diagnosis that failed (raised, ran over its budget): said once on the pod, and the
    termination recorded as done so that no later event starts it again."""
    return {
        f"{prefix}diagnosis-failed": value(
            "diagnosis-failed", f"{termination.key}: {reason}: {detail}"),
        f"{prefix}diagnosed-at": _timestamp(now),
        f"{prefix}diagnosed-key": _keys([*previous_keys, termination.key]),
    }


def clear_stale(
    existing: Mapping[str, str] | None, patch: Mapping[str, str], prefix: str
) -> dict[str, str | None]:
    """A merge patch that also clears an older `recommended-alloc-conf` or `diagnosis-failed`
    that the new diagnosis does not carry."""
    out: dict[str, str | None] = dict(patch)
    for name in ("recommended-alloc-conf", "diagnosis-failed"):
        key = f"{prefix}{name}"
        if key not in patch and key in (existing or {}):
            out[key] = None
    return out


def owner_annotations(written: Written, prefix: str, pod_ref: str) -> dict[str, str]:
    """The same summary on the owning workload, so it survives the pod."""
    keep = ("diagnosis", "reason", "recommended-alloc-conf", "actions", "diagnosed-at")
    result = {k: v for k, v in written.annotations.items()
              if k.removeprefix(prefix) in keep}
    result[f"{prefix}diagnosed-pod"] = value("diagnosed-pod", pod_ref)
    return result


def sharing_annotations(prefix: str, findings: Sequence[Finding], ref: str) -> dict[str, str]:
    """One set of annotations for all of a pod's findings (a pod on a GPU it did not request,
    shared with another pod, has two): each value lists them sorted, so it is stable."""
    others = sorted({p for f in findings for p in f.pods if p != ref})
    return {
        f"{prefix}gpu-shared-with": _joined(others, "gpu-shared-with") or "(host processes)",
        f"{prefix}sharing-finding": _joined(sorted({f.kind for f in findings}),
                                            "sharing-finding"),
        f"{prefix}sharing-gpu": _joined(sorted({f.gpu_uuid for f in findings}), "sharing-gpu"),
    }


def sharing_message(finding: Finding, ref: str) -> str:
    others = sorted(p for p in finding.pods if p != ref)
    text = finding.message or finding.kind
    if others:
        text += f" (shared with {', '.join(others)})"
    return bounded.clip(text, EVENT_MESSAGE_LIMIT)


def _keys(keys: list[str]) -> str:
    """The last KEYS_KEPT distinct keys, comma-separated, within the limit (oldest dropped)."""
    kept = list(dict.fromkeys(keys))[-KEYS_KEPT:]
    while len(",".join(kept)) > LIMITS["diagnosed-key"] and len(kept) > 1:
        kept.pop(0)
    return ",".join(kept)


def _joined(items: list[str], name: str) -> str:
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


def _timestamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
