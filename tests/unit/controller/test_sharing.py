"""The sharing path (`SharingPath`): a node report's findings written once per pod, only on the
pods the report names on that node with that UID, the ignore label, retries and back-off. With
an in-memory stand-in for the API (controller_helpers.py)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from gpu_auditor.base.errors import APIForbiddenError, APIServerError
from gpu_auditor.base.nodereport import parse_report
from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller.kube import ObjectRef

from .controller_helpers import (
    ERROR,
    PREFIX,
    FakeKube,
    Scheduled,
    job_pod,
    make_services,
    metric,
    report_kube,
    running,
    sharing,
)

pytestmark = pytest.mark.unit


def test_sharing_findings_are_written_once_per_pod() -> None:
    kube = report_kube(running("train-x", "uid-train-x"), running("nb", "uid-nb"))
    services = make_services(kube)
    report = parse_report(sharing("ml/train-x", "ml/nb"))
    services.handle_report(report)
    services.handle_report(report)
    assert kube.others["train-x"]["metadata"]["annotations"][f"{PREFIX}gpu-shared-with"] == (
        "ml/nb")
    assert sorted(kube.patched) == [("ml", "nb", "uid-nb"), ("ml", "train-x", "uid-train-x")]
    assert len(kube.events) == 2


def test_a_pod_with_two_findings_gets_one_stable_annotation_set_and_an_event_for_each() -> None:
    kube = report_kube(running("train-x", "uid-train-x"), running("nb", "uid-nb"))
    report = parse_report(sharing("ml/train-x", "ml/nb", extra=[
        {"kind": "unrequested-gpu-use", "gpuUUID": "GPU-a", "pods": ["ml/train-x"]}]))
    make_services(kube).handle_report(report)
    make_services(kube).handle_report(report)  # a restarted operator: nothing changes
    notes = kube.others["train-x"]["metadata"]["annotations"]
    assert notes[f"{PREFIX}sharing-finding"] == "unintended-sharing,unrequested-gpu-use"
    assert notes[f"{PREFIX}gpu-shared-with"] == "ml/nb"
    assert [n for _, n, _ in kube.patched] == ["train-x", "nb"]
    assert sorted(reason for reason, _ in kube.events.values()) == [
        "UnintendedGPUSharing", "UnintendedGPUSharing", "UnrequestedGPUUse"]


def test_a_report_naming_a_pod_on_another_node_writes_nothing_there() -> None:
    kube = report_kube(running("coredns", "uid-coredns", node="gpu-2", namespace="kube-system"),
                        running("nb", "uid-nb"))
    before = metric("gpu_auditor_operator_report_items_ignored_total", reason="other-node")
    make_services(kube).handle_report(parse_report(sharing("kube-system/coredns", "ml/nb")))
    assert [n for _, n, _ in kube.patched] == ["nb"]
    assert [reason for reason, _ in kube.events.values()] == ["UnintendedGPUSharing"]
    assert metric("gpu_auditor_operator_report_items_ignored_total",
                  reason="other-node") - before == 1


def test_a_report_naming_a_pod_by_a_uid_it_does_not_have_writes_nothing() -> None:
    kube = report_kube(running("train-x", "uid-real"), running("nb", "uid-nb"))
    before = metric("gpu_auditor_operator_report_items_ignored_total", reason="uid-mismatch")
    make_services(kube).handle_report(parse_report(
        sharing("ml/train-x", "ml/nb", uids={"ml/train-x": "uid-forged"})))
    assert [n for _, n, _ in kube.patched] == ["nb"]
    assert metric("gpu_auditor_operator_report_items_ignored_total",
                  reason="uid-mismatch") - before == 1


def test_a_finding_naming_a_bare_uid_or_a_path_is_ignored_without_a_request() -> None:
    kube = report_kube(running("nb", "uid-nb"))
    raw = sharing("ml/nb")
    raw["spec"]["findings"][0]["pods"] += ["0f1e2d3c-aaaa-bbbb-cccc-000000000001",
                                           "ml/../../api/v1/nodes", "kube-system/a/b"]
    before = metric("gpu_auditor_operator_report_items_ignored_total", reason="malformed-pod-ref")
    make_services(kube).handle_report(parse_report(raw))
    assert kube.reads == [("ml", "nb")]
    assert metric("gpu_auditor_operator_report_items_ignored_total", reason="malformed-pod-ref") - (
        before) == 3


def test_one_forbidden_pod_does_not_stop_the_rest_of_the_report_and_is_retried() -> None:
    kube = report_kube(running("a", "uid-a"), running("b", "uid-b"), running("c", "uid-c"))
    kube.fail_patch["b"] = APIForbiddenError("patch_pod: 403 Forbidden", status=403)
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    services.handle_report(parse_report(sharing("ml/a", "ml/b", "ml/c")))
    assert [n for _, n, _ in kube.patched] == ["a", "c"]
    assert [delay for delay, _ in scheduled] == [5.0]
    scheduled[0][1]()  # still forbidden: the next attempt is later
    assert [delay for delay, _ in scheduled] == [5.0, 15.0]
    del kube.fail_patch["b"]
    scheduled[1][1]()
    assert [n for _, n, _ in kube.patched] == ["a", "c", "b"]
    assert len(scheduled) == 2


def test_a_retry_against_a_newer_report_that_no_longer_names_the_pod_does_nothing() -> None:
    kube = report_kube(running("a", "uid-a"), running("b", "uid-b"))
    kube.fail_patch["b"] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    services.handle_report(parse_report(sharing("ml/a", "ml/b")))
    del kube.fail_patch["b"]
    services.reports.note(parse_report(sharing("ml/a")))  # b is gone from the node's report
    scheduled[0][1]()
    assert [n for _, n, _ in kube.patched] == ["a"]


# The sharing path at its decision points (issue 18), each negative case beside the positive one
# it differs from by one value, and each proving the pod was examined (the stand-in API records
# the read) rather than waiting for nothing to happen.

OOM = {"exitCode": 1, "reason": "Error", "finishedAt": "2026-11-29T10:00:00Z"}


def oom_message(gib: int) -> str:
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib}.00 GiB. GPU 0 "
            "has a total capacity of 79.15 GiB of which 0.20 GiB is free. Including non-PyTorch "
            "memory, this process has 78.80 GiB memory in use. Of the allocated memory 78.10 GiB "
            "is allocated by PyTorch, and 0.10 GiB is reserved by PyTorch but unallocated.\n")


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


def labelled(name: str, uid: str, value: str) -> dict[str, Any]:
    body = running(name, uid)
    body["metadata"]["labels"] = {"gpu-auditor.io/ignore": value}
    return body


OPERATOR_LOG = "gpu_auditor.operator"


class EventArgs(FakeKube):
    """Records every Event asked for, with the object it is about."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[tuple[Any, dict[str, Any]]] = []

    def post_event(self, about: Any, **kwargs: Any) -> bool:
        self.asked.append((about, kwargs))
        return super().post_event(about, **kwargs)


def test_a_pod_labelled_ignore_true_is_read_and_not_written() -> None:
    kube = report_kube(labelled("train-x", "uid-train-x", "true"), running("nb", "uid-nb"))
    make_services(kube).handle_report(parse_report(sharing("ml/train-x", "ml/nb")))
    assert sorted(kube.reads) == [("ml", "nb"), ("ml", "train-x")]  # both examined
    assert kube.patched == [("ml", "nb", "uid-nb")]
    assert f"{PREFIX}gpu-shared-with" not in kube.others["train-x"]["metadata"]["annotations"]
    assert len(kube.events) == 1 and kube.event_creates == 1  # the other pod's Event only


@pytest.mark.parametrize("value", ["false", "True", "yes", ""])
def test_any_other_ignore_value_is_written(value: str) -> None:
    kube = report_kube(labelled("train-x", "uid-train-x", value), running("nb", "uid-nb"))
    make_services(kube).handle_report(parse_report(sharing("ml/train-x", "ml/nb")))
    assert sorted(kube.patched) == [("ml", "nb", "uid-nb"), ("ml", "train-x", "uid-train-x")]
    assert len(kube.events) == 2


def test_an_ignored_pod_is_examined_again_on_the_next_report() -> None:
    kube = report_kube(labelled("train-x", "uid-train-x", "true"), running("nb", "uid-nb"))
    services = make_services(kube)
    report = parse_report(sharing("ml/train-x", "ml/nb"))
    services.handle_report(report)
    services.handle_report(report)
    # nb is remembered as written (no second read); train-x was never written, so it is read
    assert kube.reads.count(("ml", "train-x")) == 2 and kube.reads.count(("ml", "nb")) == 1
    kube.others["train-x"]["metadata"]["labels"] = {}  # the label removed: now written
    services.handle_report(report)
    assert sorted(n for _, n, _ in kube.patched) == ["nb", "train-x"]


def test_a_pod_already_carrying_the_annotations_is_read_not_written_then_remembered() -> None:
    kube = report_kube(running("train-x", "uid-train-x"), running("nb", "uid-nb"))
    report = parse_report(sharing("ml/train-x", "ml/nb"))
    make_services(kube).handle_report(report)
    assert len(kube.patched) == 2
    restarted = make_services(kube)  # a new operator: its memo is empty
    restarted.handle_report(report)
    assert len(kube.patched) == 2 and kube.event_creates == 2  # nothing written twice
    reads = len(kube.reads)
    restarted.handle_report(report)
    assert len(kube.reads) == reads  # remembered: not even read


def test_a_changed_finding_is_written_over_the_old_one() -> None:
    kube = report_kube(running("train-x", "uid-train-x"), running("nb", "uid-nb"),
                        running("c", "uid-c"))  # fmt: skip
    services = make_services(kube)
    services.handle_report(parse_report(sharing("ml/train-x", "ml/nb")))
    services.handle_report(parse_report(sharing("ml/train-x", "ml/nb", "ml/c")))
    notes = kube.others["train-x"]["metadata"]["annotations"]
    assert notes[f"{PREFIX}gpu-shared-with"] == "ml/c,ml/nb"
    assert [n for _, n, _ in kube.patched].count("train-x") == 2


def test_a_pod_deleted_before_its_write_is_read_and_not_retried() -> None:
    kube = report_kube(running("nb", "uid-nb"))  # train-x is named but gone
    scheduled = Scheduled()
    make_services(kube, schedule=scheduled).handle_report(
        parse_report(sharing("ml/train-x", "ml/nb")))  # fmt: skip
    assert sorted(kube.reads) == [("ml", "nb"), ("ml", "train-x")]
    assert kube.patched == [("ml", "nb", "uid-nb")] and scheduled == []


def test_a_failed_write_is_retried_once_due_and_the_write_then_lands() -> None:
    kube = report_kube(running("nb", "uid-nb"), running("a", "uid-a"))
    kube.fail_patch["nb"] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    services.handle_report(parse_report(sharing("ml/a", "ml/nb")))
    assert [delay for delay, _ in scheduled] == [5.0]
    del kube.fail_patch["nb"]
    scheduled[0][1]()
    assert sorted(n for _, n, _ in kube.patched) == ["a", "nb"]
    assert len(scheduled) == 1


def test_a_retry_for_a_node_without_a_report_reads_nothing() -> None:
    kube = report_kube(running("nb", "uid-nb"))
    services = make_services(kube)
    services.sharing._retry("gpu-9", "uid-nb")
    assert (kube.reads, kube.patched) == ([], [])


def test_the_sharing_event_is_about_the_live_pod_with_its_name_and_message() -> None:
    kube = EventArgs(None)  # type: ignore[arg-type]
    kube.others = {p["metadata"]["name"]: p for p in (running("train-x", "uid-train-x"),
                                                      running("nb", "uid-nb"))}  # fmt: skip
    make_services(kube).handle_report(parse_report(sharing("ml/train-x", "ml/nb")))
    about, asked = kube.asked[0]
    assert about == ObjectRef("ml", "train-x", "uid-train-x")
    assert asked == {
        "name": notes.event_name("train-x", "uid-train-x", "unintended-sharing", "GPU-a",
                                 "ml/nb", "ml/train-x"),
        "reason": "UnintendedGPUSharing",
        "message": "2 pods on GPU-a (shared with ml/nb)",
    }
    assert kube.asked[1][0] == ObjectRef("ml", "nb", "uid-nb")


def test_a_written_finding_is_counted_by_kind() -> None:
    kube = report_kube(running("train-x", "uid-train-x"), running("nb", "uid-nb"))
    name = "gpu_auditor_sharing_findings_total"
    before = REGISTRY.get_sample_value(name, {"kind": "unintended-sharing"}) or 0.0
    make_services(kube).handle_report(parse_report(sharing("ml/train-x", "ml/nb")))
    assert REGISTRY.get_sample_value(name, {"kind": "unintended-sharing"}) == before + 2


def test_the_operator_log_says_why_a_named_pod_is_left_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = report_kube(running("coredns", "uid-coredns", node="gpu-2", namespace="kube-system"),
                        running("train-x", "uid-real"), running("nb", "uid-nb"))  # fmt: skip
    with caplog.at_level("WARNING", logger=OPERATOR_LOG):
        make_services(kube).handle_report(parse_report(sharing(
            "kube-system/coredns", "ml/train-x", "ml/nb", uids={"ml/train-x": "uid-forged"})))
    said = [r.getMessage() for r in caplog.records if r.name == OPERATOR_LOG]
    assert (
        "GPUNodeReport gpu-1 names kube-system/coredns, which runs on another node: ignored"
    ) in said
    assert "GPUNodeReport gpu-1 names ml/train-x, which has another UID: ignored" in said
    assert "ml/nb: 3 pods on GPU-a (shared with kube-system/coredns, ml/train-x)" in said


def test_the_operator_log_says_which_write_failed_and_the_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = report_kube(running("a", "uid-a"), running("b", "uid-b"))
    denied = APIForbiddenError("patch_pod: 403 Forbidden", status=403)
    kube.fail_patch["b"] = denied
    scheduled = Scheduled()
    with caplog.at_level("WARNING", logger=OPERATOR_LOG):
        make_services(kube, schedule=scheduled).handle_report(
            parse_report(sharing("ml/a", "ml/b")))  # fmt: skip
        scheduled[0][1]()
    said = [r.getMessage() for r in caplog.records if r.name == OPERATOR_LOG]
    assert f"sharing finding on ml/b not written (attempt 1): {denied}" in said
    assert f"sharing finding on ml/b not written (attempt 2): {denied}" in said


def test_each_pods_failed_writes_back_off_on_their_own() -> None:
    kube = report_kube(running("a", "uid-a"), running("b", "uid-b"))
    for name in ("a", "b"):
        kube.fail_patch[name] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    make_services(kube, schedule=scheduled).handle_report(parse_report(sharing("ml/a", "ml/b")))
    assert [delay for delay, _ in scheduled] == [5.0, 5.0]


def test_a_write_that_lands_starts_the_back_off_again() -> None:
    kube = report_kube(running("a", "uid-a"), running("b", "uid-b"), running("c", "uid-c"))
    kube.fail_patch["b"] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    services.handle_report(parse_report(sharing("ml/a", "ml/b")))
    del kube.fail_patch["b"]
    scheduled[0][1]()  # lands: its attempts are forgotten
    kube.fail_patch["b"] = APIServerError("patch_pod: 503", status=503)
    services.handle_report(parse_report(sharing("ml/a", "ml/b", "ml/c")))  # b's value changes
    assert [delay for delay, _ in scheduled] == [5.0, 5.0]


def test_a_pod_gone_at_its_retry_starts_afresh_if_it_comes_back() -> None:
    kube = report_kube(running("a", "uid-a"), running("b", "uid-b"))
    kube.fail_patch["b"] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    report = parse_report(sharing("ml/a", "ml/b"))
    services.handle_report(report)
    b = kube.others.pop("b")
    scheduled[0][1]()  # 404: forgotten, no further retry
    assert len(scheduled) == 1
    kube.others["b"] = b
    services.handle_report(report)
    assert [delay for delay, _ in scheduled] == [5.0, 5.0]


def test_a_pod_no_longer_in_the_report_at_its_retry_starts_afresh_later() -> None:
    kube = report_kube(running("a", "uid-a"), running("b", "uid-b"))
    kube.fail_patch["b"] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    services = make_services(kube, schedule=scheduled)
    services.handle_report(parse_report(sharing("ml/a", "ml/b")))
    services.reports.note(parse_report(sharing("ml/a")))
    scheduled[0][1]()  # b is no longer named: forgotten
    services.handle_report(parse_report(sharing("ml/a", "ml/b")))
    assert [delay for delay, _ in scheduled] == [5.0, 5.0]


def test_the_sharing_path_remembers_50000_writes() -> None:
    kube = report_kube(running("train-x", "uid-train-x"), running("nb", "uid-nb"))
    services = make_services(kube)
    report = parse_report(sharing("ml/train-x", "ml/nb"))
    services.handle_report(report)  # train-x, then nb, remembered
    for i in range(49_998):
        services.sharing.written.add(("filler", i))  # 50,000 remembered writes
    services.handle_report(report)
    assert len(kube.reads) == 2  # both still remembered: not read again
    services.sharing.written.add(("filler", "one more"))  # the oldest, train-x, is dropped
    services.handle_report(report)
    # train-x is read again; remembering it once more drops the next oldest, nb
    assert kube.reads[2:] == [("ml", "train-x"), ("ml", "nb")]
