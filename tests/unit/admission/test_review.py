"""AdmissionReview in, response out: warnings by default, a refusal only where asked."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from gpu_auditor.admission.review import (
    MAX_WARNING,
    ReviewError,
    parse_review,
    response,
    validate,
)

pytestmark = pytest.mark.unit


def deployment(value: str | None, *, containers: int = 1) -> dict[str, Any]:
    env = [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": value}] if value is not None else []
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "train", "namespace": "team"},
        "spec": {"template": {"spec": {"containers": [
            {"name": f"c{i}", "image": "img", "env": env} for i in range(containers)
        ]}}},
    }


def review(obj: dict[str, Any], old: dict[str, Any] | None = None,
           operation: str = "CREATE") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": operation, "object": obj, "oldObject": old}}


def test_bad_setting_is_allowed_with_a_warning() -> None:
    outcome = validate(parse_review(review(deployment("expandable_segment:True"))), deny=False)
    assert outcome.allowed and outcome.result == "warned"
    [warning] = outcome.warnings
    assert warning.startswith('gpu-auditor: container "c0": PYTORCH_CUDA_ALLOC_CONF: ')
    assert "did you mean expandable_segments?" in warning


def test_deny_refuses_with_the_warning_text() -> None:
    outcome = validate(parse_review(review(deployment("expandable_segment:True"))), deny=True)
    assert not outcome.allowed and outcome.result == "denied"
    assert outcome.message is not None
    assert outcome.warnings[0].removeprefix("gpu-auditor: ") in outcome.message
    body = response("u-1", outcome)["response"]
    assert body["status"]["code"] == 422 and body["allowed"] is False


def test_valid_or_absent_setting_is_clean() -> None:
    for value in ("expandable_segments:True", None):
        outcome = validate(parse_review(review(deployment(value))), deny=True)
        assert outcome.allowed and outcome.warnings == () and outcome.result == "clean"
        assert "warnings" not in response("u-1", outcome)["response"]


def test_update_keeping_an_old_finding_is_warned_not_refused() -> None:
    bad = deployment("expandable_segment:True")
    outcome = validate(parse_review(review(bad, old=bad, operation="UPDATE")), deny=True)
    assert outcome.allowed and outcome.result == "warned"


def test_update_bringing_a_new_finding_is_refused() -> None:
    request = review(deployment("expandable_segment:True"), old=deployment(None),
                     operation="UPDATE")
    assert not validate(parse_review(request), deny=True).allowed


@pytest.mark.parametrize("body", [
    None, [], {"kind": "AdmissionReview"}, {"apiVersion": "admission.k8s.io/v1beta1",
                                             "kind": "AdmissionReview", "request": {"uid": "x"}},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
     "request": {"uid": "x" * 129}},
])
def test_a_body_that_is_not_a_review_is_refused_as_bad_input(body: object) -> None:
    with pytest.raises(ReviewError):
        parse_review(body)


def test_object_of_any_shape_is_clean_not_a_crash() -> None:
    for obj in ({"kind": "Deployment", "spec": []}, {"kind": "Pod", "spec": {"containers": 1}},
                {"kind": 5}, "x"):
        request = review(obj)  # type: ignore[arg-type]
        assert validate(parse_review(request), deny=True).allowed


def test_many_findings_are_bounded_with_a_count_of_the_rest() -> None:
    outcome = validate(parse_review(review(deployment("x:1", containers=60))), deny=False)
    assert all(len(w) <= MAX_WARNING for w in outcome.warnings)
    assert sum(len(w) for w in outcome.warnings) <= 3500
    assert "more findings not shown" in outcome.warnings[-1]


def test_response_patch_is_base64_json_patch() -> None:
    from gpu_auditor.admission.review import Outcome

    outcome = Outcome(True, "injected", (), patch=[{"op": "add", "path": "/x", "value": 1}])
    body = response("u", outcome)["response"]
    assert body["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(body["patch"])) == [{"op": "add", "path": "/x",
                                                             "value": 1}]


def test_containers_past_the_checked_number_are_named_not_checked() -> None:
    from gpu_auditor.admission.objects import check_object

    [checked] = check_object(deployment("x:1", containers=130))
    assert len(checked.findings) == 129
    assert checked.findings[-1].kind == "not-checked"
    assert "2 containers after the first 128 not checked" in checked.findings[-1].message


def test_a_pod_made_by_a_controller_is_warned_not_refused() -> None:
    """Its template was checked when the workload was written; refusing its pods would break a
    workload admitted before the namespace opted into deny."""
    pod = {"kind": "Pod", "metadata": {"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u",
         "controller": True}]},
        "spec": deployment("expandable_segment:True")["spec"]["template"]["spec"]}
    outcome = validate(parse_review(review(pod)), deny=True)
    assert outcome.allowed and outcome.result == "warned"
    del pod["metadata"]["ownerReferences"][0]["controller"]
    assert not validate(parse_review(review(pod)), deny=True).allowed

def test_values_that_are_not_strings_are_unset_not_text() -> None:
    """JSON cannot alias, but it can carry a number where the API server wants a string: it
    was checked as its str() ("128": a syntax finding). Now it reads as unset, as in YAML."""
    pod = {"kind": "Pod", "metadata": {"name": 5}, "spec": {"containers": [
        {"name": 7, "image": 1.5, "env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": 128},
                                          {"name": "TORCH_VERSION", "value": 2.1}]}]}}
    outcome = validate(parse_review(review(pod)), deny=True)
    assert outcome.allowed and outcome.result == "clean"
