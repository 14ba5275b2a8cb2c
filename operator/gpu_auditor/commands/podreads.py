"""The API reads `gpu-auditor explain` makes, with the user's own kubeconfig (exec plugins
too, through the base's client): the pod, the operator's Events about it, its owner chain, and
its node's GPUNodeReport. All GETs; nothing is written.

Only the pod is required. Each other read that is refused (RBAC), absent or unreadable becomes
one note in the explanation, so a user who may read pods but not node reports still gets the
diagnosis. Every name that goes into a path (the owner's, the node's) comes from the pod, a
tenant-written object: validated by `base.names` and escaped before any request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_auditor.base import names
from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.errors import APIError, APIForbiddenError, APINotFoundError
from gpu_auditor.base.nodereport import (
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    InvalidReport,
    NodeReport,
    parse_report,
)

TIMEOUT = 15.0
MAX_OWNER_HOPS = 3
FOLLOWED = {
    # kind -> (apiVersion path prefix, plural): owners whose own owner we look up
    "ReplicaSet": ("/apis/apps/v1", "replicasets"),
    "Job": ("/apis/batch/v1", "jobs"),
}
"""A ReplicaSet is followed to its Deployment, a Job to its CronJob: the object a person edits."""


@dataclass(frozen=True)
class PodReads:
    pod: dict[str, Any]
    events: list[Any]
    owners: tuple[str, ...]
    report: NodeReport | None
    report_note: str
    notes: tuple[str, ...]


def _ns_path(namespace: str, *parts: str) -> str:
    return "/".join([f"/api/v1/namespaces/{names.segment(namespace)}",
                     *(names.segment(p) for p in parts)])


def why(exc: APIError) -> str:
    """What an API refusal says to a person: not found, forbidden, or its own text (300 chars)."""
    if isinstance(exc, APIForbiddenError):
        return "forbidden to your account"
    if isinstance(exc, APINotFoundError):
        return "not found"
    return str(exc)[:300]


def read_pod(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The pod; raises `names.InvalidName` or an `APIError` class (the caller says which)."""
    path = _ns_path(names.namespace(namespace), "pods", names.object_name(name))
    pod = api.request("GET", path, timeout=TIMEOUT)
    if not isinstance(pod, dict):
        raise APIError(f"GET {path}: not an object", status=200)
    return pod


def _controller(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            kind, name = ref.get("kind"), ref.get("name")
            if isinstance(kind, str) and kind.isalnum() and len(kind) <= 63 and \
                    names.is_subdomain(name):
                return kind, str(name)
    return None


def read_owners(api: ApiClient, namespace: str, pod: Mapping[str, Any],
                notes: list[str]) -> tuple[str, ...]:
    """`Kind/name` of the pod's controller, then its controller, as far as a person edits."""
    chain: list[str] = []
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    for _ in range(MAX_OWNER_HOPS):
        owner = _controller(meta)
        if owner is None:
            break
        kind, name = owner
        chain.append(f"{kind}/{name}")
        if kind not in FOLLOWED:
            break
        prefix, plural = FOLLOWED[kind]
        path = f"{prefix}/namespaces/{names.segment(namespace)}/{plural}/{names.segment(name)}"
        try:
            obj = api.request("GET", path, timeout=TIMEOUT)
        except APIError as exc:
            notes.append(f"{kind}/{name}: {why(exc)}; its own owner not looked up")
            break
        meta = (obj.get("metadata") or {}) if isinstance(obj, dict) else {}
    return tuple(chain)


def read_events(api: ApiClient, namespace: str, uid: str, notes: list[str]) -> list[Any]:
    query = {"fieldSelector": f"involvedObject.uid={uid}"} if names.is_uid(uid) else {}
    try:
        body = api.request("GET", _ns_path(namespace, "events"), query=query, timeout=TIMEOUT)
    except APIError as exc:
        notes.append(f"Events: {why(exc)}")
        return []
    items = body.get("items") if isinstance(body, dict) else None
    return items if isinstance(items, list) else []


def read_report(api: ApiClient, node: object) -> tuple[NodeReport | None, str]:
    """The node's report, typed, and where it came from; or None and why."""
    if not node:
        return None, "unknown: the pod is not scheduled on a node"
    if not names.is_subdomain(node):
        return None, f"unknown: {names.shown(node)} is not a node name"
    path = f"/apis/{GROUP}/{VERSION}/{PLURAL}/{names.segment(str(node))}"
    try:
        report = parse_report(api.request("GET", path, timeout=TIMEOUT))
    except APINotFoundError:
        return None, f"unknown: no {KIND} {node} (is the agent running on that node?)"
    except APIError as exc:
        return None, f"unknown: {KIND} {node}: {why(exc)}"
    except InvalidReport as exc:
        return None, f"unknown: {KIND} {node} is unusable ({exc})"
    when = f", generated {report.generated_at}" if report.generated_at else ""
    dropped = sum(report.dropped.values())
    left = f"; {dropped} malformed entries left out" if dropped else ""
    return report, f"{KIND} {node}{when} (kubectl get gnr {node} -o yaml){left}"


def read_all(api: ApiClient, namespace: str, name: str) -> PodReads:
    """Everything `explain` shows about one pod; raises only for the pod itself."""
    pod = read_pod(api, namespace, name)
    notes: list[str] = []
    meta = pod.get("metadata") or {}
    uid = meta.get("uid") if isinstance(meta, dict) else None
    events = read_events(api, namespace, str(uid or ""), notes)
    owners = read_owners(api, namespace, pod, notes)
    spec = pod.get("spec") or {}
    report, report_note = read_report(api, spec.get("nodeName") if isinstance(spec, dict)
                                      else None)
    return PodReads(pod=pod, events=events, owners=owners, report=report,
                    report_note=report_note, notes=tuple(notes))
