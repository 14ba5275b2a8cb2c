"""Thin calls to the Kubernetes API, with the errors the operator acts on made explicit."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpu_auditor.controller import metrics
from gpu_auditor.controller.nodereport import GROUP, PLURAL, VERSION

T = TypeVar("T")


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
    except ApiException as exc:
        if exc.status == 404:
            raise Gone(str(exc.reason)) from exc
        if exc.status in (429,) or (exc.status or 0) >= 500:
            raise Retry(f"{verb}: {exc.status} {exc.reason}") from exc
        raise
    except (OSError, ConnectionError) as exc:  # urllib3 errors derive from these
        raise Retry(f"{verb}: {exc}") from exc


class KubeApi:
    """The API calls the operator makes, nothing else (see RBAC in the chart)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod = _call("get_pod", lambda: self.core.read_namespaced_pod(
            name, namespace, _preload_content=False))
        import json

        return dict(json.loads(pod.data))

    def read_log(
        self, namespace: str, name: str, container: str, *, previous: bool,
        tail_lines: int, limit_bytes: int,
    ) -> bytes:
        """The container's log tail as raw bytes (bounded by both limits)."""
        try:
            response = _call("get_log", lambda: self.core.read_namespaced_pod_log(
                name, namespace, container=container, previous=previous,
                tail_lines=tail_lines, limit_bytes=limit_bytes, _preload_content=False,
                _request_timeout=(5, 30),
            ))
        except Gone:
            raise
        except Retry as exc:
            raise LogUnavailable("unavailable", str(exc)) from exc
        except ApiException as exc:
            reason = {403: "forbidden", 400: "bad-request"}.get(exc.status or 0, "error")
            raise LogUnavailable(reason, str(exc.reason)) from exc
        data: bytes = response.data
        return data[:limit_bytes]

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        _call("patch_pod", lambda: self.core.patch_namespaced_pod(name, namespace, body))

    def post_event(
        self, pod: Mapping[str, Any], *, name: str, reason: str, message: str,
        event_type: str = "Warning",
    ) -> bool:
        """Create the Event; False when an Event of that name exists already (posted before)."""
        meta = pod.get("metadata") or {}
        now = dt.datetime.now(dt.UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=name, namespace=meta.get("namespace")),
            involved_object=client.V1ObjectReference(
                api_version="v1", kind="Pod", name=meta.get("name"),
                namespace=meta.get("namespace"), uid=meta.get("uid"),
            ),
            reason=reason, message=message, type=event_type, count=1,
            first_timestamp=now, last_timestamp=now,
            source=client.V1EventSource(component="gpu-auditor"),
            reporting_component="gpu-auditor.io/operator", reporting_instance="gpu-auditor",
        )
        try:
            _call("create_event", lambda: self.core.create_namespaced_event(
                meta.get("namespace"), body))
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def read_node_report(self, node: str) -> dict[str, Any] | None:
        try:
            obj = _call("get_report", lambda: self.custom.get_cluster_custom_object(
                GROUP, VERSION, PLURAL, node))
        except Gone:
            return None
        except ApiException as exc:
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
        kind, name = owner.get("kind"), str(owner.get("name"))
        if kind == "ReplicaSet":
            rs = _call("get_replicaset", lambda: self.apps.read_namespaced_replica_set(
                name, namespace))
            parent = next((o for o in rs.metadata.owner_references or [] if o.controller), None)
            if parent is None or parent.kind != "Deployment":
                return None
            kind, name = "Deployment", parent.name
        body = {"metadata": {"annotations": dict(annotations)}}
        patchers: dict[str, Callable[[], object]] = {
            "Job": lambda: self.batch.patch_namespaced_job(name, namespace, body),
            "Deployment": lambda: self.apps.patch_namespaced_deployment(name, namespace, body),
            "StatefulSet": lambda: self.apps.patch_namespaced_stateful_set(name, namespace, body),
            "DaemonSet": lambda: self.apps.patch_namespaced_daemon_set(name, namespace, body),
        }
        if kind not in patchers:
            return None
        _call(f"patch_{str(kind).lower()}", patchers[str(kind)])
        return f"{kind}/{name}"
