"""Annotation values: bounded, cut at whole items, always valid JSON, far below 256 KiB."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from gpu_auditor.base.contract import FindingKind
from gpu_auditor.base.nodereport import Finding
from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller import bounded
from gpu_auditor.controller.pod import (
    AllocConf,
    DiagnosedKeys,
    Pod,
    Termination,
    diagnosed_keys,
    parse_pod,
)
from gpu_auditor.diagnosis import (
    Diagnosis,
    Figures,
    NodeEvidence,
    OtherPod,
    OtherProcess,
    Recommendation,
)

pytestmark = pytest.mark.unit

PREFIX = "gpu-auditor.io/"
NOW = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)
TERMINATION = Termination(container="main", restart_count=3, reason="Error", exit_code=1,
                          message="", finished_at=None, previous=False)


def _pod(annotations: dict[str, str] | None = None) -> Pod:
    return parse_pod({"metadata": {"namespace": "ml", "name": "train-x", "uid": "uid-1",
                                   "annotations": annotations or {}}}, PREFIX)


def _diagnosis(actions: tuple[str, ...] = (), alloc_conf: str | None = None,
               summary: str = "fragmentation: 2.0 GiB reserved but unallocated",
               problems: tuple[str, ...] = ()) -> Diagnosis:
    return Diagnosis(
        detected=True, framework="pytorch", kind="fragmentation", contributing=(),
        figures=Figures(requested_bytes=2**30), torch_version_hint="2.11",
        recommendation=Recommendation("PYTORCH_CUDA_ALLOC_CONF" if alloc_conf else None,
                                      alloc_conf, actions),
        summary=summary, oom_count=1, alloc_conf_problems=problems,
    )


def _written(diagnosis: Diagnosis, pod: Pod | None = None,
             **kw: object) -> dict[str, str | None]:
    return notes.diagnosis_annotations(
        diagnosis, TERMINATION, pod or _pod(), prefix=PREFIX, previous_keys=[], source="log",
        now=NOW, **kw).annotations  # type: ignore[arg-type]


def test_the_budget_of_all_annotations_is_16_kib_with_the_longest_prefix() -> None:
    assert notes.BUDGET == 16384
    assert sum(notes.LIMITS.values()) == 15136
    prefix = "p" * 63 + "/"  # 64 characters, the most --annotation-prefix allows
    worst = sum(len(prefix) + len(name) + limit for name, limit in notes.LIMITS.items())
    assert worst == 16052 and worst <= 16384  # and 256 KiB is the API server's limit


def test_actions_are_cut_at_whole_items_and_say_how_many_were_left_out() -> None:
    written = _written(_diagnosis(actions=tuple(f"{i}" + "x" * 999 for i in range(10))))
    actions = json.loads(str(written[f"{PREFIX}actions"]))
    assert len(str(written[f"{PREFIX}actions"])) == 4041
    assert actions[:4] == [f"{i}" + "x" * 999 for i in range(4)]
    assert actions[4] == "(6 more actions left out)"


def test_one_action_longer_than_1024_bytes_is_cut_inside_the_string_and_still_parses() -> None:
    written = _written(_diagnosis(actions=('say "' + "\\" * 5000 + '"',)))
    (action,) = json.loads(str(written[f"{PREFIX}actions"]))
    assert action.endswith("…") and len(action.encode()) == 1024


def test_a_long_list_in_the_evidence_keeps_whole_items_and_counts_the_rest() -> None:
    node = NodeEvidence(gpu_uuid="GPU-a", other_pods=tuple(
        OtherPod(namespace=f"ns-{i:03d}", pod=f"pod-{i:03d}", bytes=1) for i in range(200)))
    evidence = json.loads(str(_written(_diagnosis(), node=node)[f"{PREFIX}evidence"]))
    assert evidence["otherPodsOnGPU"][:2] == ["ns-000/pod-000", "ns-001/pod-001"]
    assert len(evidence["otherPodsOnGPU"]) == 90
    assert evidence["leftOut"] == {"otherPodsOnGPU": 110}


def test_evidence_fields_that_do_not_fit_are_named_not_cut() -> None:
    text = bounded.json_object([(f"f{i}", "z" * 1000) for i in range(10)], 5120,
                               string_limit=1024, list_limit=1536)
    value = json.loads(text)
    assert len(text) == 5089
    assert list(value) == ["f0", "f1", "f2", "f3", "f4", "leftOut"]
    assert value["leftOut"] == {"fields": ["f5", "f6", "f7", "f8", "f9"]}


def test_numbers_json_cannot_carry_become_null() -> None:
    text = bounded.json_object([("nan", float("nan")), ("inf", float("-inf")),
                                ("huge", 10**4000), ("ok", 2**63 - 1)], 5120,
                               string_limit=1024, list_limit=1536)
    assert json.loads(text) == {"nan": None, "inf": None, "huge": None, "ok": 2**63 - 1}


@pytest.mark.parametrize("text", ['"' * 20000, "\\" * 20000, "é" * 20000, "\ud800" * 20000,
                                  "\x00\n" * 20000])
def test_hostile_strings_never_make_invalid_json_or_exceed_the_limits(text: str) -> None:
    written = _written(_diagnosis(actions=(text, text, text), summary=text,
                                  problems=(text,) * 50),
                       alloc_conf=AllocConf(None, text))
    json.loads(str(written[f"{PREFIX}actions"]))
    json.loads(str(written[f"{PREFIX}evidence"]))
    for key, value in written.items():
        assert value is not None
        assert len(value.encode("utf-8", "replace")) <= notes.LIMITS[key.removeprefix(PREFIX)]
    assert sum(len(k) + len(str(v).encode("utf-8", "replace"))
               for k, v in written.items()) <= 16384


def test_a_recommended_alloc_conf_over_1024_bytes_is_not_written_and_the_evidence_says_so(
) -> None:
    written = _written(_diagnosis(alloc_conf="expandable_segments:True," + "a:" * 600))
    assert f"{PREFIX}recommended-alloc-conf" not in written
    evidence = json.loads(str(written[f"{PREFIX}evidence"]))
    assert evidence["recommendedAllocConf"] == (
        "left out: 1225 characters, over the 1024-byte limit")


def test_an_ignored_current_setting_is_said_in_the_evidence() -> None:
    why = "PYTORCH_CUDA_ALLOC_CONF not read: 300000 characters, over the 1024-character limit"
    evidence = json.loads(str(_written(_diagnosis(), alloc_conf=AllocConf(None, why))
                              [f"{PREFIX}evidence"]))
    assert evidence["currentAllocConf"] == why


def test_diagnosed_keys_keep_one_entry_per_container_and_ignore_keys_a_tenant_forged() -> None:
    forged = ",".join(["main/1", "../x/2", "a" * 70 + "/1", "main/" + "9" * 11, "side/2"])
    assert diagnosed_keys(forged) == DiagnosedKeys({"main": 1, "side": 2})
    assert _pod({f"{PREFIX}diagnosed-key": forged}).diagnosed_keys.keys() == ["main/1", "side/2"]
    previous = [f"side/{i}" for i in range(40)]
    keys = notes.diagnosis_annotations(
        _diagnosis(), TERMINATION, _pod(), prefix=PREFIX, previous_keys=previous,
        source="log", now=NOW).annotations[f"{PREFIX}diagnosed-key"]
    assert keys == "main/3,side/39"


def test_a_failure_is_one_short_annotation_and_records_the_key() -> None:
    patch = notes.failure_annotations(TERMINATION, prefix=PREFIX, previous_keys=["main/2"],
                                      reason="timeout", detail="x" * 2000, now=NOW)
    assert patch[f"{PREFIX}diagnosis-failed"].startswith("main/3: timeout: xxx")
    assert len(patch[f"{PREFIX}diagnosis-failed"].encode()) == 512
    assert patch[f"{PREFIX}diagnosed-key"] == "main/3"


def test_a_later_diagnosis_clears_a_stale_failure_and_recommendation() -> None:
    pod = _pod({f"{PREFIX}diagnosis-failed": "main/0: timeout",
                f"{PREFIX}recommended-alloc-conf": "expandable_segments:True", "team": "ml"})
    patch = _written(_diagnosis(), pod)
    assert patch[f"{PREFIX}diagnosis"] == "fragmentation"
    assert patch[f"{PREFIX}diagnosis-failed"] is None
    assert patch[f"{PREFIX}recommended-alloc-conf"] is None
    assert "team" not in patch
    kept = _written(_diagnosis(alloc_conf="expandable_segments:True"), pod)
    assert kept[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"


def test_the_evidence_is_built_from_the_typed_diagnosis_in_camel_case() -> None:
    diagnosis = _diagnosis(problems=("max_split_size_mb: must be > 20",))
    diagnosis = Diagnosis(**{**diagnosis.__dict__, "figures": Figures(
        requested_bytes=2**30, total_bytes=8 * 2**30, free_bytes=0, allocated_bytes=5,
        reserved_unallocated_bytes=3, other_processes=(OtherProcess(pid=7, bytes=9),))})
    evidence = json.loads(str(_written(diagnosis)[f"{PREFIX}evidence"]))
    assert evidence["figures"] == {
        "requestedBytes": 2**30, "totalBytes": 8 * 2**30, "freeBytes": 0, "processBytes": None,
        "allocatedBytes": 5, "reservedUnallocatedBytes": 3, "allowedBytes": None,
        "otherProcesses": [{"pid": 7, "bytes": 9, "namespace": None, "pod": None}]}
    assert (evidence["oomCount"], evidence["torchVersionHint"]) == (1, "2.11")
    assert evidence["currentAllocConfProblems"] == ["max_split_size_mb: must be > 20"]
    snake = [k for k in evidence if "_" in k] + [k for k in evidence["figures"] if "_" in k]
    assert snake == []


def test_the_owner_gets_the_summary_and_the_pod_it_came_from() -> None:
    written = notes.diagnosis_annotations(
        _diagnosis(alloc_conf="expandable_segments:True"), TERMINATION, _pod(), prefix=PREFIX,
        previous_keys=[], source="log", now=NOW)
    assert set(written.owner_annotations) == {
        f"{PREFIX}{name}" for name in ("diagnosis", "summary", "recommended-alloc-conf",
                                       "actions", "diagnosed-at", "diagnosed-pod")}
    assert written.owner_annotations[f"{PREFIX}diagnosed-pod"] == "ml/train-x"


def test_the_owner_loses_a_recommended_setting_the_next_diagnosis_has_not() -> None:
    # pod A of a Deployment: fragmentation, a setting helps; then pod B: capacity, none does
    owner: dict[str, str] = {}
    capacity = Diagnosis(**{**_diagnosis().__dict__, "kind": "capacity",
                            "summary": "capacity: the request exceeds the GPU"})
    for name, diagnosis in (("train-a", _diagnosis(alloc_conf="expandable_segments:True")),
                            ("train-b", capacity)):
        pod = parse_pod({"metadata": {"namespace": "ml", "name": name, "uid": name}}, PREFIX)
        patch = notes.diagnosis_annotations(diagnosis, TERMINATION, pod, prefix=PREFIX,
                                            previous_keys=[], source="log",
                                            now=NOW).owner_annotations
        for key, value in patch.items():  # a JSON merge patch (RFC 7386)
            if value is None:
                owner.pop(key, None)
            else:
                owner[key] = value
    assert owner == {f"{PREFIX}diagnosis": "capacity",
                     f"{PREFIX}summary": "capacity: the request exceeds the GPU",
                     f"{PREFIX}actions": "[]", f"{PREFIX}diagnosed-at": "2026-11-29T10:00:00Z",
                     f"{PREFIX}diagnosed-pod": "ml/train-b"}


def test_every_owner_annotation_is_set_or_cleared_and_only_the_setting_is_cleared() -> None:
    kept = {f"{PREFIX}{name}" for name in ("diagnosis", "summary", "recommended-alloc-conf",
                                           "actions", "diagnosed-at", "diagnosed-pod")}
    without = notes.diagnosis_annotations(_diagnosis(), TERMINATION, _pod(), prefix=PREFIX,
                                          previous_keys=[], source="log", now=NOW)
    assert set(without.owner_annotations) == kept
    assert [k for k, v in without.owner_annotations.items() if v is None] == [
        f"{PREFIX}recommended-alloc-conf"]
    with_setting = notes.diagnosis_annotations(
        _diagnosis(alloc_conf="expandable_segments:True"), TERMINATION, _pod(), prefix=PREFIX,
        previous_keys=[], source="log", now=NOW)
    assert with_setting.owner_annotations[f"{PREFIX}recommended-alloc-conf"] == (
        "expandable_segments:True")
    assert None not in with_setting.owner_annotations.values()


def test_sharing_annotations_list_whole_pod_refs_within_1024_bytes() -> None:
    pods = tuple(f"ns/{'p' * 60}-{i:03d}" for i in range(40))
    finding = Finding(kind=FindingKind.UNINTENDED_SHARING, gpu_uuid="GPU-a", pods=pods,
                      message="m")
    shared = notes.sharing_annotations(PREFIX, [finding], pods[0])[f"{PREFIX}gpu-shared-with"]
    items = shared.split(",")
    assert len(shared) <= 1024
    assert items[:-1] == list(pods[1:15]) and items[-1] == "(+25 more)"


def test_event_names_are_valid_object_names_whatever_the_pod_is_called() -> None:
    assert notes.event_name("a" * 199 + "." + "b" * 50, "u").startswith("a" * 199 + ".gpu-")
    assert notes.event_name("../etc", "u").startswith("pod.gpu-auditor.")
