"""The operator's two paths at their decision points (issue 18), each negative case beside the
positive one it differs from by one value, and each proving the pod was examined (the stand-in
API records the read) rather than waiting for nothing to happen.

Survivors these kill: `pending()` ignoring `diagnosed-key`, the sharing path ignoring the
`gpu-auditor.io/ignore` label, a write skipped or repeated when the pod already carries it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import REGISTRY
from test_service import (
    ERROR,
    FIXTURE,
    PREFIX,
    FakeKube,
    Inline,
    Scheduled,
    _pod,
    _report_kube,
    _running,
    _services,
    _sharing,
)

from gpu_auditor.base.errors import APIForbiddenError, APIServerError
from gpu_auditor.base.nodereport import parse_report
from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller.kube import ObjectRef
from gpu_auditor.controller.pod import DiagnosedKeys
from gpu_auditor.controller.service import OperatorConfig, Services

pytestmark = pytest.mark.unit

OOM = {"exitCode": 1, "reason": "Error", "finishedAt": "2026-11-29T10:00:00Z"}


def failed_pod(diagnosed: str | None, restarts: int = 0) -> dict[str, Any]:
    body = _pod(ERROR)
    body["status"]["containerStatuses"][0]["restartCount"] = restarts
    if diagnosed is not None:
        body["metadata"]["annotations"][f"{PREFIX}diagnosed-key"] = diagnosed
    return body


# -- pending(): a termination diagnosed-key records (or one below it) is done --------------------


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
    services = _services(FakeKube(failed_pod(diagnosed)))
    assert [t.key for t in services.pending(failed_pod(diagnosed))] == pending


def test_pending_reads_diagnosed_key_under_the_configured_prefix() -> None:
    body = failed_pod(None)
    body["metadata"]["annotations"]["example.com/diagnosed-key"] = "main/0"
    config = OperatorConfig(annotation_prefix="example.com/")
    services = Services(kube=FakeKube(body), config=config,  # type: ignore[arg-type]
                        diagnoser=Inline(), schedule=Scheduled())  # fmt: skip
    assert services.pending(body) == []
    assert [t.key for t in _services(FakeKube(body)).pending(body)] == ["main/0"]


def test_a_diagnosed_termination_is_not_diagnosed_again_a_new_one_is() -> None:
    log = (FIXTURE / "seed_example_fragmentation.log").read_bytes()
    done = FakeKube(failed_pod("main/0"), log=log)
    diagnoser = Inline()
    _services(done, diagnoser).handle_pod(done.pod)
    assert (diagnoser.calls, done.log_reads, done.patches) == (0, 0, [])
    again = FakeKube(failed_pod("main/0", restarts=1), log=log)  # the key is now main/1
    diagnoser = Inline()
    _services(again, diagnoser).handle_pod(again.pod)
    assert (diagnoser.calls, again.log_reads, len(again.patches)) == (1, 1, 1)
    assert again.pod["metadata"]["annotations"][f"{PREFIX}diagnosed-key"] == "main/1"


def oom_message(gib: int) -> str:
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib}.00 GiB. GPU 0 "
            "has a total capacity of 79.15 GiB of which 0.20 GiB is free. Including non-PyTorch "
            "memory, this process has 78.80 GiB memory in use. Of the allocated memory 78.10 GiB "
            "is allocated by PyTorch, and 0.10 GiB is reserved by PyTorch but unallocated.\n")


def many_failed(containers: int) -> dict[str, Any]:
    body = _pod(ERROR)
    body["spec"]["containers"] = [{"name": f"c{i}"} for i in range(containers)]
    body["status"]["containerStatuses"] = [
        {"name": f"c{i}", "restartCount": 0,
         "state": {"terminated": {**OOM, "message": oom_message(i + 1)}}}
        for i in range(containers)]  # fmt: skip
    return body


def test_a_pod_with_20_failed_containers_converges_across_operator_restarts() -> None:
    kube = FakeKube(many_failed(20))
    first = Inline()
    _services(kube, first).handle_pod(kube.pod)
    notes_after_first = dict(kube.pod["metadata"]["annotations"])
    assert first.calls == 20 and len(kube.events) == 20
    for _ in range(3):  # the operator restarted three times: kopf lists the pod again
        again = Inline()
        services = _services(kube, again)
        assert services.pending(kube.pod) == []
        services.handle_pod(kube.pod)
        assert again.calls == 0
    assert kube.pod["metadata"]["annotations"] == notes_after_first
    assert len(notes_after_first[f"{PREFIX}diagnosed-key"].split(",")) == 20


def test_17_failed_containers_and_16_are_all_recorded() -> None:
    for containers in (16, 17):  # the old format kept 16 keys: no bound at 16 any more
        kube = FakeKube(many_failed(containers))
        _services(kube).handle_pod(kube.pod)
        assert _services(kube).pending(kube.pod) == []


def restarted(restarts: int, *, current: bool = False) -> dict[str, Any]:
    """A crash-looping container at `restarts`: its last run failed (lastState); with `current`
    the run after it failed too and is not restarted yet (state.terminated)."""
    body = _pod(ERROR)
    status = body["status"]["containerStatuses"][0]
    status.update(restartCount=restarts, state={"waiting": {"reason": "CrashLoopBackOff"}},
                  lastState={"terminated": {**OOM, "message": oom_message(1)}})
    if current:
        status["state"] = {"terminated": {**OOM, "message": oom_message(2)}}
    return body


def test_the_older_run_is_diagnosed_first_and_the_newer_one_is_what_the_pod_shows() -> None:
    kube = FakeKube(restarted(1, current=True))  # main/0 (lastState) and main/1 (state)
    services = _services(kube)
    assert [t.key for t in services.pending(kube.pod)] == ["main/0", "main/1"]
    services.handle_pod(kube.pod)
    notes = kube.pod["metadata"]["annotations"]
    assert len(kube.events) == 2
    assert notes[f"{PREFIX}diagnosed-key"] == "main/1"
    assert json.loads(notes[f"{PREFIX}evidence"])["restartCount"] == 1
    assert "2.00 GiB" in notes[f"{PREFIX}summary"]


def test_a_crash_looping_pod_is_remembered_by_one_entry_however_often_it_restarts() -> None:
    kube = FakeKube(restarted(1))
    services = _services(kube)
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
    services = _services(kube, diagnoser)
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
    services = _services(kube, schedule=scheduled)
    services.handle_pod(kube.pod)
    assert services.pending(kube.pod) == []  # its retry is scheduled, not due
    assert [delay for delay, _ in scheduled] == [5.0]


# -- the sharing path: the ignore label, examined, not written ----------------------------------


def labelled(name: str, uid: str, value: str) -> dict[str, Any]:
    body = _running(name, uid)
    body["metadata"]["labels"] = {"gpu-auditor.io/ignore": value}
    return body


def test_a_pod_labelled_ignore_true_is_read_and_not_written() -> None:
    kube = _report_kube(labelled("train-x", "uid-train-x", "true"), _running("nb", "uid-nb"))
    _services(kube).handle_report(parse_report(_sharing("ml/train-x", "ml/nb")))
    assert sorted(kube.reads) == [("ml", "nb"), ("ml", "train-x")]  # both examined
    assert kube.patched == [("ml", "nb", "uid-nb")]
    assert f"{PREFIX}gpu-shared-with" not in kube.others["train-x"]["metadata"]["annotations"]
    assert len(kube.events) == 1 and kube.event_creates == 1  # the other pod's Event only


@pytest.mark.parametrize("value", ["false", "True", "yes", ""])
def test_any_other_ignore_value_is_written(value: str) -> None:
    kube = _report_kube(labelled("train-x", "uid-train-x", value), _running("nb", "uid-nb"))
    _services(kube).handle_report(parse_report(_sharing("ml/train-x", "ml/nb")))
    assert sorted(kube.patched) == [("ml", "nb", "uid-nb"), ("ml", "train-x", "uid-train-x")]
    assert len(kube.events) == 2


def test_an_ignored_pod_is_examined_again_on_the_next_report() -> None:
    kube = _report_kube(labelled("train-x", "uid-train-x", "true"), _running("nb", "uid-nb"))
    services = _services(kube)
    report = parse_report(_sharing("ml/train-x", "ml/nb"))
    services.handle_report(report)
    services.handle_report(report)
    # nb is remembered as written (no second read); train-x was never written, so it is read
    assert kube.reads.count(("ml", "train-x")) == 2 and kube.reads.count(("ml", "nb")) == 1
    kube.others["train-x"]["metadata"]["labels"] = {}  # the label removed: now written
    services.handle_report(report)
    assert sorted(n for _, n, _ in kube.patched) == ["nb", "train-x"]


def test_a_pod_already_carrying_the_annotations_is_read_not_written_then_remembered() -> None:
    kube = _report_kube(_running("train-x", "uid-train-x"), _running("nb", "uid-nb"))
    report = parse_report(_sharing("ml/train-x", "ml/nb"))
    _services(kube).handle_report(report)
    assert len(kube.patched) == 2
    restarted = _services(kube)  # a new operator: its memo is empty
    restarted.handle_report(report)
    assert len(kube.patched) == 2 and kube.event_creates == 2  # nothing written twice
    reads = len(kube.reads)
    restarted.handle_report(report)
    assert len(kube.reads) == reads  # remembered: not even read


def test_a_changed_finding_is_written_over_the_old_one() -> None:
    kube = _report_kube(_running("train-x", "uid-train-x"), _running("nb", "uid-nb"),
                        _running("c", "uid-c"))  # fmt: skip
    services = _services(kube)
    services.handle_report(parse_report(_sharing("ml/train-x", "ml/nb")))
    services.handle_report(parse_report(_sharing("ml/train-x", "ml/nb", "ml/c")))
    notes = kube.others["train-x"]["metadata"]["annotations"]
    assert notes[f"{PREFIX}gpu-shared-with"] == "ml/c,ml/nb"
    assert [n for _, n, _ in kube.patched].count("train-x") == 2


def test_a_pod_deleted_before_its_write_is_read_and_not_retried() -> None:
    kube = _report_kube(_running("nb", "uid-nb"))  # train-x is named but gone
    scheduled = Scheduled()
    _services(kube, schedule=scheduled).handle_report(
        parse_report(_sharing("ml/train-x", "ml/nb")))  # fmt: skip
    assert sorted(kube.reads) == [("ml", "nb"), ("ml", "train-x")]
    assert kube.patched == [("ml", "nb", "uid-nb")] and scheduled == []


def test_a_failed_write_is_retried_once_due_and_the_write_then_lands() -> None:
    kube = _report_kube(_running("nb", "uid-nb"), _running("a", "uid-a"))
    kube.fail_patch["nb"] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    services = _services(kube, schedule=scheduled)
    services.handle_report(parse_report(_sharing("ml/a", "ml/nb")))
    assert [delay for delay, _ in scheduled] == [5.0]
    del kube.fail_patch["nb"]
    scheduled[0][1]()
    assert sorted(n for _, n, _ in kube.patched) == ["a", "nb"]
    assert len(scheduled) == 1


def test_a_retry_for_a_node_without_a_report_reads_nothing() -> None:
    kube = _report_kube(_running("nb", "uid-nb"))
    services = _services(kube)
    services.sharing._retry("gpu-9", "uid-nb")
    assert (kube.reads, kube.patched) == ([], [])


def test_close_stops_the_schedule_and_the_diagnoser() -> None:
    stopped: list[str] = []

    class Stops(Scheduled):
        def stop(self) -> None:
            stopped.append("schedule")

    class Closes(Inline):
        def close(self) -> None:
            stopped.append("diagnoser")

    services = Services(kube=FakeKube(_pod(OOM)), config=OperatorConfig(), diagnoser=Closes(),
                        schedule=Stops())  # type: ignore[arg-type]  # fmt: skip
    services.close()
    assert stopped == ["schedule", "diagnoser"]


# -- what mutation testing found loose (scripts/mutation.py --modules controller.service) ---------


class LogKwargs(FakeKube):
    """Records how the log was asked for."""

    asked: dict[str, Any]

    def read_log(self, *args: Any, **kwargs: Any) -> bytes:
        self.asked = kwargs
        return super().read_log(*args, **kwargs)


def test_the_log_is_read_with_the_configured_tail_and_byte_limit() -> None:
    log = (FIXTURE / "seed_example_fragmentation.log").read_bytes()
    kube = LogKwargs(failed_pod(None), log=log)
    config = OperatorConfig(log_tail_lines=123, log_limit_bytes=4567)
    services = Services(kube=kube, config=config, diagnoser=Inline(),  # type: ignore[arg-type]
                        schedule=Scheduled())  # fmt: skip
    services.handle_pod(kube.pod)
    assert kube.asked == {"previous": False, "tail_lines": 123, "limit_bytes": 4567}


def test_close_skips_a_part_without_stop_or_close_and_closes_the_next() -> None:
    closed: list[str] = []

    class Closes(Inline):
        def close(self) -> None:
            closed.append("diagnoser")

    services = Services(kube=FakeKube(_pod(OOM)), config=OperatorConfig(),  # type: ignore[arg-type]
                        diagnoser=Closes(), schedule=Scheduled())  # fmt: skip
    services.close()
    assert closed == ["diagnoser"]


# -- what mutation testing found loose (scripts/mutation.py --modules controller.sharing) ---------

OPERATOR_LOG = "gpu_auditor.operator"


class EventArgs(FakeKube):
    """Records every Event asked for, with the object it is about."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[tuple[Any, dict[str, Any]]] = []

    def post_event(self, about: Any, **kwargs: Any) -> bool:
        self.asked.append((about, kwargs))
        return super().post_event(about, **kwargs)


def test_the_sharing_event_is_about_the_live_pod_with_its_name_and_message() -> None:
    kube = EventArgs(None)  # type: ignore[arg-type]
    kube.others = {p["metadata"]["name"]: p for p in (_running("train-x", "uid-train-x"),
                                                      _running("nb", "uid-nb"))}  # fmt: skip
    _services(kube).handle_report(parse_report(_sharing("ml/train-x", "ml/nb")))
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
    kube = _report_kube(_running("train-x", "uid-train-x"), _running("nb", "uid-nb"))
    name = "gpu_auditor_sharing_findings_total"
    before = REGISTRY.get_sample_value(name, {"kind": "unintended-sharing"}) or 0.0
    _services(kube).handle_report(parse_report(_sharing("ml/train-x", "ml/nb")))
    assert REGISTRY.get_sample_value(name, {"kind": "unintended-sharing"}) == before + 2


def test_the_operator_log_says_why_a_named_pod_is_left_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = _report_kube(_running("coredns", "uid-coredns", node="gpu-2", namespace="kube-system"),
                        _running("train-x", "uid-real"), _running("nb", "uid-nb"))  # fmt: skip
    with caplog.at_level("WARNING", logger=OPERATOR_LOG):
        _services(kube).handle_report(parse_report(_sharing(
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
    kube = _report_kube(_running("a", "uid-a"), _running("b", "uid-b"))
    denied = APIForbiddenError("patch_pod: 403 Forbidden", status=403)
    kube.fail_patch["b"] = denied
    scheduled = Scheduled()
    with caplog.at_level("WARNING", logger=OPERATOR_LOG):
        _services(kube, schedule=scheduled).handle_report(
            parse_report(_sharing("ml/a", "ml/b")))  # fmt: skip
        scheduled[0][1]()
    said = [r.getMessage() for r in caplog.records if r.name == OPERATOR_LOG]
    assert f"sharing finding on ml/b not written (attempt 1): {denied}" in said
    assert f"sharing finding on ml/b not written (attempt 2): {denied}" in said


def test_each_pods_failed_writes_back_off_on_their_own() -> None:
    kube = _report_kube(_running("a", "uid-a"), _running("b", "uid-b"))
    for name in ("a", "b"):
        kube.fail_patch[name] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    _services(kube, schedule=scheduled).handle_report(parse_report(_sharing("ml/a", "ml/b")))
    assert [delay for delay, _ in scheduled] == [5.0, 5.0]


def test_a_write_that_lands_starts_the_back_off_again() -> None:
    kube = _report_kube(_running("a", "uid-a"), _running("b", "uid-b"), _running("c", "uid-c"))
    kube.fail_patch["b"] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    services = _services(kube, schedule=scheduled)
    services.handle_report(parse_report(_sharing("ml/a", "ml/b")))
    del kube.fail_patch["b"]
    scheduled[0][1]()  # lands: its attempts are forgotten
    kube.fail_patch["b"] = APIServerError("patch_pod: 503", status=503)
    services.handle_report(parse_report(_sharing("ml/a", "ml/b", "ml/c")))  # b's value changes
    assert [delay for delay, _ in scheduled] == [5.0, 5.0]


def test_a_pod_gone_at_its_retry_starts_afresh_if_it_comes_back() -> None:
    kube = _report_kube(_running("a", "uid-a"), _running("b", "uid-b"))
    kube.fail_patch["b"] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    services = _services(kube, schedule=scheduled)
    report = parse_report(_sharing("ml/a", "ml/b"))
    services.handle_report(report)
    b = kube.others.pop("b")
    scheduled[0][1]()  # 404: forgotten, no further retry
    assert len(scheduled) == 1
    kube.others["b"] = b
    services.handle_report(report)
    assert [delay for delay, _ in scheduled] == [5.0, 5.0]


def test_a_pod_no_longer_in_the_report_at_its_retry_starts_afresh_later() -> None:
    kube = _report_kube(_running("a", "uid-a"), _running("b", "uid-b"))
    kube.fail_patch["b"] = APIServerError("patch_pod: 503", status=503)
    scheduled = Scheduled()
    services = _services(kube, schedule=scheduled)
    services.handle_report(parse_report(_sharing("ml/a", "ml/b")))
    services.reports.note(parse_report(_sharing("ml/a")))
    scheduled[0][1]()  # b is no longer named: forgotten
    services.handle_report(parse_report(_sharing("ml/a", "ml/b")))
    assert [delay for delay, _ in scheduled] == [5.0, 5.0]


def test_the_sharing_path_remembers_50000_writes() -> None:
    kube = _report_kube(_running("train-x", "uid-train-x"), _running("nb", "uid-nb"))
    services = _services(kube)
    report = parse_report(_sharing("ml/train-x", "ml/nb"))
    services.handle_report(report)  # train-x, then nb, remembered
    for i in range(49_998):
        services.sharing.written.add(("filler", i))  # 50,000 remembered writes
    services.handle_report(report)
    assert len(kube.reads) == 2  # both still remembered: not read again
    services.sharing.written.add(("filler", "one more"))  # the oldest, train-x, is dropped
    services.handle_report(report)
    # train-x is read again; remembering it once more drops the next oldest, nb
    assert kube.reads[2:] == [("ml", "train-x"), ("ml", "nb")]
