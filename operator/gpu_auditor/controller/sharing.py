"""The sharing path: a node report's unintended findings written onto the pods involved.

Only pods the report lists with their UID on the finding's GPU (`reports.targets`), in a
namespace the operator watches, and only if the live pod (read now, parsed once) has that UID,
runs on the report's node and is not ignored. A pod whose write fails is tried again on its
own, against the node's latest report; the others go on.
"""

from __future__ import annotations

import logging

from gpu_auditor.base.errors import APINotFoundError
from gpu_auditor.base.nodereport import NodeReport
from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller import metrics
from gpu_auditor.controller.kube import KubeApi, ObjectRef
from gpu_auditor.controller.lru import Lru
from gpu_auditor.controller.pod import Pod, parse_pod
from gpu_auditor.controller.reports import NodeReports, Target, count_ignored, targets
from gpu_auditor.controller.retry import Attempts

log = logging.getLogger("gpu_auditor.operator")


class SharingPath:
    def __init__(self, kube: KubeApi, reports: NodeReports, attempts: Attempts, *,
                 prefix: str, namespaces: tuple[str, ...] = ()) -> None:
        self.kube = kube
        self.reports = reports
        self.attempts = attempts
        """(node, pod UID) -> failed attempts at writing that pod's findings."""
        self.prefix = prefix
        self.namespaces = frozenset(namespaces)
        """The namespaces watched (`--namespace`); empty: all of them."""
        self.written = Lru(50_000)
        """(pod UID, the annotations written) already on the pod."""

    def handle(self, report: NodeReport) -> None:
        """Remember the report, then write its unintended findings onto the pods it names."""
        self.reports.note(report)
        count_ignored(report.dropped)
        found, ignored = targets(report)
        count_ignored(ignored)
        for target in found:
            if self.namespaces and target.namespace not in self.namespaces:
                # Reports are cluster-wide; an operator watching some namespaces neither reads
                # nor writes pods elsewhere (its Roles stop there).
                metrics.REPORT_ITEMS_IGNORED.labels("not-watched").inc()
                continue
            self._attempt(report.node, target)

    def _attempt(self, node: str, target: Target) -> None:
        key = (node, target.uid)
        try:
            self.annotate(node, target)
        except APINotFoundError:
            self.attempts.forget(key)
            return
        except Exception as exc:  # 403, 5xx, a refused write: this pod only
            attempts = self.attempts.failed(key, lambda: self._retry(node, target.uid))
            log.warning("sharing finding on %s not written (attempt %d): %s", target.ref,
                        attempts, exc)
            return
        self.attempts.forget(key)

    def _retry(self, node: str, uid: str) -> None:
        """Try a pod again against the node's latest report (it may no longer name it)."""
        report = self.reports.get(node)
        if report is None:
            return
        found, _ = targets(report)
        target = next((t for t in found if t.uid == uid), None)
        if target is None:
            self.attempts.forget((node, uid))
            return
        self._attempt(node, target)

    def annotate(self, node: str, target: Target) -> None:
        wanted = notes.sharing_annotations(self.prefix, target.findings, target.ref)
        memo_key = (target.uid, tuple(sorted(wanted.items())))
        if self.written.get(memo_key):
            return
        pod = parse_pod(self.kube.read_pod(target.namespace, target.name), self.prefix)
        why = self._not_this_pod(pod, node, target)
        if why:
            metrics.REPORT_ITEMS_IGNORED.labels(why).inc()
            log.warning("GPUNodeReport %s names %s, which %s: ignored", node, target.ref,
                        "runs on another node" if why == "other-node" else "has another UID")
            return
        if pod.ignored:
            return
        existing = {f"{self.prefix}{name}": value for name, value in pod.annotations}
        if all(existing.get(k) == v for k, v in wanted.items()):
            self.written.add(memo_key)
            return
        about = ObjectRef(pod.namespace, pod.name, pod.uid)
        for finding in target.findings:
            identity = [finding.kind.value, finding.gpu_uuid, *sorted(finding.pods)]
            posted = self.kube.post_event(
                about, name=notes.event_name(target.name, target.uid, *identity),
                reason=notes.sharing_event_reason(finding),
                message=notes.sharing_message(finding, target.ref),
            )
            if posted:
                metrics.SHARING_FINDINGS.labels(finding.kind).inc()
        self.kube.patch_pod_annotations(target.namespace, target.name, wanted, uid=target.uid)
        self.written.add(memo_key)
        for finding in target.findings:
            log.warning("%s: %s", target.ref, notes.sharing_message(finding, target.ref))

    @staticmethod
    def _not_this_pod(pod: Pod, node: str, target: Target) -> str | None:
        """Why the live pod is not the one the report means: `uid-mismatch`, `other-node`."""
        if pod.uid != target.uid:
            return "uid-mismatch"
        if pod.node_name != node:
            return "other-node"
        return None
