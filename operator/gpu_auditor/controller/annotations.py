"""The annotations and Events the operator writes: pure builders, no API calls."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_auditor.controller.podview import Termination
from gpu_auditor.diagnosis import Diagnosis, NodeEvidence

DEFAULT_PREFIX = "gpu-auditor.io/"
KEYS_KEPT = 16
"""How many diagnosed termination keys a pod remembers (a crash-looping pod keeps restarting)."""
MAX_VALUE = 4096
"""Annotation values are cut to this many characters; the whole object must stay < 256 KiB."""


@dataclass(frozen=True)
class Written:
    """A diagnosis ready to write: the annotation patch and the Event."""

    annotations: dict[str, str]
    event_reason: str
    event_message: str
    event_name: str


def diagnosed_keys(annotations: Mapping[str, str] | None, prefix: str) -> list[str]:
    raw = (annotations or {}).get(f"{prefix}diagnosed-key", "")
    return [key for key in raw.split(",") if key]


def event_name(pod_name: str, *parts: str) -> str:
    """A deterministic Event name: a second create of the same Event is a 409, not a duplicate."""
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]
    return f"{pod_name[:200]}.gpu-auditor.{digest}"


def event_reason(diagnosis: Diagnosis) -> str:
    return "OOMKilled" if diagnosis.kind == "host-oom-killed" else "CUDAOutOfMemory"


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
    current_alloc_conf_problems: tuple[str, ...] = (),
) -> Written:
    """The annotation patch and Event for one diagnosed termination."""
    result = diagnosis.to_json_dict()
    recommendation = result.get("recommendation") or {}
    other_pods = [f"{p.namespace}/{p.pod}" for p in (node.other_pods if node else ()) if p.pod]
    evidence = {
        "figures": result.get("figures"),
        "container": termination.container,
        "restartCount": termination.restart_count,
        "exitCode": termination.exit_code,
        "terminationReason": termination.reason,
        "source": source,
        "framework": result.get("framework"),
        "torchVersionHint": result.get("torch_version_hint"),
        "contributing": result.get("contributing"),
        "ooms": result.get("oom_count"),
        "otherPodsOnGPU": other_pods,
    }
    if current_alloc_conf_problems:
        evidence["currentAllocConfProblems"] = list(current_alloc_conf_problems)
    keys = [*previous_keys, termination.key][-KEYS_KEPT:]
    annotations = {
        f"{prefix}diagnosis": diagnosis.kind,
        f"{prefix}reason": _cut(diagnosis.summary),
        f"{prefix}actions": _cut(json.dumps(list(recommendation.get("actions") or []))),
        f"{prefix}evidence": _cut(json.dumps(evidence, separators=(",", ":"), default=str)),
        f"{prefix}diagnosed-at": now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        f"{prefix}diagnosed-key": ",".join(keys),
    }
    alloc_conf = recommendation.get("alloc_conf")
    if alloc_conf:
        annotations[f"{prefix}recommended-alloc-conf"] = str(alloc_conf)
    reason = event_reason(diagnosis)
    message = f"[{termination.container}] {diagnosis.summary}"
    if alloc_conf:
        env = recommendation.get("env") or "PYTORCH_CUDA_ALLOC_CONF"
        message += f" Recommended: {env}={alloc_conf}"
    return Written(
        annotations=annotations,
        event_reason=reason,
        event_message=_cut(message, 1024),
        event_name=event_name(pod_name, pod_uid, termination.key, reason),
    )


def stale_recommendation_removal(
    existing: Mapping[str, str] | None, written: Written, prefix: str
) -> dict[str, str | None]:
    """A merge patch that also clears an older `recommended-alloc-conf` the new diagnosis lacks."""
    patch: dict[str, str | None] = dict(written.annotations)
    key = f"{prefix}recommended-alloc-conf"
    if key not in written.annotations and key in (existing or {}):
        patch[key] = None
    return patch


def owner_annotations(written: Written, prefix: str, pod_ref: str) -> dict[str, str]:
    """The same summary on the owning workload, so it survives the pod."""
    keep = ("diagnosis", "reason", "recommended-alloc-conf", "actions", "diagnosed-at")
    result = {k: v for k, v in written.annotations.items()
              if k.removeprefix(prefix) in keep}
    result[f"{prefix}diagnosed-pod"] = pod_ref
    return result


def sharing_annotations(
    prefix: str, findings: list[Mapping[str, Any]], ref: str
) -> dict[str, str]:
    """One set of annotations for all of a pod's findings (a pod on a GPU it did not request,
    shared with another pod, has two): each value lists them sorted, so it is stable."""
    others = sorted({p for f in findings for p in f.get("pods") or [] if p != ref})
    return {
        f"{prefix}gpu-shared-with": ",".join(others) or "(host processes)",
        f"{prefix}sharing-finding": ",".join(sorted({str(f.get("kind")) for f in findings})),
        f"{prefix}sharing-gpu": ",".join(sorted({str(f.get("gpuUUID") or "") for f in findings})),
    }


def sharing_message(finding: Mapping[str, Any], ref: str) -> str:
    others = sorted(p for p in finding.get("pods") or [] if p != ref)
    text = str(finding.get("message") or finding.get("kind"))
    if others:
        text += f" (shared with {', '.join(others)})"
    return _cut(text, 1024)


def _cut(text: str, limit: int = MAX_VALUE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
