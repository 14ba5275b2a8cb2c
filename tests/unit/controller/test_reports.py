"""The agent's GPUNodeReport: parsed once into a typed, bounded value; evidence for a failed pod;
which pods a finding may touch."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.base.nodereport import InvalidReport, parse_report
from gpu_auditor.controller.reports import PodSightings, evidence, targets

pytestmark = pytest.mark.unit

GIB = 2**30


def _report(*pods: dict[str, Any], findings: list[dict[str, Any]] | None = None,
            name: str = "gpu-1") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {
        "nodeName": "gpu-1",
        "gpus": [
            {"uuid": "GPU-a", "index": 0, "memoryTotalBytes": 140 * GIB,
             "memoryFreeBytes": 1 * GIB, "pods": list(pods)},
            {"uuid": "GPU-b", "index": 1, "memoryTotalBytes": 140 * GIB,
             "memoryFreeBytes": 139 * GIB, "pods": []},
        ],
        "findings": findings or [],
    }}


def _entry(pod: str, gib: int, **extra: Any) -> dict[str, Any]:
    return {"namespace": "ml", "pod": pod, "podUID": f"uid-{pod}", "container": "main",
            "bytes": gib * GIB, "pids": [100], **extra}


def test_other_pods_on_the_failed_pods_gpu_are_named_with_their_bytes() -> None:
    report = parse_report(_report(_entry("trainer", 10, allocated=True,
                                         growthBytesPerSecond=0.0),
                                  _entry("notebook", 120, allocated=False)))
    found = evidence(report, "uid-trainer", "ml/trainer", None)
    assert found is not None
    assert found.gpu_uuid == "GPU-a"
    assert [(p.pod, p.bytes) for p in found.other_pods] == [("notebook", 120 * GIB)]
    assert found.allocated is True


def test_a_pod_whose_process_died_is_found_where_it_was_last_seen() -> None:
    sightings = PodSightings()
    sightings.update(parse_report(_report(_entry("trainer", 10), _entry("notebook", 120))))
    now = parse_report(_report(_entry("notebook", 120)))  # trainer's process is gone
    found = evidence(now, "uid-trainer", "ml/trainer", sightings.get("uid-trainer"))
    assert found is not None and [p.pod for p in found.other_pods] == ["notebook"]


def test_a_sighting_on_another_node_is_not_evidence_about_this_one() -> None:
    sightings = PodSightings()
    elsewhere = _report(_entry("trainer", 10), name="gpu-9")
    elsewhere["spec"]["nodeName"] = "gpu-9"
    sightings.update(parse_report(elsewhere))
    here = parse_report(_report(_entry("notebook", 120)))
    assert evidence(here, "uid-trainer", "ml/trainer", sightings.get("uid-trainer")) is None


def test_an_unseen_pod_on_a_multi_gpu_node_gets_no_evidence() -> None:
    assert evidence(parse_report(_report(_entry("notebook", 120))), "uid-trainer", "ml/trainer",
                    None) is None


def test_sightings_stay_bounded() -> None:
    sightings = PodSightings(capacity=2)
    for name in ("a", "b", "c"):
        sightings.update(parse_report(_report(_entry(name, 1))))
    assert sightings.get("uid-a") is None and sightings.get("uid-c") is not None


def test_only_unintended_findings_name_pods_to_annotate_each_with_its_uid() -> None:
    report = parse_report(_report(_entry("a", 1), _entry("b", 1), findings=[
        {"kind": "unintended-sharing", "gpuUUID": "GPU-a", "pods": ["ml/a", "ml/b"]},
        {"kind": "intended-sharing", "gpuUUID": "GPU-a", "pods": ["ml/a", "ml/b"]},
    ]))
    found, ignored = targets(report)
    assert [(t.ref, t.uid, len(t.findings)) for t in found] == [("ml/a", "uid-a", 1),
                                                                ("ml/b", "uid-b", 1)]
    assert not ignored


def test_a_finding_naming_a_pod_the_report_does_not_list_on_that_gpu_touches_nothing() -> None:
    report = parse_report(_report(_entry("a", 1), findings=[
        {"kind": "unintended-sharing", "gpuUUID": "GPU-a", "pods": ["ml/a", "kube-system/dns"]},
        {"kind": "unrequested-gpu-use", "gpuUUID": "GPU-b", "pods": ["ml/a"]},
    ]))
    found, ignored = targets(report)
    assert [(t.ref, [f.gpu_uuid for f in t.findings]) for t in found] == [("ml/a", ["GPU-a"])]
    assert ignored == {"not-in-report": 2}


def test_a_report_whose_name_is_not_its_node_is_refused() -> None:
    with pytest.raises(InvalidReport) as caught:
        parse_report(_report(name="gpu-2"))
    assert caught.value.reason == "name-mismatch"


@pytest.mark.parametrize("body", [None, [], {"metadata": {"name": "x"}},
                                  {"metadata": {"name": "../x"}, "spec": {"nodeName": "../x"}},
                                  {"metadata": {}, "spec": {"nodeName": 7}}])
def test_a_report_of_another_shape_is_refused(body: object) -> None:
    with pytest.raises(InvalidReport) as caught:
        parse_report(body)
    assert caught.value.reason == "malformed-report"


def test_allocated_is_read_as_the_agent_writes_it_now_and_as_reports_before_0_2_did() -> None:
    report = parse_report(_report(*(_entry(f"p{i}", 1, allocated=value) for i, value in
                                    enumerate(["true", "false", "unknown", True, False, None]))))
    assert [e.allocated for e in report.gpus[0].pods] == [
        "true", "false", "unknown", "true", "false", "unknown"]
    assert not report.dropped
    assert parse_report(_report(_entry("h", 1, allocated="host"))).dropped == {
        "malformed-entry": 1}  # host processes have no entry


def test_malformed_entries_are_dropped_and_counted() -> None:
    raw = _report(
        _entry("ok", 1),
        _entry("../etc", 1),                      # not a pod name
        _entry("neg", 1, bytes=-1),                # not a size
        _entry("huge", 1, bytes=2**64),            # not a size either
        _entry("nouid", 1, podUID="../x"),         # not a UID
        _entry("flag", 1, allocated="yes"),        # not true/false/unknown
        "not an entry",
        findings=[
            {"kind": "unintended-sharing", "gpuUUID": "GPU-a",
             "pods": ["ml/ok", "0f1e2d3c-aaaa-bbbb-cccc-000000000001", "ml/a/b", 7]},
            {"kind": "who-knows", "gpuUUID": "GPU-a", "pods": []},
            {"kind": "unintended-sharing", "gpuUUID": "G" * 129, "pods": []},
        ])
    raw["spec"]["gpus"].append({"uuid": "", "pods": []})
    report = parse_report(raw)
    assert [p.pod for g in report.gpus for p in g.pods] == ["ok"]
    assert [f.pods for f in report.findings] == [("ml/ok",)]
    assert report.dropped == {"malformed-entry": 7, "malformed-pod-ref": 3,
                              "malformed-finding": 2}


def test_lists_beyond_their_bounds_are_cut_and_counted() -> None:
    raw = _report(*(_entry(f"p{i}", 1) for i in range(300)), findings=[
        {"kind": "unintended-sharing", "gpuUUID": "GPU-a",
         "pods": [f"ml/p{i}" for i in range(100)], "message": "m" * 5000}])
    report = parse_report(raw)
    assert len(report.gpus[0].pods) == 256
    assert len(report.findings[0].pods) == 64
    assert len(report.findings[0].message) == 1024
    assert report.dropped == {"too-many": 44 + 36}


def test_a_findings_message_cannot_forge_log_lines() -> None:
    report = parse_report(_report(findings=[
        {"kind": "unintended-sharing", "gpuUUID": "GPU-a", "pods": [],
         "message": "ok\n2026-11-29 ERROR gpu_auditor.operator: fake\r\x1b[2J"}]))
    assert report.findings[0].message == "ok 2026-11-29 ERROR gpu_auditor.operator: fake  [2J"


def test_a_growth_rate_that_is_not_a_finite_number_is_unknown() -> None:
    report = parse_report(_report(_entry("a", 1, growthBytesPerSecond=float("inf")),
                                  _entry("b", 1, growthBytesPerSecond=True)))
    assert [p.growth_bytes_per_second for p in report.gpus[0].pods] == [None, None]
