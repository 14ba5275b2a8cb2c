"""Which workload owns a pod, verified before the operator writes onto it.

A pod's `ownerReferences` are written by whoever created the pod: a forged one can name any Job,
Deployment, StatefulSet or DaemonSet of the namespace. So the owner is followed only when the
object of that name has the UID the reference states (a GET), the Deployment behind a
ReplicaSet only through the ReplicaSet's own verified reference, and the write itself carries
the UID as a precondition (`KubeApi.patch_workload`), so an object recreated in between is not
written either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpu_auditor.base import names
from gpu_auditor.controller.kube import WORKLOADS
from gpu_auditor.controller.pod import OwnerReference, controller_reference

POD_OWNERS = ("Job", "ReplicaSet", "StatefulSet", "DaemonSet")
"""Controllers that own pods directly (a Deployment owns its pods through a ReplicaSet)."""


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


def verified_owner(kube: Workloads, namespace: str, ref: OwnerReference | None) -> Owner | None:
    """The workload to annotate for a pod with this controller reference, every link verified;
    None when the pod has no such owner. Raises OwnerRefused, or the API's errors."""
    owner = controller_ref(ref, POD_OWNERS)
    if owner is None:
        return None
    replica_set = _verified(kube, namespace, owner)
    if owner.kind != "ReplicaSet":
        return owner
    metadata = replica_set.get("metadata")  # the ReplicaSet as read: parsed here, its edge
    references = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    deployment = controller_ref(controller_reference(references), ("Deployment",))
    if deployment is None:
        return None
    _verified(kube, namespace, deployment)
    return deployment


def _verified(kube: Workloads, namespace: str, owner: Owner) -> dict[str, Any]:
    obj = kube.read_workload(owner.kind, namespace, owner.name)
    metadata = obj.get("metadata")
    actual = metadata.get("uid") if isinstance(metadata, Mapping) else None
    if actual != owner.uid:
        raise OwnerRefused("uid-mismatch", f"{owner.kind} {namespace}/{owner.name} has UID "
                                           f"{names.shown(actual)}, the reference says "
                                           f"{owner.uid}")
    return obj
