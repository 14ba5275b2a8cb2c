"""What the operator does for one pod event or one node report: diagnose and write.

Idempotency: one diagnosis per (pod UID, container, restart count). The pod's
`<prefix>diagnosed-key` annotation records what was written, so operator restarts and watch
re-lists find it done; Events have deterministic names, so a second create is a 409 and never a
duplicate. The Event is created before the annotation: if the operator dies between the two,
the next run writes the annotation and its Event create is a harmless 409.

Failures: a diagnosis that raises or overruns its budget is written once as `diagnosis-failed`
and its key recorded as done (never started again by a later event); a write or log read that
fails is tried again by our own scheduler, with back-off, and never holds up other pods.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller import metrics, names, nodereport, owners, podview
from gpu_auditor.controller.diagnoser import DiagnosisFailed
from gpu_auditor.controller.kube import Gone, KubeApi, KubeError, LogUnavailable
from gpu_auditor.controller.nodereport import (
    UNINTENDED_FINDINGS,
    InvalidReport,
    NodeReport,
    PodSightings,
    Target,
    evidence,
)
from gpu_auditor.controller.scheduler import Scheduler
from gpu_auditor.diagnosis import Diagnosis, NodeEvidence, diagnose_host_oom, validate_alloc_conf

log = logging.getLogger("gpu_auditor.operator")

IGNORE_LABEL = "gpu-auditor.io/ignore"
RETRY_DELAYS = (5.0, 15.0, 45.0, 120.0, *(300.0,) * 8)
"""Seconds before each new attempt at a termination whose log read or write failed, or at a
pod of a node report whose write failed (a kubelet or kwok answering 400/5xx, the API server
restarting, a 403). A terminated pod sends no more events and kopf never retries an event
handler, so the operator schedules these attempts itself: about 45 minutes in all, then the
termination waits for an operator restart and the report for its next change."""
MAX_NODES = 10_000
"""Node reports kept in memory (any agent can write reports under any name)."""


class Diagnoser(Protocol):
    def diagnose(self, text: bytes | str, **options: Any) -> Diagnosis: ...


Schedule = Callable[[float, Callable[[], None]], bool]


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...] = ()
    annotation_prefix: str = notes.DEFAULT_PREFIX
    metrics_port: int = 9402
    metrics_bind_address: str = "0.0.0.0"
    liveness_port: int = 8080
    log_tail_lines: int = 500
    log_limit_bytes: int = 1 << 20
    annotate_owners: bool = True
    diagnosis_timeout: float = 10.0
    diagnosis_workers: int = 2


class _Lru:
    """A bounded map of keys already handled in this process."""

    def __init__(self, capacity: int) -> None:
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def add(self, key: Any, value: object = True) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def get(self, key: Any) -> Any:
        with self._lock:
            return self._items.get(key)

    def pop(self, key: Any) -> Any:
        with self._lock:
            return self._items.pop(key, None)


def count_ignored(reasons: Mapping[str, int]) -> None:
    for reason, n in reasons.items():
        metrics.REPORT_ITEMS_IGNORED.labels(reason).inc(n)


@dataclass
class Services:
    """State the handlers share: API access, config, and bounded in-memory memories."""

    kube: KubeApi
    config: OperatorConfig
    diagnoser: Diagnoser
    schedule: Schedule = field(default_factory=Scheduler)
    """Called as schedule(delay, callback) for our own retries."""
    sightings: PodSightings = field(default_factory=PodSightings)
    reports: _Lru = field(default_factory=lambda: _Lru(MAX_NODES))
    """Node name -> its latest NodeReport."""
    checked: _Lru = field(default_factory=lambda: _Lru(50_000))
    """Terminations examined and final in this process (no OOM, a forbidden log, a failed
    diagnosis): True; or (monotonic time of a failed attempt, attempt count) while retrying."""
    failures: _Lru = field(default_factory=lambda: _Lru(10_000))
    """(pod UID, key) -> (reason, detail) of a failed diagnosis not yet written."""
    sharing_written: _Lru = field(default_factory=lambda: _Lru(50_000))
    sharing_attempts: _Lru = field(default_factory=lambda: _Lru(50_000))
    """(node, pod UID) -> failed attempts at writing that pod's sharing findings."""
    written: _Lru = field(default_factory=lambda: _Lru(50_000))
    """Pod UID -> termination keys this process has written (stale events see them too)."""

    def close(self) -> None:
        """Stop the retries and the diagnosis workers (at operator shutdown)."""
        stop = getattr(self.schedule, "stop", None)
        if stop is not None:
            stop()
        close = getattr(self.diagnoser, "close", None)
        if close is not None:
            close()

    # -- pods ---------------------------------------------------------------------------------

    def pending(self, pod: Mapping[str, Any]) -> list[podview.Termination]:
        """Failed terminations of this pod not yet diagnosed (pure check on the body)."""
        meta = pod.get("metadata") or {}
        done = set(notes.diagnosed_keys(meta.get("annotations"), self.config.annotation_prefix))
        uid = meta.get("uid")
        return [t for t in podview.terminations(pod)
                if t.key not in done and self._due((uid, t.key))]

    def _due(self, key: tuple[Any, str]) -> bool:
        seen = self.checked.get(key)
        if seen is None:
            return True
        if not isinstance(seen, tuple):
            return False
        at, attempts = seen
        delay = RETRY_DELAYS[min(attempts, len(RETRY_DELAYS)) - 1]
        return bool(time.monotonic() - at >= delay)

    def _failed_attempt(self, pod: Mapping[str, Any], key: tuple[Any, str]) -> None:
        seen = self.checked.get(key)
        attempts = seen[1] + 1 if isinstance(seen, tuple) else 1
        self.checked.add(key, (time.monotonic(), attempts))
        if attempts <= len(RETRY_DELAYS):
            meta = pod.get("metadata") or {}
            namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
            self.schedule(RETRY_DELAYS[attempts - 1], lambda: self._look_again(namespace, name))

    def _look_again(self, namespace: str, name: str) -> None:
        try:
            pod = self.kube.read_pod(namespace, name)
        except (KubeError, names.InvalidName) as exc:  # gone, or the API is down
            log.info("retry of %s/%s: %s", namespace, name, exc)
            return
        self.handle_pod(pod)

    def handle_pod(self, pod: Mapping[str, Any]) -> None:
        """Diagnose the pod's pending terminations; never raises (a handler's exception would
        only be logged by kopf, and a terminated pod sends no second event)."""
        uid = (pod.get("metadata") or {}).get("uid")
        for termination in self.pending(pod):
            key = (uid, termination.key)
            try:
                self.diagnose_termination(pod, termination)
            except Gone:
                log.info("pod %s is gone; nothing to write", podview.pod_ref(pod))
                return
            except KubeError as exc:
                log.warning("%s [%s]: %s; trying again later", podview.pod_ref(pod),
                            termination.container, exc)
                self._failed_attempt(pod, key)
            except Exception:
                log.exception("%s [%s]: not diagnosed", podview.pod_ref(pod),
                              termination.container)
                metrics.DIAGNOSIS_FAILURES.labels("internal").inc()
                self.checked.add(key)

    def diagnose_termination(self, pod: Mapping[str, Any], t: podview.Termination) -> None:
        """Diagnose one termination from the watched body, without reading the pod again: a
        stale event (one queued before our own patch) is caught by the in-memory record of what
        this process wrote, and after a restart kopf's fresh listing carries the annotation.
        Measured at 5,000 pods, the extra GET cost about half the median latency."""
        meta = pod.get("metadata") or {}
        ns, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
        prefix = self.config.annotation_prefix
        written = self.written.get(uid)
        keys = list(dict.fromkeys([*notes.diagnosed_keys(meta.get("annotations"), prefix),
                                   *(written if isinstance(written, list) else [])]))
        if t.key in keys:
            return
        spec = podview.container_spec(pod, t.container)
        alloc_conf = podview.current_alloc_conf(spec)
        failure = self.failures.get((uid, t.key))
        diagnosis: Diagnosis | None = None
        source, node = "", None
        if failure is None:
            try:
                diagnosis, source, node = self._diagnose(pod, t, spec, alloc_conf)
            except DiagnosisFailed as exc:
                metrics.DIAGNOSIS_FAILURES.labels(exc.reason).inc()
                log.warning("%s/%s [%s]: diagnosis failed: %s", ns, name, t.container, exc)
                failure = (exc.reason, exc.detail)
                self.failures.add((uid, t.key), failure)
        if failure is not None:
            self._write_failure(pod, t, keys, failure)
            return
        if diagnosis is None:  # the log could not be read this time
            self._failed_attempt(pod, (uid, t.key))
            return
        if not diagnosis.detected:
            self.checked.add((uid, t.key))
            return
        torch = podview.torch_version_hint(spec)
        problems = (validate_alloc_conf(alloc_conf.value, torch_version=torch)
                    if alloc_conf.value else [])
        now = dt.datetime.now(dt.UTC)
        result = notes.diagnosis_annotations(
            diagnosis, t, pod_uid=uid, pod_name=name, prefix=prefix, previous_keys=keys,
            source=source, now=now, node=node, alloc_conf=alloc_conf,
            current_alloc_conf_problems=problems,
        )
        self.kube.post_event(pod, name=result.event_name, reason=result.event_reason,
                             message=result.event_message)
        self.kube.patch_pod_annotations(
            ns, name, notes.clear_stale(meta.get("annotations"), result.annotations, prefix),
            uid=uid)
        self.written.add(uid, [*keys, t.key])
        metrics.DIAGNOSES.labels(ns, diagnosis.kind).inc()
        if t.finished_at:
            try:
                finished = dt.datetime.fromisoformat(str(t.finished_at).replace("Z", "+00:00"))
                metrics.DIAGNOSIS_LATENCY.observe(max((now - finished).total_seconds(), 0.0))
            except (ValueError, TypeError):
                pass
        log.warning("%s/%s [%s]: %s", ns, name, t.container, diagnosis.summary)
        if self.config.annotate_owners:
            self._annotate_owner(pod, result)

    def _write_failure(self, pod: Mapping[str, Any], t: podview.Termination, keys: list[str],
                       failure: tuple[str, str]) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid", "")
        reason, detail = failure
        patch = notes.failure_annotations(
            t, prefix=self.config.annotation_prefix, previous_keys=keys, reason=reason,
            detail=detail, now=dt.datetime.now(dt.UTC))
        self.kube.patch_pod_annotations(meta.get("namespace", ""), meta.get("name", ""), patch,
                                        uid=uid)
        self.written.add(uid, [*keys, t.key])
        self.checked.add((uid, t.key))
        self.failures.pop((uid, t.key))

    def _diagnose(
        self, pod: Mapping[str, Any], t: podview.Termination, spec: Mapping[str, Any],
        alloc_conf: podview.AllocConf,
    ) -> tuple[Diagnosis | None, str, NodeEvidence | None]:
        """(diagnosis, source, node evidence); the diagnosis is None when nothing was read.
        The tenant's text (termination message, log) is diagnosed in a worker process, within
        the budget; raises DiagnosisFailed."""
        if t.host_oom_killed:
            limit, request = podview.memory_limits(spec)
            return (diagnose_host_oom(container=t.container, memory_limit_bytes=limit,
                                      memory_request_bytes=request, exit_code=t.exit_code),
                    "termination-state", None)
        node = self._node_evidence(pod)
        options: dict[str, Any] = {
            "torch_version": podview.torch_version_hint(spec),
            "alloc_conf": alloc_conf.value,
            "node": node,
        }
        if t.message:
            found = self.diagnoser.diagnose(t.message, **options)
            if found.detected:
                return found, "termination-message", node
        meta = pod.get("metadata") or {}
        try:
            text = self.kube.read_log(
                meta.get("namespace", ""), meta.get("name", ""), t.container,
                previous=t.previous, tail_lines=self.config.log_tail_lines,
                limit_bytes=self.config.log_limit_bytes,
            )
        except LogUnavailable as exc:
            metrics.LOG_FETCH_FAILURES.labels(exc.reason).inc()
            log.warning("log of %s [%s] unavailable: %s", podview.pod_ref(pod), t.container, exc)
            if exc.reason == "forbidden":  # final: no point asking again; say so on the pod
                return self.diagnoser.diagnose(b"", **options), "log-forbidden", node
            return None, "log", node
        return self.diagnoser.diagnose(text, **options), "log", node

    def _node_evidence(self, pod: Mapping[str, Any]) -> NodeEvidence | None:
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        if not names.is_subdomain(node_name):
            return None
        report = self.reports.get(node_name)
        if report is None:
            raw = self.kube.read_node_report(node_name)
            if raw is not None:
                try:
                    report = nodereport.parse_report(raw)
                except InvalidReport as exc:
                    metrics.REPORT_ITEMS_IGNORED.labels(exc.reason).inc()
                    log.warning("GPUNodeReport %s ignored: %s", node_name, exc)
                    return None
                self.note_report(report)
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        return evidence(report, uid, podview.pod_ref(pod), self.sightings.get(uid))

    def _annotate_owner(self, pod: Mapping[str, Any], written: notes.Written) -> None:
        meta = pod.get("metadata") or {}
        if not meta.get("ownerReferences"):
            return
        namespace, ref = meta.get("namespace", ""), podview.pod_ref(pod)
        try:
            owner = owners.verified_owner(self.kube, namespace, meta.get("ownerReferences"))
            if owner is None:
                return
            self.kube.patch_workload(
                owner.kind, namespace, owner.name, owner.uid,
                notes.owner_annotations(written, self.config.annotation_prefix, ref))
        except owners.OwnerRefused as exc:
            metrics.OWNER_WRITES_REFUSED.labels(exc.reason).inc()
            log.warning("owner of %s not annotated: %s", ref, exc)
        except Exception as exc:  # the pod's own annotation is written; the owner is a bonus
            log.warning("could not annotate the owner of %s: %s", ref, exc)

    # -- node reports ---------------------------------------------------------------------

    def note_report(self, report: NodeReport) -> None:
        self.reports.add(report.node, report)
        self.sightings.update(report)

    def handle_report(self, report: NodeReport) -> None:
        """Remember the report, then write its unintended findings onto the pods it names: only
        pods it lists with their UID on that GPU, and only if the live pod has that UID and runs
        on the report's node. A pod whose write fails is retried on its own; the others go on."""
        self.note_report(report)
        count_ignored(report.dropped)
        found, ignored = nodereport.targets(report)
        count_ignored(ignored)
        for target in found:
            if self.config.namespaces and target.namespace not in self.config.namespaces:
                # Reports are cluster-wide; an operator watching some namespaces neither reads
                # nor writes pods elsewhere (its Roles stop there).
                count_ignored({"not-watched": 1})
                continue
            self._sharing_attempt(report.node, target)

    def _sharing_attempt(self, node: str, target: Target) -> None:
        key = (node, target.uid)
        try:
            self.annotate_sharing(node, target)
        except Gone:
            self.sharing_attempts.pop(key)
            return
        except Exception as exc:  # 403, 5xx, a refused write: this pod only
            attempts = (self.sharing_attempts.get(key) or 0) + 1
            self.sharing_attempts.add(key, attempts)
            log.warning("sharing finding on %s not written (attempt %d): %s", target.ref,
                        attempts, exc)
            if attempts <= len(RETRY_DELAYS):
                self.schedule(RETRY_DELAYS[attempts - 1],
                              lambda: self._retry_sharing(node, target.uid))
            return
        self.sharing_attempts.pop(key)

    def _retry_sharing(self, node: str, uid: str) -> None:
        """Try a pod again against the node's latest report (it may no longer name it)."""
        report = self.reports.get(node)
        if report is None:
            return
        found, _ = nodereport.targets(report)
        target = next((t for t in found if t.uid == uid), None)
        if target is None:
            self.sharing_attempts.pop((node, uid))
            return
        self._sharing_attempt(node, target)

    def annotate_sharing(self, node: str, target: Target) -> None:
        prefix = self.config.annotation_prefix
        wanted = notes.sharing_annotations(prefix, target.findings, target.ref)
        memo_key = (target.uid, tuple(sorted(wanted.items())))
        if self.sharing_written.get(memo_key):
            return
        pod = self.kube.read_pod(target.namespace, target.name)
        meta = pod.get("metadata") or {}
        why = self._not_this_pod(pod, node, target)
        if why:
            metrics.REPORT_ITEMS_IGNORED.labels(why).inc()
            log.warning("GPUNodeReport %s names %s, which %s: ignored", node, target.ref,
                        "runs on another node" if why == "other-node" else "has another UID")
            return
        if (meta.get("labels") or {}).get(IGNORE_LABEL) == "true":
            return
        existing = meta.get("annotations") or {}
        if all(existing.get(k) == v for k, v in wanted.items()):
            self.sharing_written.add(memo_key)
            return
        for finding in target.findings:
            identity = [finding.kind, finding.gpu_uuid, *sorted(finding.pods)]
            posted = self.kube.post_event(
                pod, name=notes.event_name(target.name, target.uid, *identity),
                reason=UNINTENDED_FINDINGS[finding.kind],
                message=notes.sharing_message(finding, target.ref),
            )
            if posted:
                metrics.SHARING_FINDINGS.labels(finding.kind).inc()
        self.kube.patch_pod_annotations(target.namespace, target.name, wanted, uid=target.uid)
        self.sharing_written.add(memo_key)
        for finding in target.findings:
            log.warning("%s: %s", target.ref, notes.sharing_message(finding, target.ref))

    @staticmethod
    def _not_this_pod(pod: Mapping[str, Any], node: str, target: Target) -> str | None:
        """Why the live pod is not the one the report means: `uid-mismatch`, `other-node`."""
        if (pod.get("metadata") or {}).get("uid") != target.uid:
            return "uid-mismatch"
        if (pod.get("spec") or {}).get("nodeName") != node:
            return "other-node"
        return None

