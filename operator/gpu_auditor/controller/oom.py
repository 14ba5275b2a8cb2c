"""The OOM path: a failed container's termination, from the typed pod to the annotation.

    Pod (parsed once) ─► pending terminations ─► diagnosis (worker process, the node's report
    as evidence, the container's memory series from it as samples, the OOM probe's record from
    the termination message, the log if the termination message holds no OOM) ─► annotations
    and Event built from the typed Diagnosis ─► Event, pod patch, owner patch

Idempotency: one diagnosis per (pod UID, container, restart count). The pod's `diagnosed-key`
annotation records what was written (per container the highest restart count: a termination at
or below it is done; a pod's older terminations are diagnosed first), so operator restarts and
watch re-lists find it done;
Events have deterministic names, so a second create is a 409 and never a duplicate. The
annotation, which the user reads, is written first and the Event after it: an Event that fails
is tried again on its own (`RETRY_DELAYS`); one the operator dies before posting is posted
again by the next process that sees the pod within `EVENT_REPAIR_WINDOW`, rebuilt from the
annotation under the same name (measured in bench/results/operator_scale_issue27.md: the Event
first cost the annotation a request's time under load).

The pods of a distributed job (`jobmember`) go to the job path (`jobpath.JobPath`), which uses
the same reading and writing of one termination, and writes the job's object and one Event on
it instead of an Event and owner annotations per pod.

Failures: a diagnosis that raises or overruns its budget is written once as `diagnosis-failed`
and its key recorded as done (never started again by a later event); a write or log read that
fails is tried again (`retry.Attempts`), with back-off, and never holds up other pods.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpu_auditor.base import names
from gpu_auditor.base.contract import Annotation
from gpu_auditor.base.errors import APIError, APINotFoundError
from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller import metrics, owners
from gpu_auditor.controller.diagnosispool import Diagnoser, DiagnosisFailed, ReadingDiagnoser
from gpu_auditor.controller.kube import KubeApi, LogUnavailable, ObjectRef
from gpu_auditor.controller.lru import Lru
from gpu_auditor.controller.pod import (
    AllocConf,
    Container,
    DiagnosedKeys,
    Pod,
    Termination,
    diagnosed_keys,
    parse_pod,
)
from gpu_auditor.controller.probe import ProbeUse, probe_use, record_in_message
from gpu_auditor.controller.reports import NodeReports
from gpu_auditor.controller.retry import Attempts
from gpu_auditor.controller.trials import Trials
from gpu_auditor.diagnosis import Diagnosis, NodeEvidence, diagnose_host_oom
from gpu_auditor.diagnosis.consequence import FailureReading

log = logging.getLogger("gpu_auditor.operator")

EVENT_REPAIR_WINDOW = dt.timedelta(minutes=10)
"""How recent a termination another process diagnosed must be for this one to post its Event
again (`OomPath.repair_event`): a restart's re-list posts at most the last minutes' Events, each a
409 when it was posted; Kubernetes keeps Events an hour by default."""


@dataclass(frozen=True)
class Diagnosed:
    """A diagnosis and what it was built from."""

    diagnosis: Diagnosis | None
    """None when nothing could be read this time (the log)."""
    source: str
    node: NodeEvidence | None = None
    samples: int = 0
    """Points of the node's memory series passed to the diagnosis."""
    probe: ProbeUse | None = None
    reading: FailureReading | None = None
    """How the text failed (`consequence.read_failure`), when it was asked for."""
    unread: bool = False
    """The log was not read (the job path's bound): `diagnosis` holds what the termination
    message said."""


class Grouped(Protocol):
    """The path of distributed jobs: takes the pods it groups (True), leaves the others."""

    def take(self, pod: Pod) -> bool: ...


class OomPath:
    """Diagnoses a pod's failed terminations and writes each once."""

    def __init__(self, kube: KubeApi, diagnoser: Diagnoser, reports: NodeReports,
                 attempts: Attempts, *, prefix: str, log_tail_lines: int, log_limit_bytes: int,
                 annotate_owners: bool) -> None:
        self.kube = kube
        self.diagnoser = diagnoser
        self.reports = reports
        self.attempts = attempts
        self.prefix = prefix
        self.log_tail_lines = log_tail_lines
        self.log_limit_bytes = log_limit_bytes
        self.annotate_owners = annotate_owners
        self.failures = Lru(10_000)
        """(pod UID, key) -> (reason, detail) of a failed diagnosis not yet written."""
        self.repaired = Lru(10_000)
        """(pod UID, key) whose Event this process has posted again (`repair_event`)."""
        self.written = Lru(50_000)
        """Pod UID -> the `DiagnosedKeys` this process last wrote on it (stale events see
        them): what the annotation holds, so at most one entry per container."""
        self.jobs: Grouped | None = None
        """The path of distributed jobs, when it is on (`service.Services`)."""
        self.trials: Trials | None = None
        """The recommendations' trials on the owners (`service.Services`)."""

    def pending(self, pod: Pod) -> list[Termination]:
        """Failed terminations of this pod not yet diagnosed (no API call), the oldest first:
        a container's record keeps only its highest restart count, so a newer run written
        first would leave the older one done, never diagnosed."""
        written = self._written(pod)
        return sorted((t for t in pod.terminations
                       if not pod.diagnosed_keys.done(t) and not written.done(t)
                       and self.attempts.due((pod.uid, t.key))),
                      key=lambda t: t.restart_count)

    def _written(self, pod: Pod) -> DiagnosedKeys:
        return self.remembered(pod.uid)

    def remembered(self, uid: str) -> DiagnosedKeys:
        """The `diagnosed-key` this process last wrote on the pod of `uid`."""
        written = self.written.get(uid)
        return written if isinstance(written, DiagnosedKeys) else DiagnosedKeys()

    def keys(self, pod: Pod) -> DiagnosedKeys:
        """What the pod's annotation and this process's memory say is done."""
        return pod.diagnosed_keys.merged(self._written(pod))

    def handle(self, pod: Pod) -> None:
        """Diagnose the pod's pending terminations; never raises (a handler's exception would
        only be logged by kopf, and a terminated pod sends no second event)."""
        if self.jobs is not None and self.jobs.take(pod):
            return
        self.repair_event(pod)
        for termination in self.pending(pod):
            key = (pod.uid, termination.key)
            try:
                self.diagnose_termination(pod, termination)
            except APINotFoundError:
                log.info("pod %s is gone; nothing to write", pod.ref)
                return
            except APIError as exc:
                log.warning("%s [%s]: %s; trying again later", pod.ref, termination.container,
                            exc)
                self.failed(pod, key)
            except Exception:
                log.exception("%s [%s]: not diagnosed", pod.ref, termination.container)
                metrics.DIAGNOSIS_FAILURES.labels("internal").inc()
                self.attempts.done(key)

    def diagnose_termination(self, pod: Pod, t: Termination) -> None:
        """Diagnose one termination from the watched pod, without reading it again: a stale
        event (one queued before our own patch) is caught by the in-memory record of what this
        process wrote, and after a restart kopf's fresh listing carries the annotation.
        Measured at 5,000 pods, the extra GET cost about half the median latency."""
        written = self._written(pod)
        if pod.diagnosed_keys.done(t) or written.done(t):
            return
        keys = pod.diagnosed_keys.merged(written)
        container = container_of(pod, t)
        failure = self.failures.get((pod.uid, t.key))
        found = Diagnosed(None, "")
        if failure is None:
            try:
                found = self.diagnose(pod, t, container)
            except DiagnosisFailed as exc:
                metrics.DIAGNOSIS_FAILURES.labels(exc.reason).inc()
                log.warning("%s [%s]: diagnosis failed: %s", pod.ref, t.container, exc)
                failure = (exc.reason, exc.detail)
                self.failures.add((pod.uid, t.key), failure)
        if failure is not None:
            self.write_failure(pod, t, keys, failure)
            return
        diagnosis = found.diagnosis
        if diagnosis is None:  # the log could not be read this time
            self.failed(pod, (pod.uid, t.key))
            return
        if not diagnosis.detected:
            self.attempts.done((pod.uid, t.key))
            return
        self.write(pod, t, keys, diagnosis, found, container)

    def diagnose(self, pod: Pod, t: Termination, container: Container, *,
                  reading: bool = False, read_log: bool = True) -> Diagnosed:
        """The diagnosis and what it was built from; its diagnosis is None when nothing was
        read. The tenant's text (termination message, log) is diagnosed in a worker process,
        within the budget; raises DiagnosisFailed. `reading`: also read how the text failed
        (`Diagnosed.reading`); `read_log`: False leaves the log unread (`Diagnosed.unread`)
        when the termination message tells nothing."""
        if t.host_oom_killed:
            return Diagnosed(diagnose_host_oom(container=t.container,
                                               memory_limit_bytes=container.memory_limit_bytes,
                                               memory_request_bytes=container.memory_request_bytes,
                                               exit_code=t.exit_code, evicted=t.evicted),
                             "termination-state")
        node = self.reports.evidence(pod.node_name, pod.uid, pod.ref)
        samples = self.reports.samples(pod.node_name, pod.uid, t)
        record = record_in_message(t.message) if t.message else None
        options: dict[str, Any] = {"torch_version": container.torch_version,
                                   "alloc_conf": container.alloc_conf.value, "node": node,
                                   "samples": samples}
        if record is not None and record.record is not None:
            options["probe_record"] = record.record

        def built(diagnosis: Diagnosis | None, source: str,
                  how: FailureReading | None = None, unread: bool = False) -> Diagnosed:
            use = probe_use(diagnosis, record) if diagnosis is not None else None
            return Diagnosed(diagnosis, source, node, len(samples), use, how, unread)

        def ask(text: bytes | str) -> tuple[Diagnosis, FailureReading | None]:
            if not reading:
                return self.diagnoser.diagnose(text, **options), None
            diagnoser: ReadingDiagnoser = self.diagnoser  # type: ignore[assignment]
            return diagnoser.diagnose_reading(text, t.finished_at, **options)

        if t.message:
            found, how = ask(t.message)
            if found.detected or (how is not None and how.consequence is not None):
                return built(found, "termination-message", how)
            if not read_log:
                return built(found, "termination-message", how, unread=True)
        elif not read_log:
            return Diagnosed(None, "", node, unread=True)
        try:
            text = self.kube.read_log(
                pod.namespace, pod.name, t.container, previous=t.previous,
                tail_lines=self.log_tail_lines, limit_bytes=self.log_limit_bytes)
        except LogUnavailable as exc:
            metrics.LOG_FETCH_FAILURES.labels(exc.reason).inc()
            log.warning("log of %s [%s] unavailable: %s", pod.ref, t.container, exc)
            if exc.reason == "forbidden":  # final: no point asking again; say so on the pod
                found, how = ask(b"")
                return built(found, "log-forbidden", how)
            return Diagnosed(None, "log", node)
        found, how = ask(text)
        return built(found, "log", how)

    def write(self, pod: Pod, t: Termination, keys: DiagnosedKeys, diagnosis: Diagnosis,
               found: Diagnosed, container: Container, *, alone: bool = True
               ) -> notes.Written:
        """Write the diagnosis onto the pod (the annotation first: what the user reads), then
        the pod's Event and its owner's annotations; `alone=False` (a pod of a distributed
        job) writes the pod's annotations only, the job path deciding the rest. A
        recommendation's trial on the owner (`trials`) is read before the pod is written, so
        the pod's diagnosis says when a setting did not help."""
        trial = self.trials.prepare(pod, t, container, diagnosis) \
            if alone and self.annotate_owners and self.trials is not None else None
        try:
            diagnosis = trial.diagnosis if trial is not None else diagnosis
            now = dt.datetime.now(dt.UTC)
            result = notes.diagnosis_annotations(
                diagnosis, t, pod, prefix=self.prefix, previous_keys=keys, source=found.source,
                now=now, node=found.node, alloc_conf=container.alloc_conf,
                samples=found.samples, probe=found.probe)
            self.kube.patch_pod_annotations(pod.namespace, pod.name, result.annotations,
                                            uid=pod.uid)
            self.wrote(pod, result.annotations)
            metrics.DIAGNOSES.labels(pod.namespace, diagnosis.kind).inc()
            _count_probe(pod, t, diagnosis, found.probe)
            if t.finished_at is not None:
                metrics.DIAGNOSIS_LATENCY.observe(
                    max((now - t.finished_at).total_seconds(), 0.0))
            log.warning("%s [%s]: %s", pod.ref, t.container, diagnosis.summary)
            if alone:
                self.post_event(pod, t, result)
                if trial is not None and self.trials is not None:
                    self.trials.settle(trial, result.owner_annotations, pod.namespace)
                elif self.annotate_owners:
                    self.annotate_owner(pod, result.owner_annotations)
            return result
        finally:
            if trial is not None:
                trial.release()

    def wants(self, pod: Pod) -> bool:
        """kopf's cheap filter (no API call): a termination to diagnose, or an Event to post
        again (`repair_event`). A pod whose latest termination another process annotated was
        filtered out before its lost Event could be posted again (the integration test's
        restart mid-run failed on it once in two CI runs)."""
        return bool(self.pending(pod)) or self._lost_event(pod) is not None

    def _lost_event(self, pod: Pod) -> tuple[Termination, notes.WrittenEvent] | None:
        """The termination and the Event `repair_event` would post again, or None."""
        finished = [t for t in pod.terminations if t.finished_at is not None]
        if not finished:
            return None
        t = max(finished, key=lambda x: x.finished_at or dt.datetime.min)  # only the latest's
        key = (pod.uid, t.key)  # annotation can be its (`event_from_annotations`)
        if self._written(pod).done(t) or self.repaired.get(key) is not None:
            return None
        if t.finished_at is None or dt.datetime.now(dt.UTC) - t.finished_at > EVENT_REPAIR_WINDOW:
            return None
        event = notes.event_from_annotations(pod, t)
        return None if event is None else (t, event)

    def repair_event(self, pod: Pod) -> None:
        """Post again the Event of a termination another process diagnosed within
        `EVENT_REPAIR_WINDOW`: one killed between the pod's annotation and its Event left the
        Event unposted. Rebuilt from the annotation with the same name, so an Event that was
        posted is a 409, never a second one; once per termination per process, and never for
        older terminations (an Event past its TTL is not brought back)."""
        lost = self._lost_event(pod)
        if lost is None:
            return
        t, event = lost
        self.repaired.add((pod.uid, t.key), True)
        try:
            self.kube.post_event(ObjectRef(pod.namespace, pod.name, pod.uid),
                                 name=event.name, reason=event.reason, message=event.message)
        except APIError as exc:  # the next process, or the next handling, tries again
            log.warning("%s [%s]: Event not posted again: %s", pod.ref, t.container, exc)

    def post_event(self, pod: Pod, t: Termination, result: notes.Written) -> None:
        """The pod's Event for a written diagnosis; one that fails is tried again on its own
        (the annotation is written: the termination is done)."""
        try:
            self.kube.post_event(ObjectRef(pod.namespace, pod.name, pod.uid),
                                 name=result.event_name, reason=result.event_reason,
                                 message=result.event_message)
        except APINotFoundError:
            return
        except APIError as exc:
            log.warning("%s [%s]: Event not posted: %s; trying again later", pod.ref,
                        t.container, exc)
            self.attempts.failed((pod.uid, t.key, "event"),
                                 lambda: self.post_event(pod, t, result))

    def write_failure(self, pod: Pod, t: Termination, keys: DiagnosedKeys,
                       failure: tuple[str, str]) -> None:
        reason, detail = failure
        patch = notes.failure_annotations(t, prefix=self.prefix, previous_keys=keys,
                                          reason=reason, detail=detail,
                                          now=dt.datetime.now(dt.UTC))
        self.kube.patch_pod_annotations(pod.namespace, pod.name, patch, uid=pod.uid)
        self.wrote(pod, patch)
        self.attempts.done((pod.uid, t.key))
        self.failures.pop((pod.uid, t.key))

    def wrote(self, pod: Pod, patch: Mapping[str, str | None]) -> None:
        """Remember the `diagnosed-key` just written, as the annotation holds it (bounded)."""
        written = patch[f"{self.prefix}{Annotation.DIAGNOSED_KEY}"]
        self.written.add(pod.uid, diagnosed_keys(written))


    def annotate_owner(self, pod: Pod, annotations: dict[str, str | None]) -> None:
        if pod.controller is None:
            return
        try:
            owner = owners.verified_owner(self.kube, pod.namespace, pod.controller, pod.labels)
            if owner is None:
                return
            self.kube.patch_workload(owner.kind, pod.namespace, owner.name, owner.uid,
                                     annotations)
        except owners.OwnerRefused as exc:
            metrics.OWNER_WRITES_REFUSED.labels(exc.reason).inc()
            log.warning("owner of %s not annotated: %s", pod.ref, exc)
        except Exception as exc:  # the pod's own annotation is written; the owner is a bonus
            log.warning("could not annotate the owner of %s: %s", pod.ref, exc)

    # -- retries --

    def failed(self, pod: Pod, key: tuple[str, str]) -> None:
        self._retry(pod.namespace, pod.name, key)

    def _retry(self, namespace: str, name: str, key: tuple[str, str]) -> None:
        """A failed attempt at `key`: its next back-off reads the pod again."""
        self.attempts.failed(key, lambda: self._look_again(namespace, name, key))

    def _look_again(self, namespace: str, name: str, key: tuple[str, str]) -> None:
        """The scheduled retry: read the pod again and handle it. A read that fails other than
        by the pod being gone is a failed attempt too, with the next back-off: one read on a
        connection the API server's restart had closed ended the retries, and a terminated pod
        sends no event to start them again (an integration run: the pod never diagnosed)."""
        try:
            body = self.kube.read_pod(namespace, name)
        except (APINotFoundError, names.InvalidName) as exc:  # gone
            log.info("retry of %s/%s: %s", namespace, name, exc)
            return
        except APIError as exc:  # the API is down or restarting
            log.info("retry of %s/%s: %s; trying again later", namespace, name, exc)
            self._retry(namespace, name, key)
            return
        self.handle(parse_pod(body, self.prefix))


def container_of(pod: Pod, t: Termination) -> Container:
    """The spec of the container that ended (an unknown one reads as unset)."""
    return next((c for c in pod.containers if c.name == t.container),
                Container(t.container, AllocConf(None), None, None, None))


def _count_probe(pod: Pod, t: Termination, diagnosis: Diagnosis, use: ProbeUse | None) -> None:
    """The probe record's metrics and log line, once per written diagnosis."""
    if use is None:
        return
    if not use.used:
        result = "invalid" if (use.ignored or "").startswith("invalid") else "unmatched"
        metrics.PROBE_RECORDS.labels(result).inc()
        log.info("%s [%s]: probe record in the %s not used: %s", pod.ref, t.container,
                 use.source, use.ignored)
        return
    metrics.PROBE_RECORDS.labels("used").inc()
    if use.disagrees:
        metrics.PROBE_DISAGREEMENTS.labels(diagnosis.kind, use.inference_kind or "").inc()
        log.warning("%s [%s]: the probe record says %s where the OOM message alone says %s",
                    pod.ref, t.container, diagnosis.kind, use.inference_kind)
