"""Annotation values: bounded, cut at whole items, always valid JSON, far below 256 KiB."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import time
from typing import Any

import pytest

from gpu_auditor.base.contract import Annotation, FindingKind
from gpu_auditor.base.nodereport import Finding
from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller.pod import (
    AllocConf,
    DiagnosedKeys,
    Pod,
    Termination,
    diagnosed_keys,
    parse_pod,
)
from gpu_auditor.controller.probe import ProbeUse
from gpu_auditor.diagnosis import (
    Diagnosis,
    Figures,
    NodeEvidence,
    OtherPod,
    OtherProcess,
    Recommendation,
)
from gpu_auditor.diagnosis.model import Growth

from .controller_helpers import pod, termination

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


# Boundary tables for what the operator writes (issue 18): each limit from both sides, with
# literal numbers, never the module's constants.

def diagnosis(alloc_conf: str | None = None, summary: str = "fragmentation: 2.0 GiB",
              kind: str = "fragmentation") -> Diagnosis:  # fmt: skip
    return Diagnosis(
        detected=True, framework="pytorch", kind=kind, contributing=(),
        figures=Figures(requested_bytes=2**30), torch_version_hint="2.11",
        recommendation=Recommendation("PYTORCH_CUDA_ALLOC_CONF" if alloc_conf else None,
                                      alloc_conf, ()),
        summary=summary, oom_count=1, alloc_conf_problems=(),
    )  # fmt: skip


def written(d: Diagnosis | None = None, p: Pod | None = None, t: Termination | None = None,
            previous: list[str] | DiagnosedKeys | None = None) -> notes.Written:  # fmt: skip
    return notes.diagnosis_annotations(
        d or diagnosis(), t or termination(), p or pod(), prefix=PREFIX,
        previous_keys=previous or [], source="log", now=NOW)  # fmt: skip


def keys_of(w: notes.Written) -> list[str]:
    return str(w.annotations[f"{PREFIX}diagnosed-key"]).split(",")


def finding(*pods: str, kind: FindingKind = FindingKind.UNINTENDED_SHARING,
            gpu: str = "GPU-a") -> Finding:  # fmt: skip
    return Finding(kind=kind, gpu_uuid=gpu, pods=pods, message="m")


def refs(*lengths: int) -> list[str]:
    """Pod refs of the given lengths, sorted in the order given (a, b, c, ... after "ns/")."""
    return [f"ns/{chr(97 + i)}{'p' * (n - 4)}" for i, n in enumerate(lengths)]


def shared_with(others: list[str]) -> str:
    found = notes.sharing_annotations(PREFIX, [finding("ml/me", *others)], "ml/me")
    return found[f"{PREFIX}gpu-shared-with"]


def test_each_container_keeps_only_its_highest_restart_count() -> None:
    previous = ["main/1", "side/0", "main/2", "side/4"]
    assert keys_of(written(previous=previous)) == ["main/3", "side/4"]


def test_a_higher_count_recorded_before_is_kept() -> None:
    assert keys_of(written(previous=["main/5", "side/1"])) == ["main/5", "side/1"]


def test_17_containers_are_all_recorded_the_16_keys_of_the_old_format_are_no_bound() -> None:
    previous = [f"c{i}/0" for i in range(16)]
    new = termination(container="c16", restart=0)
    assert sorted(keys_of(written(previous=previous, t=new))) == sorted(
        [*previous, "c16/0"])


def test_keys_are_kept_whole_while_they_fit_1280_bytes() -> None:
    # nineteen entries of 65 characters and one of 26, joined by 19 commas: 1,280 bytes
    previous = [f"{chr(97 + i) * 63}/{i % 9 + 1}" for i in range(19)]
    new = termination(container="t" * 24, restart=5)
    kept = keys_of(written(previous=previous, t=new))
    assert len(",".join(kept)) == 1280 and kept == [*previous, new.key]


def test_one_byte_over_1280_folds_the_lowest_entry_into_the_floor() -> None:
    previous = [f"{chr(97 + i) * 63}/{i % 9 + 1}" for i in range(19)]
    new = termination(container="t" * 25, restart=5)  # 1,281 bytes whole
    kept = keys_of(written(previous=previous, t=new))
    # a.../1 (the lowest count, then the first name) is left out: every container is done up
    # to restart count 1
    assert kept == [*previous[1:], new.key, "*/1"] and len(",".join(kept)) == 1219


def test_the_floor_counts_against_1280_bytes_too() -> None:
    previous = [f"{chr(97 + i) * 63}/{i % 9 + 1}" for i in range(19)] + ["*/7"]
    inside = termination(container="t" * 20, restart=5)  # 1,280 bytes with ",*/7"
    kept = keys_of(written(previous=previous, t=inside))
    assert len(",".join(kept)) == 1280 and kept == [*previous[:19], inside.key, "*/7"]
    outside = termination(container="t" * 21, restart=5)
    kept = keys_of(written(previous=previous, t=outside))
    assert kept == [*previous[1:19], outside.key, "*/7"] and len(",".join(kept)) == 1215


def test_folding_stops_at_1280_bytes_with_the_floor_and_goes_on_at_1281() -> None:
    previous = [f"{chr(97 + i) * 63}/{i % 9 + 1}" for i in range(20)]
    inside = termination(container="u" * 20, restart=5)  # 1,342 bytes whole: 1,280 without a.../1
    kept = keys_of(written(previous=previous, t=inside))
    assert len(",".join(kept)) == 1280 and kept == [*previous[1:], inside.key, "*/1"]
    outside = termination(container="u" * 21, restart=5)  # 1,281 without a.../1: j.../1 goes too
    kept = keys_of(written(previous=previous, t=outside))
    assert len(",".join(kept)) == 1215
    assert kept == [*previous[1:9], *previous[10:], outside.key, "*/1"]


def test_the_lowest_entry_is_folded_first_whatever_order_the_record_was_read_in() -> None:
    previous = [f"{chr(97 + i) * 63}/{i % 9 + 1}" for i in range(19)]
    new = termination(container="t" * 25, restart=5)  # 1,281 bytes whole
    kept = keys_of(written(previous=list(reversed(previous)), t=new))
    assert kept == [*previous[1:], new.key, "*/1"]  # a.../1, not s.../1 (read first)


def test_a_folded_count_above_the_floor_raises_it() -> None:
    previous = [f"{chr(97 + i) * 63}/{i % 9 + 3}" for i in range(19)] + ["*/2"]
    outside = termination(container="t" * 21, restart=5)
    assert keys_of(written(previous=previous, t=outside))[-1] == "*/3"


def test_one_entry_over_1280_bytes_leaves_the_floor() -> None:
    huge = termination(container="h" * 1300, restart=0)  # no container name is that long
    assert keys_of(written(previous=["side/1"], t=huge)) == ["side/1", "*/0"]


def test_a_failure_records_its_key_under_the_same_bounds() -> None:
    previous = [f"{chr(97 + i) * 63}/{i % 9 + 1}" for i in range(19)]
    patch = notes.failure_annotations(termination(container="t" * 25, restart=5),
                                      prefix=PREFIX, previous_keys=previous, reason="timeout",
                                      detail="d", now=NOW)  # fmt: skip
    assert patch[f"{PREFIX}diagnosed-key"].split(",") == [*previous[1:], "t" * 25 + "/5", "*/1"]
    assert patch[f"{PREFIX}diagnosed-at"] == "2026-11-29T10:00:00Z"


def test_the_record_itself_is_taken_as_previous_keys() -> None:
    record = DiagnosedKeys({"side": 4}, 1)
    assert keys_of(written(previous=record)) == ["main/3", "side/4", "*/1"]


@pytest.mark.parametrize(
    ("name", "limit"),
    [
        (Annotation.SUMMARY, 1024),
        (Annotation.DIAGNOSIS, 64),
        (Annotation.DIAGNOSIS_FAILED, 512),
        (Annotation.DIAGNOSED_POD, 320),
    ],
)
def test_a_value_at_its_limit_is_whole_one_byte_more_is_cut(name: Annotation, limit: int) -> None:
    assert notes.value(name, "s" * limit) == "s" * limit
    cut = notes.value(name, "s" * (limit + 1))
    assert len(cut.encode()) == limit and cut.endswith("…") and cut.startswith("s")


def test_the_summary_annotation_is_cut_at_1024_bytes() -> None:
    w = written(diagnosis(summary="x" * 1025))
    summary = str(w.annotations[f"{PREFIX}summary"])
    assert len(summary.encode()) == 1024 and summary.endswith("…")
    assert written(diagnosis(summary="x" * 1024)).annotations[f"{PREFIX}summary"] == "x" * 1024


def test_the_event_message_is_cut_at_1024_bytes() -> None:
    # "[main] " is 7 bytes: a 1,017-byte summary makes a message of exactly 1,024
    assert written(diagnosis(summary="x" * 1017)).event_message == "[main] " + "x" * 1017
    cut = written(diagnosis(summary="x" * 1018)).event_message
    assert len(cut.encode()) == 1024 and cut.endswith("…")


def test_a_recommended_setting_of_1024_bytes_is_written_one_more_is_not() -> None:
    fits = "max_split_size_mb:" + "1" * 1006
    assert len(fits) == 1024
    w = written(diagnosis(alloc_conf=fits))
    assert w.annotations[f"{PREFIX}recommended-alloc-conf"] == fits
    assert "Recommended: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:111" in w.event_message
    w = written(diagnosis(alloc_conf=fits + "1"))
    assert f"{PREFIX}recommended-alloc-conf" not in w.annotations
    assert "Recommended" not in w.event_message
    evidence = json.loads(str(w.annotations[f"{PREFIX}evidence"]))
    assert evidence["recommendedAllocConf"] == (
        "left out: 1025 characters, over the 1024-byte limit"
    )


def test_a_stale_recommendation_is_cleared_when_the_new_diagnosis_has_none() -> None:
    stale = pod({f"{PREFIX}recommended-alloc-conf": "expandable_segments:True"})
    patch = written(diagnosis(kind="capacity"), stale).annotations
    assert patch[f"{PREFIX}recommended-alloc-conf"] is None
    assert f"{PREFIX}diagnosis-failed" not in patch  # the pod has none: nothing to clear


def test_nothing_is_cleared_that_the_pod_does_not_carry() -> None:
    patch = written(diagnosis(kind="capacity"), pod({"other.io/recommended-alloc-conf": "x"}))
    assert None not in patch.annotations.values()
    assert set(patch.annotations) == {
        f"{PREFIX}{n}"
        for n in ("diagnosis", "summary", "actions", "evidence", "diagnosed-at", "diagnosed-key")
    }


def test_a_new_recommendation_replaces_the_old_one() -> None:
    stale = pod({f"{PREFIX}recommended-alloc-conf": "max_split_size_mb:128"})
    patch = written(diagnosis(alloc_conf="expandable_segments:True"), stale).annotations
    assert patch[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"


def test_a_second_crash_of_the_same_container_gets_its_own_event() -> None:
    first = written(t=termination(restart=3)).event_name
    second = written(t=termination(restart=4)).event_name
    assert first != second
    assert written(t=termination(restart=3)).event_name == first  # a repeat is the same Event
    other_container = written(t=termination(container="side", restart=3)).event_name
    assert other_container not in (first, second)


def test_the_same_termination_of_another_pod_uid_gets_another_event() -> None:
    assert written(p=pod(uid="uid-1")).event_name != written(p=pod(uid="uid-2")).event_name


def test_the_event_name_is_the_pod_name_and_a_digest() -> None:
    name = written().event_name
    stem, _, digest = name.rpartition(".")
    assert stem == "train-x.gpu-auditor"
    assert len(digest) == 12 and all(c in "0123456789abcdef" for c in digest)


def test_the_event_name_keeps_200_characters_of_the_pod_name() -> None:
    assert notes.event_name("a" * 201, "u").startswith("a" * 200 + ".gpu-auditor.")
    assert notes.event_name("a" * 200, "u").startswith("a" * 200 + ".gpu-auditor.")
    assert notes.event_name("a" * 199 + "-b", "u").startswith("a" * 199 + ".gpu-auditor.")


def test_a_host_oom_kill_is_an_oomkilled_event_and_a_cuda_oom_is_not() -> None:
    assert written(diagnosis(kind="host-oom-killed")).event_reason == "OOMKilled"
    assert written(diagnosis(kind="fragmentation")).event_reason == "CUDAOutOfMemory"


def test_pods_listed_whole_while_they_fit_1024_bytes() -> None:
    # 16 refs of 63 bytes and 15 commas: 1,023 bytes; the 64-byte last one makes 1,024
    refs = [f"ns/{'p' * 58}{i:02d}" for i in range(15)] + [f"ns/{'p' * 59}15"]
    assert len(",".join(refs)) == 1024
    shared = notes.sharing_annotations(PREFIX, [finding("ml/me", *refs)], "ml/me")
    assert shared[f"{PREFIX}gpu-shared-with"] == ",".join(sorted(refs))
    longer = [*refs[:-1], f"ns/{'p' * 60}15"]  # one byte more
    shared = notes.sharing_annotations(PREFIX, [finding("ml/me", *longer)], "ml/me")
    items = shared[f"{PREFIX}gpu-shared-with"].split(",")
    assert items[-1] == "(+1 more)" and items[:-1] == sorted(longer)[:15]


def test_a_pod_alone_with_host_processes_says_so() -> None:
    shared = notes.sharing_annotations(
        PREFIX, [finding("ml/me", kind=FindingKind.UNREQUESTED_GPU_USE)], "ml/me")
    assert shared == {
        f"{PREFIX}gpu-shared-with": "(host processes)",
        f"{PREFIX}sharing-finding": "unrequested-gpu-use",
        f"{PREFIX}sharing-gpu": "GPU-a",
    }


def test_two_findings_on_two_gpus_are_listed_sorted_once() -> None:
    found = [finding("ml/me", "ml/b", gpu="GPU-z"), finding("ml/a", "ml/me", "ml/b"),
             finding("ml/me", kind=FindingKind.UNREQUESTED_GPU_USE, gpu="GPU-z")]  # fmt: skip
    shared = notes.sharing_annotations(PREFIX, found, "ml/me")
    assert shared[f"{PREFIX}gpu-shared-with"] == "ml/a,ml/b"
    assert shared[f"{PREFIX}sharing-finding"] == "unintended-sharing,unrequested-gpu-use"
    assert shared[f"{PREFIX}sharing-gpu"] == "GPU-a,GPU-z"


def test_a_sharing_event_names_the_others_and_is_cut_at_1024_bytes() -> None:
    f = Finding(kind=FindingKind.UNINTENDED_SHARING, gpu_uuid="GPU-a", pods=("ml/me", "ml/b"),
                message="2 pods")  # fmt: skip
    assert notes.sharing_message(f, "ml/me") == "2 pods (shared with ml/b)"
    alone = Finding(kind=FindingKind.UNREQUESTED_GPU_USE, gpu_uuid="GPU-a", pods=("ml/me",),
                    message="")  # fmt: skip
    assert notes.sharing_message(alone, "ml/me") == "unrequested-gpu-use"
    long = Finding(kind=FindingKind.UNINTENDED_SHARING, gpu_uuid="GPU-a", pods=("ml/me",),
                   message="m" * 1025)  # fmt: skip
    assert len(notes.sharing_message(long, "ml/me").encode()) == 1024


def test_a_cut_list_that_fits_exactly_1024_bytes_keeps_its_last_item() -> None:
    # 4 refs of 200 bytes, one of 210, 9 more: "5 refs,(+9 more)" is 1,010 + 5 + 9 = 1,024
    others = refs(200, 200, 200, 200, 210, *[50] * 9)
    value = shared_with(others)
    assert value == ",".join([*others[:5], "(+9 more)"]) and len(value) == 1024


def test_the_count_in_the_trial_is_the_count_written() -> None:
    # 10 left out makes "(+10 more)", one byte longer: the fifth ref no longer fits
    others = refs(200, 200, 200, 200, 210, *[50] * 10)
    assert shared_with(others) == ",".join([*others[:4], "(+11 more)"])


def test_the_evidence_names_the_termination_and_the_source() -> None:
    d = Diagnosis(
        detected=True, framework="pytorch", kind="fragmentation",
        contributing=("capacity",), figures=Figures(requested_bytes=2**30),
        torch_version_hint="2.11", recommendation=Recommendation(None, None, ()),
        summary="s", oom_count=2, alloc_conf_problems=(),
    )  # fmt: skip
    t = Termination(container="main", restart_count=3, reason="Error", exit_code=137,
                    message="", finished_at=None, previous=False)  # fmt: skip
    w = notes.diagnosis_annotations(d, t, pod(), prefix=PREFIX, previous_keys=[],
                                    source="termination-message", now=NOW)  # fmt: skip
    evidence = json.loads(str(w.annotations[f"{PREFIX}evidence"]))
    assert {k: evidence[k] for k in ("container", "restartCount", "exitCode",
                                     "terminationReason", "source", "framework",
                                     "contributing", "oomCount")} == {
        "container": "main", "restartCount": 3, "exitCode": 137, "terminationReason": "Error",
        "source": "termination-message", "framework": "pytorch", "contributing": ["capacity"],
        "oomCount": 2,
    }  # fmt: skip


def test_the_event_message_is_the_summary_then_the_setting() -> None:
    w = written(diagnosis(alloc_conf="expandable_segments:True", summary="frag"))
    assert w.event_message == (
        "[main] frag Recommended: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    )
    d = diagnosis(alloc_conf="expandable_segments:True", summary="frag")
    d = Diagnosis(**{**d.__dict__, "recommendation": Recommendation(
        "PYTORCH_ALLOC_CONF", "expandable_segments:True", ())})  # fmt: skip
    assert written(d).event_message == (
        "[main] frag Recommended: PYTORCH_ALLOC_CONF=expandable_segments:True"
    )


def test_the_event_name_is_the_documented_digest_of_uid_key_and_reason() -> None:
    # stable across operator versions: a newer operator finds the older one's Event (a 409)
    expected = hashlib.sha256(b"uid-1\0main/3\0CUDAOutOfMemory").hexdigest()[:12]
    assert written().event_name == f"train-x.gpu-auditor.{expected}"
    oom_killed = written(diagnosis(kind="host-oom-killed")).event_name
    assert oom_killed != written().event_name  # the reason is part of it


def test_an_event_name_from_text_that_is_not_utf_8_is_still_made() -> None:
    name = notes.event_name("train-x", "uid\ud800", "main/0")  # a lone surrogate
    assert name.startswith("train-x.gpu-auditor.") and len(name) == 20 + 12


def test_diagnosed_at_is_utc_whatever_the_operators_time_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "IST-5:30")  # POSIX form: no tzdata needed
    time.tzset()
    try:
        india = dt.timezone(dt.timedelta(hours=5, minutes=30))
        local = dt.datetime(2026, 11, 29, 15, 30, tzinfo=india)
        w = notes.diagnosis_annotations(diagnosis(), termination(), pod(), prefix=PREFIX,
                                        previous_keys=[], source="log", now=local)  # fmt: skip
        assert w.annotations[f"{PREFIX}diagnosed-at"] == "2026-11-29T10:00:00Z"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_sharing_event_lists_the_others_comma_separated() -> None:
    f = Finding(kind=FindingKind.UNINTENDED_SHARING, gpu_uuid="GPU-a",
                pods=("ml/me", "ml/c", "ml/b"), message="3 pods")  # fmt: skip
    assert notes.sharing_message(f, "ml/me") == "3 pods (shared with ml/b, ml/c)"


# The evidence annotation's optional fields (issue 18, mutation survivors): the node's memory
# series points, the growth behind a leak and what became of a probe record are written under
# their exact camelCase keys, and only when there is something to write. Literal values.

POD = parse_pod({"metadata": {"namespace": "ml", "name": "train-x", "uid": "uid-1",
                              "annotations": {}}}, PREFIX)


LEAK = Diagnosis(
    detected=True, framework="pytorch", kind="leak", contributing=(),
    figures=Figures(requested_bytes=2**30), torch_version_hint="2.11",
    recommendation=Recommendation(None, None, ()), summary="leak", oom_count=1,
    alloc_conf_problems=(),
)


def evidence(d: Diagnosis = LEAK, **kw: Any) -> dict[str, Any]:
    w = notes.diagnosis_annotations(d, TERMINATION, POD, prefix=PREFIX, previous_keys=[],
                                    source="log", now=NOW, **kw)
    found: dict[str, Any] = json.loads(str(w.annotations[f"{PREFIX}{Annotation.EVIDENCE}"]))
    return found


def test_no_series_points_no_growth_no_probe_by_default() -> None:
    e = evidence()
    assert "memorySeriesPoints" not in e and "growth" not in e and "probe" not in e


@pytest.mark.parametrize(("samples", "written"), [(0, None), (1, 1), (37, 37)])
def test_series_points_are_written_from_one(samples: int, written: int | None) -> None:
    assert evidence(samples=samples).get("memorySeriesPoints") == written


def test_the_growth_behind_a_leak_is_written_whole() -> None:
    growth = Growth(source="samples", points=12, first_bytes=3 * 2**30, last_bytes=9 * 2**30,
                    per_unit=1024.0)
    e = evidence(dataclasses.replace(LEAK, growth=growth))
    assert e["growth"] == {"source": "samples", "points": 12, "firstBytes": 3221225472,
                           "lastBytes": 9663676416}


def test_what_became_of_a_probe_record_is_written() -> None:
    used = ProbeUse(source="termination-message", used=True, status="ok", verdict="cap",
                    inference_kind="capacity", disagrees=True)
    assert evidence(probe=used)["probe"] == {
        "source": "termination-message", "used": True, "status": "ok", "verdict": "cap",
        "inferenceKind": "capacity", "disagrees": True,
    }
    ignored = ProbeUse(source="log", used=False, ignored="another request")
    assert evidence(probe=ignored)["probe"] == {"source": "log", "used": False,
                                                "ignored": "another request"}


# -- an Event rebuilt from the annotation (an operator killed before posting it) ---------------

FINISHED = NOW - dt.timedelta(minutes=1)
DONE = dataclasses.replace(TERMINATION, finished_at=FINISHED)


def _annotated(diagnosis: Diagnosis, *, drop: tuple[str, ...] = (),
               extra: dict[str, str] | None = None,
               terminations: tuple[Termination, ...] = (DONE,)) -> tuple[Pod, notes.Written]:
    written = notes.diagnosis_annotations(diagnosis, DONE, _pod(), prefix=PREFIX,
                                          previous_keys=[], source="log", now=NOW)
    ann = {k: v for k, v in written.annotations.items()
           if v is not None and k.removeprefix(PREFIX) not in drop}
    ann.update(extra or {})
    return dataclasses.replace(_pod(ann), terminations=terminations), written


@pytest.mark.parametrize("diagnosis", [
    _diagnosis(alloc_conf="expandable_segments:True"),
    _diagnosis(),
    dataclasses.replace(_diagnosis(), kind="host-oom-killed",
                        summary="host-oom-killed: container 'main' was killed"),
    _diagnosis(summary="capacity: " + "x" * 5000),  # clipped as the first Event was
])  # fmt: skip
def test_the_rebuilt_event_is_the_one_first_built(diagnosis: Diagnosis) -> None:
    pod, written = _annotated(diagnosis)
    event = notes.event_from_annotations(pod, DONE)
    assert event == notes.WrittenEvent(written.event_name, written.event_reason,
                                       written.event_message)
    assert ("Recommended:" in event.message) is (diagnosis.recommendation.alloc_conf is not None)


def test_a_diagnosis_written_the_instant_the_container_finished_is_its_own() -> None:
    pod, _ = _annotated(_diagnosis())
    at_finish = dataclasses.replace(DONE, finished_at=NOW)
    same = dataclasses.replace(pod, terminations=(at_finish,))
    assert notes.event_from_annotations(same, at_finish) is not None
    later = dataclasses.replace(DONE, finished_at=NOW + dt.timedelta(seconds=1))
    after = dataclasses.replace(pod, terminations=(later,))
    assert notes.event_from_annotations(after, later) is None  # an older termination's


@pytest.mark.parametrize(("drop", "extra"), [
    (("diagnosis",), None),
    (("summary",), None),
    (("diagnosed-at",), None),
    ((), {f"{PREFIX}diagnosis-failed": "main/3: timeout: over budget"}),
    ((), {f"{PREFIX}diagnosed-key": "main/2"}),  # this termination is not done
])  # fmt: skip
def test_annotations_that_may_be_another_terminations_give_no_event(
    drop: tuple[str, ...], extra: dict[str, str] | None
) -> None:
    pod, _ = _annotated(_diagnosis(), drop=drop, extra=extra)
    assert notes.event_from_annotations(pod, DONE) is None


def test_only_the_pods_latest_termination_gets_its_event_again() -> None:
    side = Termination(container="side", restart_count=0, reason="Error", exit_code=1,
                       message="", finished_at=FINISHED - dt.timedelta(seconds=5),
                       previous=False)
    pod, _ = _annotated(_diagnosis(), terminations=(side, DONE),
                        extra={f"{PREFIX}diagnosed-key": "main/3,side/0"})
    assert notes.event_from_annotations(pod, DONE) is not None
    assert notes.event_from_annotations(pod, side) is None
    unfinished = dataclasses.replace(DONE, finished_at=None)
    pod, _ = _annotated(_diagnosis(), terminations=(unfinished,))
    assert notes.event_from_annotations(pod, unfinished) is None
