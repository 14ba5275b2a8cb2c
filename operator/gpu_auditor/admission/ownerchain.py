"""A pod's owners at admission, verified link by link before their annotations are used.

The admission webhook applies an owner's recommended setting to its next pod (`apply`); which
owner that is comes from the pod's controller reference, which whoever creates the pod writes.
So each link is checked as the operator checks it before it writes onto an owner
(`controller.owners`, `controller.jobowners`): the object the reference names is read, its UID
must be the reference's, and it must select the pod as its own controller does (a built-in
workload by its `spec.selector`, a Job with a generated selector also by the pod's
`controller-uid` label; a JobSet or a training-operator job by the labels its controller selects
its pods by). The chains followed:

    Job pod            -> Job [-> JobSet [-> TrainJob]]
    Deployment pod     -> ReplicaSet -> Deployment
    StatefulSet, DaemonSet pod -> its controller
    training-operator  -> PyTorchJob / TFJob / XGBoostJob / PaddleJob / JAXJob / MPIJob

Pure: the objects are read through the `Read` callable the caller passes (the webhook's API
reader, a test's dict). A link that does not hold raises `Refused`; a kind not followed ends
the chain. The owners come back top first: the topmost is the one whose annotations a
distributed job's recommendation is on, a Job or a Deployment is one alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.base import names
from gpu_auditor.base.selectors import selector_matches

REPLICASET: Final = jk.JobKind("", "ReplicaSet", "apps", "v1", "replicasets")
DEPLOYMENT: Final = jk.JobKind("", "Deployment", "apps", "v1", "deployments")
STATEFULSET: Final = jk.JobKind("", "StatefulSet", "apps", "v1", "statefulsets")
DAEMONSET: Final = jk.JobKind("", "DaemonSet", "apps", "v1", "daemonsets")
TRAINING: Final = (jk.PYTORCHJOB, jk.TFJOB, jk.XGBOOSTJOB, jk.PADDLEJOB, jk.JAXJOB, jk.MPIJOB_V1,
                   jk.MPIJOB)
KINDS: Final = (jk.JOB, jk.JOBSET, jk.TRAINJOB, REPLICASET, DEPLOYMENT, STATEFULSET, DAEMONSET,
                *TRAINING)
"""Every kind a chain may read (the webhook's RBAC: `get` on each)."""
_OPERATOR_NAMES: Final = {kind: name for name, kind in jk.TRAINING_OPERATOR.items()}
JOB_UID_LABELS: Final = ("batch.kubernetes.io/controller-uid", "controller-uid")


class Refused(Exception):
    """A link that does not verify; `reason` as the operator's owner refusals."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class Read(Protocol):
    def __call__(self, kind: jk.JobKind, namespace: str, name: str) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Owner:
    kind: jk.JobKind
    name: str
    uid: str
    annotations: Mapping[str, str]

    @property
    def shown(self) -> str:
        return f"{self.kind.kind} {self.name}"


def owners(pod: Mapping[str, Any], namespace: str, read: Read) -> list[Owner]:
    """The pod's verified owners, top first ([] for a pod of no followed kind). Raises Refused,
    or what `read` raises."""
    meta = _map(pod.get("metadata"))
    labels = _strings(meta.get("labels"))
    ref = _controller(meta.get("ownerReferences"))
    if ref is None or not names.is_label(namespace):
        return []
    kind = _kind(ref)
    if kind is None:
        return []
    first, obj = _link(read, kind, namespace, ref, f"pod {_name(meta)}")
    chain = [first]
    if kind in (jk.JOB, REPLICASET, STATEFULSET, DAEMONSET):
        _selects(first, obj, labels, "the pod")
    if kind is jk.JOB:
        chain = _above_job(read, namespace, obj, labels) + chain
    elif kind is REPLICASET:
        up = _controller(_map(obj.get("metadata")).get("ownerReferences"))
        if up is not None and _kind(up) is DEPLOYMENT:
            deployment, found = _link(read, DEPLOYMENT, namespace, up, f"ReplicaSet {first.name}")
            _selects(deployment, found, labels, "the pod")
            _selects(deployment, found, _strings(_map(obj.get("metadata")).get("labels")),
                     f"ReplicaSet {first.name}")
            chain = [deployment, *chain]
    elif kind in TRAINING:
        _labelled(labels, {jk.TRAINING_JOB_NAME: first.name,
                           jk.TRAINING_OPERATOR_NAME: _OPERATOR_NAMES[kind]}, first)
    return chain


def _above_job(read: Read, namespace: str, job: Mapping[str, Any], labels: Mapping[str, str]
               ) -> list[Owner]:
    """The JobSet (and its TrainJob) above a Job, when the Job's controller is one."""
    ref = _controller(_map(job.get("metadata")).get("ownerReferences"))
    if ref is None or _kind(ref) is not jk.JOBSET:
        return []
    jobset, found = _link(read, jk.JOBSET, namespace, ref, "the pod's Job")
    wanted = {jk.JOBSET_NAME: jobset.name}
    if jk.JOBSET_UID in labels:
        wanted[jk.JOBSET_UID] = jobset.uid
    _labelled(labels, wanted, jobset)
    up = _controller(_map(found.get("metadata")).get("ownerReferences"))
    if up is not None and _kind(up) is jk.TRAINJOB and up.get("name") == jobset.name:
        trainjob, _ = _link(read, jk.TRAINJOB, namespace, up, f"JobSet {jobset.name}")
        return [trainjob, jobset]
    return [jobset]


def _link(read: Read, kind: jk.JobKind, namespace: str, ref: Mapping[str, Any], what: str
          ) -> tuple[Owner, Mapping[str, Any]]:
    name, uid = ref.get("name"), ref.get("uid")
    if not names.is_subdomain(name) or not names.is_uid(uid):
        raise Refused("invalid-reference", f"{kind.kind} reference of {what}: name "
                                           f"{names.shown(name)}, UID {names.shown(uid)}")
    obj = read(kind, namespace, str(name))
    meta = _map(obj.get("metadata"))
    if meta.get("uid") != uid:
        raise Refused("uid-mismatch", f"{kind.kind} {namespace}/{name} has another UID than "
                                      f"the reference of {what}")
    return Owner(kind, str(name), str(uid), _strings(meta.get("annotations"))), obj


def _selects(owner: Owner, obj: Mapping[str, Any], labels: Mapping[str, str], what: str
             ) -> None:
    spec = _map(obj.get("spec"))
    if not selector_matches(spec.get("selector"), labels):
        raise Refused("not-selected", f"{owner.shown}: its selector does not select {what}")
    if owner.kind is jk.JOB and spec.get("manualSelector") is not True and next(
            (labels[k] for k in JOB_UID_LABELS if k in labels), None) != owner.uid:
        raise Refused("not-selected", f"{owner.shown}: {what} has not its UID as "
                                      "controller-uid label")


def _labelled(labels: Mapping[str, str], wanted: Mapping[str, str], owner: Owner) -> None:
    wrong = [k for k, v in wanted.items() if labels.get(k) != v]
    if wrong:
        raise Refused("not-selected", f"{owner.shown}: the pod has not its {wrong[0]} label")


def _kind(ref: Mapping[str, Any]) -> jk.JobKind | None:
    api_version, kind = ref.get("apiVersion"), ref.get("kind")
    return next((k for k in KINDS if k.api_version == api_version and k.kind == kind), None)


def _controller(refs: object) -> Mapping[str, Any] | None:
    return next((r for r in (refs if isinstance(refs, list) else [])
                 if isinstance(r, Mapping) and r.get("controller") is True), None)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strings(value: object) -> dict[str, str]:
    return {str(k): v for k, v in _map(value).items() if isinstance(v, str)}


def _name(meta: Mapping[str, Any]) -> str:
    name = meta.get("name") or meta.get("generateName") or "?"
    return names.shown(name)
