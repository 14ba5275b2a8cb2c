"""The OOM path: a failed container's termination, from the typed pod to the annotation.

    Pod (parsed once) ─► pending terminations ─► diagnosis (worker process, the node's report
    as evidence, the container's memory series from it as samples, the OOM probe's record from
    the termination message, the log if the termination message holds no OOM) ─► annotations
    and Event built from the typed Diagnosis ─► Event, pod patch, owner patch

Idempotency: one diagnosis per (pod UID, container, restart count). The pod's `diagnosed-key`
annotation records what was written (per container the highest restart count: a termination at
or below it is done; a pod's older terminations are diagnosed first), so operator restarts and
watch re-lists find it done;
Events have deterministic names, so a second create is a 409 and never a duplicate. The Event
is created before the annotation: if the operator dies between the two, the next run writes the
annotation and its Event create is a harmless 409.

Failures: a diagnosis that raises or overruns its budget is written once as `diagnosis-failed`
and its key recorded as done (never started again by a later event); a write or log read that
fails is tried again (`retry.Attempts`), with back-off, and never holds up other pods.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_auditor.base import names
from gpu_auditor.base.contract import Annotation
from gpu_auditor.base.errors import APIError, APINotFoundError
from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller import metrics, owners
from gpu_auditor.controller.diagnosispool import Diagnoser, DiagnosisFailed
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
from gpu_auditor.diagnosis import Diagnosis, NodeEvidence, diagnose_host_oom

log = logging.getLogger("gpu_auditor.operator")


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
        self.written = Lru(50_000)
        """Pod UID -> the `DiagnosedKeys` this process last wrote on it (stale events see
        them): what the annotation holds, so at most one entry per container."""

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
        written = self.written.get(pod.uid)
        return written if isinstance(written, DiagnosedKeys) else DiagnosedKeys()

    def handle(self, pod: Pod) -> None:
        """Diagnose the pod's pending terminations; never raises (a handler's exception would
        only be logged by kopf, and a terminated pod sends no second event)."""
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
                self._failed(pod, key)
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
        container = next((c for c in pod.containers if c.name == t.container),
                         Container(t.container, AllocConf(None), None, None, None))
        failure = self.failures.get((pod.uid, t.key))
        found = Diagnosed(None, "")
        if failure is None:
            try:
                found = self._diagnose(pod, t, container)
            except DiagnosisFailed as exc:
                metrics.DIAGNOSIS_FAILURES.labels(exc.reason).inc()
                log.warning("%s [%s]: diagnosis failed: %s", pod.ref, t.container, exc)
                failure = (exc.reason, exc.detail)
                self.failures.add((pod.uid, t.key), failure)
        if failure is not None:
            self._write_failure(pod, t, keys, failure)
            return
        diagnosis = found.diagnosis
        if diagnosis is None:  # the log could not be read this time
            self._failed(pod, (pod.uid, t.key))
            return
        if not diagnosis.detected:
            self.attempts.done((pod.uid, t.key))
            return
        self._write(pod, t, keys, diagnosis, found, container)

    def _diagnose(self, pod: Pod, t: Termination, container: Container) -> Diagnosed:
        """The diagnosis and what it was built from; its diagnosis is None when nothing was
        read. The tenant's text (termination message, log) is diagnosed in a worker process,
        within the budget; raises DiagnosisFailed."""
        if t.host_oom_killed:
            return Diagnosed(diagnose_host_oom(container=t.container,
                                               memory_limit_bytes=container.memory_limit_bytes,
                                               memory_request_bytes=container.memory_request_bytes,
                                               exit_code=t.exit_code),
                             "termination-state")
        node = self.reports.evidence(pod.node_name, pod.uid, pod.ref)
        samples = self.reports.samples(pod.node_name, pod.uid, t)
        record = record_in_message(t.message) if t.message else None
        options: dict[str, Any] = {"torch_version": container.torch_version,
                                   "alloc_conf": container.alloc_conf.value, "node": node,
                                   "samples": samples}
        if record is not None and record.record is not None:
            options["probe_record"] = record.record

        def built(diagnosis: Diagnosis | None, source: str) -> Diagnosed:
            use = probe_use(diagnosis, record) if diagnosis is not None else None
            return Diagnosed(diagnosis, source, node, len(samples), use)

        if t.message:
            found = self.diagnoser.diagnose(t.message, **options)
            if found.detected:
                return built(found, "termination-message")
        try:
            text = self.kube.read_log(
                pod.namespace, pod.name, t.container, previous=t.previous,
                tail_lines=self.log_tail_lines, limit_bytes=self.log_limit_bytes)
        except LogUnavailable as exc:
            metrics.LOG_FETCH_FAILURES.labels(exc.reason).inc()
            log.warning("log of %s [%s] unavailable: %s", pod.ref, t.container, exc)
            if exc.reason == "forbidden":  # final: no point asking again; say so on the pod
                return built(self.diagnoser.diagnose(b"", **options), "log-forbidden")
            return Diagnosed(None, "log", node)
        return built(self.diagnoser.diagnose(text, **options), "log")

    def _write(self, pod: Pod, t: Termination, keys: DiagnosedKeys, diagnosis: Diagnosis,
               found: Diagnosed, container: Container) -> None:
        now = dt.datetime.now(dt.UTC)
        result = notes.diagnosis_annotations(
            diagnosis, t, pod, prefix=self.prefix, previous_keys=keys, source=found.source,
            now=now, node=found.node, alloc_conf=container.alloc_conf, samples=found.samples,
            probe=found.probe)
        self.kube.post_event(ObjectRef(pod.namespace, pod.name, pod.uid),
                             name=result.event_name, reason=result.event_reason,
                             message=result.event_message)
        self.kube.patch_pod_annotations(pod.namespace, pod.name, result.annotations,
                                        uid=pod.uid)
        self._wrote(pod, result.annotations)
        metrics.DIAGNOSES.labels(pod.namespace, diagnosis.kind).inc()
        _count_probe(pod, t, diagnosis, found.probe)
        if t.finished_at is not None:
            metrics.DIAGNOSIS_LATENCY.observe(max((now - t.finished_at).total_seconds(), 0.0))
        log.warning("%s [%s]: %s", pod.ref, t.container, diagnosis.summary)
        if self.annotate_owners:
            self._annotate_owner(pod, result.owner_annotations)

    def _write_failure(self, pod: Pod, t: Termination, keys: DiagnosedKeys,
                       failure: tuple[str, str]) -> None:
        reason, detail = failure
        patch = notes.failure_annotations(t, prefix=self.prefix, previous_keys=keys,
                                          reason=reason, detail=detail,
                                          now=dt.datetime.now(dt.UTC))
        self.kube.patch_pod_annotations(pod.namespace, pod.name, patch, uid=pod.uid)
        self._wrote(pod, patch)
        self.attempts.done((pod.uid, t.key))
        self.failures.pop((pod.uid, t.key))

    def _wrote(self, pod: Pod, patch: Mapping[str, str | None]) -> None:
        """Remember the `diagnosed-key` just written, as the annotation holds it (bounded)."""
        self.written.add(pod.uid, diagnosed_keys(patch[f"{self.prefix}{Annotation.DIAGNOSED_KEY}"]))

    def _annotate_owner(self, pod: Pod, annotations: dict[str, str | None]) -> None:
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

    def _failed(self, pod: Pod, key: tuple[str, str]) -> None:
        namespace, name = pod.namespace, pod.name
        self.attempts.failed(key, lambda: self._look_again(namespace, name))

    def _look_again(self, namespace: str, name: str) -> None:
        try:
            body = self.kube.read_pod(namespace, name)
        except (APIError, names.InvalidName) as exc:  # gone, or the API is down
            log.info("retry of %s/%s: %s", namespace, name, exc)
            return
        self.handle(parse_pod(body, self.prefix))


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
