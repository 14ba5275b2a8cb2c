"""The trial of a recommended setting, judged: pure functions over the owner's recorded trial
(`base.trial`) and what one of its pods did (issue 28).

    a diagnosis with a setting, written on the owner   ─► `started`: a new trial (open)
    a next pod of the owner (created after the failure), for the container it was made for:
        without the setting (changed, removed)           ─► not-applied (the trial stays open)
        with it, and it completes or runs past the point
        where the failed attempt ended                   ─► fixed (final)
        with it, and it runs out of memory again         ─► not-fixed (final; never again)
    an OOM's new diagnosis                               ─► `adjusted`: says a setting was
        applied and did not help, and recommends no setting that did not help this owner

Each outcome is counted once per trial (`Trial.counted`); a decided trial ignores later pods
until a new recommendation starts another. No API calls, no clock: the shell (`trials`) reads
the owner and the pod, calls these, and writes what they return.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

from gpu_auditor.base.trial import (
    Outcome,
    Trial,
    entries,
    has_setting,
    rejects,
    render,
    setting_of,
    with_rejected,
)
from gpu_auditor.diagnosis import ALLOC_CONF_ENV, Diagnosis, Recommendation

PAST_MARGIN: Final = 1.1
PAST_EXTRA: Final = 30.0
"""A pod with the setting "runs past the point where the failed attempt ended" once it has run
10% longer than that attempt, and at least 30 s longer: a fragmentation OOM comes back at about
the same step when the setting does not help."""


class Seen(StrEnum):
    """What a pod of the owner was seen doing."""

    STARTED = "started"
    RAN_PAST = "ran-past"
    COMPLETED = "completed"
    OOM = "oom"
    """Ran out of memory (a diagnosis found a CUDA OOM, or the container was OOMKilled)."""


class Carries(StrEnum):
    """Whether the pod's container runs with the trial's setting."""

    WITH = "with"
    WITHOUT = "without"
    UNKNOWN = "unknown"
    """Its setting is not known from the spec (`valueFrom`, envFrom): not judged."""


@dataclass(frozen=True)
class Attempt:
    """One pod of the owner, as far as a trial needs it."""

    ref: str
    """`namespace/name`."""
    uid: str
    created_at: dt.datetime | None
    alloc_conf: str | None
    """The allocator setting the trial's container runs with (None: not set)."""
    known: bool = True
    """False when that setting is not known from the spec."""
    has_container: bool = True
    """False when the pod has no container of the trial's name."""

    def carries(self, setting: str) -> Carries:
        if not self.has_container:
            return Carries.WITHOUT
        if not self.known:
            return Carries.UNKNOWN
        return Carries.WITH if has_setting(self.alloc_conf, setting) else Carries.WITHOUT


@dataclass(frozen=True)
class Judged:
    trial: Trial
    """The trial as it is now to be recorded."""
    counted: Outcome | None = None
    """An outcome decided now and not counted before: count it once."""
    changed: bool = False


def is_next_pod(trial: Trial, attempt: Attempt) -> bool:
    """A pod created after the failure the trial answers (not that pod itself, nor one that
    ran beside it: only a next pod can carry the recommendation)."""
    if attempt.uid and attempt.uid == trial.failed_uid:
        return False
    if trial.failed_at is None or attempt.created_at is None:
        return bool(attempt.uid) and attempt.uid != trial.failed_uid
    return attempt.created_at >= trial.failed_at


def judge(trial: Trial, attempt: Attempt, seen: Seen) -> Judged:
    """What `seen` of `attempt` makes of the trial."""
    if trial.final or not is_next_pod(trial, attempt):
        return Judged(trial)
    carries = attempt.carries(trial.setting)
    if carries is Carries.UNKNOWN:
        return Judged(trial)
    if carries is Carries.WITHOUT:
        if trial.outcome is not None:
            return Judged(trial)
        return _decided(trial, Outcome.NOT_APPLIED, attempt)
    if seen is Seen.STARTED:
        return Judged(trial)
    if seen is Seen.OOM:
        return _decided(with_rejected(trial, trial.setting), Outcome.NOT_FIXED, attempt)
    return _decided(trial, Outcome.FIXED, attempt)


def _decided(trial: Trial, outcome: Outcome, attempt: Attempt) -> Judged:
    new = outcome not in trial.counted
    counted = (*trial.counted, outcome) if new else trial.counted
    return Judged(replace(trial, outcome=outcome, judged_pod=attempt.ref, counted=counted),
                  outcome if new else None, changed=True)


def ran_past_at(trial: Trial, started_at: dt.datetime) -> dt.datetime | None:
    """When a pod with the setting whose container started at `started_at` has run past the
    point where the failed attempt ended; None when that attempt's length is not known."""
    if trial.ran_seconds is None:
        return None
    past = max(trial.ran_seconds * PAST_MARGIN, trial.ran_seconds + PAST_EXTRA)
    return started_at + dt.timedelta(seconds=past)


# -- a new diagnosis ---------------------------------------------------------------------------

def recommended_setting(diagnosis: Diagnosis, current: str | None) -> str:
    """The keys the diagnosis's recommendation sets beyond the job's own setting ("" when it
    recommends none)."""
    value = diagnosis.recommendation.alloc_conf
    return setting_of(value, current) if value else ""


def revised(summary: str, actions: tuple[str, ...], recommended: str | None,
            trial: Trial | None, current: str | None, *, owner: str, not_fixed_by: str = ""
            ) -> tuple[str, tuple[str, ...], str | None]:
    """A diagnosis's summary, actions and recommended value as they are to be written for a
    failure of `owner`'s pod (`adjusted`, for the typed diagnosis; the job path's annotations
    for a distributed job's object)."""
    notes: list[str] = []
    if trial is not None and not_fixed_by:
        summary += f" ({trial.setting} was applied and did not help)"
        notes.append(f"{ALLOC_CONF_ENV} with {trial.setting} was applied to {not_fixed_by} and "
                     f"did not help: it is not recommended again for {owner}")
    setting = setting_of(recommended, current) if recommended else ""
    if trial is not None and recommended and (
            rejects(trial.rejected, setting or recommended)
            or rejects(trial.rejected, render(entries(recommended)))):
        actions = tuple(a for a in actions if f"{ALLOC_CONF_ENV}={recommended}" not in a)
        if not not_fixed_by:
            notes.append(f"{setting or recommended} did not help {owner} before"
                         f"{f' ({trial.judged_pod})' if trial.judged_pod else ''}: not "
                         "recommended again")
        recommended = None
    return summary, tuple(dict.fromkeys((*notes, *actions))), recommended


def adjusted(diagnosis: Diagnosis, trial: Trial | None, current: str | None, *, owner: str,
             not_fixed_by: str = "") -> Diagnosis:
    """The diagnosis to write for a failure of `owner`'s pod: when the trial's setting was just
    found not to help (`not_fixed_by`: the pod that ran out of memory with it), the summary and
    the first action say so; a recommended setting that did not help this owner before is left
    out, with an action that says why."""
    rec = diagnosis.recommendation
    summary, actions, value = revised(diagnosis.summary, rec.actions, rec.alloc_conf, trial,
                                      current, owner=owner, not_fixed_by=not_fixed_by)
    if (summary, actions, value) == (diagnosis.summary, rec.actions, rec.alloc_conf):
        return diagnosis
    return replace(diagnosis, summary=summary, recommendation=Recommendation(
        rec.env if value else None, value, actions))


def started(diagnosis: Diagnosis, previous: Trial | None, *, container: str, current: str | None,
            failed_pod: str, failed_uid: str, failed_at: dt.datetime | None,
            ran_seconds: float | None) -> Trial | None:
    """The trial to record after a diagnosis (already `adjusted`) of a failure: a new one for
    the setting it recommends, the open one refreshed when it recommends the same setting again
    (its not-applied kept, counted once), the previous one as it was when it recommends none
    (None when there was none)."""
    return trial_for(diagnosis.recommendation.alloc_conf, str(diagnosis.kind),
                     diagnosis.torch_version_hint, previous, container=container,
                     current=current, failed_pod=failed_pod, failed_uid=failed_uid,
                     failed_at=failed_at, ran_seconds=ran_seconds)


def trial_for(value: str | None, kind: str, release: str | None, previous: Trial | None, *,
              container: str, current: str | None, failed_pod: str, failed_uid: str,
              failed_at: dt.datetime | None, ran_seconds: float | None) -> Trial | None:
    """`started`, from the recommended value, the diagnosis kind and release as written."""
    setting = setting_of(value, current) if value else ""
    if not setting or value is None:
        return previous
    rejected = previous.rejected if previous is not None else ()
    fresh = Trial(setting=setting, value=value, kind=kind, container=container,
                  failed_pod=failed_pod, failed_uid=failed_uid, failed_at=failed_at,
                  ran_seconds=ran_seconds, release=release, rejected=rejected)
    if previous is not None and previous.open and previous.setting == setting:
        return replace(fresh, outcome=previous.outcome, judged_pod=previous.judged_pod,
                       counted=previous.counted)
    return fresh


def ran_seconds(started_at: dt.datetime | None, finished_at: dt.datetime | None) -> float | None:
    """How long a run lasted, from its container's timestamps."""
    if started_at is None or finished_at is None or finished_at < started_at:
        return None
    return (finished_at - started_at).total_seconds()
