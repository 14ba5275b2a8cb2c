"""The API reads of `gpu-auditor explain KIND/NAME` (a distributed job's view), with the user's
own kubeconfig: the job's object, its pods (listed by the label its controller sets on them)
and the operator's Events about the object. All GETs; nothing is written.

Only the object is required; a list or Events the user may not read become a note.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.base import names
from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.errors import APIError, APINotFoundError
from gpu_auditor.commands.podreads import why

TIMEOUT = 15.0
POD_LIMIT = 1000
"""Pods of the job read at most (one page): the view lists a few, the counts come from the
job's own evidence."""


@dataclass(frozen=True)
class JobReads:
    kind: jk.JobKind
    obj: dict[str, Any]
    pods: list[Any]
    events: list[Any]
    notes: tuple[str, ...]


def target(word: str) -> tuple[tuple[jk.JobKind, ...], str] | None:
    """(the kinds `KIND/NAME` may mean, NAME) when `word` names a distributed job's kind
    (`jobset/train`, `pytorchjobs/pj`, `lws/x`), else None (a pod, maybe `NAMESPACE/POD`)."""
    kind, slash, name = word.partition("/")
    if not slash or "/" in name:
        return None
    kinds = jk.by_word(kind)
    return (kinds, name) if kinds else None


def read_object(api: ApiClient, kinds: tuple[jk.JobKind, ...], namespace: str, name: str
                ) -> tuple[jk.JobKind, dict[str, Any]]:
    """The first of `kinds` that has an object `name` (an MPIJob of either API); raises the
    last kind's `APIError` or `names.InvalidName`."""
    error: APIError | None = None
    for kind in kinds:
        try:
            obj = api.request("GET", kind.path(namespace, name), timeout=TIMEOUT)
        except APINotFoundError as exc:
            error = exc
            continue
        if not isinstance(obj, dict):
            raise APIError(f"GET {kind.plural}/{name}: not an object", status=200)
        return kind, obj
    assert error is not None
    raise error


def _selector(kind: jk.JobKind, obj: dict[str, Any]) -> str | None:
    name = str((obj.get("metadata") or {}).get("name") or "")
    if kind is jk.RAYJOB:
        status = obj.get("status")
        cluster = status.get("rayClusterName") if isinstance(status, dict) else None
        return f"{jk.RAY_CLUSTER}={cluster}" if names.is_subdomain(cluster) else None
    return jk.pod_selector(kind, name)


def read_all(api: ApiClient, kinds: tuple[jk.JobKind, ...], namespace: str, name: str
             ) -> JobReads:
    """Everything the job view shows; raises only for the job's object itself."""
    namespace = names.namespace(namespace)
    kind, obj = read_object(api, kinds, namespace, names.object_name(name))
    notes: list[str] = []
    pods: list[Any] = []
    selector = _selector(kind, obj)
    base = f"/api/v1/namespaces/{names.segment(namespace)}"
    if selector is None:
        notes.append(f"the {kind.kind}'s pods: no label selects them (no cluster yet)")
    else:
        try:
            body = api.request("GET", f"{base}/pods", timeout=TIMEOUT,
                               query={"labelSelector": selector, "limit": str(POD_LIMIT)})
            items = body.get("items") if isinstance(body, dict) else None
            pods = items if isinstance(items, list) else []
            more = (body.get("metadata") or {}).get("continue") if isinstance(body, dict) \
                else None
            if more:
                notes.append(f"pods past the first {POD_LIMIT}: not read")
        except APIError as exc:
            notes.append(f"the {kind.kind}'s pods: {why(exc)}")
    uid = (obj.get("metadata") or {}).get("uid")
    events: list[Any] = []
    try:
        query = {"fieldSelector": f"involvedObject.uid={uid}"} if names.is_uid(uid) else {}
        body = api.request("GET", f"{base}/events", query=query, timeout=TIMEOUT)
        items = body.get("items") if isinstance(body, dict) else None
        events = items if isinstance(items, list) else []
    except APIError as exc:
        notes.append(f"Events: {why(exc)}")
    return JobReads(kind=kind, obj=obj, pods=pods, events=events, notes=tuple(notes))
