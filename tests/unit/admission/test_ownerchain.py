"""A pod's owners at admission, each link verified before the webhook reads its annotations:
the reference's UID, the owner's selector (a Job's controller-uid label), a JobSet's and a
training operator's labels; forged links refused."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.admission.ownerchain import DEPLOYMENT, REPLICASET, Refused, owners
from gpu_auditor.base import jobkinds as jk

pytestmark = pytest.mark.unit

NS = "ml"


class Cluster:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads: list[tuple[str, str]] = []

    def add(self, kind: jk.JobKind, name: str, uid: str, *, selector: Any = None,
            owner: tuple[jk.JobKind, str, str] | None = None,
            labels: dict[str, str] | None = None, notes: dict[str, str] | None = None,
            **spec: Any) -> None:
        meta: dict[str, Any] = {"name": name, "uid": uid, "labels": labels or {},
                                "annotations": notes or {}}
        if owner is not None:
            meta["ownerReferences"] = [ref(*owner)]
        self.objects[(kind.kind, name)] = {"metadata": meta,
                                           "spec": {"selector": selector, **spec}}

    def __call__(self, kind: jk.JobKind, namespace: str, name: str) -> dict[str, Any]:
        assert namespace == NS
        self.reads.append((kind.kind, name))
        return self.objects[(kind.kind, name)]


def ref(kind: jk.JobKind, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": kind.api_version, "kind": kind.kind, "name": name, "uid": uid,
            "controller": True}


def pod(owner: tuple[jk.JobKind, str, str] | None, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"generateName": "p-", "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [ref(*owner)]
    return {"kind": "Pod", "metadata": meta}


JOB_LABELS = {"batch.kubernetes.io/controller-uid": "job-uid", "job-name": "train"}
JOB_SELECTOR = {"matchLabels": {"batch.kubernetes.io/controller-uid": "job-uid"}}


def shown(found: list[Any]) -> list[tuple[str, str]]:
    return [(o.kind.kind, o.name) for o in found]


def test_a_job_pod_reaches_its_job_with_the_jobs_annotations() -> None:
    cluster = Cluster()
    cluster.add(jk.JOB, "train", "job-uid", selector=JOB_SELECTOR, notes={"a": "b"})
    [job] = owners(pod((jk.JOB, "train", "job-uid"), JOB_LABELS), NS, cluster)
    assert (job.kind, job.name, job.uid, dict(job.annotations)) == (jk.JOB, "train", "job-uid",
                                                                     {"a": "b"})


@pytest.mark.parametrize(("uid", "labels", "reason"), [
    ("other-uid", JOB_LABELS, "uid-mismatch"),
    ("job-uid", {"job-name": "train"}, "not-selected"),
    ("job-uid", {**JOB_LABELS, "batch.kubernetes.io/controller-uid": "x"}, "not-selected"),
])
def test_a_forged_job_link_is_refused(uid: str, labels: dict[str, str], reason: str) -> None:
    cluster = Cluster()
    cluster.add(jk.JOB, "train", "job-uid", selector={"matchLabels": {"job-name": "train"}})
    with pytest.raises(Refused) as refused:
        owners(pod((jk.JOB, "train", uid), labels), NS, cluster)
    assert refused.value.reason == reason


def test_a_deployment_pod_reaches_the_deployment_through_its_replicaset() -> None:
    cluster = Cluster()
    cluster.add(DEPLOYMENT, "web", "dep-uid", selector={"matchLabels": {"app": "web"}})
    cluster.add(REPLICASET, "web-5d4f8", "rs-uid", owner=(DEPLOYMENT, "web", "dep-uid"),
                selector={"matchLabels": {"app": "web", "pod-template-hash": "5d4f8"}},
                labels={"app": "web", "pod-template-hash": "5d4f8"})
    found = owners(pod((REPLICASET, "web-5d4f8", "rs-uid"),
                       {"app": "web", "pod-template-hash": "5d4f8"}), NS, cluster)
    assert shown(found) == [("Deployment", "web"), ("ReplicaSet", "web-5d4f8")]


def test_a_deployment_that_does_not_select_the_replicaset_is_refused() -> None:
    cluster = Cluster()
    cluster.add(DEPLOYMENT, "web", "dep-uid", selector={"matchLabels": {"app": "web",
                                                                         "tier": "a"}})
    cluster.add(REPLICASET, "web-1", "rs-uid", owner=(DEPLOYMENT, "web", "dep-uid"),
                selector={"matchLabels": {"app": "web"}}, labels={"app": "web"})
    with pytest.raises(Refused):
        owners(pod((REPLICASET, "web-1", "rs-uid"), {"app": "web", "tier": "a"}), NS, cluster)


def test_a_jobset_pod_reaches_the_jobset_through_its_child_job() -> None:
    cluster = Cluster()
    cluster.add(jk.JOBSET, "train", "js-uid")
    cluster.add(jk.JOB, "train-workers-0", "job-uid", selector=JOB_SELECTOR,
                owner=(jk.JOBSET, "train", "js-uid"))
    labels = {**JOB_LABELS, jk.JOBSET_NAME: "train", jk.JOBSET_UID: "js-uid"}
    found = owners(pod((jk.JOB, "train-workers-0", "job-uid"), labels), NS, cluster)
    assert shown(found) == [("JobSet", "train"), ("Job", "train-workers-0")]
    with pytest.raises(Refused):  # a pod of another JobSet's name
        owners(pod((jk.JOB, "train-workers-0", "job-uid"),
                   {**labels, jk.JOBSET_NAME: "other"}), NS, cluster)


def test_a_pytorchjob_pod_needs_the_labels_its_operator_sets() -> None:
    cluster = Cluster()
    cluster.add(jk.PYTORCHJOB, "pj", "pj-uid")
    labels = {jk.TRAINING_JOB_NAME: "pj", jk.TRAINING_OPERATOR_NAME: "pytorchjob-controller"}
    [found] = owners(pod((jk.PYTORCHJOB, "pj", "pj-uid"), labels), NS, cluster)
    assert found.kind is jk.PYTORCHJOB
    with pytest.raises(Refused):
        owners(pod((jk.PYTORCHJOB, "pj", "pj-uid"), {jk.TRAINING_JOB_NAME: "pj"}), NS, cluster)


@pytest.mark.parametrize("body", [
    pod(None, {}), {"kind": "Pod"},
    {"metadata": {"ownerReferences": [{**ref(jk.JOB, "t", "u"), "controller": False}]}},
    pod((jk.JobKind("", "Widget", "example.com", "v1", "widgets"), "w", "u"), {}),
])
def test_a_pod_of_no_followed_owner_reads_nothing(body: dict[str, Any]) -> None:
    cluster = Cluster()
    assert owners(body, NS, cluster) == [] and cluster.reads == []


@pytest.mark.parametrize(("name", "uid"), [("../secrets", "u"), ("train", "u/../x"),
                                           (7, "u"), ("train", None)])
def test_a_reference_of_invalid_names_is_refused_before_any_read(name: Any, uid: Any) -> None:
    cluster = Cluster()
    body = pod(None, {})
    body["metadata"]["ownerReferences"] = [{**ref(jk.JOB, "x", "y"), "name": name, "uid": uid}]
    with pytest.raises(Refused) as refused:
        owners(body, NS, cluster)
    assert refused.value.reason == "invalid-reference" and cluster.reads == []
