"""Which distributed job a pod says it belongs to, and where in it: read from its labels alone.

The labels are those the job's controller puts on its pods (`base.jobkinds`); a pod may carry
them without being the job's (a tenant may copy them), so what this gives is a claim: the group
a failure is filed under in memory, never a reason to write onto the job. Before anything is
written onto the job's object, the root-cause pod's owner chain is verified (`jobowners`).

The group is the unit one failure's consequences stay in: a JobSet restart attempt (a restart
recreates every pod), a LeaderWorkerSet group (a group is recreated whole), the job otherwise.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.base import names
from gpu_auditor.controller.pod import Pod


@dataclass(frozen=True)
class GroupKey:
    """One job's pods that fail together: namespace, kind (of the group, before the chain is
    verified: `JobSet` for a TrainJob's pods), name, generation."""

    namespace: str
    kind: str
    name: str
    generation: str = ""
    uid: str = ""
    """The job's UID where a label states it (a JobSet's since v0.10, an Indexed Job's)."""


@dataclass(frozen=True)
class JobMember:
    """A pod's claim to a job: the kind that groups it, the job's name and (where a label
    states it) UID, its generation, and the pod's place in the job."""

    kind: jk.JobKind
    name: str
    uid: str | None
    generation: str
    position: str
    """Where the pod sits, in the controller's own words (`worker 2`, `replicatedJob workers,
    job 3, index 0`, `group 1, worker 0`)."""
    index: int | None
    """The pod's index in its own unit (a completion index, a replica index, a worker index);
    the rank comes from it and what the verified chain says (`jobowners.rank`)."""

    def group(self, namespace: str) -> GroupKey:
        return GroupKey(namespace, self.kind.kind, self.name, self.generation, self.uid or "")


def member_of(pod: Pod, switches: Collection[str]) -> JobMember | None:
    """The job `pod`'s labels place it in, among the kinds whose switch is in `switches`; None
    for a pod of no such job (it keeps the pod-level diagnosis)."""
    labels = pod.labels
    for reader in (_jobset, _training, _leaderworkerset, _ray):
        member = reader(labels, pod)
        if member is None:
            continue
        if member.kind.switch in switches:
            return member  # (a TrainJob's pods are its JobSet's: TrainJobs need JobSets on)
        if not (member.kind is jk.JOBSET and jk.JOB.switch in switches):
            return None  # a job of a kind switched off: the pod-level diagnosis, as before
        break  # a JobSet's pod, JobSets off: grouped by its own Indexed Job
    return _indexed_job(labels, pod) if jk.JOB.switch in switches else None


def _name(labels: Mapping[str, str], key: str) -> str | None:
    value = labels.get(key)
    return value if names.is_subdomain(value) else None


def _number(value: str | None) -> int | None:
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > 9:
        return None
    return int(value)


def _jobset(labels: Mapping[str, str], pod: Pod) -> JobMember | None:
    name = _name(labels, jk.JOBSET_NAME)
    if name is None:
        return None
    uid = labels.get(jk.JOBSET_UID)
    attempt = _number(labels.get(jk.JOBSET_RESTART))
    global_index = _number(labels.get(jk.JOBSET_GLOBAL_INDEX))
    job_index = _number(labels.get(jk.JOBSET_JOB_INDEX))
    replicated = labels.get(jk.JOBSET_REPLICATED_JOB, "")
    position = ", ".join(p for p in (
        f"replicatedJob {replicated}" if names.is_label(replicated) else "",
        f"job {job_index}" if job_index is not None else "",
        f"index {pod.completion_index}" if pod.completion_index is not None else "") if p)
    return JobMember(jk.JOBSET, name, uid if names.is_uid(uid) else None,
                     f"restart-attempt {attempt}" if attempt is not None else "",
                     position, global_index if global_index is not None else job_index)


def _training(labels: Mapping[str, str], pod: Pod) -> JobMember | None:
    name = _name(labels, jk.TRAINING_JOB_NAME)
    kind = jk.TRAINING_OPERATOR.get(labels.get(jk.TRAINING_OPERATOR_NAME, ""))
    if name is None or kind is None:
        return None
    if pod.controller is not None:  # mpijob-controller and mpi-operator: the reference says
        named = jk.by_reference(pod.controller.api_version, pod.controller.kind)
        kind = named if named is not None and named.switch == kind.switch else kind
    index = _number(labels.get(jk.TRAINING_REPLICA_INDEX))
    role = labels.get(jk.TRAINING_REPLICA_TYPE) or labels.get(jk.TRAINING_JOB_ROLE) or ""
    role = role if names.is_label(role) else "replica"
    position = f"{role} {index}" if index is not None else role
    return JobMember(kind, name, None, "", position, index)


def _leaderworkerset(labels: Mapping[str, str], pod: Pod) -> JobMember | None:
    name = _name(labels, jk.LWS_NAME)
    group = _number(labels.get(jk.LWS_GROUP_INDEX))
    if name is None or group is None:
        return None
    worker = _number(labels.get(jk.LWS_WORKER_INDEX))
    position = f"group {group}" + (f", worker {worker}" if worker is not None else "")
    return JobMember(jk.LEADERWORKERSET, name, None, f"group {group}", position, worker)


def _ray(labels: Mapping[str, str], pod: Pod) -> JobMember | None:
    name = _name(labels, jk.RAY_CLUSTER)
    if name is None:
        return None
    node_type = labels.get(jk.RAY_NODE_TYPE, "")
    group = labels.get(jk.RAY_GROUP, "")
    position = "head" if node_type == "head" else (
        f"worker group {group}" if names.is_subdomain(group) else "worker")
    return JobMember(jk.RAYCLUSTER, name, None, "", position, None)


def _indexed_job(labels: Mapping[str, str], pod: Pod) -> JobMember | None:
    ref = pod.controller
    if pod.completion_index is None or ref is None or ref.kind != "Job":
        return None
    if ref.api_version != jk.JOB.api_version or not names.is_subdomain(ref.name):
        return None
    uid = labels.get("batch.kubernetes.io/controller-uid", labels.get("controller-uid"))
    return JobMember(jk.JOB, str(ref.name), uid if names.is_uid(uid) else None, "",
                     f"index {pod.completion_index}", pod.completion_index)
