"""A distributed job's root cause, read back for a person: the typed value `explain KIND/NAME`
prints (`jobviewtext`).

Built once, here, from what the API served: the job's object (the operator's annotations on
it: the root cause's diagnosis, `root-cause-pod`, `root-cause-rank`, the evidence with its
figures and the incident's counts), the job's pods (each consequence's `root-cause-pod` and
`consequence`, each pod's own diagnosis) and the operator's Events about the object. Every
string is cleaned and cut as in `explanation` (the annotations are the tenant's to edit), and
JSON that does not parse is said, not guessed at.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.base import names
from gpu_auditor.base.contract import DEFAULT_ANNOTATION_PREFIX, Annotation
from gpu_auditor.commands.explanation import (
    LIST_LIMIT,
    Context,
    Event,
    _json,
    our_annotations,
    read_diagnosis,
    read_events,
    text,
)
from gpu_auditor.diagnosis import validate_alloc_conf
from gpu_auditor.diagnosis.model import Diagnosis

TEMPLATES = {
    "JobSet": "spec.replicatedJobs[].template.spec.template.spec.containers[].env",
    "TrainJob": "the TrainingRuntime's trainer container env (or spec.trainer.env)",
    "LeaderWorkerSet": "spec.leaderWorkerTemplate.{leaderTemplate,workerTemplate}.spec"
                       ".containers[].env",
    "RayCluster": "spec.{headGroupSpec,workerGroupSpecs[]}.template.spec.containers[].env",
    "RayJob": "spec.rayClusterSpec.{headGroupSpec,workerGroupSpecs[]}.template.spec"
              ".containers[].env",
    "Job": "spec.template.spec.containers[].env (a Job's template cannot change: recreate it)",
}
"""Where each kind's pods get their env (the training operator's kinds: their
`<Kind>ReplicaSpecs.<Replica>.template`)."""


@dataclass(frozen=True)
class PodNote:
    """One pod of the job and what the operator wrote on it."""

    pod: str
    says: str
    """A consequence's `consequence`, or an own diagnosis's kind and summary."""


@dataclass(frozen=True)
class JobView:
    kind: str
    namespace: str
    name: str
    uid: str
    diagnosis: Diagnosis | None
    context: Context | None
    root_pod: str
    rank: str
    position: str
    failed_at: str
    consequence_count: int | None
    consequences: tuple[tuple[str, int], ...]
    """How the consequences read, with how many of each."""
    own_oom_count: int | None
    other_failure_count: int | None
    consequence_pods: tuple[PodNote, ...]
    consequence_pods_left: int
    own_ooms: tuple[PodNote, ...]
    """Pods of the job with a diagnosis of their own (the root cause's, and OOMs after it)."""
    setting: str
    """Where to set the recommended allocator setting, or ""."""
    setting_withheld: str
    events: tuple[Event, ...]
    pods_read: int
    notes: tuple[str, ...] = field(default=())

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _pods(pods: Sequence[Any], root: str, prefix: str) -> tuple[list[PodNote], list[PodNote]]:
    pointing, own = [], []
    for pod in pods:
        meta = _map(_map(pod).get("metadata"))
        ref = f"{text(meta.get('namespace'), 63)}/{text(meta.get('name'), 253)}"
        ours = our_annotations(_map(pod), prefix)
        if root and ours.get(Annotation.ROOT_CAUSE_POD) == root:
            pointing.append(PodNote(ref, text(ours.get(Annotation.CONSEQUENCE), 256)))
        elif Annotation.DIAGNOSIS in ours:
            says = f"{text(ours[Annotation.DIAGNOSIS], 64)}: {text(ours.get(Annotation.SUMMARY))}"
            own.append(PodNote(ref, says))
    pointing.sort(key=lambda p: p.pod)
    own.sort(key=lambda p: (p.pod != root, p.pod))
    return pointing, own


def _setting(kind: str, name: str, diagnosis: Diagnosis | None,
             context: Context | None) -> tuple[str, str]:
    if diagnosis is None or not diagnosis.recommendation.alloc_conf:
        return "", ""
    value = diagnosis.recommendation.alloc_conf
    problems = validate_alloc_conf(value, torch_version=diagnosis.torch_version_hint or None)
    if problems:
        return "", f"the recommended value {value!r} does not validate: {problems[0]}"
    where = TEMPLATES.get(kind, f"the {kind}'s replica specs' template.spec.containers[].env")
    named = context.container if context is not None else ""
    container = f" (container {named})" if names.is_label(named) else ""
    return (f"set PYTORCH_CUDA_ALLOC_CONF={value} in {kind} {name}'s pod template{container}: "
            f"{where}"), ""


def job_view(kind: jk.JobKind, obj: Mapping[str, Any], *, pods: Sequence[Any], events: object,
             prefix: str = DEFAULT_ANNOTATION_PREFIX, notes: Sequence[str] = ()) -> JobView:
    """The job view of one object from what the API served (see `jobreads`)."""
    meta = _map(obj.get("metadata"))
    namespace, name = text(meta.get("namespace"), 63), text(meta.get("name"), 253)
    uid = text(meta.get("uid"), 64)
    said = list(notes)
    ours = our_annotations(obj, prefix)
    read = read_diagnosis(ours, said)
    diagnosis, context = read if read is not None else (None, None)
    evidence = _map(_json(ours.get(Annotation.EVIDENCE), "evidence", [], []))
    root = text(ours.get(Annotation.ROOT_CAUSE_POD), 320)
    rank = ours.get(Annotation.ROOT_CAUSE_RANK, "")
    pointing, own = _pods(pods, root, prefix)
    by_kind = [(text(how, 128), n) for how, n in _map(evidence.get("consequences")).items()
               if _count(n) is not None][:LIST_LIMIT]
    setting, withheld = _setting(kind.kind, name, diagnosis, context)
    return JobView(
        kind=kind.kind, namespace=namespace, name=name, uid=uid, diagnosis=diagnosis,
        context=context,
        root_pod=root, rank=rank if rank.isascii() and rank.isdigit() and len(rank) < 10
        else "",
        position=text(evidence.get("position"), 256),
        failed_at=text(evidence.get("failedAt"), 64),
        consequence_count=_count(evidence.get("consequenceCount")),
        consequences=tuple(sorted(by_kind, key=lambda c: -c[1])),
        own_oom_count=_count(evidence.get("ownOOMCount")),
        other_failure_count=_count(evidence.get("otherFailureCount")),
        consequence_pods=tuple(pointing[:LIST_LIMIT]),
        consequence_pods_left=max(len(pointing) - LIST_LIMIT, 0),
        own_ooms=tuple(own[:LIST_LIMIT]), setting=setting, setting_withheld=withheld,
        events=read_events(events, uid), pods_read=len(pods),
        notes=tuple(text(n) for n in said),
    )
