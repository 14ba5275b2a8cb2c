"""Request paths and error classes: what reaches the API server for a given name, and what the
operator catches for a given status (with a recording stand-in for the HTTP transport, which
raises the base's class for each status as the real client does)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from gpu_auditor.base import names
from gpu_auditor.base.errors import (
    APIBadRequestError,
    APIClientError,
    APIConflictError,
    APIConnectionError,
    APIError,
    APIForbiddenError,
    APINotFoundError,
    APIServerError,
    APITooManyRequestsError,
    APIUnauthorizedError,
    from_status,
)
from gpu_auditor.controller.kube import KubeApi, LogUnavailable, ObjectRef

pytestmark = pytest.mark.unit


class Recorder:
    def __init__(self, status: int | None = 0) -> None:
        self.status = status
        self.requests: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        self.requests.append((method, path, kw.get("body")))
        if self.status is None:
            raise APIConnectionError("no answer")
        if self.status != 0:
            raise from_status(self.status, "refused")
        return {"metadata": {"uid": "u"}}

    request_bytes = request


@pytest.mark.parametrize("name", ["../jobs/victim", "a/b", "a?b=c", "a%2Fb", "", "A", "x" * 254,
                                  "a..b", ".a", "a-"])
def test_a_name_that_is_not_a_kubernetes_name_never_becomes_a_request(name: str) -> None:
    http = Recorder()
    api = KubeApi(http)  # type: ignore[arg-type]
    for call in (lambda: api.read_pod("ml", name), lambda: api.read_pod(name, "p"),
                 lambda: api.patch_pod_annotations("ml", name, {}),
                 lambda: api.read_workload("Job", "ml", name),
                 lambda: api.patch_workload("Deployment", "ml", name, "u", {}),
                 lambda: api.read_node_report(name),
                 lambda: api.read_log("ml", name, "main", previous=False, tail_lines=1,
                                      limit_bytes=1024)):
        with pytest.raises(names.InvalidName):
            call()
    assert http.requests == []


def test_workload_paths_and_the_uid_precondition_in_every_write() -> None:
    http = Recorder()
    api = KubeApi(http)  # type: ignore[arg-type]
    api.read_workload("ReplicaSet", "ml", "web-5d9f")
    api.patch_workload("Job", "ml", "train.v2", "job-uid", {"gpu-auditor.io/diagnosis": "x"})
    api.patch_pod_annotations("ml", "train-x", {"k": None}, uid="pod-uid")
    assert http.requests == [
        ("GET", "/apis/apps/v1/namespaces/ml/replicasets/web-5d9f", None),
        ("PATCH", "/apis/batch/v1/namespaces/ml/jobs/train.v2",
         {"metadata": {"annotations": {"gpu-auditor.io/diagnosis": "x"}, "uid": "job-uid"}}),
        ("PATCH", "/api/v1/namespaces/ml/pods/train-x",
         {"metadata": {"annotations": {"k": None}, "uid": "pod-uid"}}),
    ]


@pytest.mark.parametrize(("status", "error", "reason"), [
    (404, APINotFoundError, "not-found"), (403, APIForbiddenError, "forbidden"),
    (409, APIConflictError, "conflict"), (400, APIBadRequestError, "invalid"),
    (422, APIBadRequestError, "invalid"), (429, APITooManyRequestsError, "unavailable"),
    (500, APIServerError, "unavailable"), (503, APIServerError, "unavailable"),
    (None, APIConnectionError, "unavailable"), (401, APIUnauthorizedError, "error"),
    (418, APIClientError, "error"),
])
def test_each_status_is_one_error_class_and_counted(status: int | None, error: type[APIError],
                                                    reason: str) -> None:
    api = KubeApi(Recorder(status))  # type: ignore[arg-type]
    labels = {"verb": "patch_pod", "reason": reason}
    before = REGISTRY.get_sample_value("gpu_auditor_operator_api_errors_total", labels) or 0
    with pytest.raises(error) as caught:
        api.patch_pod_annotations("ml", "p", {})
    assert type(caught.value) is error
    after = REGISTRY.get_sample_value("gpu_auditor_operator_api_errors_total", labels)
    assert after == before + 1


def test_an_event_that_exists_already_is_not_an_error() -> None:
    api = KubeApi(Recorder(409))  # type: ignore[arg-type]
    pod = ObjectRef("ml", "p", "u")
    assert api.post_event(pod, name="p.gpu-auditor.0123", reason="R", message="m") is False


@pytest.mark.parametrize(("status", "reason"), [(403, "forbidden"), (400, "bad-request"),
                                                (503, "unavailable"), (401, "error")])
def test_a_log_read_failure_has_a_reason(status: int, reason: str) -> None:
    api = KubeApi(Recorder(status))  # type: ignore[arg-type]
    with pytest.raises(LogUnavailable) as caught:
        api.read_log("ml", "p", "main", previous=True, tail_lines=1, limit_bytes=1024)
    assert caught.value.reason == reason


def test_an_unreadable_node_report_is_none() -> None:
    for status in (403, 404):
        assert KubeApi(Recorder(status)).read_node_report("gpu-1") is None  # type: ignore[arg-type]
