"""Boundary tables for what the operator writes (issue 18): each limit from both sides, with
literal numbers, never the module's constants.

Survivors these kill: no bound on the diagnosed keys kept (and the floor they fold into), values
never cut, a stale `recommended-alloc-conf` not cleared, an Event name that ignores the
termination key (a second crash's Event would be a 409 and lost), the pod view's ignore label
and key reading.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time

import pytest

from gpu_auditor.base.contract import Annotation, FindingKind
from gpu_auditor.base.nodereport import Finding
from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller.pod import DiagnosedKeys, Pod, Termination, diagnosed_keys, parse_pod
from gpu_auditor.diagnosis import Diagnosis, Figures, Recommendation

pytestmark = pytest.mark.unit

PREFIX = "gpu-auditor.io/"
NOW = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)


def termination(container: str = "main", restart: int = 3, reason: str = "Error") -> Termination:
    return Termination(container=container, restart_count=restart, reason=reason, exit_code=1,
                       message="", finished_at=None, previous=False)  # fmt: skip


def pod(annotations: dict[str, str] | None = None, *, uid: str = "uid-1",
        name: str = "train-x") -> Pod:  # fmt: skip
    return parse_pod({"metadata": {"namespace": "ml", "name": name, "uid": uid,
                                   "annotations": annotations or {}}}, PREFIX)  # fmt: skip


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


# -- diagnosed-key: per container its highest restart count, within 1,280 bytes ----------------


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


def test_the_old_formats_16_keys_read_as_the_highest_per_container() -> None:
    old = ",".join(f"main/{i}" for i in range(16))  # what the previous release wrote
    assert diagnosed_keys(old) == DiagnosedKeys({"main": 15})
    p = pod({f"{PREFIX}diagnosed-key": old})
    assert p.diagnosed_keys.done(termination(restart=15))
    assert p.diagnosed_keys.done(termination(restart=0))
    assert not p.diagnosed_keys.done(termination(restart=16))


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
    ("record", "restart", "container", "done"),
    [
        (DiagnosedKeys({"main": 3}), 3, "main", True),
        (DiagnosedKeys({"main": 3}), 4, "main", False),
        (DiagnosedKeys({"main": 3}), 0, "side", False),
        (DiagnosedKeys({"main": 0}), 0, "main", True),
        (DiagnosedKeys({}, 2), 2, "side", True),
        (DiagnosedKeys({}, 2), 3, "side", False),
        (DiagnosedKeys({"main": 1}, 5), 4, "main", True),
        (DiagnosedKeys({"main": 5}, 1), 4, "main", True),
        (DiagnosedKeys({}, 0), 0, "main", True),
        (DiagnosedKeys(), 0, "main", False),
    ],
    ids=[f"case{i}" for i in range(10)],  # plain ids: mutmut runs tests by id
)
def test_a_termination_is_done_at_or_below_its_containers_count_or_the_floor(
    record: DiagnosedKeys, restart: int, container: str, done: bool
) -> None:
    assert record.done(termination(container=container, restart=restart)) is done


@pytest.mark.parametrize(
    ("one", "other", "both"),
    [
        (DiagnosedKeys({"main": 1}), DiagnosedKeys({"main": 3, "side": 0}, 2),
         DiagnosedKeys({"main": 3, "side": 0}, 2)),
        (DiagnosedKeys({"main": 3, "side": 0}, 2), DiagnosedKeys({"main": 1}),
         DiagnosedKeys({"main": 3, "side": 0}, 2)),
        (DiagnosedKeys({}, 4), DiagnosedKeys({}, 2), DiagnosedKeys({}, 4)),
        (DiagnosedKeys({}, 2), DiagnosedKeys({}, 4), DiagnosedKeys({}, 4)),
        (DiagnosedKeys(), DiagnosedKeys(), DiagnosedKeys()),
    ],
    ids=[f"case{i}" for i in range(5)],
)
def test_merged_records_are_done_where_either_is(
    one: DiagnosedKeys, other: DiagnosedKeys, both: DiagnosedKeys
) -> None:
    assert one.merged(other) == both


# -- values cut at their limits ------------------------------------------------------------------


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


# -- a stale recommendation or failure is cleared, nothing else ----------------------------------


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


# -- Event names: one per (pod UID, termination, reason) -------------------------------------------


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


# -- sharing annotations ---------------------------------------------------------------------------


def finding(*pods: str, kind: FindingKind = FindingKind.UNINTENDED_SHARING,
            gpu: str = "GPU-a") -> Finding:  # fmt: skip
    return Finding(kind=kind, gpu_uuid=gpu, pods=pods, message="m")


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


# -- the pod view: ignore label, diagnosed keys ----------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "ignored"),
    [
        ({"gpu-auditor.io/ignore": "true"}, True),
        ({"gpu-auditor.io/ignore": "True"}, False),
        ({"gpu-auditor.io/ignore": "false"}, False),
        ({"gpu-auditor.io/ignore": "yes"}, False),
        ({"other.io/ignore": "true"}, False),
        ({}, False),
        ("gpu-auditor.io/ignore=true", False),  # not a mapping
    ],
)
def test_only_the_ignore_label_set_to_true_ignores_a_pod(labels: object, ignored: bool) -> None:
    body = {"metadata": {"namespace": "ml", "name": "p", "uid": "u", "labels": labels}}
    assert parse_pod(body, PREFIX).ignored is ignored


@pytest.mark.parametrize(
    ("raw", "keys"),
    [
        ("main/0", ["main/0"]),
        ("main/0,side/12", ["main/0", "side/12"]),
        ("a" * 63 + "/1", ["a" * 63 + "/1"]),  # a 63-character container name
        ("a" * 64 + "/1", []),
        ("main/" + "9" * 10, ["main/" + "9" * 10]),
        ("main/" + "9" * 11, []),
        ("Main/0", []),
        ("-main/0", []),
        ("main-/0", []),
        ("main/", []),
        ("main/0 ", []),
        ("", []),
        (None, []),
        (7, []),
        ("main/1,main/0", ["main/1"]),  # the old format: several keys per container
        ("main/0,main/1", ["main/1"]),
        ("*/3", ["*/3"]),
        ("*/1,*/4", ["*/4"]),
        ("*/4,*/1", ["*/4"]),
        ("side/3,*/2,main/1", ["main/1", "side/3", "*/2"]),
        ("**/1", []),
        ("*a/1", []),
        ("*/", []),
        ("main/00", ["main/0"]),
        ("Main/0,main/2", ["main/2"]),  # junk before a key: the key is still read
    ],
    ids=[f"case{i}" for i in range(25)],  # plain ids: mutmut runs tests by id
)
def test_diagnosed_keys_are_read_when_well_formed(raw: object, keys: list[str]) -> None:
    assert diagnosed_keys(raw).keys() == keys  # type: ignore[arg-type]


def test_diagnosed_keys_are_read_from_the_first_5120_characters() -> None:
    within = ",".join(["x"] * 2557 + ["main/7"])  # ends at character 5,120
    assert len(within) == 5120 and diagnosed_keys(within).keys() == ["main/7"]
    beyond = "," + within
    assert diagnosed_keys(beyond).keys() == []


def test_the_pod_view_reads_only_our_prefix() -> None:
    p = pod({f"{PREFIX}diagnosed-key": "main/0", "other.io/diagnosed-key": "main/1",
             f"{PREFIX}recommended-alloc-conf": "expandable_segments:True"})  # fmt: skip
    assert p.diagnosed_keys == DiagnosedKeys({"main": 0})
    assert p.our_annotations == {Annotation.DIAGNOSED_KEY, Annotation.RECOMMENDED_ALLOC_CONF}
    assert dict(p.annotations) == {"diagnosed-key": "main/0",
                                   "recommended-alloc-conf": "expandable_segments:True"}


# -- what mutation testing found loose (scripts/mutation.py --modules controller.annotations) ----


def refs(*lengths: int) -> list[str]:
    """Pod refs of the given lengths, sorted in the order given (a, b, c, ... after "ns/")."""
    return [f"ns/{chr(97 + i)}{'p' * (n - 4)}" for i, n in enumerate(lengths)]


def shared_with(others: list[str]) -> str:
    found = notes.sharing_annotations(PREFIX, [finding("ml/me", *others)], "ml/me")
    return found[f"{PREFIX}gpu-shared-with"]


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
