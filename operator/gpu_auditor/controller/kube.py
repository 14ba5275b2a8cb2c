"""Thin calls to the Kubernetes API, with the errors the operator acts on made explicit.

Built on the standard-library client the node agent uses (`node_agent.apiclient`), not on the
`kubernetes` package: importing that package's models costs the operator 20-30 MiB of RSS
(bench/results/operator_scale.md), for eight kinds of request.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

from gpu_auditor.controller import metrics
from gpu_auditor.controller.nodereport import GROUP, PLURAL, VERSION
from node_agent.apiclient import ApiClient, ApiError

T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
TIMEOUT = 30.0
LOG_TIMEOUT = 60.0


class Gone(Exception):
    """The object no longer exists (404): nothing to do."""


class LogUnavailable(Exception):
    """The log could not be read; `reason` labels the failure metric."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class Retry(Exception):
    """A transient API failure (5xx, 429, connection): try again later."""


def _call(verb: str, fn: Callable[[], T]) -> T:
    metrics.API_REQUESTS.labels(verb).inc()
    try:
        return fn()
    except ApiError as exc:
        if exc.status == 404:
            raise Gone(exc.reason) from exc
        if exc.status is None or exc.status == 429 or exc.status >= 500:
            raise Retry(f"{verb}: {exc}") from exc
        raise


def _ns(namespace: str, *parts: str) -> str:
    return "/".join([f"/api/v1/namespaces/{quote(namespace)}", *(quote(p) for p in parts)])


class KubeApi:
    """The API calls the operator makes, nothing else (see RBAC in docs/operator.md)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod: dict[str, Any] = _call("get_pod", lambda: self.api.request(
            "GET", _ns(namespace, "pods", name), timeout=TIMEOUT))
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
        try:
            data = _call("get_log", lambda: self.api.request_bytes(
                "GET", _ns(namespace, "pods", name, "log"), query=query, timeout=LOG_TIMEOUT))
        except Gone:
            raise
        except Retry as exc:
            raise LogUnavailable("unavailable", str(exc)) from exc
        except ApiError as exc:
            reason = {403: "forbidden", 400: "bad-request"}.get(exc.status or 0, "error")
            raise LogUnavailable(reason, exc.reason) from exc
        return data[:limit_bytes]

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        _call("patch_pod", lambda: self.api.request(
            "PATCH", _ns(namespace, "pods", name), body=body, content_type=MERGE_PATCH,
            timeout=TIMEOUT))

    def post_event(
        self, pod: Mapping[str, Any], *, name: str, reason: str, message: str,
        event_type: str = "Warning",
    ) -> bool:
        """Create the Event; False when an Event of that name exists already (posted before)."""
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"),
                               "namespace": namespace, "uid": meta.get("uid")},
            "reason": reason, "message": message, "type": event_type, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": "gpu-auditor"},
            "reportingComponent": "gpu-auditor.io/operator", "reportingInstance": "gpu-auditor",
        }
        try:
            _call("create_event", lambda: self.api.request(
                "POST", _ns(namespace, "events"), body=body, timeout=TIMEOUT))
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def read_node_report(self, node: str) -> dict[str, Any] | None:
        path = f"/apis/{GROUP}/{VERSION}/{PLURAL}/{quote(node)}"
        try:
            obj = _call("get_report", lambda: self.api.request("GET", path, timeout=TIMEOUT))
        except Gone:
            return None
        except ApiError as exc:
            if exc.status == 403:
                return None
            raise
        return dict(obj.get("spec") or {})

    def patch_owner(
        self, namespace: str, owner_references: list[Mapping[str, Any]],
        annotations: Mapping[str, str],
    ) -> str | None:
        """Annotate the workload that owns the pod: a Job, or the Deployment behind a
        ReplicaSet, or a StatefulSet / DaemonSet. Returns `Kind/name` or None."""
        owner = next((o for o in owner_references if o.get("controller")), None)
        if owner is None:
            return None
        kind, name = str(owner.get("kind")), str(owner.get("name"))
        apps = f"/apis/apps/v1/namespaces/{quote(namespace)}"
        if kind == "ReplicaSet":
            rs = _call("get_replicaset", lambda: self.api.request(
                "GET", f"{apps}/replicasets/{quote(name)}", timeout=TIMEOUT))
            parent = next((o for o in rs.get("metadata", {}).get("ownerReferences") or []
                           if o.get("controller")), None)
            if parent is None or parent.get("kind") != "Deployment":
                return None
            kind, name = "Deployment", str(parent.get("name"))
        collections = {
            "Job": f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs",
            "Deployment": f"{apps}/deployments",
            "StatefulSet": f"{apps}/statefulsets",
            "DaemonSet": f"{apps}/daemonsets",
        }
        if kind not in collections:
            return None
        body = {"metadata": {"annotations": dict(annotations)}}
        _call(f"patch_{kind.lower()}", lambda: self.api.request(
            "PATCH", f"{collections[kind]}/{quote(name)}", body=body, content_type=MERGE_PATCH,
            timeout=TIMEOUT))
        return f"{kind}/{name}"
