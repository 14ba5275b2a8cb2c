"""What the operator writes for a distributed job: pure builders, no API calls.

- On the job's object (the JobSet, PyTorchJob, ...): the root cause's diagnosis as the owner of
  a pod gets it today (`diagnosis`, `summary`, `recommended-alloc-conf`, `actions`,
  `diagnosed-at`, `diagnosed-pod`), plus `root-cause-pod`, `root-cause-rank` and an `evidence`
  that holds the root cause's figures and the incident: how many pods failed after it and how
  each read. The summary names the pod and its rank.
- On each pod whose failure was a consequence: `root-cause-pod` (the same pod) and a one-line
  `consequence`, with `diagnosed-at` and `diagnosed-key` so that it is done.
- One Event on the job's object per incident (a deterministic name: a second create is a 409).

Limits: `JOB_LIMITS` in bytes (the others keep `annotations.LIMITS`); on a job object the values
total at most 12,016 bytes (12,699 with the keys of a 64-character prefix), under
`annotations.BUDGET`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_auditor.base.contract import Annotation, EventReason
from gpu_auditor.base.timestamps import stamp
from gpu_auditor.controller import bounded
from gpu_auditor.controller.annotations import (
    EVENT_MESSAGE_LIMIT,
    EVIDENCE_LIST_LIMIT,
    ITEM_LIMIT,
    LIMITS,
    diagnosed_key,
    event_name,
)
from gpu_auditor.controller.pod import DiagnosedKeys, Termination, recorded
from gpu_auditor.controller.rootcause import Failure, Read, Verdict

JOB_LIMITS: dict[Annotation, int] = {
    Annotation.ROOT_CAUSE_POD: 320,
    Annotation.ROOT_CAUSE_RANK: 16,
    Annotation.CONSEQUENCE: 256,
}
"""Bytes per value of the annotations of distributed jobs (the others keep `LIMITS`)."""
JOB_KEEPS = (Annotation.DIAGNOSIS, Annotation.SUMMARY, Annotation.RECOMMENDED_ALLOC_CONF,
             Annotation.ACTIONS, Annotation.EVIDENCE, Annotation.DIAGNOSED_AT,
             Annotation.DIAGNOSED_POD, Annotation.ROOT_CAUSE_POD, Annotation.ROOT_CAUSE_RANK)
"""What a job's object carries: each set or cleared on every write, so nothing of another
incident's root cause is left over."""
POINTER_KEEPS = (Annotation.ROOT_CAUSE_POD, Annotation.CONSEQUENCE)


@dataclass(frozen=True)
class RootCause:
    """The root-cause pod's diagnosis as it was written onto the pod, and where it sits."""

    failure: Failure
    annotations: Mapping[str, str | None]
    """The pod's written annotations (prefixed keys): its diagnosis, summary, actions,
    evidence and recommended setting."""
    event_reason: EventReason
    rank: int | None
    position: str


def rank_words(rank: int | None, position: str) -> str:
    """`rank 3 (worker 2)`, `rank 0`, or the position alone (`head`) when no rank is known."""
    if rank is None:
        return position or "rank unknown"
    return f"rank {rank}" + (f" ({position})" if position and position != f"index {rank}" else "")


def _field(root: RootCause, prefix: str, name: Annotation) -> str | None:
    value = root.annotations.get(f"{prefix}{name}")
    return value if isinstance(value, str) else None


def _how(failure: Failure) -> str:
    return failure.how if failure.read is not Read.UNREAD else f"{failure.how} (log not read)"


def summary(root: RootCause, verdict: Verdict, prefix: str) -> str:
    """`rank 3 (pod ml/w-3) failed first: <its summary>; 15 pods failed after it (12
    nccl-timeout, 3 SIGTERM (exit code 143))`, cut to the summary's limit."""
    pod_summary = _field(root, prefix, Annotation.SUMMARY) or root.failure.how
    after = _tally(verdict.consequences)
    tail = ""
    if verdict.consequences:
        tail += (f"; {len(verdict.consequences)} pod{'s' if len(verdict.consequences) > 1 else ''}"
                 f" failed after it ({after})")
    if verdict.oom_too:
        tail += f"; {len(verdict.oom_too)} more ran out of memory on their own"
    if verdict.others:
        tail += f"; {len(verdict.others)} failed of something else"
    head = f"{rank_words(root.rank, root.position)} (pod {root.failure.ref}) failed first: "
    room = LIMITS[Annotation.SUMMARY] - bounded.size(head) - bounded.size(tail)
    return bounded.clip(head + bounded.clip(pod_summary, max(room, 64)) + tail,
                        LIMITS[Annotation.SUMMARY])


def _tally(failures: Sequence[Failure]) -> str:
    counts = Counter(_how(f) for f in failures)
    return ", ".join(f"{n} {how}" for how, n in counts.most_common())


def job_annotations(root: RootCause, verdict: Verdict, *, prefix: str, now: dt.datetime
                    ) -> dict[str, str | None]:
    """The job object's annotations for this verdict (every one of JOB_KEEPS, set or None)."""
    f = root.failure
    pod_evidence = _evidence(root, prefix)
    fields: list[tuple[str, Any]] = [
        ("rootCausePod", f.ref), ("rootCausePodUID", f.pod_uid), ("rank", root.rank),
        ("position", root.position), ("container", f.container),
        ("restartCount", f.restart_count), ("failedAt", _iso(f.when)),
        ("finishedAt", _iso(f.finished_at)), ("consequenceCount", len(verdict.consequences)),
        ("consequences", dict(Counter(_how(c) for c in verdict.consequences))),
        ("ownOOMCount", len(verdict.oom_too)), ("otherFailureCount", len(verdict.others)),
        *((k, v) for k, v in pod_evidence.items()
          if k not in ("container", "restartCount", "otherPodsOnGPU")),
        ("consequencePods", [c.ref for c in verdict.consequences]),
        ("ownOOMPods", [c.ref for c in verdict.oom_too]),
        ("otherFailurePods", [c.ref for c in verdict.others]),
    ]
    written: dict[Annotation, str | None] = {
        Annotation.DIAGNOSIS: _field(root, prefix, Annotation.DIAGNOSIS),
        Annotation.SUMMARY: summary(root, verdict, prefix),
        Annotation.RECOMMENDED_ALLOC_CONF: _field(root, prefix,
                                                  Annotation.RECOMMENDED_ALLOC_CONF),
        Annotation.ACTIONS: _field(root, prefix, Annotation.ACTIONS),
        Annotation.EVIDENCE: bounded.json_object(
            fields, LIMITS[Annotation.EVIDENCE], string_limit=ITEM_LIMIT,
            list_limit=EVIDENCE_LIST_LIMIT),
        Annotation.DIAGNOSED_AT: stamp(now),
        Annotation.DIAGNOSED_POD: bounded.clip(f.ref, LIMITS[Annotation.DIAGNOSED_POD]),
        Annotation.ROOT_CAUSE_POD: bounded.clip(f.ref, JOB_LIMITS[Annotation.ROOT_CAUSE_POD]),
        Annotation.ROOT_CAUSE_RANK: str(root.rank) if root.rank is not None else None,
    }
    return {f"{prefix}{name}": written[name] for name in JOB_KEEPS}


def cleared(prefix: str) -> dict[str, str | None]:
    """The job object's annotations removed: its incident turned out not to start with an
    OOM (an earlier failure of another kind was seen late)."""
    return {f"{prefix}{name}": None for name in JOB_KEEPS}


def _evidence(root: RootCause, prefix: str) -> dict[str, Any]:
    text = _field(root, prefix, Annotation.EVIDENCE)
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {k: v for k, v in found.items() if k != "leftOut"} if isinstance(found, dict) else {}


def consequence_text(failure: Failure, root: RootCause, verdict: Verdict) -> str:
    """`nccl-timeout, 4 s after ml/w-3 failed (capacity, rank 3)`."""
    after = verdict.after_root(failure)
    when = "at about the same time as" if after is None or abs(after.total_seconds()) < 1 else (
        f"{after.total_seconds():.0f} s after" if after.total_seconds() > 0
        else f"{-after.total_seconds():.0f} s before")
    rank = f"rank {root.rank}" if root.rank is not None else root.position
    text = (f"{_how(failure)}, {when} {root.failure.ref} failed ({root.failure.how}"
            f"{', ' + rank if rank else ''})")
    return bounded.clip(text, JOB_LIMITS[Annotation.CONSEQUENCE])


def pointer_annotations(failure: Failure, termination: Termination, root: RootCause,
                        verdict: Verdict, *, prefix: str, previous_keys: DiagnosedKeys,
                        now: dt.datetime) -> dict[str, str | None]:
    """A consequence pod's annotations: where its failure came from, and that it is done."""
    return {
        f"{prefix}{Annotation.ROOT_CAUSE_POD}": bounded.clip(
            root.failure.ref, JOB_LIMITS[Annotation.ROOT_CAUSE_POD]),
        f"{prefix}{Annotation.CONSEQUENCE}": consequence_text(failure, root, verdict),
        f"{prefix}{Annotation.DIAGNOSED_AT}": stamp(now),
        f"{prefix}{Annotation.DIAGNOSED_KEY}": diagnosed_key(previous_keys, termination),
    }


def pointer_cleared(prefix: str) -> dict[str, str | None]:
    return {f"{prefix}{name}": None for name in POINTER_KEEPS}


def job_event(root: RootCause, verdict: Verdict, *, prefix: str, job_name: str, job_uid: str
              ) -> tuple[str, EventReason, str]:
    """(name, reason, message) of the incident's one Event on the job's object."""
    f = root.failure
    name = event_name(job_name, job_uid, f.pod_uid, f"{f.container}/{f.restart_count}",
                      root.event_reason)
    message = bounded.clip(summary(root, verdict, prefix), EVENT_MESSAGE_LIMIT)
    recommended = _field(root, prefix, Annotation.RECOMMENDED_ALLOC_CONF)
    if recommended:
        message = bounded.clip(f"{message} Recommended: PYTORCH_CUDA_ALLOC_CONF={recommended}",
                               EVENT_MESSAGE_LIMIT)
    return name, root.event_reason, message


def keys_of(raw: str | None) -> DiagnosedKeys:
    return recorded(raw.split(",")) if raw else DiagnosedKeys()


def _iso(when: dt.datetime | None) -> str | None:
    return when.astimezone(dt.UTC).isoformat().replace("+00:00", "Z") if when else None
