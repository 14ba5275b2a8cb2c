"""The trials of recommended settings, followed (issue 28): the shell between the operator's pod
events, the owners' recorded trials (`base.trial`) and their judgement (`outcome`).

    an OOM of a pod with an owner (`oom.OomPath.write`) ─► `prepare`: the owner read and
        verified before the pod is written, when a trial may be concerned; the owner's trial
        judged (not-fixed, not-applied), the diagnosis adjusted (says the setting did not help,
        never recommends it again), a new trial started ─► the pod's annotations ─► `settle`:
        the owner's annotations with the trial, the outcome counted once, its Event
    another event of a pod (`follows`, a cheap filter in kopf's event loop: a pod the webhook
        put a setting into, or a pod of an owner known to have a trial) ─► `follow`: its
        RecommendationApplied Event; started (not-applied, or a timer for running past the
        failed attempt), completed (fixed)

State lives on the objects: the trial on the owner, `recommendation-outcome` on the pod that
decided it. What this process keeps (which owners have a trial, which pod events it handled) is
a bounded cache, rebuilt after a restart from kopf's fresh listing: a failed pod that carries
`recommended-alloc-conf`, or a pod that carries `recommendation-applied`, names an owner to
look at. A write to an owner is a read, a judgement and a patch under that owner's lock, so two
pods ending at once count one outcome.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import zlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.base import names
from gpu_auditor.base.contract import Annotation, EventReason
from gpu_auditor.base.errors import TRANSIENT, APIError, APINotFoundError
from gpu_auditor.base.timestamps import parse_time
from gpu_auditor.base.trial import (
    Outcome,
    Trial,
    parse_trial,
    trial_annotations,
)
from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller import bounded, jobowners, metrics, owners
from gpu_auditor.controller.jobmember import member_of
from gpu_auditor.controller.kube import WORKLOADS, KubeApi, ObjectRef
from gpu_auditor.controller.lru import Lru
from gpu_auditor.controller.outcome import (
    Attempt,
    Carries,
    Judged,
    Seen,
    adjusted,
    judge,
    ran_past_at,
    ran_seconds,
    revised,
    started,
    trial_for,
)
from gpu_auditor.controller.pod import (
    Container,
    OwnerReference,
    Pod,
    Termination,
    controller_reference,
    current_alloc_conf,
    parse_pod,
)
from gpu_auditor.controller.retry import RETRY_DELAYS, Schedule
from gpu_auditor.diagnosis import KINDS, Diagnosis

log = logging.getLogger("gpu_auditor.operator")

MAX_OWNERS = 10_000
"""Owners this process remembers as having a trial (a cache: the trial is on the owner)."""
MAX_SETTINGS = 32
"""Values of the metric's `setting` label at most; past it, `other` (an owner's annotations are
writable by its editors, and a label value per forged setting would grow the series)."""
STRIPES = 64
RETRY_DELAY = 30.0
PRECREATED = ("fragmentation", "expandable_segments:True")
"""The (kind, setting) whose outcome series exist from the start at 0: `increase()` misses the
first count of a series that is born at 1 (docs/metrics.md)."""


OwnerKey = tuple[str, str, str]
"""(namespace, how, what): ("ml", "uid", <owner UID>), or ("ml", "Deployment", <name>) for the
pods of a Deployment's ReplicaSets, ("ml", "JobSet", <name>) for a JobSet's: their direct
owners' UIDs change with each rollout or restart."""


@dataclass(frozen=True)
class Target:
    """The verified owner that carries a recommendation: a workload (a pod's owner,
    `owners`) or a distributed job's object (`jobowners`)."""

    kind: str
    api_version: str
    name: str
    uid: str
    annotations: Mapping[str, str]
    job_kind: jk.JobKind | None = None
    """Set for a distributed job's object (written with `patch_object`)."""

    @property
    def shown(self) -> str:
        return f"{self.kind} {self.name}"


def workload_target(owner: owners.Owner, obj: Mapping[str, Any]) -> Target:
    return Target(owner.kind, WORKLOADS[owner.kind].api_version, owner.name, owner.uid,
                  _annotations(obj))


def job_target(job: jobowners.VerifiedJob) -> Target:
    return Target(job.kind.kind, job.kind.api_version, job.name, job.uid, job.annotations,
                  job.kind)


def owner_key(namespace: str, ref: OwnerReference | None, labels: Mapping[str, Any]
              ) -> OwnerKey | None:
    """Which owner a pod's controller reference points at, as far as its own fields tell (no
    API call: a cache key, verified before any use)."""
    jobset = labels.get(jk.JOBSET_NAME)
    if isinstance(jobset, str) and jobset:  # its child Jobs are new with each restart
        return (namespace, "JobSet", jobset)
    if ref is None or not isinstance(ref.uid, str) or not isinstance(ref.name, str):
        return None
    hashed = labels.get("pod-template-hash")
    if ref.kind == "ReplicaSet" and isinstance(hashed, str) and hashed and \
            ref.name.endswith(f"-{hashed}"):
        return (namespace, "Deployment", ref.name[: -len(hashed) - 1])
    return (namespace, "uid", ref.uid)


@dataclass
class Prepared:
    """An OOM's diagnosis readied against its owner's trial (`Trials.prepare`)."""

    diagnosis: Diagnosis
    """The diagnosis to write (adjusted)."""
    owner: Target | None
    """The verified owner; None when the pod has none, or its chain did not verify."""
    trial: Trial | None = None
    """The trial to record on the owner (None: none)."""
    judged: Judged | None = None
    key: OwnerKey | None = None
    pod: str = ""
    release: Callable[[], None] = lambda: None
    """Unlocks the owner (`OomPath.write` calls it when the write is over)."""


@dataclass(frozen=True)
class Facts:
    """What following a pod needs of its body, read once."""

    namespace: str
    name: str
    uid: str
    created_at: dt.datetime | None
    labels: Mapping[str, str]
    controller: OwnerReference | None
    containers: Mapping[str, Mapping[str, Any]]
    statuses: Mapping[str, Mapping[str, Any]]
    applied: str
    seen: Seen | None
    pod: Pod
    """The pod as the job path's readers take it (labels, controller, completion index)."""

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


class Trials:
    """Follows the trials of recommended settings on their owners' pods."""

    def __init__(self, kube: KubeApi, schedule: Schedule, *, prefix: str,
                 switches: frozenset[str] = frozenset(),
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self.kube = kube
        self.schedule = schedule
        self.prefix = prefix
        self.switches = switches
        """The distributed jobs' kinds whose pods the job path groups (`--job-kinds`)."""
        self.clock = clock
        self.index = Lru(MAX_OWNERS)
        """OwnerKey -> the creation time after which its pods are next pods (None: any)."""
        self.handled = Lru(50_000)
        """(pod UID, Seen) already followed."""
        self.evented = Lru(50_000)
        """Pod UIDs whose RecommendationApplied Event was posted."""
        self.settings: set[str] = set()
        self._settings_lock = threading.Lock()
        self._stripes = [threading.RLock() for _ in range(STRIPES)]
        for outcome in Outcome:
            metrics.RECOMMENDATION_OUTCOMES.labels(*PRECREATED, outcome)

    def _lock(self, key: Hashable) -> threading.RLock:
        return self._stripes[zlib.crc32(repr(key).encode()) % STRIPES]

    # -- the OOM path ------------------------------------------------------------------------

    def concerns(self, pod: Pod, container: Container, diagnosis: Diagnosis) -> bool:
        """Whether a diagnosis of this pod may touch a trial (so its owner is read first): it
        recommends a setting, the container runs with one, or its owner is known to have one."""
        if pod.controller is None:
            return False
        return bool(diagnosis.recommendation.alloc_conf or container.alloc_conf.value
                    or container.alloc_conf.ignored
                    or self.index.get(owner_key(pod.namespace, pod.controller, pod.labels))
                    is not None)

    def prepare(self, pod: Pod, t: Termination, container: Container, diagnosis: Diagnosis
                ) -> Prepared | None:
        """The owner read and verified, its trial judged by this OOM, the diagnosis adjusted
        and the next trial made; the owner stays locked until `Prepared.release`. None when no
        trial is concerned (the OOM path annotates the owner as before). Raises the API's
        errors (the termination is then tried again)."""
        if not self.concerns(pod, container, diagnosis):
            return None
        key = owner_key(pod.namespace, pod.controller, pod.labels)
        lock = self._lock(key)
        lock.acquire()
        try:
            found = owners.verified_owner_read(self.kube, pod.namespace, pod.controller,
                                               pod.labels)
        except owners.OwnerRefused as exc:
            metrics.OWNER_WRITES_REFUSED.labels(exc.reason).inc()
            log.warning("owner of %s not annotated: %s", pod.ref, exc)
            lock.release()
            return Prepared(diagnosis, None)
        except TRANSIENT:
            lock.release()
            raise  # the API is away: the termination is tried again, the pod with it
        except Exception as exc:  # gone, forbidden: the pod is written all the same
            log.warning("could not read the owner of %s: %s", pod.ref, exc)
            lock.release()
            return Prepared(diagnosis, None)
        except BaseException:
            lock.release()
            raise
        if found is None:
            lock.release()
            return Prepared(diagnosis, None)
        try:
            return self._prepared(pod, t, container, diagnosis, workload_target(*found), key,
                                  lock.release)
        except BaseException:
            lock.release()
            raise

    def _prepared(self, pod: Pod, t: Termination, container: Container, diagnosis: Diagnosis,
                  owner: Target, key: OwnerKey | None, release: Callable[[], None]
                  ) -> Prepared:
        trial = parse_trial(owner.annotations, self.prefix)
        current = container.alloc_conf.value
        attempt = Attempt(pod.ref, pod.uid, pod.created_at, current,
                          known=container.alloc_conf.ignored is None)
        judged = judge(trial, attempt, Seen.OOM) if trial is not None else None
        after = judged.trial if judged is not None else trial
        not_fixed = judged is not None and judged.changed and \
            judged.trial.outcome is Outcome.NOT_FIXED
        diagnosis = adjusted(diagnosis, after, current, owner=owner.shown,
                             not_fixed_by=pod.ref if not_fixed else "")
        next_trial = started(diagnosis, after, container=t.container, current=current,
                             failed_pod=pod.ref, failed_uid=pod.uid,
                             failed_at=t.finished_at or pod.created_at,
                             ran_seconds=ran_seconds(t.started_at, t.finished_at))
        return Prepared(diagnosis, owner, next_trial, judged, key, pod.ref, release)

    def settle(self, prepared: Prepared, owner_annotations: Mapping[str, str | None],
               namespace: str) -> None:
        """Write the owner's annotations with the trial (the pod's are written), count a
        decided outcome once, post its Event. Never raises: the pod's annotation is written,
        the owner is a bonus (a failure is logged)."""
        owner = prepared.owner
        if owner is None:
            return
        patch = dict(owner_annotations)
        if prepared.trial is not None:
            patch.update(trial_annotations(prepared.trial, self.prefix))
        try:
            self._write(owner, namespace, patch)
        except Exception as exc:
            log.warning("could not annotate %s %s/%s: %s", owner.kind, namespace, owner.name,
                        exc)
            return
        self._remember(prepared.key, prepared.trial)
        if prepared.judged is not None:
            self._decided(namespace, owner, prepared.judged)

    # -- other pod events ----------------------------------------------------------------------

    def follows(self, body: Mapping[str, Any]) -> bool:
        """kopf's cheap filter (no API call): a next pod of an owner with a trial, or one the
        webhook put a setting into, in a state not handled yet. A failed pod that carries our
        recommendation names its owner as one with a trial (after a restart)."""
        meta = _map(body.get("metadata"))
        found = _map(meta.get("annotations"))
        if f"{self.prefix}{Annotation.RECOMMENDATION_OUTCOME}" in found:
            return False  # it decided a trial
        labels = _map(meta.get("labels"))
        key = owner_key(str(meta.get("namespace") or ""),
                        controller_reference(meta.get("ownerReferences")), labels)
        if f"{self.prefix}{Annotation.RECOMMENDED_ALLOC_CONF}" in found:
            if key is not None and self.index.get(key) is None:
                self.index.add(key, parse_time(meta.get("creationTimestamp")) or _EPOCH)
            return False  # the failed pod itself: the OOM path's
        seen = _seen(body)
        if seen is None or self.handled.get((meta.get("uid"), seen)) is not None:
            return False
        if f"{self.prefix}{Annotation.RECOMMENDATION_APPLIED}" in found:
            return True
        after = self.index.get(key) if key is not None else None
        created = parse_time(meta.get("creationTimestamp"))
        return after is not None and (created is None or created >= after)

    def follow(self, body: Mapping[str, Any]) -> None:
        """Judge a followed pod's state against its owner's trial. Never raises (an API error
        is tried again later)."""
        facts = _facts(body, self.prefix)
        if facts.seen is None:
            return
        try:
            if facts.applied:
                self._applied_event(facts)
            self._judge(facts, facts.seen)
        except APINotFoundError:
            pass
        except APIError as exc:
            log.warning("trial of %s: %s; trying again later", facts.ref, exc)
            self.schedule(RETRY_DELAY, lambda: self._look_again(facts.namespace, facts.name))
            return
        except Exception:
            log.exception("trial of %s: not followed", facts.ref)
        self.handled.add((facts.uid, facts.seen))

    def _judge(self, facts: Facts, seen: Seen) -> None:
        key = owner_key(facts.namespace, facts.controller, facts.labels)
        with self._lock(key):
            try:
                owner = self._target(facts)
            except owners.OwnerRefused as exc:
                log.info("trial of %s not followed: %s", facts.ref, exc)
                return
            trial = parse_trial(owner.annotations, self.prefix) if owner else None
            if owner is None or trial is None:
                if key is not None:
                    self.index.pop(key)
                return
            judged = judge(trial, _attempt(facts, trial), seen)
            if judged.changed:
                self._write(owner, facts.namespace,
                            trial_annotations(judged.trial, self.prefix))
                self._remember(key, judged.trial)
                self._decided(facts.namespace, owner, judged)
                if judged.trial.final:
                    self._mark_judged(facts, str(judged.trial.outcome))
                    return
            if seen is Seen.STARTED and judged.trial.open:
                self._watch_run(facts, judged.trial)

    def _mark_judged(self, facts: Facts, outcome: str, attempt: int = 0) -> None:
        """Say the outcome on the pod that decided it. The owner already says it, and the pod
        is no longer followed (its owner's trial is final), so a refused write is tried again
        on its own, after `RETRY_DELAYS`, until they run out."""
        try:
            self.kube.patch_pod_annotations(
                facts.namespace, facts.name,
                {f"{self.prefix}{Annotation.RECOMMENDATION_OUTCOME}": outcome}, uid=facts.uid)
        except APINotFoundError:
            return
        except APIError as exc:
            if attempt >= len(RETRY_DELAYS):
                log.warning("trial of %s: outcome not written on the pod: %s", facts.ref, exc)
                return
            log.info("trial of %s: outcome on the pod: %s; trying again later", facts.ref, exc)
            self.schedule(RETRY_DELAYS[attempt],
                          lambda: self._mark_judged(facts, outcome, attempt + 1))

    def _watch_run(self, facts: Facts, trial: Trial) -> None:
        """A pod with the setting has started: look again when it has run past the point where
        the failed attempt ended."""
        if _attempt(facts, trial).carries(trial.setting) is not Carries.WITH:
            return
        state = _map(_map(facts.statuses.get(trial.container)).get("state"))
        started_at = parse_time(_map(state.get("running")).get("startedAt"))
        if started_at is None:
            return
        at = ran_past_at(trial, started_at)
        if at is None:
            return
        since = started_at
        delay = max((at - self.clock()).total_seconds(), 0.0)
        self.schedule(delay, lambda: self._ran_past(facts, trial.container, since))

    def _ran_past(self, facts: Facts, container: str, started_at: dt.datetime) -> None:
        try:
            body = self.kube.read_pod(facts.namespace, facts.name)
        except (APIError, names.InvalidName) as exc:
            log.info("trial of %s: %s", facts.ref, exc)
            return
        now = _facts(body, self.prefix)
        running = _map(_map(now.statuses.get(container)).get("state")).get("running")
        if now.uid != facts.uid or not isinstance(running, Mapping) or \
                parse_time(running.get("startedAt")) != started_at:
            return  # gone, or restarted meanwhile (a failure: the OOM path's)
        try:
            self._judge(now, Seen.RAN_PAST)
        except APIError as exc:
            log.warning("trial of %s: %s", facts.ref, exc)

    def _look_again(self, namespace: str, name: str) -> None:
        try:
            body = self.kube.read_pod(namespace, name)
        except (APIError, names.InvalidName) as exc:
            log.info("trial of %s/%s: %s", namespace, name, exc)
            return
        if self.follows(body):
            self.follow(body)

    def _target(self, facts: Facts) -> Target | None:
        """The verified owner of a followed pod that may carry a trial: its distributed job's
        object when the job path groups its kind, else its workload. Raises OwnerRefused, or
        the API's errors."""
        pod = facts.pod
        member = member_of(pod, self.switches) if self.switches else None
        if member is not None:
            return job_target(jobowners.verify(self.kube, pod, member, self.switches))
        found = owners.verified_owner_read(self.kube, facts.namespace, facts.controller,
                                           facts.labels)
        return workload_target(*found) if found is not None else None

    # -- the job path ----------------------------------------------------------------------------

    def for_job(self, namespace: str, job: jobowners.VerifiedJob, pod: Pod | None,
                t: Termination | None, wanted: Mapping[str, str | None]
                ) -> tuple[dict[str, str | None], Callable[[], None]]:
        """A distributed job's annotations (`jobnotes.job_annotations`) with its trial: the
        root-cause pod's OOM judged against the job's recorded trial (not-fixed when it ran
        with the setting), a setting that did not help left out and said so, the next trial
        started; and what to do once they are written (count, Event, remember)."""
        if pod is None or t is None:  # a root cause remembered after a restart: done before
            return dict(wanted), lambda: None
        try:
            return self._for_job(namespace, job, pod, t, wanted)
        except Exception:  # the job's root cause is written all the same, without its trial
            log.exception("%s %s/%s: trial not recorded", job.kind.kind, namespace, job.name)
            return dict(wanted), lambda: None

    def _for_job(self, namespace: str, job: jobowners.VerifiedJob, pod: Pod, t: Termination,
                 wanted: Mapping[str, str | None]
                 ) -> tuple[dict[str, str | None], Callable[[], None]]:
        out = dict(wanted)
        target = job_target(job)
        container = next((c for c in pod.containers if c.name == t.container), None)
        conf = container.alloc_conf if container is not None else None
        current = conf.value if conf is not None else None
        trial = parse_trial(job.annotations, self.prefix)
        attempt = Attempt(pod.ref, pod.uid, pod.created_at, current,
                          known=conf is not None and conf.ignored is None)
        judged = judge(trial, attempt, Seen.OOM) if trial is not None else None
        after = judged.trial if judged is not None else trial
        not_fixed = judged is not None and judged.changed and \
            judged.trial.outcome is Outcome.NOT_FIXED
        rec_key = f"{self.prefix}{Annotation.RECOMMENDED_ALLOC_CONF}"
        summary_key = f"{self.prefix}{Annotation.SUMMARY}"
        actions_key = f"{self.prefix}{Annotation.ACTIONS}"
        summary, actions, value = revised(
            out.get(summary_key) or "", tuple(_actions(out.get(actions_key))), out.get(rec_key),
            after, current, owner=target.shown, not_fixed_by=pod.ref if not_fixed else "")
        if value != out.get(rec_key) or not_fixed:
            out[rec_key] = value
            out[summary_key] = notes.value(Annotation.SUMMARY, summary)
            out[actions_key] = bounded.json_list(
                list(actions), notes.LIMITS[Annotation.ACTIONS], item_limit=notes.ITEM_LIMIT,
                what="actions")
        kind = out.get(f"{self.prefix}{Annotation.DIAGNOSIS}") or "unknown"
        new = trial_for(value, kind, _release(out.get(f"{self.prefix}{Annotation.EVIDENCE}")),
                        after, container=t.container, current=current, failed_pod=pod.ref,
                        failed_uid=pod.uid, failed_at=t.finished_at or pod.created_at,
                        ran_seconds=ran_seconds(t.started_at, t.finished_at))
        if new is not None:
            out.update(trial_annotations(new, self.prefix))
        key = owner_key(namespace, pod.controller, pod.labels)

        def written() -> None:
            self._remember(key, new)
            if judged is not None:
                self._decided(namespace, target, judged)

        return out, written

    # -- writing -------------------------------------------------------------------------------

    def _write(self, target: Target, namespace: str,
               annotations: Mapping[str, str | None]) -> None:
        if target.job_kind is not None:
            self.kube.patch_object(target.job_kind, namespace, target.name, target.uid,
                                   annotations)
        else:
            self.kube.patch_workload(target.kind, namespace, target.name, target.uid,
                                     annotations)

    def _remember(self, key: OwnerKey | None, trial: Trial | None) -> None:
        if key is None:
            return
        if trial is not None and trial.open:
            self.index.add(key, trial.failed_at or _EPOCH)
        else:
            self.index.pop(key)

    def _decided(self, namespace: str, owner: Target, judged: Judged) -> None:
        """Count a newly decided outcome once, and say it on the owner."""
        outcome = judged.counted
        if outcome is None:
            return
        trial = judged.trial
        metrics.RECOMMENDATION_OUTCOMES.labels(
            trial.kind if trial.kind in KINDS else "unknown", self._setting_label(trial.setting),
            outcome).inc()
        log.warning("%s %s/%s: %s %s (pod %s)", owner.kind, namespace, owner.name,
                    trial.setting, outcome, trial.judged_pod)
        message = outcome_message(trial, outcome)
        name = notes.event_name(owner.name, owner.uid, trial.failed_uid, trial.setting, outcome)
        try:
            self.kube.post_event(ObjectRef(namespace, owner.name, owner.uid, kind=owner.kind,
                                           api_version=owner.api_version),
                                 name=name, reason=EventReason.RECOMMENDATION_OUTCOME,
                                 message=message,
                                 event_type="Warning" if outcome is Outcome.NOT_FIXED
                                 else "Normal")
        except APIError as exc:
            log.warning("%s %s: outcome Event not posted: %s", owner.kind, owner.name, exc)

    def _applied_event(self, facts: Facts) -> None:
        if self.evented.get(facts.uid) is not None:
            return
        self.kube.post_event(ObjectRef(facts.namespace, facts.name, facts.uid),
                             name=notes.event_name(facts.name, facts.uid, "recommendation"),
                             reason=EventReason.RECOMMENDATION_APPLIED,
                             message=bounded.clip(f"Set {facts.applied}",
                                                        notes.EVENT_MESSAGE_LIMIT),
                             event_type="Normal")
        self.evented.add(facts.uid)

    def _setting_label(self, setting: str) -> str:
        with self._settings_lock:
            if setting in self.settings or len(self.settings) < MAX_SETTINGS:
                self.settings.add(setting)
                return setting
        return "other"


def outcome_message(trial: Trial, outcome: Outcome) -> str:
    """The owner's RecommendationOutcome Event: the setting, the outcome and the pod."""
    what = {Outcome.FIXED: "fixed the failure: pod {pod} ran with it without running out of "
                           "memory",
            Outcome.NOT_FIXED: "did not help: pod {pod} ran out of memory again with it; it is "
                               "not recommended again here",
            Outcome.NOT_APPLIED: "was not applied: pod {pod} started without it"}[outcome]
    return bounded.clip(
        f"{trial.setting} (recommended after {trial.failed_pod}'s {trial.kind}) "
        + what.format(pod=trial.judged_pod), notes.EVENT_MESSAGE_LIMIT)


# -- reading a pod's body ------------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _facts(body: Mapping[str, Any], prefix: str) -> Facts:
    meta = _map(body.get("metadata"))
    spec = _map(body.get("spec"))
    status = _map(body.get("status"))
    containers = {str(c.get("name")): c for c in _list(spec.get("containers"))
                  if isinstance(c, Mapping)}
    statuses = {str(s.get("name")): s for s in _list(status.get("containerStatuses"))
                if isinstance(s, Mapping)}
    found = _map(meta.get("annotations"))
    applied = found.get(f"{prefix}{Annotation.RECOMMENDATION_APPLIED}")
    labels = {k: v for k, v in _map(meta.get("labels")).items() if isinstance(v, str)}
    index = found.get(jk.COMPLETION_INDEX, labels.get(jk.COMPLETION_INDEX))
    pod = replace(parse_pod(body, prefix), labels=labels,
                  completion_index=int(index) if isinstance(index, str) and index.isascii()
                  and index.isdigit() and len(index) <= 9 else None)
    return Facts(
        namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""), created_at=parse_time(meta.get("creationTimestamp")),
        labels=labels, controller=controller_reference(meta.get("ownerReferences")),
        containers=containers, statuses=statuses,
        applied=applied if isinstance(applied, str) else "", seen=_seen(body), pod=pod)


def _attempt(facts: Facts, trial: Trial) -> Attempt:
    container = facts.containers.get(trial.container)
    if container is None:
        return Attempt(facts.ref, facts.uid, facts.created_at, None, has_container=False)
    conf = current_alloc_conf(container)
    return Attempt(facts.ref, facts.uid, facts.created_at, conf.value,
                   known=conf.ignored is None)


def _seen(body: Mapping[str, Any]) -> Seen | None:
    """What a pod is doing, as far as a trial cares: completed (it succeeded, or every
    container ended with exit code 0), started (a container runs); None otherwise (pending, or
    failed: the OOM path's)."""
    status = _map(body.get("status"))
    phase = status.get("phase")
    if phase == "Succeeded":
        return Seen.COMPLETED
    if phase != "Running":
        return None
    states = [_map(_map(s).get("state")) for s in _list(status.get("containerStatuses"))]
    ended = [_map(s.get("terminated")) for s in states if "terminated" in s]
    if states and len(ended) == len(states) and all(e.get("exitCode") == 0 for e in ended):
        return Seen.COMPLETED
    return Seen.STARTED if any("running" in s for s in states) else None


def _actions(text: str | None) -> list[str]:
    """A written `actions` value's items (strings only; a cut one's note kept as an item)."""
    try:
        found = json.loads(text) if text else []
    except ValueError:
        return []
    return [a for a in found if isinstance(a, str)] if isinstance(found, list) else []


def _release(evidence: str | None) -> str | None:
    """The release hint of a job's `evidence` (`torchVersionHint`), if any."""
    try:
        found = json.loads(evidence) if evidence else {}
    except ValueError:
        return None
    hint = found.get("torchVersionHint") if isinstance(found, dict) else None
    return hint if isinstance(hint, str) and len(hint) <= 16 else None


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    found = _map(_map(obj.get("metadata")).get("annotations"))
    return {str(k): v for k, v in found.items() if isinstance(v, str)}


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
