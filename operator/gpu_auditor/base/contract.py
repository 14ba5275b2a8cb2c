"""The names of docs/contracts.md in code: one definition each, imported by both wings.

`tests/unit/base/test_contract.py` reads the naming table of docs/contracts.md and fails when
it and these differ. A `StrEnum` member is its string (`FindingKind.UNINTENDED_SHARING ==
"unintended-sharing"`), so JSON, labels and annotations carry the plain value.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class FindingKind(StrEnum):
    """What a sharing finding says about one GPU (GPUNodeReport `findings[].kind`, the metric
    label `kind`, the annotation `sharing-finding`)."""

    UNINTENDED_SHARING = "unintended-sharing"
    """Processes of two or more pods on one GPU that the node does not share."""
    UNREQUESTED_GPU_USE = "unrequested-gpu-use"
    """A pod's process on a GPU the pod was not allocated."""
    INTENDED_SHARING = "intended-sharing"
    """Time-slicing or MPS: reported, not a problem."""


class Allocated(StrEnum):
    """Was a process's pod allocated the GPU it uses? The metric label `allocated` and the
    GPUNodeReport field `pods[].allocated` (where `host` never appears: host processes have no
    entry)."""

    TRUE = "true"
    FALSE = "false"  # use without a request
    UNKNOWN = "unknown"  # kubelet not reachable, or the pod could not be told
    HOST = "host"  # a process positively in no pod


class SharingStrategy(StrEnum):
    """How a node shares its GPUs (GPUNodeReport `sharingStrategy`)."""

    NONE = "none"
    TIME_SLICING = "time-slicing"
    MPS = "mps"
    MIG = "mig"


class EventReason(StrEnum):
    """`reason` of the Events the operator posts on a pod or its owner (a code, never prose)."""

    CUDA_OUT_OF_MEMORY = "CUDAOutOfMemory"
    OOM_KILLED = "OOMKilled"
    UNINTENDED_GPU_SHARING = "UnintendedGPUSharing"
    UNREQUESTED_GPU_USE = "UnrequestedGPUUse"
    RECOMMENDATION_APPLIED = "RecommendationApplied"
    """Normal, on a pod the admission webhook put its owner's recommended setting into."""
    RECOMMENDATION_OUTCOME = "RecommendationOutcome"
    """On the owner, when a trial is decided: Normal for fixed, Warning for not-fixed."""


PROBLEM_FINDINGS: Final[dict[FindingKind, EventReason]] = {
    FindingKind.UNINTENDED_SHARING: EventReason.UNINTENDED_GPU_SHARING,
    FindingKind.UNREQUESTED_GPU_USE: EventReason.UNREQUESTED_GPU_USE,
}
"""Finding kinds that are a problem (written onto the pods), with the Event reason of each."""


class Annotation(StrEnum):
    """Annotation names the operator writes, after the prefix (`--annotation-prefix`)."""

    DIAGNOSIS = "diagnosis"
    SUMMARY = "summary"
    RECOMMENDED_ALLOC_CONF = "recommended-alloc-conf"
    ACTIONS = "actions"
    EVIDENCE = "evidence"
    DIAGNOSED_AT = "diagnosed-at"
    DIAGNOSED_KEY = "diagnosed-key"
    DIAGNOSIS_FAILED = "diagnosis-failed"
    DIAGNOSED_POD = "diagnosed-pod"
    GPU_SHARED_WITH = "gpu-shared-with"
    SHARING_FINDING = "sharing-finding"
    SHARING_GPU = "sharing-gpu"
    ROOT_CAUSE_POD = "root-cause-pod"
    """On a distributed job's object: the pod whose failure came first (`namespace/name`); on
    each pod whose failure was its consequence: the same pod, which it points at."""
    ROOT_CAUSE_RANK = "root-cause-rank"
    """On a distributed job's object: the rank of the root-cause pod in the job."""
    CONSEQUENCE = "consequence"
    """On a pod whose failure followed the root cause's: how it read and when, in words."""
    RECOMMENDATION_TRIAL = "recommendation-trial"
    """On an owner that carries `recommended-alloc-conf`: the trial of that setting on its next
    pods (compact JSON, `base.trial`)."""
    RECOMMENDATION_OUTCOME = "recommendation-outcome"
    """On that owner, and on the pod that decided it: `fixed`, `not-fixed` or `not-applied`."""
    RECOMMENDATION_APPLIED = "recommendation-applied"
    """On a pod the admission webhook put the owner's recommended setting into: what and why."""


DEFAULT_ANNOTATION_PREFIX: Final = "gpu-auditor.io/"
IGNORE_LABEL: Final = "gpu-auditor.io/ignore"
"""`gpu-auditor.io/ignore=true` on a pod: the operator never sees it."""
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
REPORT_MANAGER: Final = "gpu-auditor-agent"
"""`app.kubernetes.io/managed-by` of every GPUNodeReport the agent writes."""
EVENT_COMPONENT: Final = "gpu-auditor"

METRIC_NAMESPACE: Final = "gpu_auditor"


class Subsystem(StrEnum):
    """The metric subsystem of series about a component's own work (its health, its errors,
    its latency). Series about the cluster's GPUs, pods and diagnoses have none."""

    AGENT = "agent"
    OPERATOR = "operator"
    WEBHOOK = "webhook"


def metric_name(name: str, subsystem: Subsystem | None = None) -> str:
    """`gpu_auditor_[<subsystem>_]<name>`, joined as client_python joins `namespace` and
    `subsystem` (the prefix is written here once)."""
    return "_".join(part for part in (METRIC_NAMESPACE, subsystem, name) if part)
