"""The OOM path (`OomPath`): a failed container read, diagnosed and written once, its retries,
its failures, the writes the API refuses, and its two later inputs: the node's memory series of
the failed container (issue 10) and the OOM probe's record in its termination message (issue
17). With an in-memory stand-in for the API (controller_helpers.py; the real API server is in
tests/integration/test_operator.py, test_operator_hostile.py and
test_operator_series_probe.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from prometheus_client import REGISTRY

from gpu_auditor.base.errors import APIForbiddenError, APIServerError
from gpu_auditor.base.nodereport import parse_report
from gpu_auditor.controller.diagnosispool import DiagnosisFailed
from gpu_auditor.controller.pod import DiagnosedKeys
from gpu_auditor.controller.service import OperatorConfig, Services

from .controller_helpers import (
    END,
    ERROR,
    FIXTURE,
    GIB,
    H200_LOGS,
    PREFIX,
    FakeKube,
    Inline,
    Scheduled,
    flat,
    fragmentation_kube,
    job_pod,
    make_services,
    metric,
    record_of,
    report_with,
    rising,
)

pytestmark = pytest.mark.unit


def _due(services: Services, key: tuple[str, str], seconds: float) -> None:
    """Move a failed attempt `seconds` into the past (its retry's time has come)."""
    memory = services.oom.attempts.memory
    at, attempts = memory.get(key)
    memory.add(key, (at - seconds, attempts))


def test_a_cuda_oom_is_written_once_however_often_the_pod_event_repeats() -> None:
    kube = FakeKube(job_pod(ERROR), log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    services = make_services(kube)
    for _ in range(3):
        services.handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert notes[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"
    assert notes[f"{PREFIX}diagnosed-key"] == "main/0"
    assert (len(kube.patches), len(kube.events), kube.log_reads) == (1, 1, 1)


def test_a_restarted_operator_finds_the_work_done_and_posts_no_second_event() -> None:
    kube = FakeKube(job_pod(ERROR), log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    make_services(kube).handle_pod(kube.pod)
    make_services(kube).handle_pod(kube.pod)  # a new process: no memory of the first
    assert (len(kube.patches), len(kube.events), kube.log_reads) == (1, 1, 1)


def test_the_annotation_is_written_before_the_event() -> None:
    kube = FakeKube(job_pod(ERROR), log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    order: list[str] = []
    patch, post = kube.patch_pod_annotations, kube.post_event
    kube.patch_pod_annotations = (  # type: ignore[method-assign]
        lambda *a, **k: (order.append("annotation"), patch(*a, **k))[1])
    kube.post_event = (  # type: ignore[method-assign]
        lambda *a, **k: (order.append("event"), post(*a, **k))[1])
    make_services(kube).handle_pod(kube.pod)
    assert order[:2] == ["annotation", "event"]


def test_an_event_that_fails_is_tried_again_alone_and_the_annotation_stays_done() -> None:
    kube = FakeKube(job_pod(ERROR), log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    post = kube.post_event
    kube.post_event = lambda *a, **k: (_ for _ in ()).throw(  # type: ignore[method-assign]
        APIServerError("down", status=503))
    schedule = Scheduled()
    services = make_services(kube, schedule=schedule)
    services.handle_pod(kube.pod)
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "fragmentation"
    assert kube.events == {} and [delay for delay, _ in schedule] == [5.0]
    kube.post_event = post  # type: ignore[method-assign]
    schedule[0][1]()
    assert [reason for reason, _ in kube.events.values()] == ["CUDAOutOfMemory"]
    services.handle_pod(kube.pod)  # the termination is done: no second diagnosis, no log read
    assert (len(kube.patches), kube.log_reads) == (1, 1)


def test_the_termination_message_is_read_before_the_log() -> None:
    message = (FIXTURE / "capacity_batch_too_big_fullgpu.log").read_text()
    kube = FakeKube(job_pod({**ERROR, "message": message}))
    make_services(kube).handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert json.loads(notes[f"{PREFIX}evidence"])["source"] == "termination-message"
    assert kube.log_reads == 0


def test_a_restarted_container_is_diagnosed_under_the_key_of_the_failed_run() -> None:
    kube = FakeKube(job_pod(ERROR, restarted=True),
                    log=(FIXTURE / "capacity_batch_too_big_fullgpu.log").read_bytes())
    make_services(kube).handle_pod(kube.pod)
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosed-key"] == "main/0"


def test_an_oom_kill_names_the_memory_limit_and_reads_no_log() -> None:
    kube = FakeKube(job_pod({"exitCode": 137, "reason": "OOMKilled"}))
    make_services(kube).handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert "4.00 GiB" in notes[f"{PREFIX}summary"]
    assert kube.log_reads == 0
    assert [reason for reason, _ in kube.events.values()] == ["OOMKilled"]


def test_a_pod_evicted_for_the_node_s_memory_is_annotated_as_a_host_kill() -> None:
    """public11 t-011, t-012, v-030: pipelines' pods the kubelet evicted under node memory
    pressure; the annotation names the eviction and asks for a memory request."""
    pod = job_pod({"exitCode": 137, "reason": "Error"})
    pod["status"].update(phase="Failed", reason="Evicted", message=(
        "The node was low on resource: memory. Container main was using 2519384Ki, which "
        "exceeds its request of 0."))
    kube = FakeKube(pod)
    make_services(kube).handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert notes[f"{PREFIX}summary"].startswith(
        "host-oom-killed: container 'main' was stopped (exit 137) when the kubelet evicted the "
        "pod: the node was low on host (CPU) memory")
    assert kube.log_reads == 0


def test_a_failure_without_an_oom_writes_nothing_and_is_not_read_again() -> None:
    kube = FakeKube(job_pod(ERROR), log=b"Traceback...\nValueError: bad config\n")
    services = make_services(kube)
    services.handle_pod(kube.pod)
    services.handle_pod(kube.pod)
    assert (kube.patches, kube.events, kube.log_reads) == ([], {}, 1)


def test_a_transient_log_failure_schedules_its_own_retry_and_then_succeeds() -> None:
    kube = FakeKube(job_pod(ERROR), log_error="unavailable")
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    services.handle_pod(kube.pod)
    services.handle_pod(kube.pod)  # an event right after: too early for another read
    assert kube.log_reads == 1 and kube.patches == []
    assert [delay for delay, _ in scheduled] == [5.0]  # a terminated pod sends no more events
    kube.log_error, kube.log = None, (FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes()
    _due(services, ("uid-1", "main/0"), 5.0)
    scheduled[0][1]()  # the retry reads the pod again and diagnoses it
    assert kube.reads == [("ml", "train-x")]
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "fragmentation"


def test_a_retry_whose_read_fails_schedules_the_next_one() -> None:
    """The API server restarting: the retry's own read fails too; the retries go on (they had
    stopped there, and a terminated pod sends no event to start them again)."""
    kube = FakeKube(job_pod({"exitCode": 137, "reason": "OOMKilled"}))
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    kube.fail_patch["train-x"] = APIServerError("patch_pod: 503 Service Unavailable", status=503)
    services.handle_pod(kube.pod)
    del kube.fail_patch["train-x"]
    read = kube.read_pod

    def closed(*_: Any) -> dict[str, Any]:
        raise APIServerError("GET pod: Remote end closed connection without response", status=0)

    kube.read_pod = closed  # type: ignore[method-assign]
    scheduled[0][1]()
    assert [delay for delay, _ in scheduled] == [5.0, 15.0]
    kube.read_pod = read  # type: ignore[method-assign]
    _due(services, ("uid-1", "main/0"), 15.0)
    scheduled[1][1]()
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "host-oom-killed"
    gone = FakeKube(job_pod({"exitCode": 137, "reason": "OOMKilled"}))
    later = Scheduled()
    services = make_services(gone, schedule=later)
    gone.fail_patch["train-x"] = APIServerError("patch_pod: 503", status=503)
    services.handle_pod(gone.pod)
    gone.pod = None  # deleted: its retry ends there
    later[0][1]()
    assert [delay for delay, _ in later] == [5.0]


def test_retries_back_off() -> None:
    kube = FakeKube(job_pod(ERROR), log_error="unavailable")
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    for _ in range(6):
        services.handle_pod(kube.pod)
        _due(services, ("uid-1", "main/0"), 1000.0)
    assert [delay for delay, _ in scheduled] == [5.0, 15.0, 45.0, 120.0, 300.0, 300.0]


def test_the_recommendation_merges_with_the_jobs_current_setting() -> None:
    env = [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "garbage_collection_threshold:0.6"}]
    kube = FakeKube(job_pod(ERROR, env=env),
                    log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    make_services(kube).handle_pod(kube.pod)
    conf = kube.pod["metadata"]["annotations"][f"{PREFIX}recommended-alloc-conf"]
    assert set(conf.split(",")) == {"garbage_collection_threshold:0.6", "expandable_segments:True"}


def test_an_invalid_current_setting_is_flagged_in_the_evidence() -> None:
    env = [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "max_split_size_mb:10"}]
    kube = FakeKube(job_pod(ERROR, env=env),
                    log=(FIXTURE / "capacity_batch_too_big_fullgpu.log").read_bytes())
    make_services(kube).handle_pod(kube.pod)
    evidence = json.loads(kube.pod["metadata"]["annotations"][f"{PREFIX}evidence"])
    assert any("max_split_size_mb" in p for p in evidence["currentAllocConfProblems"])


def test_a_300_kb_alloc_conf_is_not_echoed_and_the_annotations_stay_within_16_kib() -> None:
    value = "garbage_collection_threshold:0.6," + "x" * 299_967
    assert len(value) == 300_000
    kube = FakeKube(job_pod(ERROR, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": value}]),
                    log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    make_services(kube).handle_pod(kube.pod)
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
        kube = FakeKube(job_pod(ERROR, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": value}]),
                        log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
        make_services(kube).handle_pod(kube.pod)
        conf = kube.pod["metadata"]["annotations"][f"{PREFIX}recommended-alloc-conf"]
        assert ("garbage_collection_threshold:0.6" in conf) is read, length


def test_a_torch_version_of_300_kb_of_digits_is_not_passed_on() -> None:
    env = [{"name": "TORCH_VERSION", "value": "2." + "1" * 300_000}]
    kube = FakeKube(job_pod(ERROR, env=env),
                    log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    make_services(kube).handle_pod(kube.pod)
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "fragmentation"


@pytest.mark.parametrize("reason", ["error", "timeout", "crashed"])
def test_a_failed_diagnosis_is_recorded_once_and_not_retried_hot(reason: str) -> None:
    kube = FakeKube(job_pod(ERROR), log=b"anything")
    diagnoser = Inline(fail=DiagnosisFailed(reason, "over the 10 s budget"))
    services = make_services(kube, diagnoser)
    before = metric("gpu_auditor_operator_diagnosis_failures_total", reason=reason)
    for _ in range(5):
        services.handle_pod(kube.pod)
    make_services(kube, diagnoser).handle_pod(kube.pod)  # a restarted operator sees the annotation
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis-failed"] == f"main/0: {reason}: over the 10 s budget"
    assert notes[f"{PREFIX}diagnosed-key"] == "main/0"
    assert f"{PREFIX}diagnosis" not in notes and kube.events == {}
    assert (diagnoser.calls, kube.log_reads, len(kube.patches)) == (1, 1, 1)
    assert metric("gpu_auditor_operator_diagnosis_failures_total", reason=reason) - before == 1
    assert services.pending(kube.pod) == []  # kopf's filter lets no later event through
    assert not services.wants(kube.pod) and not make_services(kube).wants(kube.pod)


def test_a_failure_whose_write_fails_is_written_later_without_diagnosing_again() -> None:
    kube = FakeKube(job_pod(ERROR), log=b"anything")
    diagnoser = Inline(fail=DiagnosisFailed("timeout", "no answer within the 10 s budget"))
    scheduled = Scheduled()
    services = make_services(kube, diagnoser, scheduled)
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
    kube = FakeKube(job_pod(ERROR), log=b"anything")
    diagnoser = Inline()
    diagnoser.diagnose = lambda *_, **__: 1 / 0  # type: ignore[method-assign,assignment,misc]
    services = make_services(kube, diagnoser)
    before = metric("gpu_auditor_operator_diagnosis_failures_total", reason="internal")
    services.handle_pod(kube.pod)
    services.handle_pod(kube.pod)
    assert metric("gpu_auditor_operator_diagnosis_failures_total",
                  reason="internal") - before == 1
    assert kube.log_reads == 1


def test_a_later_successful_diagnosis_clears_the_failure() -> None:
    kube = FakeKube(job_pod(ERROR, restarted=True),
                    log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    kube.pod["metadata"]["annotations"] = {f"{PREFIX}diagnosis-failed": "main/5: timeout"}
    make_services(kube).handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert f"{PREFIX}diagnosis-failed" not in notes


def test_a_raw_cuda_error_with_another_pod_filling_the_gpu_is_gpu_shared() -> None:
    gib = 2**30
    report = {"metadata": {"name": "gpu-1"}, "spec": {"nodeName": "gpu-1", "gpus": [{
        "uuid": "GPU-a", "memoryTotalBytes": 140 * gib, "memoryFreeBytes": 64 * 2**20,
        "pods": [{"namespace": "ml", "pod": "hog", "podUID": "uid-hog", "container": "main",
                  "bytes": 139 * gib, "pids": [7], "allocated": "false"}]}]}}
    kube = FakeKube(job_pod(ERROR), log=(FIXTURE / "context_oom_gpu_full.log").read_bytes(),
                    report=report)
    make_services(kube).handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert notes[f"{PREFIX}diagnosis"] == "gpu-shared"
    assert json.loads(notes[f"{PREFIX}evidence"])["otherPodsOnGPU"] == ["ml/hog"]


def test_a_report_whose_name_is_not_its_node_gives_no_evidence() -> None:
    gib = 2**30
    report = {"metadata": {"name": "gpu-2"}, "spec": {"nodeName": "gpu-1", "gpus": [{
        "uuid": "GPU-a", "memoryTotalBytes": 140 * gib, "memoryFreeBytes": 64 * 2**20,
        "pods": [{"namespace": "ml", "pod": "hog", "podUID": "uid-hog", "container": "main",
                  "bytes": 139 * gib, "pids": [7], "allocated": "false"}]}]}}
    kube = FakeKube(job_pod(ERROR), log=(FIXTURE / "context_oom_gpu_full.log").read_bytes(),
                    report=report)
    make_services(kube).handle_pod(kube.pod)
    evidence = json.loads(kube.pod["metadata"]["annotations"][f"{PREFIX}evidence"])
    assert evidence["otherPodsOnGPU"] == []


def test_an_api_outage_while_writing_is_retried_later() -> None:
    kube = FakeKube(job_pod({"exitCode": 137, "reason": "OOMKilled"}))
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    kube.fail_patch["train-x"] = APIServerError("patch_pod: 503 Service Unavailable", status=503)
    services.handle_pod(kube.pod)
    assert [delay for delay, _ in scheduled] == [5.0]
    del kube.fail_patch["train-x"]
    _due(services, ("uid-1", "main/0"), 5.0)
    scheduled[0][1]()
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert len(kube.events) == 1


def test_a_forbidden_write_is_retried_later_too() -> None:
    kube = FakeKube(job_pod({"exitCode": 137, "reason": "OOMKilled"}))
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    kube.fail_patch["train-x"] = APIForbiddenError("patch_pod: 403", status=403)
    services.handle_pod(kube.pod)
    services.handle_pod(kube.pod)  # an event right after: not hot
    assert [delay for delay, _ in scheduled] == [5.0]


def test_a_pod_deleted_mid_diagnosis_writes_nothing() -> None:
    kube = FakeKube(job_pod(ERROR))
    pod = kube.pod
    kube.pod = None  # type: ignore[assignment]
    make_services(kube).handle_pod(pod)
    assert kube.patches == [] and kube.events == {}


def test_every_pod_write_names_the_pods_uid() -> None:
    kube = fragmentation_kube(job_pod(ERROR))
    make_services(kube).handle_pod(kube.pod)
    assert kube.patched == [("ml", "train-x", "uid-1")]


def test_a_stale_event_queued_before_our_own_patch_writes_nothing_twice() -> None:
    kube = FakeKube(job_pod(ERROR), log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    services = make_services(kube)
    stale = copy.deepcopy(kube.pod)  # the status event kopf queued while we were writing
    services.handle_pod(kube.pod)
    services.oom.attempts.memory = type(services.oom.attempts.memory)(10)  # that memory gone
    services.handle_pod(stale)
    assert (len(kube.patches), kube.event_creates, kube.log_reads) == (1, 1, 1)


# The OOM path at its decision points (issue 18), each negative case beside the positive one it
# differs from by one value.

OOM = {"exitCode": 1, "reason": "Error", "finishedAt": "2026-11-29T10:00:00Z"}


def failed_pod(diagnosed: str | None, restarts: int = 0) -> dict[str, Any]:
    body = job_pod(ERROR)
    body["status"]["containerStatuses"][0]["restartCount"] = restarts
    if diagnosed is not None:
        body["metadata"]["annotations"][f"{PREFIX}diagnosed-key"] = diagnosed
    return body


def oom_message(gib: int) -> str:
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib}.00 GiB. GPU 0 "
            "has a total capacity of 79.15 GiB of which 0.20 GiB is free. Including non-PyTorch "
            "memory, this process has 78.80 GiB memory in use. Of the allocated memory 78.10 GiB "
            "is allocated by PyTorch, and 0.10 GiB is reserved by PyTorch but unallocated.\n")


def many_failed(containers: int) -> dict[str, Any]:
    body = job_pod(ERROR)
    body["spec"]["containers"] = [{"name": f"c{i}"} for i in range(containers)]
    body["status"]["containerStatuses"] = [
        {"name": f"c{i}", "restartCount": 0,
         "state": {"terminated": {**OOM, "message": oom_message(i + 1)}}}
        for i in range(containers)]  # fmt: skip
    return body


def restarted(restarts: int, *, current: bool = False) -> dict[str, Any]:
    """A crash-looping container at `restarts`: its last run failed (lastState); with `current`
    the run after it failed too and is not restarted yet (state.terminated)."""
    body = job_pod(ERROR)
    status = body["status"]["containerStatuses"][0]
    status.update(restartCount=restarts, state={"waiting": {"reason": "CrashLoopBackOff"}},
                  lastState={"terminated": {**OOM, "message": oom_message(1)}})
    if current:
        status["state"] = {"terminated": {**OOM, "message": oom_message(2)}}
    return body


class LogKwargs(FakeKube):
    """Records how the log was asked for."""

    asked: dict[str, Any]

    def read_log(self, *args: Any, **kwargs: Any) -> bytes:
        self.asked = kwargs
        return super().read_log(*args, **kwargs)


@pytest.mark.parametrize(
    ("diagnosed", "pending"),
    [
        (None, ["main/0"]),
        ("main/1", []),  # a higher restart count of the container is recorded
        ("side/0", ["main/0"]),
        ("main/0", []),
        ("side/0,main/0", []),
        ("main/0,side/0", []),
        ("main/00", []),  # read as 0
        ("Main/0", ["main/0"]),  # not a key: a tenant cannot mark work done with junk
        ("*/0", []),  # every container done up to restart count 0
    ],
    ids=[f"case{i}" for i in range(9)],  # plain ids: mutmut runs tests by id
)
def test_pending_leaves_out_what_diagnosed_key_lists(
    diagnosed: str | None, pending: list[str]
) -> None:
    services = make_services(FakeKube(failed_pod(diagnosed)))
    assert [t.key for t in services.pending(failed_pod(diagnosed))] == pending


def test_pending_reads_diagnosed_key_under_the_configured_prefix() -> None:
    body = failed_pod(None)
    body["metadata"]["annotations"]["example.com/diagnosed-key"] = "main/0"
    config = OperatorConfig(annotation_prefix="example.com/")
    services = Services(kube=FakeKube(body), config=config,  # type: ignore[arg-type]
                        diagnoser=Inline(), schedule=Scheduled())  # fmt: skip
    assert services.pending(body) == []
    assert [t.key for t in make_services(FakeKube(body)).pending(body)] == ["main/0"]


def test_a_diagnosed_termination_is_not_diagnosed_again_a_new_one_is() -> None:
    log = (FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes()
    done = FakeKube(failed_pod("main/0"), log=log)
    diagnoser = Inline()
    make_services(done, diagnoser).handle_pod(done.pod)
    assert (diagnoser.calls, done.log_reads, done.patches) == (0, 0, [])
    again = FakeKube(failed_pod("main/0", restarts=1), log=log)  # the key is now main/1
    diagnoser = Inline()
    make_services(again, diagnoser).handle_pod(again.pod)
    assert (diagnoser.calls, again.log_reads, len(again.patches)) == (1, 1, 1)
    assert again.pod["metadata"]["annotations"][f"{PREFIX}diagnosed-key"] == "main/1"


def test_a_pod_with_20_failed_containers_converges_across_operator_restarts() -> None:
    kube = FakeKube(many_failed(20))
    first = Inline()
    make_services(kube, first).handle_pod(kube.pod)
    notes_after_first = dict(kube.pod["metadata"]["annotations"])
    assert first.calls == 20 and len(kube.events) == 20
    for _ in range(3):  # the operator restarted three times: kopf lists the pod again
        again = Inline()
        services = make_services(kube, again)
        assert services.pending(kube.pod) == []
        services.handle_pod(kube.pod)
        assert again.calls == 0
    assert kube.pod["metadata"]["annotations"] == notes_after_first
    assert len(notes_after_first[f"{PREFIX}diagnosed-key"].split(",")) == 20


def test_17_failed_containers_and_16_are_all_recorded() -> None:
    for containers in (16, 17):  # the old format kept 16 keys: no bound at 16 any more
        kube = FakeKube(many_failed(containers))
        make_services(kube).handle_pod(kube.pod)
        assert make_services(kube).pending(kube.pod) == []


def test_the_older_run_is_diagnosed_first_and_the_newer_one_is_what_the_pod_shows() -> None:
    kube = FakeKube(restarted(1, current=True))  # main/0 (lastState) and main/1 (state)
    services = make_services(kube)
    assert [t.key for t in services.pending(kube.pod)] == ["main/0", "main/1"]
    services.handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert len(kube.events) == 2
    assert notes[f"{PREFIX}diagnosed-key"] == "main/1"
    assert json.loads(notes[f"{PREFIX}evidence"])["restartCount"] == 1
    assert "2.00 GiB" in notes[f"{PREFIX}summary"]


def test_a_crash_looping_pod_is_remembered_by_one_entry_however_often_it_restarts() -> None:
    kube = FakeKube(restarted(1))
    services = make_services(kube)
    for restarts in range(1, 201):  # 200 diagnosed restarts of one container
        kube.pod = restarted(restarts) | {"metadata": kube.pod["metadata"]}
        services.handle_pod(kube.pod)
    assert len(kube.events) == 200
    assert services.oom.written.get("uid-1") == DiagnosedKeys({"main": 199})
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosed-key"] == "main/199"
    stale = restarted(50)  # an event from long ago, before any of our patches
    assert services.pending(stale) == []
    services.handle_pod(stale)
    assert len(kube.events) == 200


def test_a_pod_annotated_by_the_previous_release_is_not_diagnosed_again() -> None:
    body = restarted(16)  # its lastState is main/15
    body["metadata"]["annotations"][f"{PREFIX}diagnosed-key"] = ",".join(
        f"main/{i}" for i in range(16))  # the last 16 keys, as 0.x wrote them
    kube = FakeKube(body)
    diagnoser = Inline()
    services = make_services(kube, diagnoser)
    assert services.pending(kube.pod) == []
    services.handle_pod(kube.pod)
    assert (diagnoser.calls, kube.patches) == (0, [])
    kube.pod = restarted(17) | {"metadata": kube.pod["metadata"]}  # main/16: a new failure
    services.handle_pod(kube.pod)
    assert diagnoser.calls == 1
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosed-key"] == "main/16"


def test_a_termination_waiting_for_its_retry_is_not_pending_until_due() -> None:
    kube = FakeKube(failed_pod(None), log_error="log unavailable: 503")
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    services.handle_pod(kube.pod)
    assert services.pending(kube.pod) == []  # its retry is scheduled, not due
    assert [delay for delay, _ in scheduled] == [5.0]


def test_the_log_is_read_with_the_configured_tail_and_byte_limit() -> None:
    log = (FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes()
    kube = LogKwargs(failed_pod(None), log=log)
    config = OperatorConfig(log_tail_lines=123, log_limit_bytes=4567)
    services = Services(kube=kube, config=config, diagnoser=Inline(),  # type: ignore[arg-type]
                        schedule=Scheduled())  # fmt: skip
    services.handle_pod(kube.pod)
    assert kube.asked == {"previous": False, "tail_lines": 123, "limit_bytes": 4567}


# The OOM path's two new inputs: the node's memory series of the failed container (issue 10) and
# the OOM probe's record in its termination message (issue 17), with an in-memory API (the real
# API server: tests/integration/test_operator_series_probe.py).

def series_pod(message: str = "", *, restarted: bool = False, started: str | None = None) -> dict:
    terminated: dict[str, Any] = {"exitCode": 1, "reason": "Error",
                                  "finishedAt": "2026-11-29T10:00:00Z", "message": message}
    if started:
        terminated["startedAt"] = started
    status: dict[str, Any] = {"name": "main", "restartCount": 1 if restarted else 0}
    if restarted:
        status.update(state={"running": {}}, lastState={"terminated": terminated})
    else:
        status["state"] = {"terminated": terminated}
    return {"metadata": {"namespace": "ml", "name": "train-x", "uid": "uid-1",
                         "annotations": {}},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "main", "image": "trainer"}]},
            "status": {"containerStatuses": [status]}}


def _silent_oom_log() -> bytes:
    """A real H200 OOM of a job that printed no memory figure (PyTorch holds 138 GiB)."""
    return (H200_LOGS / "capacity_batch__baseline.log").read_bytes()


def _diagnose(kube: FakeKube) -> dict[str, str]:
    make_services(kube).handle_pod(kube.pod)
    notes: dict[str, str] = kube.pod["metadata"]["annotations"]
    return notes


def _evidence(notes: dict[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(notes[f"{PREFIX}evidence"])
    return found


def _log_without_record(name: str) -> bytes:
    lines = (H200_LOGS / "probe" / f"{name}__baseline.log").read_text().splitlines()
    return "\n".join(ln for ln in lines if "gpu-auditor-probe-record" not in ln).encode() + b"\n"


def _disagreements(inferred: str) -> dict[str, float]:
    """gpu_auditor_probe_disagreements_total by written kind, for one inferred kind."""
    return {sample.labels["kind"]: sample.value
            for family in REGISTRY.collect() if family.name == "gpu_auditor_probe_disagreements"
            for sample in family.samples
            if sample.name.endswith("_total") and sample.labels["inferred_kind"] == inferred}


def test_a_silent_leak_is_a_leak_with_the_nodes_series_and_capacity_without() -> None:
    without = _diagnose(FakeKube(series_pod(), log=_silent_oom_log(), report=report_with(None)))
    assert without[f"{PREFIX}diagnosis"] == "capacity"
    notes = _diagnose(FakeKube(series_pod(), log=_silent_oom_log(), report=report_with(rising())))
    assert notes[f"{PREFIX}diagnosis"] == "leak"
    evidence = _evidence(notes)
    assert evidence["memorySeriesPoints"] == 20
    assert evidence["growth"] == {"source": "samples", "points": 20, "firstBytes": 10 * GIB,
                                  "lastBytes": 138 * GIB}
    assert "10.00 GiB to 138.00 GiB" in notes[f"{PREFIX}summary"]


def test_a_flat_series_is_not_a_leak() -> None:
    notes = _diagnose(FakeKube(series_pod(), log=_silent_oom_log(), report=report_with(flat())))
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert _evidence(notes)["memorySeriesPoints"] == 20
    assert "growth" not in _evidence(notes)


def test_a_rising_series_written_under_another_node_is_not_used() -> None:
    kube = FakeKube(series_pod(), log=_silent_oom_log(), report=report_with(rising(), node="gpu-9"))
    notes = _diagnose(kube)
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert "memorySeriesPoints" not in _evidence(notes)


def test_another_nodes_report_naming_the_pod_does_not_displace_its_own_nodes_series() -> None:
    services = make_services(kube := FakeKube(series_pod(), log=_silent_oom_log(),
                                          report=report_with(rising())))
    services.handle_report(parse_report(report_with(rising())))
    services.handle_report(parse_report(report_with(flat(), node="gpu-9")))  # a forged claim
    services.handle_pod(kube.pod)
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "leak"


def test_a_rising_series_of_another_pod_uid_is_not_used() -> None:
    notes = _diagnose(FakeKube(series_pod(), log=_silent_oom_log(),
                               report=report_with(rising(), uid="uid-other")))
    assert notes[f"{PREFIX}diagnosis"] == "capacity"


def test_the_next_runs_rise_after_a_restart_is_not_this_runs_leak() -> None:
    after = rising(end=END + 200)  # every point after the failed run ended
    notes = _diagnose(FakeKube(series_pod(restarted=True), log=_silent_oom_log(),
                               report=report_with(after)))
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert "memorySeriesPoints" not in _evidence(notes)


def test_a_malformed_series_is_counted_and_the_pod_is_still_diagnosed() -> None:
    before = metric("gpu_auditor_operator_report_items_ignored_total", reason="malformed-series")
    hostile = {"times": [END - 10, float("nan")], "bytes": [GIB, 2**70]}
    notes = _diagnose(FakeKube(series_pod(), log=_silent_oom_log(), report=report_with(hostile)))
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert metric("gpu_auditor_operator_report_items_ignored_total",
                  reason="malformed-series") == before + 1


def test_a_record_in_the_termination_message_builds_the_diagnosis() -> None:
    used = metric("gpu_auditor_operator_probe_records_total", result="used")
    kube = FakeKube(series_pod(record_of("frag_pinned")), log=_log_without_record("frag_pinned"))
    notes = _diagnose(kube)
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    probe = _evidence(notes)["probe"]
    assert probe == {"source": "termination-message", "used": True, "status": "ok",
                     "verdict": "fragmentation", "inferenceKind": "fragmentation",
                     "disagrees": False}
    assert "probe record" in notes[f"{PREFIX}summary"]  # the figures are the record's
    assert _evidence(notes)["source"] == "log"  # the OOM message itself came from the log
    assert metric("gpu_auditor_operator_probe_records_total", result="used") == used + 1


def test_a_record_that_disagrees_wins_and_the_disagreement_is_counted() -> None:
    # The real record (a 0.05 memory fraction), with the cache's free blocks cut to 16 MiB:
    # they no longer cover the request, so the record says the cap, not fragmentation, where
    # the message alone (1.89 GiB reserved but unallocated) says fragmentation.
    raw = json.loads(record_of("frag_pinned").partition(" ")[2])
    raw["pools"]["large"]["free_bytes"] = raw["pools"]["large"]["largest_free_bytes"] = 16 * 2**20
    message = "gpu-auditor-probe-record " + json.dumps(raw, separators=(",", ":"))
    kube = FakeKube(series_pod(message), log=_log_without_record("frag_pinned"))
    before = _disagreements("fragmentation")
    notes = _diagnose(kube)
    kind = notes[f"{PREFIX}diagnosis"]
    assert kind != "fragmentation" and f"{PREFIX}recommended-alloc-conf" not in notes
    probe = _evidence(notes)["probe"]
    assert (probe["verdict"], probe["inferenceKind"], probe["disagrees"]) == (
        "cap", "fragmentation", True)
    after = _disagreements("fragmentation")
    assert after[kind] == before.get(kind, 0.0) + 1
    assert sum(after.values()) == sum(before.values()) + 1


def test_an_invalid_record_is_said_and_counted_and_the_log_still_diagnosed() -> None:
    invalid = metric("gpu_auditor_operator_probe_records_total", result="invalid")
    message = 'gpu-auditor-probe-record {"probe":"gpu-auditor","v":99,"status":"ok"}'
    notes = _diagnose(FakeKube(series_pod(message), log=_log_without_record("frag_pinned")))
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    probe = _evidence(notes)["probe"]
    assert probe["used"] is False and probe["ignored"].startswith("invalid: unsupported schema")
    assert metric("gpu_auditor_operator_probe_records_total", result="invalid") == invalid + 1


def test_a_record_of_another_failure_is_not_used() -> None:
    unmatched = metric("gpu_auditor_operator_probe_records_total", result="unmatched")
    kube = FakeKube(series_pod(record_of("capacity_batch")), log=_log_without_record("frag_pinned"))
    notes = _diagnose(kube)
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert _evidence(notes)["probe"]["used"] is False
    assert metric("gpu_auditor_operator_probe_records_total", result="unmatched") == unmatched + 1


def _recent_error(minutes_ago: float) -> dict[str, Any]:
    import datetime as dt

    at = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=minutes_ago)
    return {**ERROR, "finishedAt": at.strftime("%Y-%m-%dT%H:%M:%SZ")}


def test_an_event_lost_to_a_kill_after_the_annotation_is_posted_by_the_next_process() -> None:
    # the integration test's restart mid-run (test_operator.py) lost one pod's Event this way
    kube = FakeKube(job_pod(_recent_error(1)),
                    log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    post = kube.post_event
    kube.post_event = lambda *a, **k: True  # type: ignore[method-assign]  # killed before it
    make_services(kube).handle_pod(kube.pod)
    assert kube.events == {} and len(kube.patches) == 1
    kube.post_event = post  # type: ignore[method-assign]
    services = make_services(kube)  # the next process: the termination is done, its Event not
    # kopf's filter lets the pod through (it filtered it out before: the integration test's
    # restart mid-run lost the Event for good in one CI run of two)
    assert services.pending(kube.pod) == [] and services.wants(kube.pod)
    services.handle_pod(kube.pod)
    assert not services.wants(kube.pod)  # once per process: the filter stops it after
    services.handle_pod(kube.pod)  # once per process
    ((reason, message),) = kube.events.values()
    assert reason == "CUDAOutOfMemory"
    assert message.startswith("[main] fragmentation:")
    assert message.endswith("Recommended: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert (kube.event_creates, len(kube.patches), kube.log_reads) == (1, 1, 1)
    make_services(kube).handle_pod(kube.pod)  # a third process: the same name, no second Event
    assert (len(kube.events), kube.event_creates) == (1, 2)


def test_the_filter_lets_through_no_pod_without_work() -> None:
    """The process that wrote the pod's annotation and Event, a termination past the window, a
    failed diagnosis: nothing to post again, so kopf's filter keeps the pod from a thread."""
    kube = FakeKube(job_pod(_recent_error(1)),
                    log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    services = make_services(kube)
    assert services.wants(kube.pod)  # a termination to diagnose
    services.handle_pod(kube.pod)
    assert not services.wants(kube.pod)  # this process wrote it
    old = FakeKube(job_pod(_recent_error(11)),
                   log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    make_services(old).handle_pod(old.pod)
    assert not make_services(old).wants(old.pod)  # past the window


def test_the_event_posted_again_is_the_one_first_built() -> None:
    kube = FakeKube(job_pod(_recent_error(1)),
                    log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    make_services(kube).handle_pod(kube.pod)
    first = dict(kube.events)
    make_services(kube).handle_pod(kube.pod)  # posted again: a 409 on the same name
    assert kube.events == first and kube.event_creates == 2


def test_no_event_is_posted_again_past_the_window_or_for_a_failed_diagnosis() -> None:
    kube = FakeKube(job_pod(_recent_error(11)),
                    log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())
    kube.post_event = lambda *a, **k: True  # type: ignore[method-assign]
    make_services(kube).handle_pod(kube.pod)
    del kube.post_event  # the real fake again
    make_services(kube).handle_pod(kube.pod)
    assert kube.events == {} and kube.event_creates == 0
    failed = FakeKube(job_pod(_recent_error(1)), log=b"")
    failed.pod["metadata"]["annotations"] = {
        f"{PREFIX}diagnosis": "capacity", f"{PREFIX}summary": "an older termination's",
        f"{PREFIX}diagnosis-failed": "main/0: timeout: over budget",
        f"{PREFIX}diagnosed-at": "2099-01-01T00:00:00Z", f"{PREFIX}diagnosed-key": "main/0",
    }
    make_services(failed).handle_pod(failed.pod)
    assert failed.events == {} and failed.event_creates == 0
