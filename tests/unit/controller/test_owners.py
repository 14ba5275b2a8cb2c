"""The owner a pod's diagnosis is copied onto: its controller reference names the object with
its UID *and* that object's selector selects the pod, as its own controller decides (a pod it
does not select it releases; one it selects it counts as its own)."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.controller import owners
from gpu_auditor.controller.pod import controller_reference

from .controller_helpers import (
    ERROR,
    FIXTURE,
    JOB_POD_LABELS,
    PREFIX,
    fragmentation_kube,
    job_pod,
    make_services,
    metric,
)

pytestmark = pytest.mark.unit

REFUSED = "gpu_auditor_operator_owner_writes_refused_total"


def _refused(kube: Any) -> float:
    """Owner writes refused as not-selected while the pod is handled."""
    before = metric(REFUSED, reason="not-selected")
    make_services(kube).handle_pod(kube.pod)
    return metric(REFUSED, reason="not-selected") - before


def test_a_bare_pod_naming_another_teams_job_with_its_real_uid_leaves_the_job_alone() -> None:
    # the adversary's case: the Job's real UID (anyone who may get the Job reads it), none of
    # the labels the Job's pods carry
    kube = fragmentation_kube(_owned("Job", "team-b-train", "job-uid-b", labels={"app": "x"}))
    kube.workloads[("Job", "team-b-train")] = _job("job-uid-b")
    assert _refused(kube) == 1
    assert kube.workload_reads == [("Job", "team-b-train")]  # examined, then refused
    assert kube.workload_patches == []
    assert kube.pod["metadata"]["annotations"]["gpu-auditor.io/diagnosis"] == "fragmentation"


def test_the_jobs_own_pod_with_the_same_reference_is_written() -> None:
    kube = fragmentation_kube(_owned("Job", "team-b-train", "job-uid-b",
                                 labels={"batch.kubernetes.io/controller-uid": "job-uid-b"}))
    kube.workloads[("Job", "team-b-train")] = _job("job-uid-b")
    assert _refused(kube) == 0
    assert [(k, n, u) for k, n, u, _ in kube.workload_patches] == [
        ("Job", "team-b-train", "job-uid-b")]


def test_a_job_pod_of_an_older_release_with_only_the_legacy_label_is_written() -> None:
    kube = fragmentation_kube(_owned("Job", "train", "job-uid",
                                     labels={"controller-uid": "job-uid"}))
    kube.workloads[("Job", "train")] = _job("job-uid", {"matchLabels": {
        "controller-uid": "job-uid"}})
    assert _refused(kube) == 0 and len(kube.workload_patches) == 1


def test_a_generated_selector_needs_the_controller_uid_label_of_the_job() -> None:
    # a selector that names no UID (never generated so, but the label is what the API server
    # guarantees): the pod's controller-uid must still be the Job's
    selector = {"matchLabels": {"app": "train"}}
    kube = fragmentation_kube(_owned("Job", "train", "job-uid", labels={"app": "train"}))
    kube.workloads[("Job", "train")] = _job("job-uid", selector)
    assert _refused(kube) == 1 and kube.workload_patches == []
    labelled = {"app": "train", "batch.kubernetes.io/controller-uid": "other-uid",
                "controller-uid": "job-uid"}  # the current label wins over the legacy one
    kube = fragmentation_kube(_owned("Job", "train", "job-uid", labels=labelled))
    kube.workloads[("Job", "train")] = _job("job-uid", selector)
    assert _refused(kube) == 1 and kube.workload_patches == []


def test_a_manual_selector_job_is_written_when_its_selector_selects_the_pod() -> None:
    selector = {"matchLabels": {"app": "train"}}
    kube = fragmentation_kube(_owned("Job", "train", "job-uid", labels={"app": "train"}))
    kube.workloads[("Job", "train")] = _job("job-uid", selector, manual=True)
    assert _refused(kube) == 0 and len(kube.workload_patches) == 1
    kube = fragmentation_kube(_owned("Job", "train", "job-uid", labels={"app": "other"}))
    kube.workloads[("Job", "train")] = _job("job-uid", selector, manual=True)
    assert _refused(kube) == 1 and kube.workload_patches == []


def test_a_manual_selector_that_is_not_true_is_a_generated_one() -> None:
    selector = {"matchLabels": {"app": "train"}}
    kube = fragmentation_kube(_owned("Job", "train", "job-uid", labels={"app": "train"}))
    kube.workloads[("Job", "train")] = _job("job-uid", selector, manual=False)
    assert _refused(kube) == 1


def test_a_reference_without_controller_true_is_not_followed() -> None:
    for flag in (False, None, "true"):
        pod = _owned("Job", "train", "job-uid", labels=dict(JOB_POD_LABELS))
        pod["metadata"]["ownerReferences"][0]["controller"] = flag
        kube = fragmentation_kube(pod)
        kube.workloads[("Job", "train")] = _job("job-uid")
        make_services(kube).handle_pod(kube.pod)
        assert (kube.workload_reads, kube.workload_patches) == ([], [])


def test_a_replica_set_that_does_not_select_the_pod_is_refused() -> None:
    kube = fragmentation_kube(_web_pod({"app": "web"}))  # no pod-template-hash
    kube.workloads[("ReplicaSet", "web-1")] = _replica_set("dep-uid")
    kube.workloads[("Deployment", "web")] = _deployment()
    assert _refused(kube) == 1
    assert kube.workload_reads == [("ReplicaSet", "web-1")] and kube.workload_patches == []


def test_a_deployment_that_does_not_select_the_pod_is_refused() -> None:
    kube = fragmentation_kube(_web_pod())
    kube.workloads[("ReplicaSet", "web-1")] = _replica_set("dep-uid")
    kube.workloads[("Deployment", "web")] = _deployment({"matchLabels": {"app": "api"}})
    assert _refused(kube) == 1 and kube.workload_patches == []


def test_a_deployment_that_does_not_select_the_replica_set_is_refused() -> None:
    # a ReplicaSet someone created naming the Deployment: the Deployment controller would
    # release it, since its selector does not match the ReplicaSet's own labels
    kube = fragmentation_kube(_web_pod())
    kube.workloads[("ReplicaSet", "web-1")] = _replica_set("dep-uid", labels={"app": "other"})
    kube.workloads[("Deployment", "web")] = _deployment()
    assert _refused(kube) == 1 and kube.workload_patches == []
    kube = fragmentation_kube(_web_pod())
    kube.workloads[("ReplicaSet", "web-1")] = _replica_set("dep-uid")
    kube.workloads[("ReplicaSet", "web-1")]["metadata"]["labels"] = "not a map"
    kube.workloads[("Deployment", "web")] = _deployment()
    assert _refused(kube) == 1 and kube.workload_patches == []


@pytest.mark.parametrize("kind", ["StatefulSet", "DaemonSet"])
def test_a_stateful_set_or_daemon_set_is_written_only_when_it_selects_the_pod(kind: str) -> None:
    workload = {"metadata": {"uid": "w-uid"}, "spec": {"selector": {"matchLabels": {
        "app": "db"}}}}
    kube = fragmentation_kube(_owned(kind, "db", "w-uid", "apps/v1", labels={"app": "db"}))
    kube.workloads[(kind, "db")] = workload
    assert _refused(kube) == 0 and len(kube.workload_patches) == 1
    kube = fragmentation_kube(_owned(kind, "db", "w-uid", "apps/v1", labels={"app": "web"}))
    kube.workloads[(kind, "db")] = workload
    assert _refused(kube) == 1 and kube.workload_patches == []


def test_an_owner_without_a_selector_selects_no_pod() -> None:
    """Every caller passes the pod's labels (no path walks the references alone): a Job read
    back without a selector is refused."""

    class Workloads:
        def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
            return {"metadata": {"uid": "job-uid"}}

    ref = controller_reference([{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                 "uid": "job-uid", "controller": True}])
    with pytest.raises(owners.OwnerRefused, match="not-selected"):
        owners.verified_owner(Workloads(), "ml", ref, JOB_POD_LABELS)


POD = {"app": "web", "tier": "front", "pod-template-hash": "5d9f"}


@pytest.mark.parametrize(
    ("selector", "selects"),
    [
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "web", "tier": "front"}}, True),
        ({"matchLabels": {"app": "web", "tier": "back"}}, False),
        ({"matchLabels": {"app": "api"}}, False),
        ({"matchLabels": {"missing": ""}}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["back"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]},
         False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["back"]}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]}, False),
        ({"matchLabels": {"app": "web"},
          "matchExpressions": [{"key": "tier", "operator": "In", "values": ["back"]}]}, False),
        ({"matchLabels": {"app": "web"},
          "matchExpressions": [{"key": "tier", "operator": "Exists"},
                               {"key": "zone", "operator": "DoesNotExist"}]}, True),
        ({}, False),  # empty: the API server gives no controller one
        ({"matchLabels": {}, "matchExpressions": []}, False),
        (None, False),
        ("app=web", False),
        ({"matchLabels": ["app", "web"]}, False),
        ({"matchExpressions": {"key": "tier", "operator": "Exists"}}, False),
        ({"matchExpressions": ["tier"]}, False),
        ({"matchExpressions": [{"key": 7, "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": "front"}]}, False),
        ({"matchLabels": {"app": 7}}, False),
    ],
    ids=[f"case{i}" for i in range(28)],
)
def test_a_selector_selects_as_kubernetes_does(selector: object, selects: bool) -> None:
    assert owners.selector_matches(selector, POD) is selects


def test_web_pods_carry_what_their_replica_set_selects() -> None:
    assert owners.selector_matches(_replica_set("dep-uid")["spec"]["selector"], WEB_POD_LABELS)


# Through the operator: the owner gets the summary only when verified.

def _owned(kind: str, name: str, uid: str, api_version: str = "batch/v1",
           labels: dict[str, str] | None = None) -> dict[str, Any]:
    pod = job_pod(ERROR)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}]
    if labels is not None:
        pod["metadata"]["labels"] = labels
    return pod


def _job(uid: str, selector: dict[str, Any] | None = None,
         manual: bool | None = None) -> dict[str, Any]:
    """A Job as the API server serves it: its generated selector names its UID."""
    spec: dict[str, Any] = {"selector": selector or {
        "matchLabels": {"batch.kubernetes.io/controller-uid": uid}}}
    if manual is not None:
        spec["manualSelector"] = manual
    return {"metadata": {"uid": uid}, "spec": spec}


WEB_POD_LABELS = {"app": "web", "pod-template-hash": "5d9f"}


def _replica_set(deployment_uid: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"uid": "rs-uid", "labels": WEB_POD_LABELS if labels is None else labels,
                         "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": deployment_uid,
         "controller": True}]},
            "spec": {"selector": {"matchLabels": WEB_POD_LABELS}}}


def _deployment(selector: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"uid": "dep-uid"},
            "spec": {"selector": selector or {"matchLabels": {"app": "web"}}}}


def _web_pod(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return _owned("ReplicaSet", "web-1", "rs-uid", api_version="apps/v1",
                  labels=dict(WEB_POD_LABELS) if labels is None else labels)


def test_the_owning_job_gets_the_summary_when_its_uid_matches() -> None:
    kube = fragmentation_kube(job_pod(ERROR))
    kube.workloads[("Job", "train")] = _job("job-uid")
    make_services(kube).handle_pod(kube.pod)
    ((kind, name, uid, owner),) = kube.workload_patches
    assert (kind, name, uid) == ("Job", "train", "job-uid")
    assert owner[f"{PREFIX}diagnosis"] == "fragmentation"
    assert owner[f"{PREFIX}diagnosed-pod"] == "ml/train-x"


def test_the_job_keeps_no_setting_from_an_earlier_pods_diagnosis() -> None:
    kube = fragmentation_kube(job_pod(ERROR))  # fragmentation: expandable_segments helps
    kube.workloads[("Job", "train")] = _job("job-uid")
    make_services(kube).handle_pod(kube.pod)
    job = kube.workloads[("Job", "train")]["metadata"]["annotations"]
    assert job[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"
    second = job_pod({**ERROR, "message": (FIXTURE / "capacity_batch_too_big_fullgpu.log")
                   .read_text()})  # the Job's next pod: capacity, no setting helps
    second["metadata"].update(name="train-y", uid="uid-2")
    kube.others["train-y"] = second
    make_services(kube).handle_pod(second)
    assert job[f"{PREFIX}diagnosis"] == "capacity"
    assert job[f"{PREFIX}diagnosed-pod"] == "ml/train-y"
    assert f"{PREFIX}recommended-alloc-conf" not in job


def test_a_forged_owner_reference_is_refused_and_counted() -> None:
    kube = fragmentation_kube(_owned("Job", "victim", "forged-uid"))
    kube.workloads[("Job", "victim")] = _job("real-uid")
    before = metric("gpu_auditor_operator_owner_writes_refused_total", reason="uid-mismatch")
    make_services(kube).handle_pod(kube.pod)
    assert kube.workload_patches == []
    assert metric("gpu_auditor_operator_owner_writes_refused_total",
                  reason="uid-mismatch") - before == 1
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "fragmentation"


def test_a_job_whose_selector_does_not_select_the_pod_is_refused_and_counted() -> None:
    # the Job's real UID, none of its pods' labels (the full table: test_owners.py)
    kube = fragmentation_kube(_owned("Job", "victim", "real-uid", labels={"app": "x"}))
    kube.workloads[("Job", "victim")] = _job("real-uid")
    before = metric("gpu_auditor_operator_owner_writes_refused_total", reason="not-selected")
    make_services(kube).handle_pod(kube.pod)
    assert kube.workload_reads == [("Job", "victim")] and kube.workload_patches == []
    assert metric("gpu_auditor_operator_owner_writes_refused_total",
                  reason="not-selected") - before == 1


@pytest.mark.parametrize("name", ["../victim", "a/b", "UPPER", "x" * 254, "", "a..b"])
def test_an_owner_name_that_is_not_a_valid_name_is_refused_before_any_request(name: str) -> None:
    kube = fragmentation_kube(_owned("Job", name, "job-uid"))
    before = metric("gpu_auditor_operator_owner_writes_refused_total", reason="invalid-reference")
    make_services(kube).handle_pod(kube.pod)
    assert (kube.workload_reads, kube.workload_patches) == ([], [])
    assert metric("gpu_auditor_operator_owner_writes_refused_total", reason="invalid-reference") - (
        before) == 1


def test_an_owner_of_another_group_is_not_followed() -> None:
    kube = fragmentation_kube(_owned("Job", "train", "job-uid", api_version="example.com/v1"))
    kube.workloads[("Job", "train")] = _job("job-uid")
    make_services(kube).handle_pod(kube.pod)
    assert (kube.workload_reads, kube.workload_patches) == ([], [])


def test_the_deployment_is_reached_through_its_verified_replica_set() -> None:
    kube = fragmentation_kube(_web_pod())
    kube.workloads[("ReplicaSet", "web-1")] = _replica_set("dep-uid")
    kube.workloads[("Deployment", "web")] = _deployment()
    make_services(kube).handle_pod(kube.pod)
    assert [(k, n, u) for k, n, u, _ in kube.workload_patches] == [("Deployment", "web",
                                                                      "dep-uid")]


def test_a_replica_set_whose_deployment_reference_is_stale_writes_nothing() -> None:
    kube = fragmentation_kube(_web_pod())
    kube.workloads[("ReplicaSet", "web-1")] = _replica_set("old-dep-uid")
    kube.workloads[("Deployment", "web")] = _deployment()
    make_services(kube).handle_pod(kube.pod)
    assert kube.workload_patches == []
