"""The operator's decisions with an in-memory stand-in for the API (the real API server is in
tests/integration/test_operator.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.controller.kube import Gone, LogUnavailable, Retry
from gpu_auditor.controller.service import OperatorConfig, Services

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "oom" / "corpus"
PREFIX = "gpu-auditor.io/"


class FakeKube:
    """Records what the operator writes; serves one pod, its log and a node report."""

    def __init__(self, pod: dict[str, Any], log: bytes = b"", report: dict[str, Any] | None = None,
                 log_error: str | None = None) -> None:
        self.pod = pod
        self.log = log
        self.report = report
        self.log_error = log_error
        self.events: dict[str, tuple[str, str]] = {}
        self.event_creates = 0
        self.patches: list[dict[str, Any]] = []
        self.log_reads = 0
        self.owner_patches: list[dict[str, str]] = []

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        if self.pod is None or self.pod["metadata"]["name"] != name:
            raise Gone("gone")
        return copy.deepcopy(self.pod)

    def read_log(self, *_: Any, **__: Any) -> bytes:
        self.log_reads += 1
        if self.pod is None:
            raise Gone("gone")
        if self.log_error:
            raise LogUnavailable(self.log_error)
        return self.log

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, Any]) -> None:
        self.patches.append(annotations)
        notes = self.pod["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                notes.pop(key, None)
            else:
                notes[key] = value

    def post_event(self, pod: Any, *, name: str, reason: str, message: str,
                   event_type: str = "Warning") -> bool:
        self.event_creates += 1
        if name in self.events:
            return False
        self.events[name] = (reason, message)
        return True

    def read_node_report(self, node: str) -> dict[str, Any] | None:
        return self.report

    def patch_owner(self, namespace: str, owners: Any, annotations: dict[str, str]) -> str:
        self.owner_patches.append(annotations)
        return "Job/train"


def _pod(terminated: dict[str, Any], *, env: list[dict[str, str]] | None = None,
         restarted: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"name": "main", "restartCount": 1 if restarted else 0}
    if restarted:
        status.update(state={"running": {}}, lastState={"terminated": terminated})
    else:
        status["state"] = {"terminated": terminated}
    return {
        "metadata": {"namespace": "ml", "name": "train-x", "uid": "uid-1", "annotations": {},
                     "ownerReferences": [{"kind": "Job", "name": "train", "controller": True}]},
        "spec": {"nodeName": "gpu-1", "containers": [
            {"name": "main", "image": "trainer", "env": env or [],
             "resources": {"limits": {"memory": "4Gi"}}}]},
        "status": {"containerStatuses": [status]},
    }


def _services(kube: FakeKube) -> Services:
    return Services(kube=kube, config=OperatorConfig())  # type: ignore[arg-type]


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
    assert "4.00 GiB" in notes[f"{PREFIX}reason"]
    assert kube.log_reads == 0
    assert [reason for reason, _ in kube.events.values()] == ["OOMKilled"]


def test_a_failure_without_an_oom_writes_nothing_and_is_not_read_again() -> None:
    kube = FakeKube(_pod(ERROR), log=b"Traceback...\nValueError: bad config\n")
    services = _services(kube)
    services.handle_pod(kube.pod)
    services.handle_pod(kube.pod)
    assert (kube.patches, kube.events, kube.log_reads) == ([], {}, 1)


def test_a_transient_log_failure_schedules_its_own_retry_and_then_succeeds() -> None:
    kube = FakeKube(_pod(ERROR), log_error="unavailable")
    services = _services(kube)
    scheduled: list[tuple[float, str, str]] = []
    services.on_retry = lambda delay, ns, name: scheduled.append((delay, ns, name))
    services.handle_pod(kube.pod)
    services.handle_pod(kube.pod)  # an event right after: too early for another read
    assert kube.log_reads == 1 and kube.patches == []
    assert scheduled == [(5.0, "ml", "train-x")]  # a terminated pod sends no more events
    kube.log_error, kube.log = None, (FIXTURE / "seed_example_fragmentation.log").read_bytes()
    key = ("uid-1", "main/0")
    at, attempts = services.checked.get(key)  # type: ignore[misc]
    services.checked.add(key, (at - 5.0, attempts))  # the retry's time has come
    services.handle_pod(kube.pod)
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "fragmentation"


def test_retries_back_off() -> None:
    kube = FakeKube(_pod(ERROR), log_error="unavailable")
    services = _services(kube)
    scheduled: list[float] = []
    services.on_retry = lambda delay, ns, name: scheduled.append(delay)
    key = ("uid-1", "main/0")
    for _ in range(6):
        services.handle_pod(kube.pod)
        at, attempts = services.checked.get(key)  # type: ignore[misc]
        services.checked.add(key, (at - 1000.0, attempts))
    assert scheduled == [5.0, 15.0, 45.0, 120.0, 300.0, 300.0]


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


def test_the_owning_job_gets_the_summary() -> None:
    kube = FakeKube(_pod(ERROR), log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())
    _services(kube).handle_pod(kube.pod)
    (owner,) = kube.owner_patches
    assert owner[f"{PREFIX}diagnosis"] == "fragmentation"
    assert owner[f"{PREFIX}diagnosed-pod"] == "ml/train-x"


def test_a_raw_cuda_error_with_another_pod_filling_the_gpu_is_gpu_shared() -> None:
    gib = 2**30
    report = {"nodeName": "gpu-1", "gpus": [{
        "uuid": "GPU-a", "memoryTotalBytes": 140 * gib, "memoryFreeBytes": 64 * 2**20,
        "pods": [{"namespace": "ml", "pod": "hog", "container": "main", "bytes": 139 * gib,
                  "pids": [7], "allocated": False}]}]}
    kube = FakeKube(_pod(ERROR), log=(FIXTURE / "context_oom_gpu_full.log").read_bytes(),
                    report=report)
    _services(kube).handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "gpu-shared"
    assert json.loads(notes[f"{PREFIX}evidence"])["otherPodsOnGPU"] == ["ml/hog"]


def test_an_api_outage_while_writing_is_retried_later() -> None:
    kube = FakeKube(_pod({"exitCode": 137, "reason": "OOMKilled"}))
    scheduled: list[float] = []
    services = _services(kube)
    services.on_retry = lambda delay, ns, name: scheduled.append(delay)
    original = kube.patch_pod_annotations

    def outage(*_: Any) -> None:
        raise Retry("patch_pod: 503 Service Unavailable")

    kube.patch_pod_annotations = outage  # type: ignore[method-assign]
    services.handle_pod(kube.pod)
    assert scheduled == [5.0]
    kube.patch_pod_annotations = original  # type: ignore[method-assign]
    key = ("uid-1", "main/0")
    at, attempts = services.checked.get(key)  # type: ignore[misc]
    services.checked.add(key, (at - 5.0, attempts))
    services.handle_pod(kube.pod)
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert len(kube.events) == 1


def test_a_pod_deleted_mid_diagnosis_writes_nothing() -> None:
    kube = FakeKube(_pod(ERROR))
    pod = kube.pod
    kube.pod = None  # type: ignore[assignment]
    _services(kube).handle_pod(pod)
    assert kube.patches == [] and kube.events == {}


def test_a_stale_event_queued_before_our_own_patch_writes_nothing_twice() -> None:
    kube = FakeKube(_pod(ERROR), log=(FIXTURE / "seed_example_fragmentation.log").read_bytes())
    services = _services(kube)
    stale = copy.deepcopy(kube.pod)  # the status event kopf queued while we were writing
    services.handle_pod(kube.pod)
    services.checked = type(services.checked)(10)  # even with that memory gone
    services.handle_pod(stale)
    assert (len(kube.patches), kube.event_creates, kube.log_reads) == (1, 1, 1)


def test_sharing_findings_are_written_once_per_pod() -> None:
    kube = FakeKube(_pod(ERROR))
    services = _services(kube)
    spec = {"nodeName": "gpu-1", "gpus": [], "findings": [
        {"kind": "unintended-sharing", "gpuUUID": "GPU-a", "pods": ["ml/train-x", "ml/nb"],
         "message": "2 pods on GPU-a"}]}
    services.handle_report(spec)
    services.handle_report(spec)
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}gpu-shared-with"] == "ml/nb"
    assert len(kube.patches) == 1 and len(kube.events) == 1  # ml/nb is not served: skipped


def test_a_pod_with_two_findings_gets_one_stable_annotation_set_and_an_event_for_each() -> None:
    kube = FakeKube(_pod(ERROR))
    services = _services(kube)
    spec = {"nodeName": "gpu-1", "gpus": [], "findings": [
        {"kind": "unintended-sharing", "gpuUUID": "GPU-a", "pods": ["ml/train-x", "ml/nb"]},
        {"kind": "unrequested-gpu-use", "gpuUUID": "GPU-a", "pods": ["ml/train-x"]}]}
    services.handle_report(spec)
    _services(kube).handle_report(spec)  # a restarted operator: nothing changes
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}sharing-finding"] == "unintended-sharing,unrequested-gpu-use"
    assert notes[f"{PREFIX}gpu-shared-with"] == "ml/nb"
    assert len(kube.patches) == 1
    assert sorted(reason for reason, _ in kube.events.values()) == [
        "UnintendedGPUSharing", "UnrequestedGPUUse"]
