"""The apply paths from path and body to the AdmissionReview answer (`server.answer` with an
`Applier` over recorded objects): an opted-in pod of a verified Job gets the Job's setting and
the annotation; nothing for a pod not opted in, an owner that does not verify or cannot be read,
a decided trial, or without --apply-recommendations."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.base.errors import APIConnectionError
from gpu_auditor.base.trial import Outcome, Trial, trial_annotations
from gpu_auditor.webhook.applying import Applier
from gpu_auditor.webhook.server import Settings, answer

pytestmark = pytest.mark.unit

P = "gpu-auditor.io/"
ES = "expandable_segments:True"
LABELS = {"batch.kubernetes.io/controller-uid": "job-uid", "job-name": "train"}


def job(outcome: Outcome | None = None, rejected: tuple[str, ...] = ()) -> dict[str, Any]:
    trial = Trial(setting=ES, value=ES, kind="fragmentation", container="main",
                  failed_pod="ml/train-a", release="2.11", outcome=outcome, rejected=rejected)
    notes = {f"{P}recommended-alloc-conf": ES,
             **{k: v for k, v in trial_annotations(trial, P).items() if v is not None}}
    return {"metadata": {"name": "train", "uid": "job-uid", "annotations": notes},
            "spec": {"selector": {"matchLabels": {
                "batch.kubernetes.io/controller-uid": "job-uid"}}}}


class Objects:
    def __init__(self, *objects: tuple[str, dict[str, Any]], error: Exception | None = None
                 ) -> None:
        self.objects = dict(objects)
        self.error = error

    def __call__(self, kind: jk.JobKind, namespace: str, name: str) -> Mapping[str, Any]:
        if self.error is not None:
            raise self.error
        return self.objects[f"{kind.kind}/{name}"]


def pod(labels: Mapping[str, str] = LABELS, uid: str = "job-uid") -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {
        "generateName": "train-", "labels": dict(labels),
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                             "uid": uid, "controller": True}]},
        "spec": {"containers": [{"name": "main", "image": "pytorch/pytorch:2.11.0-cuda13.0"}]}}


def review(obj: dict[str, Any], operation: str = "CREATE") -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u-1", "operation": operation, "namespace": "ml",
                                   "object": obj}}).encode()


def settings(objects: Objects) -> Settings:
    return Settings(apply=Applier(objects, P))


def patch_of(reply: Any) -> list[dict[str, Any]]:
    response = json.loads(reply.body)["response"]
    assert response["allowed"] is True
    return list(json.loads(base64.b64decode(response["patch"]))) if "patch" in response else []


def test_an_opted_in_namespace_gets_the_jobs_setting_and_the_annotation() -> None:
    reply = answer("/apply/namespace", review(pod()), settings(Objects(("Job/train", job()))))
    assert (reply.webhook, reply.result) == ("apply-namespace", "applied")
    ops = patch_of(reply)
    assert ops[0] == {"op": "add", "path": "/spec/containers/0/env",
                      "value": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": ES}]}
    assert ops[1]["path"] == "/metadata/annotations"
    assert ops[1]["value"][f"{P}recommendation-applied"] == (
        f"main: PYTORCH_CUDA_ALLOC_CONF={ES} (recommended on Job train: pod ml/train-a ran out "
        "of memory (fragmentation))")


def test_the_pod_path_needs_the_pods_own_label_and_false_opts_out() -> None:
    objects = Objects(("Job/train", job()))
    assert answer("/apply/pod", review(pod()), settings(objects)).result == "skipped"
    labelled = pod({**LABELS, "gpu-auditor.io/apply-recommendation": "true"})
    assert answer("/apply/pod", review(labelled), settings(objects)).result == "applied"
    out = pod({**LABELS, "gpu-auditor.io/apply-recommendation": "false"})
    assert answer("/apply/namespace", review(out), settings(objects)).result == "skipped"


@pytest.mark.parametrize("objects", [
    Objects(("Job/train", job(Outcome.NOT_FIXED, rejected=(ES,)))),
    Objects(("Job/train", job(Outcome.FIXED))),
    Objects(("Job/train", {**job(), "metadata": {**job()["metadata"], "uid": "other"}})),
    Objects(error=APIConnectionError("no answer")),
])
def test_nothing_is_applied_from_a_decided_trial_a_forged_link_or_an_unreadable_owner(
        objects: Objects) -> None:
    reply = answer("/apply/namespace", review(pod()), settings(objects))
    assert reply.result == "skipped" and patch_of(reply) == []


def test_an_update_and_a_server_without_apply_change_nothing() -> None:
    objects = Objects(("Job/train", job()))
    assert answer("/apply/namespace", review(pod(), "UPDATE"),
                  settings(objects)).result == "skipped"
    assert answer("/apply/namespace", review(pod()), Settings()).result == "skipped"


def test_a_warning_says_why_a_container_kept_its_own_key() -> None:
    body = pod()
    body["spec"]["containers"][0]["env"] = [{"name": "PYTORCH_CUDA_ALLOC_CONF",
                                             "value": "expandable_segments:False"}]
    reply = answer("/apply/namespace", review(body), settings(Objects(("Job/train", job()))))
    assert reply.result == "skipped"
    assert "the container's keys win" in json.loads(reply.body)["response"]["warnings"][0]
