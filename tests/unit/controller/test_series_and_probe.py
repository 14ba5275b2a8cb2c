"""The OOM path's two new inputs: the node's memory series of the failed container (issue 10)
and the OOM probe's record in its termination message (issue 17), with an in-memory API
(the real API server: tests/integration/test_operator_series_probe.py)."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from test_service import PREFIX, FakeKube, _services, metric

from gpu_auditor.base.nodereport import parse_report
from gpu_auditor.controller.memoryseries import SeenSeries, SeriesMemory, samples_for, series_of
from gpu_auditor.controller.probe import record_in_message

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
H200_LOGS = ROOT / "evaluation/gpu/logs"
GIB = 2**30
FINISHED = dt.datetime(2026, 11, 29, 10, 0, 0, tzinfo=dt.UTC)
END = FINISHED.timestamp()


def _rising(n: int = 20, end: float = END - 2) -> dict[str, list[Any]]:
    """A leak: 10 GiB to 138 GiB, one point every 5 s, the last just before the failure."""
    return {"times": [end - 5.0 * (n - 1 - i) for i in range(n)],
            "bytes": [10 * GIB + (128 * GIB * i) // (n - 1) for i in range(n)]}


def _flat(n: int = 20) -> dict[str, list[Any]]:
    return {"times": [END - 2 - 5.0 * (n - 1 - i) for i in range(n)], "bytes": [138 * GIB] * n}


def _report(series: Any, *, node: str = "gpu-1", uid: str = "uid-1",
            container: str = "main") -> dict[str, Any]:
    entry: dict[str, Any] = {"namespace": "ml", "pod": "train-x", "podUID": uid,
                             "container": container, "allocated": "true", "bytes": 138 * GIB,
                             "pids": [7]}
    if series is not None:
        entry["memorySeries"] = series
    return {"metadata": {"name": node}, "spec": {
        "nodeName": node, "gpus": [{"uuid": "GPU-h200", "index": 0,
                                    "memoryTotalBytes": 150_109_880_320,
                                    "memoryFreeBytes": 11 * GIB, "pods": [entry]}]}}


def _pod(message: str = "", *, restarted: bool = False, started: str | None = None) -> dict:
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
    _services(kube).handle_pod(kube.pod)
    notes: dict[str, str] = kube.pod["metadata"]["annotations"]
    return notes


def _evidence(notes: dict[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(notes[f"{PREFIX}evidence"])
    return found


# -- the series, pure ---------------------------------------------------------------------------


def _seen(*points: tuple[float, int], node: str = "gpu-1") -> SeenSeries:
    return SeenSeries(node=node, gpu_uuid="GPU-h200", bytes=GIB, points=points)


def test_only_points_of_the_failed_run_become_samples_in_seconds_from_the_first() -> None:
    seen = _seen((END - 100, 1), (END - 60, 2), (END - 30, 3), (END + 0.5, 4), (END + 1.5, 5))
    samples = samples_for(seen, "gpu-1", started_at=FINISHED - dt.timedelta(seconds=59),
                          finished_at=FINISHED, previous=False)
    # before the start (END-60 is within the 1 s slack of END-59; END-100 is not), after the end
    assert [(s.t_seconds, s.bytes) for s in samples] == [(0.0, 2), (30.0, 3), (60.5, 4)]


def test_a_series_from_another_node_is_no_evidence() -> None:
    seen = _seen((END - 10, 1), (END - 5, 2), node="gpu-9")
    assert samples_for(seen, "gpu-1", started_at=None, finished_at=FINISHED,
                       previous=False) == ()


def test_a_restarted_containers_run_without_an_end_time_gets_no_samples() -> None:
    seen = _seen((END - 10, 1), (END - 5, 2))
    assert samples_for(seen, "gpu-1", started_at=None, finished_at=None, previous=True) == ()
    assert len(samples_for(seen, "gpu-1", started_at=None, finished_at=None,
                           previous=False)) == 2


def test_a_multi_gpu_container_gives_the_series_of_the_gpu_where_it_holds_the_most() -> None:
    raw = _report(_rising())
    small = copy.deepcopy(raw["spec"]["gpus"][0])
    small.update(uuid="GPU-other", index=1)
    small["pods"][0].update(bytes=GIB, memorySeries=_flat())
    raw["spec"]["gpus"].append(small)
    found = series_of(parse_report(raw))
    assert found[("uid-1", "main")].gpu_uuid == "GPU-h200"


def test_the_remembered_series_are_bounded() -> None:
    memory = SeriesMemory(capacity=2)
    for uid in ("uid-a", "uid-b", "uid-c"):
        memory.update(parse_report(_report(_rising(), uid=uid)))
    assert len(memory) == 2 and memory.get("gpu-1", "uid-a", "main") is None
    assert memory.get("gpu-1", "uid-c", "main") is not None


# -- the series in the OOM path -------------------------------------------------------------------


def test_a_silent_leak_is_a_leak_with_the_nodes_series_and_capacity_without() -> None:
    without = _diagnose(FakeKube(_pod(), log=_silent_oom_log(), report=_report(None)))
    assert without[f"{PREFIX}diagnosis"] == "capacity"
    notes = _diagnose(FakeKube(_pod(), log=_silent_oom_log(), report=_report(_rising())))
    assert notes[f"{PREFIX}diagnosis"] == "leak"
    evidence = _evidence(notes)
    assert evidence["memorySeriesPoints"] == 20
    assert evidence["growth"] == {"source": "samples", "points": 20, "firstBytes": 10 * GIB,
                                  "lastBytes": 138 * GIB}
    assert "10.00 GiB to 138.00 GiB" in notes[f"{PREFIX}summary"]


def test_a_flat_series_is_not_a_leak() -> None:
    notes = _diagnose(FakeKube(_pod(), log=_silent_oom_log(), report=_report(_flat())))
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert _evidence(notes)["memorySeriesPoints"] == 20
    assert "growth" not in _evidence(notes)


def test_a_rising_series_written_under_another_node_is_not_used() -> None:
    kube = FakeKube(_pod(), log=_silent_oom_log(), report=_report(_rising(), node="gpu-9"))
    notes = _diagnose(kube)
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert "memorySeriesPoints" not in _evidence(notes)


def test_another_nodes_report_naming_the_pod_does_not_displace_its_own_nodes_series() -> None:
    services = _services(kube := FakeKube(_pod(), log=_silent_oom_log(),
                                          report=_report(_rising())))
    services.handle_report(parse_report(_report(_rising())))
    services.handle_report(parse_report(_report(_flat(), node="gpu-9")))  # a forged claim
    services.handle_pod(kube.pod)
    assert kube.pod["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "leak"


def test_a_rising_series_of_another_pod_uid_is_not_used() -> None:
    notes = _diagnose(FakeKube(_pod(), log=_silent_oom_log(),
                               report=_report(_rising(), uid="uid-other")))
    assert notes[f"{PREFIX}diagnosis"] == "capacity"


def test_the_next_runs_rise_after_a_restart_is_not_this_runs_leak() -> None:
    after = _rising(end=END + 200)  # every point after the failed run ended
    notes = _diagnose(FakeKube(_pod(restarted=True), log=_silent_oom_log(),
                               report=_report(after)))
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert "memorySeriesPoints" not in _evidence(notes)


def test_a_malformed_series_is_counted_and_the_pod_is_still_diagnosed() -> None:
    before = metric("gpu_auditor_operator_report_items_ignored_total", reason="malformed-series")
    hostile = {"times": [END - 10, float("nan")], "bytes": [GIB, 2**70]}
    notes = _diagnose(FakeKube(_pod(), log=_silent_oom_log(), report=_report(hostile)))
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert metric("gpu_auditor_operator_report_items_ignored_total",
                  reason="malformed-series") == before + 1


# -- the probe record -----------------------------------------------------------------------------


def _record(name: str) -> str:
    return (H200_LOGS / "probe" / f"{name}__baseline.probe").read_text().strip()


def _log_without_record(name: str) -> bytes:
    lines = (H200_LOGS / "probe" / f"{name}__baseline.log").read_text().splitlines()
    return "\n".join(ln for ln in lines if "gpu-auditor-probe-record" not in ln).encode() + b"\n"


def test_a_record_in_the_termination_message_builds_the_diagnosis() -> None:
    used = metric("gpu_auditor_operator_probe_records_total", result="used")
    kube = FakeKube(_pod(_record("frag_pinned")), log=_log_without_record("frag_pinned"))
    notes = _diagnose(kube)
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    probe = _evidence(notes)["probe"]
    assert probe == {"source": "termination-message", "used": True, "status": "ok",
                     "verdict": "fragmentation", "inferenceKind": "fragmentation",
                     "disagrees": False}
    assert "probe record" in notes[f"{PREFIX}summary"]  # the figures are the record's
    assert _evidence(notes)["source"] == "log"  # the OOM message itself came from the log
    assert metric("gpu_auditor_operator_probe_records_total", result="used") == used + 1


def _disagreements(inferred: str) -> dict[str, float]:
    """gpu_auditor_probe_disagreements_total by written kind, for one inferred kind."""
    return {sample.labels["kind"]: sample.value
            for family in REGISTRY.collect() if family.name == "gpu_auditor_probe_disagreements"
            for sample in family.samples
            if sample.name.endswith("_total") and sample.labels["inferred_kind"] == inferred}


def test_a_record_that_disagrees_wins_and_the_disagreement_is_counted() -> None:
    # The real record (a 0.05 memory fraction), with the cache's free blocks cut to 16 MiB:
    # they no longer cover the request, so the record says the cap, not fragmentation, where
    # the message alone (1.89 GiB reserved but unallocated) says fragmentation.
    raw = json.loads(_record("frag_pinned").partition(" ")[2])
    raw["pools"]["large"]["free_bytes"] = raw["pools"]["large"]["largest_free_bytes"] = 16 * 2**20
    message = "gpu-auditor-probe-record " + json.dumps(raw, separators=(",", ":"))
    kube = FakeKube(_pod(message), log=_log_without_record("frag_pinned"))
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
    notes = _diagnose(FakeKube(_pod(message), log=_log_without_record("frag_pinned")))
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    probe = _evidence(notes)["probe"]
    assert probe["used"] is False and probe["ignored"].startswith("invalid: unsupported schema")
    assert metric("gpu_auditor_operator_probe_records_total", result="invalid") == invalid + 1


def test_a_record_of_another_failure_is_not_used() -> None:
    unmatched = metric("gpu_auditor_operator_probe_records_total", result="unmatched")
    kube = FakeKube(_pod(_record("capacity_batch")), log=_log_without_record("frag_pinned"))
    notes = _diagnose(kube)
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert _evidence(notes)["probe"]["used"] is False
    assert metric("gpu_auditor_operator_probe_records_total", result="unmatched") == unmatched + 1


def test_a_huge_forged_message_is_searched_only_at_its_end() -> None:
    record = _record("frag_pinned")
    assert record_in_message("x" * 10_000_000 + "\n" + record) is not None
    assert record_in_message(record + "\n" + "x" * 70_000) is None
