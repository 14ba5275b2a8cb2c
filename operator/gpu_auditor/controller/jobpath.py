"""The path of distributed jobs: a failed pod of a job, read, filed with its group, and the
group's root cause written where the job's owner looks.

    pod event ─► OomPath.handle ─► JobPath.take (jobmember: the labels claim a job)
        each pending termination: read (`read`: the termination state, the termination
        message, the log within the group's bound) ─► an OOM's own annotations on the pod
        (the first write: what the user reads) ─► the failure filed in its group
    a group, `SETTLE` seconds after its last new failure, on the job path's own threads:
        rootcause.verdicts ─► the root-cause pod's chain verified (jobowners) ─► the job's
        object annotated (jobnotes) ─► one Event on it ─► each consequence pod pointed at
        the root cause ─► the pod Events the job's did not replace

Bounded work: a termination that says OOMKilled or was stopped by a signal is read from the
watched pod alone; a termination message is read before the log; at most `log_reads` logs are
read per group (the earliest failures come first), the rest are filed unread and pointed at
the root cause as such. The chain is verified once per root cause; a pod's pointer, an Event
and the job's annotations are written once each (the job's again only when they change).

What is kept in memory is bounded (`MAX_GROUPS` groups, `MAX_FAILURES` failures each,
`MAX_FILED` in all: the least recently seen group is forgotten first; a consequence is kept as
its pod's name, UID and recorded keys, only an OOM pod whole); it is rebuilt after a restart from
what was written: the job's object names its root cause, which the group's next failure reads
back (`remembered`).

A chain that does not verify (`OwnerRefused`), or a job's object the operator may not read or
write (403) or that is gone (404), leaves the group's pods as they would be alone: each OOM
pod's own Event and owner annotations, no pointers.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field

from gpu_auditor.base.contract import Annotation, EventReason
from gpu_auditor.base.errors import APIError, APIForbiddenError, APINotFoundError
from gpu_auditor.base.timestamps import parse_time
from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller import jobnotes, jobowners, metrics
from gpu_auditor.controller.diagnosispool import DiagnosisFailed
from gpu_auditor.controller.jobmember import GroupKey, JobMember, member_of
from gpu_auditor.controller.jobnotes import RootCause
from gpu_auditor.controller.jobowners import VerifiedJob
from gpu_auditor.controller.kube import KubeApi, ObjectRef
from gpu_auditor.controller.oom import Diagnosed, OomPath, container_of
from gpu_auditor.controller.owners import OwnerRefused
from gpu_auditor.controller.pod import DiagnosedKeys, Pod, Termination, diagnosed_keys
from gpu_auditor.controller.retry import Attempts, Schedule
from gpu_auditor.controller.rootcause import Failure, Read, Verdict, verdicts
from gpu_auditor.diagnosis import DiagnosisKind

log = logging.getLogger("gpu_auditor.operator")

SETTLE = 2.0
"""Seconds a group waits after a new failure before it is decided: a failure seen a moment
late (its event queued behind others) may still be the first."""
MAX_GROUPS = 2_000
MAX_FAILURES = 10_000
MAX_FILED = 50_000
"""Failures kept in memory across all groups (as many as pods the OOM path remembers)."""
DEFAULT_LOG_READS = 16
SIGNAL_EXIT_CODES = {130: "SIGINT", 137: "SIGKILL", 143: "SIGTERM"}
"""Exit codes of a process stopped by a signal from outside (128 + signal); OOMKilled aside."""


@dataclass
class Member:
    """One failure of the group and what writing about it needs."""

    failure: Failure
    pod: Pod | None
    """The pod as parsed, kept for an OOM pod (a root cause's chain is verified from it) and
    the group's first failure (a restart's look back); None for the others."""
    claim: JobMember
    termination: Termination | None
    keys: DiagnosedKeys = field(default_factory=DiagnosedKeys)
    """What the pod's `diagnosed-key` recorded when it was read (its pointer adds to it)."""
    written: notes.Written | None = None
    """The pod's own diagnosis as written (an OOM)."""
    event_settled: bool = False
    """Its pod Event posted, or made needless by the job's (an OOM pod)."""
    pointer: str | None = None
    """The root-cause pod its pointer names, as written."""


@dataclass
class Group:
    key: GroupKey
    members: dict[tuple[str, str], Member] = field(default_factory=dict)
    log_reads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    scheduled: bool = False
    running: bool = False
    again: bool = False
    verified: dict[tuple[str, str], VerifiedJob | OwnerRefused] = field(default_factory=dict)
    """Root-cause key -> its verified job (or why not): one verification per root cause."""
    job_written: dict[str, str | None] | None = None
    job_root: tuple[str, str] | None = None
    """The root cause the job's object shows, as this process wrote it."""
    events: set[str] = field(default_factory=set)
    remembered: RootCause | None = None
    looked_back: bool = False


class JobPath:
    """Files the failures of distributed jobs' pods and writes each group's root cause."""

    def __init__(self, kube: KubeApi, oom: OomPath, attempts: Attempts, schedule: Schedule, *,
                 switches: Collection[str], prefix: str, log_reads: int = DEFAULT_LOG_READS,
                 settle: float = SETTLE, workers: int = 2,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self.kube = kube
        self.oom = oom
        self.attempts = attempts
        self.schedule = schedule
        self.switches = frozenset(switches)
        self.prefix = prefix
        self.log_reads = log_reads
        self.settle = settle
        self.clock = clock
        self.groups: OrderedDict[GroupKey, Group] = OrderedDict()
        """The groups, the least recently seen first (bounded: `_forget`)."""
        self.filed = 0
        """Failures kept in all groups."""
        self._lock = threading.Lock()
        self.executor: Executor = ThreadPoolExecutor(max_workers=workers,
                                                     thread_name_prefix="jobs")
        """Runs the groups' writes: threads of their own, as pointing a large job's pods takes
        a while."""

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    # -- the handler's side: read and file -----------------------------------------------------

    def take(self, pod: Pod) -> bool:
        """File `pod`'s pending terminations with its job's group; False for a pod of no job
        (the pod-level path then takes it). Never raises."""
        member = member_of(pod, self.switches) if pod.terminations else None
        if member is None:
            return False
        group = self._group(member.group(pod.namespace))
        if group is None:
            return False  # beyond the bound: the pod-level diagnosis, as for any pod
        for t in self.oom.pending(pod):
            key = (pod.uid, t.key)
            try:
                self._file(group, pod, member, t)
            except APINotFoundError:
                log.info("pod %s is gone; nothing to write", pod.ref)
                return True
            except APIError as exc:
                log.warning("%s [%s]: %s; trying again later", pod.ref, t.container, exc)
                self.oom.failed(pod, key)
            except Exception:
                log.exception("%s [%s]: not diagnosed", pod.ref, t.container)
                metrics.DIAGNOSIS_FAILURES.labels("internal").inc()
                self.attempts.done(key)
        return True

    def _group(self, key: GroupKey) -> Group | None:
        """The group of `key` (made when new), or None when it is full."""
        with self._lock:
            group = self.groups.get(key)
            if group is None:
                group = Group(key)
                self.groups[key] = group
            self.groups.move_to_end(key)
            return group if len(group.members) < MAX_FAILURES else None

    def _filed(self, group: Group, member: Member) -> None:
        """Keep `member` in `group`, forgetting the least recently seen groups past the
        bounds."""
        with group.lock:
            if member.failure.key in group.members:
                return
            group.members[member.failure.key] = member
        with self._lock:
            self.filed += 1
            while self.groups and (len(self.groups) > MAX_GROUPS or self.filed > MAX_FILED):
                _, old = self.groups.popitem(last=False)
                with old.lock:
                    self.filed -= len(old.members)

    def _file(self, group: Group, pod: Pod, member: JobMember, t: Termination) -> None:
        keys = self.oom.keys(pod)
        if keys.done(t):
            return
        found = self.read(group, pod, t)
        if found is None:  # the log could not be read this time
            self.oom.failed(pod, (pod.uid, t.key))
            return
        written: notes.Written | None = None
        diagnosis = found.diagnosis
        if diagnosis is not None and diagnosis.detected:
            written = self.oom.write(pod, t, keys, diagnosis, found, container_of(pod, t),
                                     alone=False)
        else:
            self.attempts.done((pod.uid, t.key))
        failure = _failure(pod, member, t, found)
        with group.lock:
            first = not group.members
        kept = pod if written is not None or first else None
        self._filed(group, Member(failure, kept, member, t, keys, written))
        self._soon(group)

    def read(self, group: Group, pod: Pod, t: Termination) -> Diagnosed | None:
        """How the termination failed, from as little as tells: the termination state
        (OOMKilled, a signal), the termination message, the log while the group's bound
        lasts. None when the log could not be read this time."""
        if not t.host_oom_killed and t.exit_code in SIGNAL_EXIT_CODES:
            return Diagnosed(None, "termination-state")
        with group.lock:  # a read is counted when reserved, given back when not made
            read_log = group.log_reads < self.log_reads
            group.log_reads += read_log
        try:
            found = self.oom.diagnose(pod, t, container_of(pod, t), reading=True,
                                      read_log=read_log)
        except DiagnosisFailed as exc:
            metrics.DIAGNOSIS_FAILURES.labels(exc.reason).inc()
            log.warning("%s [%s]: diagnosis failed: %s", pod.ref, t.container, exc)
            self.oom.write_failure(pod, t, self.oom.keys(pod), (exc.reason, exc.detail))
            return Diagnosed(None, "diagnosis-failed", unread=True)
        if read_log and not found.source.startswith("log"):
            with group.lock:
                group.log_reads -= 1
        if found.diagnosis is None and not found.unread:
            return None
        return found

    def _soon(self, group: Group) -> None:
        with group.lock:
            if group.scheduled:
                return
            group.scheduled = True
        if not self.schedule(self.settle, lambda: self._submit(group)):
            with group.lock:
                group.scheduled = False

    def _submit(self, group: Group) -> None:
        with contextlib.suppress(RuntimeError):  # shut down
            self.executor.submit(self.converge, group)

    # -- the group's side: decide and write ----------------------------------------------------

    def converge(self, group: Group) -> None:
        """Bring what the cluster shows to the group's verdicts; one run per group at a time,
        again when a failure came in meanwhile. Never raises: a failed write is tried again."""
        with group.lock:
            group.scheduled = False
            if group.running:
                group.again = True
                return
            group.running = True
        try:
            while True:
                try:
                    self._converge(group)
                    self.attempts.forget(("group", group.key))
                except APIError as exc:
                    log.warning("job %s: %s; trying again later", _shown(group.key), exc)
                    self.attempts.failed(("group", group.key), lambda: self._submit(group))
                except Exception:
                    log.exception("job %s: not written", _shown(group.key))
                with group.lock:
                    if not group.again:
                        return
                    group.again = False
        finally:
            with group.lock:
                group.running = False

    def _converge(self, group: Group) -> None:
        found = self._verdicts(group)
        latest = next((v for v in reversed(found) if v.root is not None), None)
        if not group.looked_back and any(v.first is None for v in found):
            self._look_back(group)
            found = self._verdicts(group)
            latest = next((v for v in reversed(found) if v.root is not None), None)
        roots = {v.root.key for v in found if v.root is not None}
        if group.job_root is not None and group.job_root not in roots:
            self._retract(group)
        for verdict in found:
            if verdict.root is not None:
                self._write_incident(group, verdict, latest=verdict is latest)
        self._settle_events(group, found)

    def _verdicts(self, group: Group) -> list[Verdict]:
        with group.lock:
            failures = [m.failure for m in group.members.values()]
        if group.remembered is not None:
            failures.append(group.remembered.failure)
        return verdicts(failures)

    def _root(self, group: Group, root: Failure) -> tuple[RootCause, VerifiedJob] | None:
        """The root cause's diagnosis and its verified job; None when the chain does not
        verify (then its pods are written as pods alone)."""
        if group.remembered is not None and root.key == group.remembered.failure.key:
            job = group.verified.get(root.key)
            return (group.remembered, job) if isinstance(job, VerifiedJob) else None
        member = group.members.get(root.key)
        if member is None or member.pod is None or member.written is None:
            return None
        job = group.verified.get(root.key)
        if job is None:
            job = self._verify(member.pod, member.claim)
            group.verified[root.key] = job
        if not isinstance(job, VerifiedJob):
            return None
        return RootCause(root, member.written.annotations, member.written.event_reason,
                         job.rank, job.position or root.position), job

    def _verify(self, pod: Pod, member: JobMember) -> VerifiedJob | OwnerRefused:
        try:
            return jobowners.verify(self.kube, pod, member, self.switches)
        except OwnerRefused as exc:
            metrics.OWNER_WRITES_REFUSED.labels(exc.reason).inc()
            log.warning("job of %s not annotated: %s", pod.ref, exc)
            return exc
        except (APINotFoundError, APIForbiddenError) as exc:  # gone, or not ours to read
            log.warning("job of %s not annotated: %s", pod.ref, exc)
            return OwnerRefused(exc.reason, str(exc))

    def _write_incident(self, group: Group, verdict: Verdict, *, latest: bool) -> None:
        assert verdict.root is not None
        found = self._root(group, verdict.root)
        if found is None:
            return
        root, job = found
        if latest and not verdict.root.remembered:
            try:
                self._write_job(group, root, verdict, job)
            except (APINotFoundError, APIForbiddenError) as exc:  # gone, or not ours to write
                log.warning("%s %s/%s not annotated: %s", job.kind.kind, group.key.namespace,
                            job.name, exc)
                group.verified[verdict.root.key] = OwnerRefused(exc.reason, str(exc))
                return
        for failure in verdict.consequences:
            member = group.members.get(failure.key)
            if member is not None and member.pointer != root.failure.ref and \
                    member.written is None:
                self._point(member, root, verdict)

    def _write_job(self, group: Group, root: RootCause, verdict: Verdict, job: VerifiedJob
                   ) -> None:
        wanted = jobnotes.job_annotations(root, verdict, prefix=self.prefix, now=self.clock())
        written: Callable[[], None] = lambda: None  # noqa: E731
        if self.oom.trials is not None:  # the recommendation's trial on the job (trials.py)
            member = group.members.get(root.failure.key)
            wanted, written = self.oom.trials.for_job(
                group.key.namespace, job, member.pod if member else None,
                member.termination if member else None, wanted)
        at = f"{self.prefix}{Annotation.DIAGNOSED_AT}"
        same = group.job_written is not None and {
            k: v for k, v in group.job_written.items() if k != at} == {
            k: v for k, v in wanted.items() if k != at}
        if not same:
            self.kube.patch_object(job.kind, group.key.namespace, job.name, job.uid, wanted)
            written()
            counted = group.job_root == root.failure.key  # the same root, more consequences
            group.job_written, group.job_root = wanted, root.failure.key
            if not counted:
                metrics.JOB_DIAGNOSES.labels(job.kind.kind, wanted[
                    f"{self.prefix}{Annotation.DIAGNOSIS}"] or "unknown").inc()
            log.warning("%s %s/%s: %s", job.kind.kind, group.key.namespace, job.name,
                        wanted[f"{self.prefix}{Annotation.SUMMARY}"])
        name, reason, message = jobnotes.job_event(root, verdict, prefix=self.prefix,
                                                   job_name=job.name, job_uid=job.uid)
        if name not in group.events:
            self.kube.post_event(ObjectRef(group.key.namespace, job.name, job.uid,
                                           kind=job.kind.kind, api_version=job.kind.api_version),
                                 name=name, reason=reason, message=message)
            group.events.add(name)

    def _point(self, member: Member, root: RootCause, verdict: Verdict) -> None:
        t, f = member.termination, member.failure
        if t is None:
            return
        keys = member.keys.merged(self.oom.remembered(f.pod_uid))
        patch = jobnotes.pointer_annotations(f, t, root, verdict, prefix=self.prefix,
                                             previous_keys=keys, now=self.clock())
        try:
            self.kube.patch_pod_annotations(f.namespace, f.pod, patch, uid=f.pod_uid)
        except APINotFoundError:
            member.pointer = root.failure.ref  # gone: nothing to point
            return
        self.oom.written.add(f.pod_uid, diagnosed_keys(
            patch[f"{self.prefix}{Annotation.DIAGNOSED_KEY}"]))
        member.pointer = root.failure.ref

    def _retract(self, group: Group) -> None:
        """The job's object shows a root cause the verdicts no longer give (a failure seen
        late came first): clear it and the pointers at it."""
        old = group.job_root
        if old is None or group.job_written is None:
            return
        job = group.verified.get(old)
        if isinstance(job, VerifiedJob):
            self.kube.patch_object(job.kind, group.key.namespace, job.name, job.uid,
                                   jobnotes.cleared(self.prefix))
        old_ref = group.job_written.get(f"{self.prefix}{Annotation.ROOT_CAUSE_POD}")
        for member in _members(group):
            f = member.failure
            if member.pointer is not None and member.pointer == old_ref:
                self.kube.patch_pod_annotations(f.namespace, f.pod,
                                                jobnotes.pointer_cleared(self.prefix),
                                                uid=f.pod_uid)
                member.pointer = None
            if member.written is not None:
                member.event_settled = False
        group.job_written, group.job_root = None, None

    def _settle_events(self, group: Group, found: list[Verdict]) -> None:
        """Each OOM pod's own Event, unless its incident's root cause is written on a verified
        job (whose one Event tells it); a pod-level owner write where the chain did not
        verify, as for a pod alone."""
        covered: set[tuple[str, str]] = set()
        for verdict in found:
            if verdict.root is not None and isinstance(group.verified.get(verdict.root.key),
                                                       VerifiedJob):
                covered |= {verdict.root.key, *(f.key for f in verdict.oom_too)}
        for member in _members(group):
            if member.written is None or member.event_settled or member.pod is None:
                continue
            if member.failure.key not in covered:
                assert member.termination is not None
                self.oom.post_event(member.pod, member.termination, member.written)
                if self.oom.annotate_owners:
                    self.oom.annotate_owner(member.pod, member.written.owner_annotations)
            member.event_settled = True

    def _look_back(self, group: Group) -> None:
        """After a restart: the root cause the job's object names (written by an earlier
        run), read through the chain of one of the group's pods."""
        group.looked_back = True
        with group.lock:
            member = next((m for m in group.members.values() if m.pod is not None), None)
        if member is None or member.pod is None:
            return
        job = self._verify(member.pod, member.claim)
        if not isinstance(job, VerifiedJob):
            return
        root = remembered_root(job, self.prefix, group.key.namespace)
        if root is not None:
            group.remembered = root
            group.verified[root.failure.key] = job


def remembered_root(job: VerifiedJob, prefix: str, namespace: str) -> RootCause | None:
    """The root cause a job's object names (its `root-cause-pod` and `evidence`, as this
    operator wrote them), or None."""
    notes_ = job.annotations
    ref = notes_.get(f"{prefix}{Annotation.ROOT_CAUSE_POD}", "")
    try:
        evidence = json.loads(notes_.get(f"{prefix}{Annotation.EVIDENCE}", "") or "{}")
    except ValueError:
        return None
    if not isinstance(evidence, dict) or "/" not in ref:
        return None
    ns, _, pod = ref.partition("/")
    failed_at = parse_time(evidence.get("failedAt"))
    uid, container = evidence.get("rootCausePodUID"), evidence.get("container")
    restart = evidence.get("restartCount")
    if ns != namespace or failed_at is None or not isinstance(uid, str) or not isinstance(
            container, str) or not isinstance(restart, int):
        return None
    kind = notes_.get(f"{prefix}{Annotation.DIAGNOSIS}", "unknown")
    rank = evidence.get("rank")
    failure = Failure(ns, pod, uid, container, restart, failed_at, Read.OOM, kind,
                      position=str(evidence.get("position") or ""), remembered=True)
    reason = EventReason.OOM_KILLED if kind == DiagnosisKind.HOST_OOM_KILLED \
        else EventReason.CUDA_OUT_OF_MEMORY
    return RootCause(failure, {f"{prefix}{k}": v for k, v in (
        (Annotation.DIAGNOSIS, kind),
        (Annotation.SUMMARY, notes_.get(f"{prefix}{Annotation.SUMMARY}")))},
        reason, rank if isinstance(rank, int) else None, failure.position)


def _members(group: Group) -> list[Member]:
    """The group's members now (handler threads add to it meanwhile)."""
    with group.lock:
        return list(group.members.values())


def _failure(pod: Pod, member: JobMember, t: Termination, found: Diagnosed) -> Failure:
    diagnosis, reading = found.diagnosis, found.reading
    if diagnosis is not None and diagnosis.detected:
        read, how = Read.OOM, str(diagnosis.kind)
    elif not t.host_oom_killed and t.exit_code in SIGNAL_EXIT_CODES:
        read, how = Read.CONSEQUENCE, f"{SIGNAL_EXIT_CODES[t.exit_code]} (exit code {t.exit_code})"
    elif reading is not None and reading.consequence is not None:
        read, how = Read.CONSEQUENCE, reading.consequence
    elif found.unread:
        read, how = Read.UNREAD, f"exit code {t.exit_code}"
    else:
        read, how = Read.OTHER, f"exit code {t.exit_code}"
    return Failure(pod.namespace, pod.name, pod.uid, t.container, t.restart_count,
                   t.finished_at, read, how, log_at=reading.at if reading else None,
                   position=member.position, index=member.index)




def _shown(key: GroupKey) -> str:
    return f"{key.kind} {key.namespace}/{key.name}" + (f" ({key.generation})"
                                                       if key.generation else "")


__all__ = ["DEFAULT_LOG_READS", "SETTLE", "DiagnosedKeys", "JobPath", "remembered_root"]
