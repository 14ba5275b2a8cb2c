"""Which workload owns a pod, verified before the operator writes onto it.

A pod's `ownerReferences` are written by whoever created the pod: a forged one can name any Job,
Deployment, StatefulSet or DaemonSet of the namespace, with its real UID (anyone who may `get`
it reads that). So the owner is followed only when its controller reference (`controller:
true`) names the object of that name with the UID it has (a GET) and that object's selector
selects the pod, as the workload's own controller decides which pods are its own (it releases a
pod it does not select, and counts one it does); for a Job with a generated selector, also the
`controller-uid` label the API server puts on its pods. The Deployment behind a ReplicaSet is
followed only through the ReplicaSet's own verified reference, when its selector selects both
the ReplicaSet and the pod. The write itself carries the UID as a precondition
(`KubeApi.patch_workload`), so an object recreated in between is not written either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpu_auditor.base import names
from gpu_auditor.base.selectors import selector_matches
from gpu_auditor.controller.kube import WORKLOADS
from gpu_auditor.controller.pod import OwnerReference, controller_reference

POD_OWNERS = ("Job", "ReplicaSet", "StatefulSet", "DaemonSet")
"""Controllers that own pods directly (a Deployment owns its pods through a ReplicaSet)."""
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
"""The labels the API server puts on the pods of a Job whose selector it generates (the first
since Kubernetes 1.27, the second, legacy, on every release), each the Job's UID."""


class OwnerRefused(Exception):
    """An owner reference the operator does not follow; `reason` labels the metric."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Owner:
    kind: str
    name: str
    uid: str


class Workloads(Protocol):
    def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]: ...


def controller_ref(ref: OwnerReference | None, kinds: Sequence[str]) -> Owner | None:
    """The controller reference when it is of one of `kinds` (in the group that kind has in
    Kubernetes); raises OwnerRefused when its name or UID is not valid."""
    if ref is None:
        return None
    kind = ref.kind
    if kind not in kinds or ref.api_version != WORKLOADS[str(kind)].api_version:
        return None  # another kind (a CRD of the same name, say): not ours to annotate
    name, uid = ref.name, ref.uid
    if not names.is_subdomain(name):
        raise OwnerRefused("invalid-reference", f"{kind} name {names.shown(name)}")
    if not names.is_uid(uid):
        raise OwnerRefused("invalid-reference", f"{kind} {name} has UID {names.shown(uid)}")
    return Owner(kind=str(kind), name=str(name), uid=str(uid))


def verified_owner(kube: Workloads, namespace: str, ref: OwnerReference | None,
                   labels: Mapping[str, str]) -> Owner | None:
    """The workload to annotate for a pod with this controller reference and these labels,
    every link verified (references and selectors); None when the pod has no such owner.
    Raises OwnerRefused, or the API's errors."""
    found = verified_owner_read(kube, namespace, ref, labels)
    return found[0] if found is not None else None


def verified_owner_read(kube: Workloads, namespace: str, ref: OwnerReference | None,
                        labels: Mapping[str, str]) -> tuple[Owner, dict[str, Any]] | None:
    """`verified_owner` and the owner as read (its annotations hold a recommendation's
    trial, `base.trial`)."""
    owner = controller_ref(ref, POD_OWNERS)
    if owner is None:
        return None
    replica_set = _verified(kube, namespace, owner)
    _selects(owner, replica_set, labels, "the pod")
    if owner.kind != "ReplicaSet":
        return owner, replica_set
    metadata = replica_set.get("metadata")  # the ReplicaSet as read: parsed here, its edge
    metadata = metadata if isinstance(metadata, Mapping) else {}
    deployment = controller_ref(controller_reference(metadata.get("ownerReferences")),
                                ("Deployment",))
    if deployment is None:
        return None
    found = _verified(kube, namespace, deployment)
    _selects(deployment, found, labels, "the pod")
    rs_labels = metadata.get("labels")
    _selects(deployment, found, rs_labels if isinstance(rs_labels, Mapping) else {},
             f"ReplicaSet {owner.name}")
    return deployment, found


def verified(kube: Workloads, namespace: str, owner: Owner, labels: Mapping[str, Any],
             what: str = "the pod") -> dict[str, Any]:
    """The workload `owner` as read, once its UID is the reference's and its selector selects
    `labels` (of `what`); raises OwnerRefused, or the API's errors."""
    found = _verified(kube, namespace, owner)
    _selects(owner, found, labels, what)
    return found


def _verified(kube: Workloads, namespace: str, owner: Owner) -> dict[str, Any]:
    obj = kube.read_workload(owner.kind, namespace, owner.name)
    metadata = obj.get("metadata")
    actual = metadata.get("uid") if isinstance(metadata, Mapping) else None
    if actual != owner.uid:
        raise OwnerRefused("uid-mismatch", f"{owner.kind} {namespace}/{owner.name} has UID "
                                           f"{names.shown(actual)}, the reference says "
                                           f"{owner.uid}")
    return obj


def _selects(owner: Owner, obj: Mapping[str, Any], labels: Mapping[str, Any], what: str) -> None:
    """Raises OwnerRefused unless the workload `obj` (as read) selects `labels` (of `what`)."""
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    if not selector_matches(spec.get("selector"), labels):
        raise OwnerRefused("not-selected", f"{owner.kind} {owner.name}: its selector does not "
                                           f"select {what}")
    if owner.kind == "Job" and spec.get("manualSelector") is not True and (
            _job_uid(labels) != owner.uid):
        raise OwnerRefused("not-selected", f"Job {owner.name}: {what} has not its UID as "
                                           "controller-uid label")


def _job_uid(labels: Mapping[str, Any]) -> object:
    """The Job UID a pod's labels state (the current label first, then the legacy one)."""
    return next((labels[label] for label in JOB_UID_LABELS if label in labels), None)


__all__ = ["JOB_UID_LABELS", "POD_OWNERS", "Owner", "OwnerRefused", "Workloads", "controller_ref",
           "selector_matches", "verified", "verified_owner", "verified_owner_read"]
