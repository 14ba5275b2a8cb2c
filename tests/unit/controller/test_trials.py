"""A recommendation's trial followed through a Job's pods with the in-memory API: the first OOM
starts it, a retry with the setting decides it (fixed when it completes or runs past the failed
attempt, not-fixed when it runs out of memory again, and then never recommended again), a retry
without it is not-applied; each outcome counted once, said in an Event on the Job; the state on
the objects, so a fresh operator carries on."""

from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Any

import pytest

from gpu_auditor.base.errors import APIError
from gpu_auditor.base.trial import parse_trial
from gpu_auditor.controller.pod import controller_reference
from gpu_auditor.controller.retry import RETRY_DELAYS
from gpu_auditor.controller.trials import owner_key

from .controller_helpers import (
    FIXTURE,
    JOB_POD_LABELS,
    PREFIX,
    FakeKube,
    Scheduled,
    make_services,
    metric,
)

pytestmark = pytest.mark.unit

ES = "expandable_segments:True"
FRAG = (FIXTURE / "frag_pinned_segments.log").read_bytes()
OUTCOMES = "gpu_auditor_recommendation_outcomes_total"
STARTED = "2026-11-29T09:58:00Z"
FAILED = "2026-11-29T10:00:00Z"


def job() -> dict[str, Any]:
    return {"metadata": {"name": "train", "uid": "job-uid", "annotations": {}},
            "spec": {"selector": {"matchLabels": {
                "batch.kubernetes.io/controller-uid": "job-uid"}}}}


def pod(name: str, uid: str, *, env: list[dict[str, str]] | None = None,
        created: str = "2026-11-29T09:57:00Z", state: dict[str, Any] | None = None,
        phase: str = "Running", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ml", "name": name, "uid": uid, "creationTimestamp": created,
                     "annotations": dict(annotations or {}), "labels": dict(JOB_POD_LABELS),
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": "train", "uid": "job-uid",
                                          "controller": True}]},
        "spec": {"nodeName": "gpu-1", "containers": [
            {"name": "main", "image": "pytorch/pytorch:2.11.0-cuda13.0", "env": env or []}]},
        "status": {"phase": phase, "containerStatuses": [
            {"name": "main", "restartCount": 0, "state": state or {"running": {
                "startedAt": "2026-11-29T10:00:20Z"}}}]},
    }


OOM = {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": STARTED,
                      "finishedAt": FAILED}}
DONE = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-11-29T11:00Z"}}
WITH = [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": ES}]


def cluster() -> FakeKube:
    kube = FakeKube(pod("train-a", "uid-a", state=OOM, phase="Failed"), log=FRAG)
    kube.workloads[("Job", "train")] = job()
    return kube


def owner(kube: FakeKube) -> dict[str, str]:
    notes: dict[str, str] = kube.workloads[("Job", "train")]["metadata"]["annotations"]
    return notes


def count(outcome: str) -> float:
    return metric(OUTCOMES, kind="fragmentation", setting=ES, outcome=outcome)


def retry(kube: FakeKube, name: str, uid: str, **fields: Any) -> dict[str, Any]:
    body = pod(name, uid, created="2026-11-29T10:00:10Z", **fields)
    kube.others[name] = body
    return body


def first_oom(schedule: Scheduled | None = None) -> tuple[FakeKube, Any]:
    kube = cluster()
    services = make_services(kube, schedule=schedule)
    services.handle_pod(kube.pod)
    return kube, services


def test_the_first_oom_starts_a_trial_of_the_keys_recommended() -> None:
    kube, _ = first_oom()
    notes = owner(kube)
    assert notes[f"{PREFIX}recommended-alloc-conf"] == ES
    trial = parse_trial(notes, PREFIX)
    assert trial is not None and trial.open and trial.setting == ES
    assert (trial.failed_pod, trial.failed_uid, trial.container) == ("ml/train-a", "uid-a",
                                                                      "main")
    assert trial.ran_seconds == 120.0 and trial.kind == "fragmentation"
    assert f"{PREFIX}recommendation-outcome" not in notes


def test_a_retry_with_the_setting_that_completes_fixes_it_once_with_an_event() -> None:
    kube, services = first_oom()
    before = count("fixed")
    body = retry(kube, "train-b", "uid-b", env=WITH, state=DONE, phase="Succeeded")
    assert services.follows(body)
    services.follow_pod(body)
    assert owner(kube)[f"{PREFIX}recommendation-outcome"] == "fixed"
    assert body["metadata"]["annotations"][f"{PREFIX}recommendation-outcome"] == "fixed"
    assert count("fixed") == before + 1
    [(_reason, message)] = [e for e in kube.events.values() if e[0] == "RecommendationOutcome"]
    assert message.startswith(f"{ES} (recommended after ml/train-a's fragmentation) fixed")
    assert not services.follows(body)  # it decided: never followed again
    services.follow_pod(body)
    assert count("fixed") == before + 1


def test_a_refused_write_of_the_outcome_on_the_pod_is_tried_again_until_it_lands() -> None:
    schedule = Scheduled()
    kube, services = first_oom(schedule)
    before = count("fixed")
    body = retry(kube, "train-b", "uid-b", env=WITH, state=DONE, phase="Succeeded")
    kube.fail_patch["train-b"] = APIError("the API server is restarting", status=503)
    services.follow_pod(body)
    assert owner(kube)[f"{PREFIX}recommendation-outcome"] == "fixed"
    assert f"{PREFIX}recommendation-outcome" not in body["metadata"]["annotations"]
    assert not services.follows(body)  # the owner's trial is final: no event brings it back
    [(_delay, again)] = [s for s in schedule if s[0] == RETRY_DELAYS[0]]
    again()  # still refused: one more, after the next back-off
    assert schedule[-1][0] == RETRY_DELAYS[1]
    del kube.fail_patch["train-b"]
    schedule[-1][1]()
    assert body["metadata"]["annotations"][f"{PREFIX}recommendation-outcome"] == "fixed"
    assert count("fixed") == before + 1  # counted once, when the owner was decided


def test_a_pod_whose_outcome_is_never_accepted_is_given_up_after_the_back_offs() -> None:
    schedule = Scheduled()
    kube, services = first_oom(schedule)
    body = retry(kube, "train-b", "uid-b", env=WITH, state=DONE, phase="Succeeded")
    kube.fail_patch["train-b"] = APIError("forbidden", status=403)
    services.follow_pod(body)
    tried = 0
    while schedule and tried < 2 * len(RETRY_DELAYS):
        _delay, again = schedule.pop()
        again()
        tried += 1
    assert tried == len(RETRY_DELAYS)
    assert owner(kube)[f"{PREFIX}recommendation-outcome"] == "fixed"


def test_a_retry_with_the_setting_that_runs_past_the_failed_attempt_fixes_it() -> None:
    schedule = Scheduled()
    kube, services = first_oom(schedule)
    body = retry(kube, "train-b", "uid-b", env=WITH)
    services.trials.clock = lambda: dt.datetime(2026, 11, 29, 10, 0, 30, tzinfo=dt.UTC)
    before = count("fixed")
    services.follow_pod(body)
    [(delay, callback)] = schedule[-1:]
    assert delay == 140.0  # started 10:00:20, the failed run lasted 120 s: +30 s, less 10 s
    assert f"{PREFIX}recommendation-outcome" not in owner(kube)
    callback()
    assert owner(kube)[f"{PREFIX}recommendation-outcome"] == "fixed"
    assert count("fixed") == before + 1


def test_a_retry_that_restarted_before_the_timer_is_not_fixed_by_it() -> None:
    schedule = Scheduled()
    kube, services = first_oom(schedule)
    body = retry(kube, "train-b", "uid-b", env=WITH)
    services.follow_pod(body)
    body["status"]["containerStatuses"][0]["state"] = {"running": {
        "startedAt": "2026-11-29T10:03:00Z"}}
    schedule[-1][1]()
    assert f"{PREFIX}recommendation-outcome" not in owner(kube)


def test_a_retry_that_runs_out_of_memory_again_with_it_is_not_fixed_and_says_so() -> None:
    kube, services = first_oom()
    before = count("not-fixed")
    body = retry(kube, "train-b", "uid-b", env=WITH, state=OOM, phase="Failed")
    kube.pod, kube.others["train-a"] = body, kube.pod
    services.handle_pod(body)
    notes = body["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert notes[f"{PREFIX}summary"].endswith(f"({ES} was applied and did not help)")
    assert json.loads(notes[f"{PREFIX}actions"])[0].startswith(
        f"PYTORCH_CUDA_ALLOC_CONF with {ES} was applied to ml/train-b and did not help")
    assert f"{PREFIX}recommended-alloc-conf" not in notes
    job_notes = owner(kube)
    assert f"{PREFIX}recommended-alloc-conf" not in job_notes
    assert job_notes[f"{PREFIX}recommendation-outcome"] == "not-fixed"
    trial = parse_trial(job_notes, PREFIX)
    assert trial is not None and trial.rejected == (ES,) and trial.judged_pod == "ml/train-b"
    assert count("not-fixed") == before + 1
    # and never again: a third pod without the setting, the same fragmentation
    third = retry(kube, "train-c", "uid-c", state=OOM, phase="Failed")
    third["metadata"]["creationTimestamp"] = "2026-11-29T10:05:00Z"
    kube.pod, kube.others["train-b"] = third, body
    services.handle_pod(third)
    assert f"{PREFIX}recommended-alloc-conf" not in third["metadata"]["annotations"]
    assert json.loads(third["metadata"]["annotations"][f"{PREFIX}actions"])[0] == (
        f"{ES} did not help Job train before (ml/train-b): not recommended again")
    assert f"{PREFIX}recommended-alloc-conf" not in owner(kube)
    assert count("not-fixed") == before + 1


def test_a_retry_without_the_setting_is_not_applied_once() -> None:
    kube, services = first_oom()
    before = count("not-applied")
    body = retry(kube, "train-b", "uid-b")
    assert services.follows(body)
    services.follow_pod(body)
    assert owner(kube)[f"{PREFIX}recommendation-outcome"] == "not-applied"
    other = retry(kube, "train-c", "uid-c")
    services.follow_pod(other)
    assert count("not-applied") == before + 1
    assert f"{PREFIX}recommendation-outcome" not in body["metadata"]["annotations"]


def test_pods_older_than_the_failure_and_pods_of_other_owners_are_not_followed() -> None:
    _kube, services = first_oom()
    old = pod("train-old", "uid-old", created="2026-11-29T09:00:00Z")
    assert not services.follows(old)
    stranger = copy.deepcopy(old)
    stranger["metadata"]["ownerReferences"][0]["uid"] = "other-uid"
    stranger["metadata"]["creationTimestamp"] = "2026-11-29T10:00:10Z"
    assert not services.follows(stranger)


def test_a_fresh_operator_finds_the_owner_through_the_failed_pod_and_judges_from_the_job(
) -> None:
    kube, _ = first_oom()
    fresh = make_services(kube)
    body = retry(kube, "train-b", "uid-b", env=WITH, state=DONE, phase="Succeeded")
    assert not fresh.follows(body)  # nothing known yet
    assert not fresh.follows(kube.pod)  # the failed pod: names its owner
    assert fresh.follows(body)
    fresh.follow_pod(body)
    assert owner(kube)[f"{PREFIX}recommendation-outcome"] == "fixed"


def test_a_pod_the_webhook_put_the_setting_into_gets_one_event() -> None:
    kube, services = first_oom()
    text = "main: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (recommended on Job train)"
    body = retry(kube, "train-b", "uid-b", env=WITH,
                 annotations={f"{PREFIX}recommendation-applied": text})
    assert services.follows(body)
    services.follow_pod(body)
    services.follow_pod(body)
    applied = [e for e in kube.events.values() if e[0] == "RecommendationApplied"]
    assert applied == [("RecommendationApplied", f"Set {text}")]


def test_a_job_without_a_trial_is_read_once_and_forgotten() -> None:
    kube = cluster()
    services = make_services(kube)
    key = owner_key("ml", controller_reference(kube.pod["metadata"]["ownerReferences"]),
                    JOB_POD_LABELS)
    services.trials.index.add(key, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    body = retry(kube, "train-b", "uid-b")
    services.follow_pod(body)
    assert services.trials.index.get(key) is None and kube.workload_patches == []


def test_a_deployments_pods_share_one_key_across_its_replicasets() -> None:
    ref = controller_reference([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": "web-5d4f8", "uid": "rs-1", "controller": True}])
    assert owner_key("ml", ref, {"pod-template-hash": "5d4f8"}) == ("ml", "Deployment", "web")
    assert owner_key("ml", ref, {}) == ("ml", "uid", "rs-1")


# -- a Deployment's next ReplicaSet ---------------------------------------------------------------

def _rs(name: str, uid: str) -> dict[str, Any]:
    hashed = name.rsplit("-", 1)[1]
    return {"metadata": {"name": name, "uid": uid,
                         "labels": {"app": "web", "pod-template-hash": hashed},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                              "name": "web", "uid": "dep-uid",
                                              "controller": True}]},
            "spec": {"selector": {"matchLabels": {"app": "web", "pod-template-hash": hashed}}}}


def _web_pod(name: str, uid: str, rs: str, rs_uid: str, **fields: Any) -> dict[str, Any]:
    body = pod(name, uid, **fields)
    body["metadata"]["labels"] = {"app": "web", "pod-template-hash": rs.rsplit("-", 1)[1]}
    body["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                            "name": rs, "uid": rs_uid, "controller": True}]
    return body


def test_a_deployments_next_replicaset_with_the_setting_that_runs_past_fixes_it() -> None:
    schedule = Scheduled()
    restarted = {"running": {"startedAt": "2026-11-29T10:00:30Z"}}
    first = _web_pod("web-aaaaa-1", "uid-a", "web-aaaaa", "rs-a", state=restarted)
    first["status"]["containerStatuses"][0].update(restartCount=1, lastState=OOM)
    kube = FakeKube(first, log=FRAG)
    kube.workloads[("Deployment", "web")] = {
        "metadata": {"name": "web", "uid": "dep-uid", "annotations": {}},
        "spec": {"selector": {"matchLabels": {"app": "web"}}}}
    kube.workloads[("ReplicaSet", "web-aaaaa")] = _rs("web-aaaaa", "rs-a")
    kube.workloads[("ReplicaSet", "web-bbbbb")] = _rs("web-bbbbb", "rs-b")
    services = make_services(kube, schedule=schedule)
    services.handle_pod(first)
    notes = kube.workloads[("Deployment", "web")]["metadata"]["annotations"]
    assert notes[f"{PREFIX}recommended-alloc-conf"] == ES
    assert parse_trial(notes, PREFIX) is not None
    # GitOps rolled the setting out: a pod of the next ReplicaSet
    nxt = _web_pod("web-bbbbb-1", "uid-b", "web-bbbbb", "rs-b", env=WITH,
                   created="2026-11-29T10:05:00Z")
    kube.others[nxt["metadata"]["name"]] = nxt
    assert services.follows(nxt)
    services.follow_pod(nxt)
    schedule[-1][1]()
    assert notes[f"{PREFIX}recommendation-outcome"] == "fixed"
    assert parse_trial(notes, PREFIX).judged_pod == "ml/web-bbbbb-1"  # type: ignore[union-attr]


# -- the pods a training operator re-creates -------------------------------------------------------

def test_a_pytorchjobs_trial_starts_on_its_object_and_a_recreated_worker_fixes_it() -> None:
    from gpu_auditor.controller.service import OperatorConfig, Services

    from .controller_helpers import Inline
    from .jobs_helpers import error_at, pytorch_pod, pytorchjob, serve

    kube, schedule = FakeKube(None, log=FRAG), Scheduled()  # type: ignore[arg-type]
    pytorchjob(kube)
    root = pytorch_pod("worker", 2, error_at(0))
    root["metadata"]["creationTimestamp"] = "2026-11-29T09:50:00Z"
    serve(kube, root)
    operator = Services(kube=kube, config=OperatorConfig(),  # type: ignore[arg-type]
                        diagnoser=Inline(), schedule=schedule)
    assert operator.jobs is not None
    operator.jobs.executor = type("Now", (), {  # type: ignore[assignment]
        "submit": lambda self, fn, *a: fn(*a), "shutdown": lambda self, **_: None})()
    operator.handle_pod(root)
    while schedule:
        schedule.pop(0)[1]()
    notes = kube.objects[("PyTorchJob", "pj")]["metadata"]["annotations"]
    assert notes[f"{PREFIX}recommended-alloc-conf"] == ES
    trial = parse_trial(notes, PREFIX)
    assert trial is not None and trial.failed_pod == "ml/pj-worker-2" and trial.open
    # the training operator re-creates the worker (same name, a new UID), with the setting
    again = pytorch_pod("worker", 2, {})
    again["metadata"].update(uid="uid-again", creationTimestamp="2026-11-29T10:01:00Z")
    again["spec"]["containers"][0]["env"] = WITH
    again["status"] = {"phase": "Succeeded", "containerStatuses": [
        {"name": "main", "restartCount": 0, "state": DONE}]}
    before = count("fixed")
    assert operator.follows(again)
    operator.follow_pod(again)
    assert notes[f"{PREFIX}recommendation-outcome"] == "fixed"
    assert count("fixed") == before + 1
    assert ("PyTorchJob", "pj") in kube.event_objects


def test_a_jobs_root_cause_that_ran_with_the_setting_is_not_fixed_on_the_jobs_object() -> None:
    from gpu_auditor.base import jobkinds as jk
    from gpu_auditor.base.trial import Trial, trial_annotations
    from gpu_auditor.controller.jobowners import VerifiedJob
    from gpu_auditor.controller.pod import parse_pod
    from gpu_auditor.controller.trials import Trials

    open_trial = Trial(setting=ES, value=ES, kind="fragmentation", container="main",
                       failed_pod="ml/pj-worker-2", failed_uid="uid-1",
                       failed_at=dt.datetime(2026, 11, 29, 10, tzinfo=dt.UTC))
    job = VerifiedJob(jk.PYTORCHJOB, "pj", "pj-uid", {
        k: v for k, v in trial_annotations(open_trial, PREFIX).items() if v is not None})
    body = pod("pj-worker-2", "uid-2", env=WITH, created="2026-11-29T10:02:00Z", state=OOM,
               phase="Failed")
    parsed = parse_pod(body, PREFIX)
    wanted = {f"{PREFIX}diagnosis": "fragmentation", f"{PREFIX}summary": "fragmentation: ...",
              f"{PREFIX}recommended-alloc-conf": ES,
              f"{PREFIX}actions": json.dumps([f"set PYTORCH_CUDA_ALLOC_CONF={ES}: lets ..."])}
    trials = Trials(FakeKube(None), Scheduled(), prefix=PREFIX)  # type: ignore[arg-type]
    out, written = trials.for_job("ml", job, parsed, parsed.terminations[0], wanted)
    assert out[f"{PREFIX}recommended-alloc-conf"] is None
    assert out[f"{PREFIX}summary"].endswith(f"({ES} was applied and did not help)")
    assert json.loads(out[f"{PREFIX}actions"] or "") == [
        f"PYTORCH_CUDA_ALLOC_CONF with {ES} was applied to ml/pj-worker-2 and did not help: it "
        "is not recommended again for PyTorchJob pj"]
    assert out[f"{PREFIX}recommendation-outcome"] == "not-fixed"
    before = count("not-fixed")
    written()
    assert count("not-fixed") == before + 1


def test_a_jobset_restart_with_the_setting_fixes_the_jobsets_trial() -> None:
    from gpu_auditor.controller.service import OperatorConfig, Services

    from .controller_helpers import Inline
    from .jobs_helpers import error_at, jobset, jobset_pod, serve

    kube, schedule = FakeKube(None, log=FRAG), Scheduled()  # type: ignore[arg-type]
    jobset(kube, ranks=2)
    root = jobset_pod(1, error_at(0))
    root["metadata"]["creationTimestamp"] = "2026-11-29T09:50:00Z"
    serve(kube, root)
    operator = Services(kube=kube, config=OperatorConfig(),  # type: ignore[arg-type]
                        diagnoser=Inline(), schedule=schedule)
    assert operator.jobs is not None
    operator.jobs.executor = type("Now", (), {  # type: ignore[assignment]
        "submit": lambda self, fn, *a: fn(*a), "shutdown": lambda self, **_: None})()
    operator.handle_pod(root)
    while schedule:
        schedule.pop(0)[1]()
    notes = kube.objects[("JobSet", "train")]["metadata"]["annotations"]
    assert notes[f"{PREFIX}recommended-alloc-conf"] == ES and parse_trial(notes, PREFIX)
    # the JobSet restarts every pod (restart-attempt 1); rank 1's new pod runs with the setting
    fresh = make_services(kube)
    again = jobset_pod(1, {}, attempt=1)
    again["metadata"].update(uid="uid-attempt-1", creationTimestamp="2026-11-29T10:02:00Z")
    again["spec"]["containers"][0]["env"] = WITH
    again["status"] = {"phase": "Succeeded", "containerStatuses": [
        {"name": "main", "restartCount": 0, "state": DONE}]}
    assert not fresh.follows(again)  # a fresh operator knows nothing yet...
    assert not fresh.follows(root)  # ...until the root pod names its JobSet
    assert fresh.follows(again)
    fresh.follow_pod(again)
    assert notes[f"{PREFIX}recommendation-outcome"] == "fixed"
    assert ("JobSet", "train") in kube.event_objects
