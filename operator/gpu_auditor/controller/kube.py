"""The operator's calls to the Kubernetes API over the shared client, nothing else.

The transport, config, credentials and error classes are the base's (`gpu_auditor.base`):
failures arrive as one `APIError` class per status; here each request is counted, and a failed
one counted by its class's `reason` (`gpu_auditor_operator_api_errors_total`).

Every name in a request path is validated (`names`) and escaped segment by segment before any
request; every write to an object names the UID the operator means (`metadata.uid` in the merge
patch), so the API server refuses it when the name now belongs to another object.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from gpu_auditor.base import names
from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.contract import EVENT_COMPONENT
from gpu_auditor.base.errors import (
    TRANSIENT,
    APIBadRequestError,
    APIConflictError,
    APIError,
    APIForbiddenError,
    APINotFoundError,
)
from gpu_auditor.base.jobkinds import JobKind
from gpu_auditor.base.nodereport import GROUP, PLURAL, VERSION
from gpu_auditor.controller import metrics

T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
TIMEOUT = 30.0
LOG_TIMEOUT = 60.0


class LogUnavailable(Exception):
    """The log could not be read; `reason` labels the failure metric."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def _call(verb: str, fn: Callable[[], T]) -> T:
    metrics.API_REQUESTS.labels(verb).inc()
    try:
        return fn()
    except APIError as exc:
        metrics.API_ERRORS.labels(verb, exc.reason).inc()
        raise


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about."""

    namespace: str
    name: str
    uid: str
    kind: str = "Pod"
    api_version: str = "v1"


def _ns(namespace: str, *parts: str) -> str:
    """`/api/v1/namespaces/<ns>/<parts...>`, each segment validated upstream and escaped here."""
    return "/".join([f"/api/v1/namespaces/{names.segment(namespace)}",
                     *(names.segment(p) for p in parts)])


@dataclass(frozen=True)
class Workload:
    """A kind of object the operator annotates as the owner of a pod."""

    kind: str
    api_version: str
    plural: str

    def path(self, namespace: str, name: str) -> str:
        group_version = self.api_version
        return (f"/apis/{group_version}/namespaces/{names.segment(names.namespace(namespace))}"
                f"/{self.plural}/{names.segment(names.object_name(name))}")


WORKLOADS = {w.kind: w for w in (
    Workload("Job", "batch/v1", "jobs"),
    Workload("ReplicaSet", "apps/v1", "replicasets"),
    Workload("Deployment", "apps/v1", "deployments"),
    Workload("StatefulSet", "apps/v1", "statefulsets"),
    Workload("DaemonSet", "apps/v1", "daemonsets"),
)}
"""Owner kinds the operator follows (a ReplicaSet only to reach its Deployment)."""


def _metadata_patch(uid: str | None, annotations: Mapping[str, str | None]) -> dict[str, Any]:
    meta: dict[str, Any] = {"annotations": dict(annotations)}
    if uid:
        # A precondition: the API server refuses the patch when the object of that name has
        # another UID (it was deleted and recreated, or a reference named the wrong one).
        meta["uid"] = uid
    return {"metadata": meta}


class KubeApi:
    """The API calls the operator makes, nothing else (see RBAC in docs/operator.md)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        path = _ns(names.namespace(namespace), "pods", names.object_name(name))
        pod: dict[str, Any] = _call("get_pod", lambda: self.api.request(
            "GET", path, timeout=TIMEOUT))
        return pod

    def read_log(
        self, namespace: str, name: str, container: str, *, previous: bool,
        tail_lines: int, limit_bytes: int,
    ) -> bytes:
        """The container's log tail as raw bytes (bounded by both limits)."""
        query = {"container": container, "tailLines": str(tail_lines),
                 "limitBytes": str(limit_bytes)}
        if previous:
            query["previous"] = "true"
        path = _ns(names.namespace(namespace), "pods", names.object_name(name), "log")
        try:
            data = _call("get_log", lambda: self.api.request_bytes(
                "GET", path, query=query, timeout=LOG_TIMEOUT))
        except APINotFoundError:
            raise
        except TRANSIENT as exc:
            raise LogUnavailable("unavailable", str(exc)) from exc
        except APIForbiddenError as exc:
            raise LogUnavailable("forbidden", str(exc)) from exc
        except APIBadRequestError as exc:
            raise LogUnavailable("bad-request", str(exc)) from exc
        except APIError as exc:
            raise LogUnavailable("error", str(exc)) from exc
        return data[:limit_bytes]

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None],
        *, uid: str | None = None,
    ) -> None:
        """Merge `annotations` into the pod's; with `uid`, only onto the pod of that UID."""
        path = _ns(names.namespace(namespace), "pods", names.object_name(name))
        body = _metadata_patch(uid, annotations)
        _call("patch_pod", lambda: self.api.request(
            "PATCH", path, body=body, content_type=MERGE_PATCH, timeout=TIMEOUT))

    def post_event(
        self, about: ObjectRef, *, name: str, reason: str, message: str,
        event_type: str = "Warning",
    ) -> bool:
        """Create the Event; False when an Event of that name exists already (posted before)."""
        namespace = names.namespace(about.namespace)
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": names.object_name(name), "namespace": namespace},
            "involvedObject": {"apiVersion": about.api_version, "kind": about.kind,
                               "name": about.name, "namespace": namespace, "uid": about.uid},
            "reason": reason, "message": message, "type": event_type, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": "gpu-auditor.io/operator", "reportingInstance": "gpu-auditor",
        }
        try:
            _call("create_event", lambda: self.api.request(
                "POST", _ns(namespace, "events"), body=body, timeout=TIMEOUT))
        except APIConflictError:
            return False
        return True

    def read_node_report(self, node: str) -> dict[str, Any] | None:
        """The whole GPUNodeReport object of `node`, or None (absent, or not readable)."""
        path = f"/apis/{GROUP}/{VERSION}/{PLURAL}/{names.segment(names.object_name(node))}"
        try:
            obj: dict[str, Any] = _call("get_report", lambda: self.api.request(
                "GET", path, timeout=TIMEOUT))
        except (APINotFoundError, APIForbiddenError):
            return None
        return obj

    def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        workload = WORKLOADS[kind]
        path = workload.path(namespace, name)
        obj: dict[str, Any] = _call(f"get_{kind.lower()}", lambda: self.api.request(
            "GET", path, timeout=TIMEOUT))
        return obj

    def patch_workload(
        self, kind: str, namespace: str, name: str, uid: str,
        annotations: Mapping[str, str | None],
    ) -> None:
        """Merge `annotations` into the workload's (None removes one), only if it still has
        `uid`."""
        workload = WORKLOADS[kind]
        path = workload.path(namespace, name)
        body = _metadata_patch(uid, annotations)
        _call(f"patch_{kind.lower()}", lambda: self.api.request(
            "PATCH", path, body=body, content_type=MERGE_PATCH, timeout=TIMEOUT))

    def read_object(self, kind: JobKind, namespace: str, name: str) -> dict[str, Any]:
        """A distributed job's object (or a link of its chain) of a `base.jobkinds` kind."""
        path = kind.path(namespace, name)
        obj: dict[str, Any] = _call(f"get_{kind.kind.lower()}", lambda: self.api.request(
            "GET", path, timeout=TIMEOUT))
        return obj

    def patch_object(
        self, kind: JobKind, namespace: str, name: str, uid: str,
        annotations: Mapping[str, str | None],
    ) -> None:
        """Merge `annotations` into a distributed job's object (None removes one), only if it
        still has `uid`."""
        path = kind.path(namespace, name)
        body = _metadata_patch(uid, annotations)
        _call(f"patch_{kind.kind.lower()}", lambda: self.api.request(
            "PATCH", path, body=body, content_type=MERGE_PATCH, timeout=TIMEOUT))
