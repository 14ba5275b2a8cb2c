"""The job a pod belongs to, verified link by link before the operator writes onto it.

The pod's labels only claim a job (`jobmember`). Here its owner chain is followed from the
pod's controller reference, each link as `owners` checks a workload's: the object the reference
names is read (a GET), its UID must be the reference's, and it must select the pod as its own
controller does. A built-in link (a Job, a StatefulSet) is checked by its `spec.selector` and,
for a Job, the `controller-uid` label (`owners.verified`); a custom kind has no `spec.selector`,
so its link is checked by the labels its controller sets on its pods and selects them by, named
for that object (a JobSet: `jobset-name`, and `jobset-uid` where present; a PyTorchJob and the
other training-operator kinds: `job-name` with their `operator-name`; a LeaderWorkerSet: `name`
and the group; a RayCluster: `ray.io/cluster`). The chains, from the controllers' sources:

    JobSet pod         -> Job -> JobSet [-> TrainJob]
    training-operator  -> PyTorchJob / TFJob / XGBoostJob / PaddleJob / JAXJob / MPIJob (v1)
    mpi-operator       -> MPIJob (v2beta1) (workers); launcher -> Job -> MPIJob
    LeaderWorkerSet    -> StatefulSet -> LeaderWorkerSet (leader);
                          worker -> StatefulSet -> leader Pod -> StatefulSet -> LeaderWorkerSet
    KubeRay            -> RayCluster [-> RayJob]
    Indexed Job        -> Job (its completionMode Indexed)

The rank follows from the pod's place and what the chain read: a JobSet pod's is its Job's
global index times the Job's completions plus its completion index; a PyTorchJob's worker i is
rank i + 1 when the job has a Master (rank 0), as the training operator sets `RANK`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.base import names
from gpu_auditor.controller import owners
from gpu_auditor.controller.jobmember import JobMember
from gpu_auditor.controller.owners import Owner, OwnerRefused
from gpu_auditor.controller.pod import OwnerReference, Pod, controller_reference


class Objects(owners.Workloads, Protocol):
    def read_object(self, kind: jk.JobKind, namespace: str, name: str) -> dict[str, Any]: ...

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class VerifiedJob:
    """The top-level object of a pod's job, every link verified."""

    kind: jk.JobKind
    name: str
    uid: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    """The object's annotations as read (string values only)."""
    rank: int | None = None
    position: str = ""


def verify(kube: Objects, pod: Pod, member: JobMember, switches: frozenset[str]) -> VerifiedJob:
    """The job `pod` belongs to as its labels claim (`member`), verified; raises OwnerRefused
    (a link that does not hold) or the API's errors."""
    kind = member.kind
    if kind is jk.JOBSET:
        return _jobset(kube, pod, member, switches)
    if kind is jk.LEADERWORKERSET:
        return _leaderworkerset(kube, pod, member)
    if kind is jk.RAYCLUSTER:
        return _ray(kube, pod, member, switches)
    if kind is jk.JOB:
        return _indexed_job(kube, pod, member)
    return _training(kube, pod, member)


# -- links ---------------------------------------------------------------------------------------

def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _strings(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def _reference(ref: OwnerReference | None, kind: jk.JobKind, what: str) -> Owner:
    """The controller reference `ref` when it names a `kind` object (else OwnerRefused)."""
    if ref is None or ref.kind != kind.kind or ref.api_version != kind.api_version:
        raise OwnerRefused("invalid-reference", f"{what} has no controller reference to a "
                                                f"{kind.kind} ({kind.api_version})")
    if not names.is_subdomain(ref.name) or not names.is_uid(ref.uid):
        raise OwnerRefused("invalid-reference", f"{kind.kind} reference of {what}: name "
                                                f"{names.shown(ref.name)}, UID "
                                                f"{names.shown(ref.uid)}")
    return Owner(kind.kind, str(ref.name), str(ref.uid))


def _read(kube: Objects, kind: jk.JobKind, namespace: str, owner: Owner) -> dict[str, Any]:
    obj = kube.read_object(kind, namespace, owner.name)
    uid = _meta(obj).get("uid")
    if uid != owner.uid:
        raise OwnerRefused("uid-mismatch", f"{kind.kind} {namespace}/{owner.name} has UID "
                                           f"{names.shown(uid)}, the reference says {owner.uid}")
    return obj


def _labelled(labels: Mapping[str, str], wanted: Mapping[str, str], kind: str, name: str,
              what: str) -> None:
    """Raises OwnerRefused unless `labels` (of `what`) carry every `wanted` pair: the labels
    the `kind` controller selects its pods by."""
    wrong = [key for key, value in wanted.items() if labels.get(key) != value]
    if wrong:
        raise OwnerRefused("not-selected", f"{kind} {name}: {what} has not its {wrong[0]} label")


def _verified_job(kube: Objects, pod: Pod) -> tuple[Owner, dict[str, Any]]:
    job = _reference(pod.controller, jk.JOB, f"pod {pod.ref}")
    return job, owners.verified(kube, pod.namespace, job, pod.labels)


def _top(kind: jk.JobKind, obj: Mapping[str, Any], owner: Owner, rank: int | None,
         position: str) -> VerifiedJob:
    return VerifiedJob(kind, owner.name, owner.uid, _strings(_meta(obj).get("annotations")),
                       rank, position)


def _count(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else default


# -- kinds ---------------------------------------------------------------------------------------

def _jobset(kube: Objects, pod: Pod, member: JobMember, switches: frozenset[str]
            ) -> VerifiedJob:
    _, job = _verified_job(kube, pod)
    jobset = _reference(controller_reference(_meta(job).get("ownerReferences")), jk.JOBSET,
                        f"Job {_meta(job).get('name')}")
    found = _read(kube, jk.JOBSET, pod.namespace, jobset)
    wanted = {jk.JOBSET_NAME: jobset.name}
    if jk.JOBSET_UID in pod.labels:
        wanted[jk.JOBSET_UID] = jobset.uid
    _labelled(pod.labels, wanted, "JobSet", jobset.name, f"pod {pod.ref}")
    completions = _count(_spec(job).get("completions"), 1)
    index = pod.completion_index or 0
    rank = index if member.index is None else member.index * completions + index
    trainjob = controller_reference(_meta(found).get("ownerReferences"))
    if trainjob is not None and jk.TRAINJOB.switch in switches and \
            jk.by_reference(trainjob.api_version, trainjob.kind) is jk.TRAINJOB:
        owner = _reference(trainjob, jk.TRAINJOB, f"JobSet {jobset.name}")
        if owner.name != jobset.name:  # the Trainer names the JobSet after its TrainJob
            raise OwnerRefused("not-selected", f"TrainJob {owner.name}: JobSet {jobset.name} "
                                               "has another name")
        top = _read(kube, jk.TRAINJOB, pod.namespace, owner)
        return _top(jk.TRAINJOB, top, owner, rank, member.position)
    return _top(jk.JOBSET, found, jobset, rank, member.position)


_OPERATOR_NAMES = {kind: name for name, kind in jk.TRAINING_OPERATOR.items()}
_MASTER_SPECS = {jk.PYTORCHJOB: "pytorchReplicaSpecs", jk.XGBOOSTJOB: "xgbReplicaSpecs"}
"""Kinds whose workers' ranks start after a Master (the operator sets RANK = index + 1)."""


def _training(kube: Objects, pod: Pod, member: JobMember) -> VerifiedJob:
    kind = member.kind
    ref = pod.controller
    if kind is jk.MPIJOB and ref is not None and ref.kind == "Job":  # the launcher's Job
        _, job = _verified_job(kube, pod)
        ref = controller_reference(_meta(job).get("ownerReferences"))
    owner = _reference(ref, kind, f"pod {pod.ref}")
    found = _read(kube, kind, pod.namespace, owner)
    _labelled(pod.labels, {jk.TRAINING_JOB_NAME: owner.name,
                           jk.TRAINING_OPERATOR_NAME: _OPERATOR_NAMES[kind]},
              kind.kind, owner.name, f"pod {pod.ref}")
    rank = member.index
    specs = _spec(found).get(_MASTER_SPECS.get(kind, ""))
    role = pod.labels.get(jk.TRAINING_REPLICA_TYPE, "")
    if isinstance(specs, Mapping) and rank is not None:
        rank = 0 if role == "master" else rank + (1 if "Master" in specs else 0)
    return _top(kind, found, owner, rank, member.position)


def _leaderworkerset(kube: Objects, pod: Pod, member: JobMember) -> VerifiedJob:
    wanted = {jk.LWS_NAME: member.name, jk.LWS_GROUP_INDEX: pod.labels.get(jk.LWS_GROUP_INDEX, "")}
    _labelled(pod.labels, wanted, "LeaderWorkerSet", member.name, f"pod {pod.ref}")
    sts = owners.controller_ref(pod.controller, ("StatefulSet",))
    if sts is None:
        raise OwnerRefused("invalid-reference", f"pod {pod.ref} has no StatefulSet controller")
    found = owners.verified(kube, pod.namespace, sts, pod.labels)
    ref = controller_reference(_meta(found).get("ownerReferences"))
    if ref is not None and ref.kind == "Pod" and ref.api_version == "v1":  # a worker's
        leader = _reference_to_pod(ref, sts.name)
        body = kube.read_pod(pod.namespace, leader.name)
        if _meta(body).get("uid") != leader.uid:
            raise OwnerRefused("uid-mismatch", f"leader pod {pod.namespace}/{leader.name} has "
                                               "another UID than the reference's")
        leader_labels = _strings(_meta(body).get("labels"))
        _labelled(leader_labels, {**wanted, jk.LWS_WORKER_INDEX: "0"}, "LeaderWorkerSet",
                  member.name, f"leader pod {leader.name}")
        leader_sts = owners.controller_ref(
            controller_reference(_meta(body).get("ownerReferences")), ("StatefulSet",))
        if leader_sts is None:
            raise OwnerRefused("invalid-reference", f"leader pod {leader.name} has no "
                                                    "StatefulSet controller")
        found = owners.verified(kube, pod.namespace, leader_sts, leader_labels,
                                f"leader pod {leader.name}")
        ref = controller_reference(_meta(found).get("ownerReferences"))
    owner = _reference(ref, jk.LEADERWORKERSET, f"StatefulSet {_meta(found).get('name')}")
    if owner.name != member.name:
        raise OwnerRefused("not-selected", f"LeaderWorkerSet {owner.name}: pod {pod.ref} is "
                                           f"labelled {member.name}")
    top = _read(kube, jk.LEADERWORKERSET, pod.namespace, owner)
    return _top(jk.LEADERWORKERSET, top, owner, member.index, member.position)


def _reference_to_pod(ref: OwnerReference, what: str) -> Owner:
    if not names.is_subdomain(ref.name) or not names.is_uid(ref.uid):
        raise OwnerRefused("invalid-reference", f"StatefulSet {what}: pod reference "
                                                f"{names.shown(ref.name)}")
    return Owner("Pod", str(ref.name), str(ref.uid))


def _ray(kube: Objects, pod: Pod, member: JobMember, switches: frozenset[str]) -> VerifiedJob:
    owner = _reference(pod.controller, jk.RAYCLUSTER, f"pod {pod.ref}")
    found = _read(kube, jk.RAYCLUSTER, pod.namespace, owner)
    _labelled(pod.labels, {jk.RAY_CLUSTER: owner.name}, "RayCluster", owner.name,
              f"pod {pod.ref}")
    ref = controller_reference(_meta(found).get("ownerReferences"))
    if ref is not None and jk.by_reference(ref.api_version, ref.kind) is jk.RAYJOB \
            and jk.RAYJOB.switch in switches:
        rayjob = _reference(ref, jk.RAYJOB, f"RayCluster {owner.name}")
        _labelled(_strings(_meta(found).get("labels")),
                  {jk.RAY_ORIGIN_NAME: rayjob.name, jk.RAY_ORIGIN_KIND: "RayJob"}, "RayJob",
                  rayjob.name, f"RayCluster {owner.name}")
        top = _read(kube, jk.RAYJOB, pod.namespace, rayjob)
        return _top(jk.RAYJOB, top, rayjob, None, member.position)
    return _top(jk.RAYCLUSTER, found, owner, None, member.position)


def _indexed_job(kube: Objects, pod: Pod, member: JobMember) -> VerifiedJob:
    job, found = _verified_job(kube, pod)
    if _spec(found).get("completionMode") != "Indexed":
        raise OwnerRefused("not-selected", f"Job {job.name} is not an Indexed Job")
    return _top(jk.JOB, found, job, pod.completion_index, member.position)
