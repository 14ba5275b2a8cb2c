"""A recommendation's trial judged from what its owner's next pods did: fixed, not-fixed (and
never again), not-applied; each outcome counted once; the new diagnosis after a setting that did
not help says so and recommends nothing."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gpu_auditor.base.trial import Outcome, Trial
from gpu_auditor.controller.outcome import (
    Attempt,
    Seen,
    adjusted,
    is_next_pod,
    judge,
    ran_past_at,
    ran_seconds,
    started,
)
from gpu_auditor.diagnosis import diagnose

pytestmark = pytest.mark.unit

ES = "expandable_segments:True"
FAILED = dt.datetime(2026, 5, 1, 10, 0, 0, tzinfo=dt.UTC)
LOGS = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "oom" / "corpus"
FRAG = (LOGS / "frag_pinned_segments.log").read_text()


def trial(**fields: object) -> Trial:
    base: dict[str, object] = dict(setting=ES, value=ES, kind="fragmentation", container="main",
                                   failed_pod="ml/train-a", failed_uid="uid-a", failed_at=FAILED,
                                   ran_seconds=60.0, release="2.11")
    base.update(fields)
    return Trial(**base)  # type: ignore[arg-type]


def retry(conf: str | None = ES, *, uid: str = "uid-b", known: bool = True,
          created: dt.datetime = FAILED + dt.timedelta(seconds=10)) -> Attempt:
    return Attempt("ml/train-b", uid, created, conf, known=known)


# -- judging -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("seen", "outcome"), [(Seen.COMPLETED, Outcome.FIXED),
                                               (Seen.RAN_PAST, Outcome.FIXED),
                                               (Seen.OOM, Outcome.NOT_FIXED)])
def test_a_next_pod_with_the_setting_decides_the_trial(seen: Seen, outcome: Outcome) -> None:
    judged = judge(trial(), retry(f"garbage_collection_threshold:0.6,{ES}"), seen)
    assert judged.trial.outcome is outcome and judged.counted is outcome and judged.changed
    assert judged.trial.judged_pod == "ml/train-b"
    assert (ES in judged.trial.rejected) is (outcome is Outcome.NOT_FIXED)


def test_a_pod_with_the_setting_that_only_started_decides_nothing_yet() -> None:
    assert judge(trial(), retry(), Seen.STARTED).changed is False


@pytest.mark.parametrize("conf", [None, "expandable_segments:False", "max_split_size_mb:256"])
def test_a_next_pod_without_the_setting_is_not_applied_once_and_the_trial_stays_open(
        conf: str | None) -> None:
    judged = judge(trial(), retry(conf), Seen.STARTED)
    assert judged.trial.outcome is Outcome.NOT_APPLIED and judged.counted is Outcome.NOT_APPLIED
    assert judged.trial.open
    again = judge(judged.trial, retry(conf, uid="uid-c"), Seen.OOM)
    assert again.changed is False and again.counted is None
    fixed = judge(judged.trial, retry(ES, uid="uid-d"), Seen.COMPLETED)
    assert fixed.trial.outcome is Outcome.FIXED and fixed.counted is Outcome.FIXED
    assert fixed.trial.counted == (Outcome.NOT_APPLIED, Outcome.FIXED)


def test_a_decided_trial_ignores_later_pods_and_counts_nothing_twice() -> None:
    fixed = judge(trial(), retry(), Seen.COMPLETED).trial
    assert judge(fixed, retry(uid="uid-c"), Seen.OOM).changed is False
    assert judge(fixed, retry(None, uid="uid-c"), Seen.STARTED).changed is False


def test_the_failed_pod_itself_and_pods_older_than_the_failure_are_not_next_pods() -> None:
    assert not is_next_pod(trial(), retry(uid="uid-a"))
    older = retry(created=FAILED - dt.timedelta(minutes=5), uid="uid-old")
    assert not is_next_pod(trial(), older)
    assert judge(trial(), older, Seen.COMPLETED).changed is False
    assert is_next_pod(trial(failed_at=None), retry(uid="uid-b"))


def test_a_setting_unknown_from_the_spec_is_not_judged() -> None:
    assert judge(trial(), retry(None, known=False), Seen.OOM).changed is False


def test_a_pod_without_the_trials_container_did_not_carry_the_setting() -> None:
    attempt = Attempt("ml/p", "uid-b", FAILED + dt.timedelta(seconds=1), ES, has_container=False)
    assert judge(trial(), attempt, Seen.COMPLETED).trial.outcome is Outcome.NOT_APPLIED


def test_running_past_the_failed_attempt_needs_ten_percent_and_30_seconds_more() -> None:
    start = FAILED + dt.timedelta(minutes=1)
    assert ran_past_at(trial(ran_seconds=60.0), start) == start + dt.timedelta(seconds=90)
    assert ran_past_at(trial(ran_seconds=3600.0), start) == start + dt.timedelta(seconds=3960)
    assert ran_past_at(trial(ran_seconds=None), start) is None
    assert ran_seconds(FAILED, FAILED + dt.timedelta(seconds=5)) == 5.0
    assert ran_seconds(FAILED, None) is None and ran_seconds(FAILED, FAILED - dt.timedelta(1)) \
        is None


# -- the new diagnosis -------------------------------------------------------------------------

def test_a_fragmentation_diagnosis_starts_a_trial_of_the_keys_it_adds() -> None:
    diagnosis = diagnose(FRAG, torch_version="2.11",
                         alloc_conf="garbage_collection_threshold:0.6")
    t = started(diagnosis, None, container="main", current="garbage_collection_threshold:0.6",
                failed_pod="ml/train-a", failed_uid="uid-a", failed_at=FAILED, ran_seconds=61.0)
    assert t is not None and t.setting == ES and t.kind == "fragmentation"
    assert t.value == f"garbage_collection_threshold:0.6,{ES}" and t.release == "2.11"
    assert t.outcome is None and t.open


def test_the_same_setting_again_keeps_the_open_trials_not_applied_and_a_new_one_resets() -> None:
    diagnosis = diagnose(FRAG, torch_version="2.11")
    open_ = trial(outcome=Outcome.NOT_APPLIED, counted=(Outcome.NOT_APPLIED,), rejected=("x",))
    again = started(diagnosis, open_, container="main", current=None, failed_pod="ml/train-b",
                    failed_uid="uid-b", failed_at=FAILED, ran_seconds=30.0)
    assert again is not None and again.failed_pod == "ml/train-b"
    assert again.outcome is Outcome.NOT_APPLIED and again.counted == (Outcome.NOT_APPLIED,)
    fixed = trial(outcome=Outcome.FIXED, counted=(Outcome.FIXED,), rejected=("y",))
    fresh = started(diagnosis, fixed, container="main", current=None, failed_pod="ml/train-c",
                    failed_uid="uid-c", failed_at=FAILED, ran_seconds=30.0)
    assert fresh is not None and fresh.outcome is None and fresh.counted == ()
    assert fresh.rejected == ("y",)


def test_a_diagnosis_without_a_setting_keeps_the_trial_as_it_was() -> None:
    capacity = diagnose((LOGS / "capacity_batch_too_big_fullgpu.log").read_text())
    assert capacity.recommendation.alloc_conf is None
    t = trial()
    assert started(capacity, t, container="main", current=None, failed_pod="p",
                   failed_uid="u", failed_at=None, ran_seconds=None) is t


def test_after_not_fixed_the_diagnosis_says_so_and_recommends_nothing() -> None:
    diagnosis = diagnose(FRAG, torch_version="2.11", alloc_conf=ES)
    judged = judge(trial(), retry(), Seen.OOM)
    out = adjusted(diagnosis, judged.trial, ES, owner="Job train", not_fixed_by="ml/train-b")
    assert out.recommendation.alloc_conf is None
    assert out.summary.endswith(f"({ES} was applied and did not help)")
    assert out.recommendation.actions[0] == (
        f"PYTORCH_CUDA_ALLOC_CONF with {ES} was applied to ml/train-b and did not help: it is "
        "not recommended again for Job train")


def test_a_setting_that_did_not_help_is_never_recommended_again_for_that_owner() -> None:
    diagnosis = diagnose(FRAG, torch_version="2.11")  # a later pod without the setting
    assert diagnosis.recommendation.alloc_conf == ES
    done = trial(outcome=Outcome.NOT_FIXED, rejected=(ES,), judged_pod="ml/train-b")
    out = adjusted(diagnosis, done, None, owner="Job train")
    assert out.recommendation.alloc_conf is None and out.recommendation.env is None
    assert out.recommendation.actions[0] == (f"{ES} did not help Job train before "
                                             "(ml/train-b): not recommended again")
    assert not any("PYTORCH_CUDA_ALLOC_CONF=" in a for a in out.recommendation.actions)
    assert started(out, done, container="main", current=None, failed_pod="p", failed_uid="u",
                   failed_at=None, ran_seconds=None) is done


def test_a_diagnosis_with_nothing_to_say_is_returned_as_it_was() -> None:
    diagnosis = diagnose(FRAG, torch_version="2.11")
    assert adjusted(diagnosis, None, None, owner="Job t") is diagnosis
    assert adjusted(diagnosis, trial(), None, owner="Job t") is diagnosis
