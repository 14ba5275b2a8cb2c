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

    [checked] = check_object(deployment("expandable_segments:True", containers=130))
    [finding] = checked.findings
    assert finding.kind == "not-checked"
    assert finding.message == "2 containers after the first 128 not checked"


def many_problems(containers: int, seed: int = 0) -> dict[str, Any]:
    """A Pod whose every container sets 4 KiB of distinct unknown keys (340 findings each)."""
    def value(i: int) -> str:
        return ",".join(f"k{seed}x{i:02d}x{j:03d}:1" for j in range(340))

    return {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": f"c{i}", "image": "x",
         "env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": value(i)}]}
        for i in range(containers)]}}


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every did-you-mean search (the work counter: each is a difflib scan)."""
    import gpu_auditor.admission.findings as findings

    seen: list[str] = []
    real = findings.difflib.get_close_matches

    def counting(word: str, *args: Any, **kwargs: Any) -> list[str]:
        seen.append(word)
        return real(word, *args, **kwargs)

    monkeypatch.setattr(findings.difflib, "get_close_matches", counting)
    return seen


def test_many_containers_of_many_problems_cost_a_bounded_number_of_searches(
    searches: list[str]
) -> None:
    """64 such containers (of 572 keys) took 16 s, 128 took 41 s: a finding and a difflib
    search per key, and a list scan per line to drop repeats. Now 8 containers' 7 searches,
    then one finding for the containers left."""
    from gpu_auditor.admission.review import findings_text

    lines = findings_text(many_problems(32))
    assert len(searches) == 8 * 7
    assert len(lines) == 8 * 8 + 1
    assert lines[-1].endswith("24 containers after 64 findings not checked")
    outcome = validate(parse_review(review(many_problems(32))), deny=False)
    assert sum(len(w) for w in outcome.warnings) <= 3500


def test_an_update_checks_object_and_old_object_each_within_the_bound(
    searches: list[str]
) -> None:
    request = review(many_problems(32), old=many_problems(32, seed=1), operation="UPDATE")
    outcome = validate(parse_review(request), deny=True)
    assert not outcome.allowed and len(searches) == 2 * 8 * 7


def test_repeated_lines_are_warned_once_in_their_order() -> None:
    from gpu_auditor.admission.review import findings_text

    pod = {"kind": "Pod", "spec": {"containers": [
        {"name": "a", "env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": v}]}
        for v in ("x:1", "y:1", "x:1", "y:1")]}}
    lines = findings_text(pod)
    assert len(lines) == 2 and "'x'" in lines[0] and "'y'" in lines[1]


def controlled_pod(namespace: str = "team") -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"namespace": namespace, "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u",
         "controller": True}]},
        "spec": deployment("expandable_segment:True")["spec"]["template"]["spec"]}


def by(user: str, obj: dict[str, Any], *groups: str) -> dict[str, Any]:
    body = review(obj)
    body["request"]["namespace"] = "team"
    body["request"]["userInfo"] = {"username": user, "groups": list(groups)}
    return body


@pytest.mark.parametrize(("user", "groups"), [
    ("system:serviceaccount:kube-system:replicaset-controller", ()),
    ("system:kube-controller-manager", ()),
    ("system:serviceaccount:kubeflow:training-operator", ()),
    ("admin", ("system:masters", "system:authenticated")),
])
def test_a_pod_a_controller_made_is_warned_not_refused(user: str, groups: tuple[str]) -> None:
    """Its template was checked when the workload was written; refusing its pods would break a
    workload admitted before the namespace opted into deny."""
    outcome = validate(parse_review(by(user, controlled_pod(), *groups)), deny=True)
    assert outcome.allowed and outcome.result == "warned"


@pytest.mark.parametrize("user", [
    "alice", "oidc:bob@example.com", "system:serviceaccount:team:default",
    "system:serviceaccount:team:ci", "system:anonymous", "",
])
def test_a_tenant_s_pod_claiming_a_controller_is_refused_like_a_bare_pod(user: str) -> None:
    """Any owner reference can be written into a pod: `controller: true` alone let a bare pod
    through a deny namespace with a warning. Who sent it the API server vouches for."""
    outcome = validate(parse_review(by(user, controlled_pod(), "system:authenticated")),
                       deny=True)
    assert not outcome.allowed and outcome.result == "denied"


def test_without_a_controller_reference_even_a_controller_is_refused() -> None:
    pod = controlled_pod()
    del pod["metadata"]["ownerReferences"][0]["controller"]
    body = by("system:serviceaccount:kube-system:replicaset-controller", pod)
    assert not validate(parse_review(body), deny=True).allowed


def test_a_user_info_of_another_shape_is_a_tenant() -> None:
    body = review(controlled_pod())
    body["request"]["userInfo"] = {"username": ["system:masters"], "groups": "system:masters"}
    assert not validate(parse_review(body), deny=True).allowed


def test_values_that_are_not_strings_are_unset_not_text() -> None:
    """JSON cannot alias, but it can carry a number where the API server wants a string: it
    was checked as its str() ("128": a syntax finding). Now it reads as unset, as in YAML."""
    pod = {"kind": "Pod", "metadata": {"name": 5}, "spec": {"containers": [
        {"name": 7, "image": 1.5, "env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": 128},
                                          {"name": "TORCH_VERSION", "value": 2.1}]}]}}
    outcome = validate(parse_review(review(pod)), deny=True)
    assert outcome.allowed and outcome.result == "clean"
