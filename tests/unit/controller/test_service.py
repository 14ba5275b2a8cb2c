"""The operator's decisions with an in-memory stand-in for the API (the real API server is in
tests/integration/test_operator.py and test_operator_hostile.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from gpu_auditor.base.errors import APIForbiddenError, APINotFoundError, APIServerError
from gpu_auditor.base.nodereport import parse_report
from gpu_auditor.controller.diagnosispool import DiagnosisFailed
from gpu_auditor.controller.kube import LogUnavailable
from gpu_auditor.controller.service import OperatorConfig, Services
from gpu_auditor.diagnosis import Diagnosis, diagnose

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "oom" / "corpus"
PREFIX = "gpu-auditor.io/"


class FakeKube:
    """Records what the operator writes; serves pods, a log, a node report and workloads."""

    def __init__(self, pod: dict[str, Any], log: bytes = b"", report: dict[str, Any] | None = None,
                 log_error: str | None = None) -> None:
        self.pod = pod
        self.others: dict[str, dict[str, Any]] = {}
        self.log = log
        self.report = report
        self.log_error = log_error
        self.events: dict[str, tuple[str, str]] = {}
        self.event_creates = 0
        self.patches: list[dict[str, Any]] = []
        self.patched: list[tuple[str, str, str | None]] = []
        self.log_reads = 0
        self.reads: list[tuple[str, str]] = []
        self.workloads: dict[tuple[str, str], dict[str, Any]] = {}
        self.workload_reads: list[tuple[str, str]] = []
        self.workload_patches: list[tuple[str, str, str, dict[str, str | None]]] = []
        self.fail_patch: dict[str, Exception] = {}

    def _pods(self) -> dict[str, dict[str, Any]]:
        pods = dict(self.others)
        if self.pod is not None:
            pods[self.pod["metadata"]["name"]] = self.pod
        return pods

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads.append((namespace, name))
        pod = self._pods().get(name)
        if pod is None or pod["metadata"]["namespace"] != namespace:
            raise APINotFoundError("gone", status=404)
        return copy.deepcopy(pod)

    def read_log(self, *_: Any, **__: Any) -> bytes:
        self.log_reads += 1
        if self.pod is None:
            raise APINotFoundError("gone", status=404)
        if self.log_error:
            raise LogUnavailable(self.log_error)
        return self.log

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, Any],
                              *, uid: str | None = None) -> None:
        if name in self.fail_patch:
            raise self.fail_patch[name]
        pod = self._pods()[name]
        assert uid is None or pod["metadata"]["uid"] == uid, "the UID precondition would fail"
        self.patches.append(annotations)
        self.patched.append((namespace, name, uid))
        notes = pod["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                notes.pop(key, None)
            else:
                notes[key] = value

    def post_event(self, about: Any, *, name: str, reason: str, message: str,
                   event_type: str = "Warning") -> bool:
        self.event_creates += 1
        if name in self.events:
            return False
        self.events[name] = (reason, message)
        return True

    def read_node_report(self, node: str) -> dict[str, Any] | None:
        return self.report

    def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        self.workload_reads.append((kind, name))
        if (kind, name) not in self.workloads:
            raise APINotFoundError("gone", status=404)
        return copy.deepcopy(self.workloads[(kind, name)])

    def patch_workload(self, kind: str, namespace: str, name: str, uid: str,
                       annotations: dict[str, str | None]) -> None:
        assert self.workloads[(kind, name)]["metadata"]["uid"] == uid
        self.workload_patches.append((kind, name, uid, annotations))
        notes = self.workloads[(kind, name)]["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():  # a JSON merge patch, as the API server applies
            if value is None:
                notes.pop(key, None)
            else:
                notes[key] = value


class Inline:
    """The diagnosis core called in this process (the worker processes are tested in
    test_diagnosispool.py); counts calls."""

    def __init__(self, fail: DiagnosisFailed | None = None) -> None:
        self.calls = 0
        self.fail = fail

    def diagnose(self, text: bytes | str, **options: Any) -> Diagnosis:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return diagnose(text, **options)


class Scheduled(list[tuple[float, Callable[[], None]]]):
    """A schedule that records (delay, callback) instead of waiting."""

    def __call__(self, delay: float, callback: Callable[[], None]) -> bool:
        self.append((delay, callback))
        return True


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


JOB_POD_LABELS = {"batch.kubernetes.io/controller-uid": "job-uid", "controller-uid": "job-uid",
                  "batch.kubernetes.io/job-name": "train", "job-name": "train"}
"""What the API server puts on the pods of Job `train` (UID job-uid)."""


def _pod(terminated: dict[str, Any], *, env: list[dict[str, str]] | None = None,
         restarted: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"name": "main", "restartCount": 1 if restarted else 0}
    if restarted:
        status.update(state={"running": {}}, lastState={"terminated": terminated})
    else:
        status["state"] = {"terminated": terminated}
    return {
        "metadata": {"namespace": "ml", "name": "train-x", "uid": "uid-1", "annotations": {},
                     "labels": dict(JOB_POD_LABELS),
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                          "uid": "job-uid", "controller": True}]},
        "spec": {"nodeName": "gpu-1", "containers": [
            {"name": "main", "image": "trainer", "env": env or [],
             "resources": {"limits": {"memory": "4Gi"}}}]},
        "status": {"containerStatuses": [status]},
    }


def _services(kube: FakeKube, diagnoser: Inline | None = None,
              schedule: Scheduled | None = None) -> Services:
    return Services(kube=kube, config=OperatorConfig(),  # type: ignore[arg-type]
                    diagnoser=diagnoser if diagnoser is not None else Inline(),
                    schedule=schedule if schedule is not None else Scheduled())


ERROR = {"exitCode": 1, "reason": "Error", "finishedAt": "2026-11-29T10:00:00Z"}


def test_a_cuda_oom_is_written_once_however_often_the_pod_event_repeats() -> None:
    kube = FakeKube(_pod(ERROR), log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())
    services = _services(kube)
    for _ in range(3):
        services.handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert notes[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"
    assert notes[f"{PREFIX}diagnosed-key"] == "main/0"
    assert (len(kube.patches), len(kube.events), kube.log_reads) == (1, 1, 1)


def test_a_restarted_operator_finds_the_work_done_and_posts_no_second_event() -> None:
    kube = FakeKube(_pod(ERROR), log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())
    _services(kube).handle_pod(kube.pod)
    _services(kube).handle_pod(kube.pod)  # a new process: no memory of the first
    assert (len(kube.patches), len(kube.events), kube.log_reads) == (1, 1, 1)


def test_a_crash_between_event_and_annotation_leaves_no_duplicate_event() -> None:
    kube = FakeKube(_pod(ERROR), log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())
    first = _services(kube)
    original = kube.patch_pod_annotations
    kube.patch_pod_annotations = lambda *a, **k: (_ for _ in ()).throw(SystemExit())  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        first.handle_pod(kube.pod)
    kube.patch_pod_annotations = original  # type: ignore[method-assign]
    _services(kube).handle_pod(kube.pod)
    assert kube.event_creates == 2 and len(kube.events) == 1
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "fragmentation"


def test_the_termination_message_is_read_before_the_log() -> None:
    message = (FIXTURE / "capacity_batch_too_big_fullgpu.log").read_text()
    kube = FakeKube(_pod({**ERROR, "message": message}))
    _services(kube).handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert json.loads(notes[f"{PREFIX}evidence"])["source"] == "termination-message"
    assert kube.log_reads == 0


def test_a_restarted_container_is_diagnosed_under_the_key_of_the_failed_run() -> None:
    kube = FakeKube(_pod(ERROR, restarted=True),
                    log=(FIXTURE / "capacity_batch_too_big_fullgpu.log").read_bytes())
    _services(kube).handle_pod(kube.pod)
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosed-key"] == "main/0"


def test_an_oom_kill_names_the_memory_limit_and_reads_no_log() -> None:
    kube = FakeKube(_pod({"exitCode": 137, "reason": "OOMKilled"}))
    _services(kube).handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert "4.00 GiB" in notes[f"{PREFIX}summary"]
    assert kube.log_reads == 0
    assert [reason for reason, _ in kube.events.values()] == ["OOMKilled"]


def test_a_failure_without_an_oom_writes_nothing_and_is_not_read_again() -> None:
    kube = FakeKube(_pod(ERROR), log=b"Traceback...\nValueError: bad config\n")
    services = _services(kube)
    services.handle_pod(kube.pod)
    services.handle_pod(kube.pod)
    assert (kube.patches, kube.events, kube.log_reads) == ([], {}, 1)


def _due(services: Services, key: tuple[str, str], seconds: float) -> None:
    """Move a failed attempt `seconds` into the past (its retry's time has come)."""
    memory = services.oom.attempts.memory
    at, attempts = memory.get(key)
    memory.add(key, (at - seconds, attempts))


def test_a_transient_log_failure_schedules_its_own_retry_and_then_succeeds() -> None:
    kube = FakeKube(_pod(ERROR), log_error="unavailable")
    scheduled = Scheduled()
    services = _services(kube, schedule=scheduled)
    services.handle_pod(kube.pod)
    services.handle_pod(kube.pod)  # an event right after: too early for another read
    assert kube.log_reads == 1 and kube.patches == []
    assert [delay for delay, _ in scheduled] == [5.0]  # a terminated pod sends no more events
    kube.log_error, kube.log = None, (FIXTURE / "seed_example_fragmentation.log").read_bytes()
    _due(services, ("uid-1", "main/0"), 5.0)
    scheduled[0][1]()  # the retry reads the pod again and diagnoses it
    assert kube.reads == [("ml", "train-x")]
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "fragmentation"


def test_retries_back_off() -> None:
    kube = FakeKube(_pod(ERROR), log_error="unavailable")
    scheduled = Scheduled()
    services = _services(kube, schedule=scheduled)
    for _ in range(6):
        services.handle_pod(kube.pod)
        _due(services, ("uid-1", "main/0"), 1000.0)
    assert [delay for delay, _ in scheduled] == [5.0, 15.0, 45.0, 120.0, 300.0, 300.0]


def test_the_recommendation_merges_with_the_jobs_current_setting() -> None:
    env = [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "garbage_collection_threshold:0.6"}]
    kube = FakeKube(_pod(ERROR, env=env),
                    log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())
    _services(kube).handle_pod(kube.pod)
    conf = kube.pod["metadata"]["annotations"][f"{PREFIX}recommended-alloc-conf"]
    assert set(conf.split(",")) == {"garbage_collection_threshold:0.6", "expandable_segments:True"}


def test_an_invalid_current_setting_is_flagged_in_the_evidence() -> None:
    env = [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "max_split_size_mb:10"}]
    kube = FakeKube(_pod(ERROR, env=env),
                    log=(FIXTURE / "capacity_batch_too_big_fullgpu.log").read_bytes())
    _services(kube).handle_pod(kube.pod)
    evidence = json.loads(kube.pod["metadata"]["annotations"][f"{PREFIX}evidence"])
    assert any("max_split_size_mb" in p for p in evidence["currentAllocConfProblems"])


def test_a_300_kb_alloc_conf_is_not_echoed_and_the_annotations_stay_within_16_kib() -> None:
    value = "garbage_collection_threshold:0.6," + "x" * 299_967
    assert len(value) == 300_000
    kube = FakeKube(_pod(ERROR, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": value}]),
                    log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())
    _services(kube).handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"
    evidence = json.loads(notes[f"{PREFIX}evidence"])
    assert evidence["currentAllocConf"] == ("PYTORCH_CUDA_ALLOC_CONF not read: 300000 "
                                            "characters, over the 1024-character limit")
    json.loads(notes[f"{PREFIX}actions"])
    assert sum(len(k) + len(v.encode()) for k, v in notes.items()) <= 16384
    ((_, message),) = kube.events.values()
    assert len(message) <= 1024 and "xxx" not in message


def test_an_alloc_conf_of_1024_characters_is_read_and_one_more_is_not() -> None:
    for length, read in ((1024, True), (1025, False)):
        value = "expandable_segments:False," + "garbage_collection_threshold:0.6,"
        value += " " * (length - len(value))
        kube = FakeKube(_pod(ERROR, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": value}]),
                        log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())
        _services(kube).handle_pod(kube.pod)
        conf = kube.pod["metadata"]["annotations"][f"{PREFIX}recommended-alloc-conf"]
        assert ("garbage_collection_threshold:0.6" in conf) is read, length


def test_a_torch_version_of_300_kb_of_digits_is_not_passed_on() -> None:
    env = [{"name": "TORCH_VERSION", "value": "2." + "1" * 300_000}]
    kube = FakeKube(_pod(ERROR, env=env),
                    log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())
    _services(kube).handle_pod(kube.pod)
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "fragmentation"


# -- a diagnosis that fails ----------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["error", "timeout", "crashed"])
def test_a_failed_diagnosis_is_recorded_once_and_not_retried_hot(reason: str) -> None:
    kube = FakeKube(_pod(ERROR), log=b"anything")
    diagnoser = Inline(fail=DiagnosisFailed(reason, "over the 10 s budget"))
    services = _services(kube, diagnoser)
    before = metric("gpu_auditor_operator_diagnosis_failures_total", reason=reason)
    for _ in range(5):
        services.handle_pod(kube.pod)
    _services(kube, diagnoser).handle_pod(kube.pod)  # a restarted operator sees the annotation
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis-failed"] == f"main/0: {reason}: over the 10 s budget"
    assert notes[f"{PREFIX}diagnosed-key"] == "main/0"
    assert f"{PREFIX}diagnosis" not in notes and kube.events == {}
    assert (diagnoser.calls, kube.log_reads, len(kube.patches)) == (1, 1, 1)
    assert metric("gpu_auditor_operator_diagnosis_failures_total", reason=reason) - before == 1
    assert services.pending(kube.pod) == []  # kopf's filter lets no later event through


def test_a_failure_whose_write_fails_is_written_later_without_diagnosing_again() -> None:
    kube = FakeKube(_pod(ERROR), log=b"anything")
    diagnoser = Inline(fail=DiagnosisFailed("timeout", "no answer within the 10 s budget"))
    scheduled = Scheduled()
    services = _services(kube, diagnoser, scheduled)
    before = metric("gpu_auditor_operator_diagnosis_failures_total", reason="timeout")
    kube.fail_patch["train-x"] = APIServerError("patch_pod: 503", status=503)
    services.handle_pod(kube.pod)
    del kube.fail_patch["train-x"]
    _due(services, ("uid-1", "main/0"), 5.0)
    scheduled[0][1]()
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis-failed"].startswith(
        "main/0: timeout")
    assert diagnoser.calls == 1
    assert metric("gpu_auditor_operator_diagnosis_failures_total",
                  reason="timeout") - before == 1


def test_a_bug_of_ours_on_one_pod_is_counted_and_not_retried() -> None:
    kube = FakeKube(_pod(ERROR), log=b"anything")
    diagnoser = Inline()
    diagnoser.diagnose = lambda *_, **__: 1 / 0  # type: ignore[method-assign,assignment,misc]
    services = _services(kube, diagnoser)
    before = metric("gpu_auditor_operator_diagnosis_failures_total", reason="internal")
    services.handle_pod(kube.pod)
    services.handle_pod(kube.pod)
    assert metric("gpu_auditor_operator_diagnosis_failures_total",
                  reason="internal") - before == 1
    assert kube.log_reads == 1


def test_a_later_successful_diagnosis_clears_the_failure() -> None:
    kube = FakeKube(_pod(ERROR, restarted=True),
                    log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())
    kube.pod["metadata"]["annotations"] = {f"{PREFIX}diagnosis-failed": "main/5: timeout"}
    _services(kube).handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert f"{PREFIX}diagnosis-failed" not in notes


# -- owners ----------------------------------------------------------------------------------------


def _owned(kind: str, name: str, uid: str, api_version: str = "batch/v1",
           labels: dict[str, str] | None = None) -> dict[str, Any]:
    pod = _pod(ERROR)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}]
    if labels is not None:
        pod["metadata"]["labels"] = labels
    return pod


def _fragmentation(pod: dict[str, Any]) -> FakeKube:
    return FakeKube(pod, log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())


def _job(uid: str, selector: dict[str, Any] | None = None,
         manual: bool | None = None) -> dict[str, Any]:
    """A Job as the API server serves it: its generated selector names its UID."""
    spec: dict[str, Any] = {"selector": selector or {
        "matchLabels": {"batch.kubernetes.io/controller-uid": uid}}}
    if manual is not None:
        spec["manualSelector"] = manual
    return {"metadata": {"uid": uid}, "spec": spec}


def test_the_owning_job_gets_the_summary_when_its_uid_matches() -> None:
    kube = _fragmentation(_pod(ERROR))
    kube.workloads[("Job", "train")] = _job("job-uid")
    _services(kube).handle_pod(kube.pod)
    ((kind, name, uid, owner),) = kube.workload_patches
    assert (kind, name, uid) == ("Job", "train", "job-uid")
    assert owner[f"{PREFIX}diagnosis"] == "fragmentation"
    assert owner[f"{PREFIX}diagnosed-pod"] == "ml/train-x"


def test_the_job_keeps_no_setting_from_an_earlier_pods_diagnosis() -> None:
    kube = _fragmentation(_pod(ERROR))  # fragmentation: expandable_segments helps
    kube.workloads[("Job", "train")] = _job("job-uid")
    _services(kube).handle_pod(kube.pod)
    job = kube.workloads[("Job", "train")]["metadata"]["annotations"]
    assert job[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"
    second = _pod({**ERROR, "message": (FIXTURE / "capacity_batch_too_big_fullgpu.log")
                   .read_text()})  # the Job's next pod: capacity, no setting helps
    second["metadata"].update(name="train-y", uid="uid-2")
    kube.others["train-y"] = second
    _services(kube).handle_pod(second)
    assert job[f"{PREFIX}diagnosis"] == "capacity"
    assert job[f"{PREFIX}diagnosed-pod"] == "ml/train-y"
    assert f"{PREFIX}recommended-alloc-conf" not in job


def test_a_forged_owner_reference_is_refused_and_counted() -> None:
    kube = _fragmentation(_owned("Job", "victim", "forged-uid"))
    kube.workloads[("Job", "victim")] = _job("real-uid")
    before = metric("gpu_auditor_operator_owner_writes_refused_total", reason="uid-mismatch")
    _services(kube).handle_pod(kube.pod)
    assert kube.workload_patches == []
    assert metric("gpu_auditor_operator_owner_writes_refused_total",
                  reason="uid-mismatch") - before == 1
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "fragmentation"


def test_a_job_whose_selector_does_not_select_the_pod_is_refused_and_counted() -> None:
    # the Job's real UID, none of its pods' labels (the full table: test_owners.py)
    kube = _fragmentation(_owned("Job", "victim", "real-uid", labels={"app": "x"}))
    kube.workloads[("Job", "victim")] = _job("real-uid")
    before = metric("gpu_auditor_operator_owner_writes_refused_total", reason="not-selected")
    _services(kube).handle_pod(kube.pod)
    assert kube.workload_reads == [("Job", "victim")] and kube.workload_patches == []
    assert metric("gpu_auditor_operator_owner_writes_refused_total",
                  reason="not-selected") - before == 1


@pytest.mark.parametrize("name", ["../victim", "a/b", "UPPER", "x" * 254, "", "a..b"])
def test_an_owner_name_that_is_not_a_valid_name_is_refused_before_any_request(name: str) -> None:
    kube = _fragmentation(_owned("Job", name, "job-uid"))
    before = metric("gpu_auditor_operator_owner_writes_refused_total", reason="invalid-reference")
    _services(kube).handle_pod(kube.pod)
    assert (kube.workload_reads, kube.workload_patches) == ([], [])
    assert metric("gpu_auditor_operator_owner_writes_refused_total", reason="invalid-reference") - (
        before) == 1


def test_an_owner_of_another_group_is_not_followed() -> None:
    kube = _fragmentation(_owned("Job", "train", "job-uid", api_version="example.com/v1"))
    kube.workloads[("Job", "train")] = _job("job-uid")
    _services(kube).handle_pod(kube.pod)
    assert (kube.workload_reads, kube.workload_patches) == ([], [])


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


def test_the_deployment_is_reached_through_its_verified_replica_set() -> None:
    kube = _fragmentation(_web_pod())
    kube.workloads[("ReplicaSet", "web-1")] = _replica_set("dep-uid")
    kube.workloads[("Deployment", "web")] = _deployment()
    _services(kube).handle_pod(kube.pod)
    assert [(k, n, u) for k, n, u, _ in kube.workload_patches] == [("Deployment", "web",
                                                                      "dep-uid")]


def test_a_replica_set_whose_deployment_reference_is_stale_writes_nothing() -> None:
    kube = _fragmentation(_web_pod())
    kube.workloads[("ReplicaSet", "web-1")] = _replica_set("old-dep-uid")
    kube.workloads[("Deployment", "web")] = _deployment()
    _services(kube).handle_pod(kube.pod)
    assert kube.workload_patches == []


def test_a_raw_cuda_error_with_another_pod_filling_the_gpu_is_gpu_shared() -> None:
    gib = 2**30
    report = {"metadata": {"name": "gpu-1"}, "spec": {"nodeName": "gpu-1", "gpus": [{
        "uuid": "GPU-a", "memoryTotalBytes": 140 * gib, "memoryFreeBytes": 64 * 2**20,
        "pods": [{"namespace": "ml", "pod": "hog", "podUID": "uid-hog", "container": "main",
                  "bytes": 139 * gib, "pids": [7], "allocated": "false"}]}]}}
    kube = FakeKube(_pod(ERROR), log=(FIXTURE / "context_oom_gpu_full.log").read_bytes(),
                    report=report)
    _services(kube).handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "gpu-shared"
    assert json.loads(notes[f"{PREFIX}evidence"])["otherPodsOnGPU"] == ["ml/hog"]


def test_a_report_whose_name_is_not_its_node_gives_no_evidence() -> None:
    gib = 2**30
    report = {"metadata": {"name": "gpu-2"}, "spec": {"nodeName": "gpu-1", "gpus": [{
        "uuid": "GPU-a", "memoryTotalBytes": 140 * gib, "memoryFreeBytes": 64 * 2**20,
        "pods": [{"namespace": "ml", "pod": "hog", "podUID": "uid-hog", "container": "main",
                  "bytes": 139 * gib, "pids": [7], "allocated": "false"}]}]}}
    kube = FakeKube(_pod(ERROR), log=(FIXTURE / "context_oom_gpu_full.log").read_bytes(),
                    report=report)
    _services(kube).handle_pod(kube.pod)
    evidence = json.loads(kube.pod["metadata"]["annotations"][f"{PREFIX}evidence"])
    assert evidence["otherPodsOnGPU"] == []


def test_an_api_outage_while_writing_is_retried_later() -> None:
    kube = FakeKube(_pod({"exitCode": 137, "reason": "OOMKilled"}))
    scheduled = Scheduled()
    services = _services(kube, schedule=scheduled)
    kube.fail_patch["train-x"] = APIServerError("patch_pod: 503 Service Unavailable", status=503)
    services.handle_pod(kube.pod)
    assert [delay for delay, _ in scheduled] == [5.0]
    del kube.fail_patch["train-x"]
    _due(services, ("uid-1", "main/0"), 5.0)
    scheduled[0][1]()
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert len(kube.events) == 1


def test_a_forbidden_write_is_retried_later_too() -> None:
    kube = FakeKube(_pod({"exitCode": 137, "reason": "OOMKilled"}))
    scheduled = Scheduled()
    services = _services(kube, schedule=scheduled)
    kube.fail_patch["train-x"] = APIForbiddenError("patch_pod: 403", status=403)
    services.handle_pod(kube.pod)
    services.handle_pod(kube.pod)  # an event right after: not hot
    assert [delay for delay, _ in scheduled] == [5.0]


def test_a_pod_deleted_mid_diagnosis_writes_nothing() -> None:
    kube = FakeKube(_pod(ERROR))
    pod = kube.pod
    kube.pod = None  # type: ignore[assignment]
    _services(kube).handle_pod(pod)
    assert kube.patches == [] and kube.events == {}


def test_every_pod_write_names_the_pods_uid() -> None:
    kube = _fragmentation(_pod(ERROR))
    _services(kube).handle_pod(kube.pod)
    assert kube.patched == [("ml", "train-x", "uid-1")]


def test_a_stale_event_queued_before_our_own_patch_writes_nothing_twice() -> None:
    kube = FakeKube(_pod(ERROR), log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())
    services = _services(kube)
    stale = copy.deepcopy(kube.pod)  # the status event kopf queued while we were writing
    services.handle_pod(kube.pod)
    services.oom.attempts.memory = type(services.oom.attempts.memory)(10)  # that memory gone
    services.handle_pod(stale)
    assert (len(kube.patches), kube.event_creates, kube.log_reads) == (1, 1, 1)


# -- node reports ----------------------------------------------------------------------------------


def _running(name: str, uid: str, node: str = "gpu-1", namespace: str = "ml") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "uid": uid, "annotations": {}},
            "spec": {"nodeName": node, "containers": [{"name": "main"}]}, "status": {}}


def _entry(ref: str, uid: str) -> dict[str, Any]:
    namespace, _, pod = ref.partition("/")
    return {"namespace": namespace, "pod": pod, "podUID": uid, "container": "main",
            "bytes": 2**30, "allocated": "true"}


def _sharing(*refs: str, uids: dict[str, str] | None = None, node: str = "gpu-1",
             kind: str = "unintended-sharing", extra: list[dict[str, Any]] | None = None
             ) -> dict[str, Any]:
    uids = uids or {}
    entries = [_entry(ref, uids.get(ref, f"uid-{ref.partition('/')[2]}")) for ref in refs]
    return {"metadata": {"name": node}, "spec": {
        "nodeName": node, "gpus": [{"uuid": "GPU-a", "index": 0, "pods": entries}],
        "findings": [{"kind": kind, "gpuUUID": "GPU-a", "pods": list(refs),
                      "message": f"{len(refs)} pods on GPU-a"}, *(extra or [])]}}


def _report_kube(*pods: dict[str, Any]) -> FakeKube:
    kube = FakeKube(None)  # type: ignore[arg-type]
    kube.others = {p["metadata"]["name"]: p for p in pods}
    return kube


def test_sharing_findings_are_written_once_per_pod() -> None:
    kube = _report_kube(_running("train-x", "uid-train-x"), _running("nb", "uid-nb"))
    services = _services(kube)
    report = parse_report(_sharing("ml/train-x", "ml/nb"))
    services.handle_report(report)
    services.handle_report(report)
    assert kube.others["train-x"]["metadata"]["annotations"][f"{PREFIX}gpu-shared-with"] == (
        "ml/nb")
    assert sorted(kube.patched) == [("ml", "nb", "uid-nb"), ("ml", "train-x", "uid-train-x")]
    assert len(kube.events) == 2


def test_a_pod_with_two_findings_gets_one_stable_annotation_set_and_an_event_for_each() -> None:
    kube = _report_kube(_running("train-x", "uid-train-x"), _running("nb", "uid-nb"))
    report = parse_report(_sharing("ml/train-x", "ml/nb", extra=[
        {"kind": "unrequested-gpu-use", "gpuUUID": "GPU-a", "pods": ["ml/train-x"]}]))
    _services(kube).handle_report(report)
    _services(kube).handle_report(report)  # a restarted operator: nothing changes
    notes = kube.others["train-x"]["metadata"]["annotations"]
    assert notes[f"{PREFIX}sharing-finding"] == "unintended-sharing,unrequested-gpu-use"
    assert notes[f"{PREFIX}gpu-shared-with"] == "ml/nb"
    assert [n for _, n, _ in kube.patched] == ["train-x", "nb"]
    assert sorted(reason for reason, _ in kube.events.values()) == [
        "UnintendedGPUSharing", "UnintendedGPUSharing", "UnrequestedGPUUse"]


def test_a_report_naming_a_pod_on_another_node_writes_nothing_there() -> None:
    kube = _report_kube(_running("coredns", "uid-coredns", node="gpu-2", namespace="kube-system"),
                        _running("nb", "uid-nb"))
    before = metric("gpu_auditor_operator_report_items_ignored_total", reason="other-node")
    _services(kube).handle_report(parse_report(_sharing("kube-system/coredns", "ml/nb")))
    assert [n for _, n, _ in kube.patched] == ["nb"]
    assert [reason for reason, _ in kube.events.values()] == ["UnintendedGPUSharing"]
    assert metric("gpu_auditor_operator_report_items_ignored_total",
                  reason="other-node") - before == 1


def test_a_report_naming_a_pod_by_a_uid_it_does_not_have_writes_nothing() -> None:
    kube = _report_kube(_running("train-x", "uid-real"), _running("nb", "uid-nb"))
    before = metric("gpu_auditor_operator_report_items_ignored_total", reason="uid-mismatch")
    _services(kube).handle_report(parse_report(
        _sharing("ml/train-x", "ml/nb", uids={"ml/train-x": "uid-forged"})))
    assert [n for _, n, _ in kube.patched] == ["nb"]
    assert metric("gpu_auditor_operator_report_items_ignored_total",
                  reason="uid-mismatch") - before == 1


def test_a_finding_naming_a_bare_uid_or_a_path_is_ignored_without_a_request() -> None:
    kube = _report_kube(_running("nb", "uid-nb"))
    raw = _sharing("ml/nb")
    raw["spec"]["findings"][0]["pods"] += ["0f1e2d3c-aaaa-bbbb-cccc-000000000001",
                                           "ml/../../api/v1/nodes", "kube-system/a/b"]
    before = metric("gpu_auditor_operator_report_items_ignored_total", reason="malformed-pod-ref")
    _services(kube).handle_report(parse_report(raw))
    assert kube.reads == [("ml", "nb")]
    assert metric("gpu_auditor_operator_report_items_ignored_total", reason="malformed-pod-ref") - (
        before) == 3


def test_one_forbidden_pod_does_not_stop_the_rest_of_the_report_and_is_retried() -> None:
    kube = _report_kube(_running("a", "uid-a"), _running("b", "uid-b"), _running("c", "uid-c"))
    kube.fail_patch["b"] = APIForbiddenError("patch_pod: 403 Forbidden", status=403)
    scheduled = Scheduled()
    services = _services(kube, schedule=scheduled)
    services.handle_report(parse_report(_sharing("ml/a", "ml/b", "ml/c")))
    assert [n for _, n, _ in kube.patched] == ["a", "c"]
    assert [delay for delay, _ in scheduled] == [5.0]
    scheduled[0][1]()  # still forbidden: the next attempt is later
    assert [delay for delay, _ in scheduled] == [5.0, 15.0]
    del kube.fail_patch["b"]
    scheduled[1][1]()
    assert [n for _, n, _ in kube.patched] == ["a", "c", "b"]
    assert len(scheduled) == 2


def test_a_retry_against_a_newer_report_that_no_longer_names_the_pod_does_nothing() -> None:
    kube = _report_kube(_running("a", "uid-a"), _running("b", "uid-b"))
    kube.fail_patch["b"] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    services = _services(kube, schedule=scheduled)
    services.handle_report(parse_report(_sharing("ml/a", "ml/b")))
    del kube.fail_patch["b"]
    services.reports.note(parse_report(_sharing("ml/a")))  # b is gone from the node's report
    scheduled[0][1]()
    assert [n for _, n, _ in kube.patched] == ["a"]


def test_an_operator_watching_some_namespaces_leaves_pods_elsewhere_alone() -> None:
    kube = _report_kube(_running("coredns", "uid-coredns", namespace="kube-system"),
                        _running("nb", "uid-nb"))
    services = Services(kube=kube, config=OperatorConfig(namespaces=("ml",)),  # type: ignore[arg-type]
                        diagnoser=Inline(), schedule=Scheduled())
    before = metric("gpu_auditor_operator_report_items_ignored_total", reason="not-watched")
    services.handle_report(parse_report(_sharing("kube-system/coredns", "ml/nb")))
    assert kube.reads == [("ml", "nb")]
    assert [n for _, n, _ in kube.patched] == ["nb"]
    assert kube.others["nb"]["metadata"]["annotations"][f"{PREFIX}gpu-shared-with"] == (
        "kube-system/coredns")
    assert metric("gpu_auditor_operator_report_items_ignored_total",
                  reason="not-watched") - before == 1
