"""The operator's parts, wired once: the OOM path, the sharing path, the node reports they
share, and their retries. The kopf handlers hand each event here.

    pod event     ─► parse_pod ─► OomPath.handle          (oom.py)
                                  └► JobPath.take         (jobpath.py: a distributed job's pod)
    pod event     ─► Trials.follows ─► Trials.follow     (trials.py: a recommendation's trial)
    report event  ─► parse_report ─► SharingPath.handle   (sharing.py)
    both          ─► NodeReports (reports.py), Attempts + RetryTimer (retry.py, retrytimer.py)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_auditor.base.contract import DEFAULT_ANNOTATION_PREFIX
from gpu_auditor.base.jobkinds import SWITCHES
from gpu_auditor.base.nodereport import NodeReport
from gpu_auditor.controller.diagnosispool import Diagnoser
from gpu_auditor.controller.jobpath import DEFAULT_LOG_READS, JobPath
from gpu_auditor.controller.kube import KubeApi
from gpu_auditor.controller.oom import OomPath
from gpu_auditor.controller.pod import Pod, Termination, parse_pod
from gpu_auditor.controller.reports import NodeReports
from gpu_auditor.controller.retry import Attempts, Schedule
from gpu_auditor.controller.retrytimer import RetryTimer
from gpu_auditor.controller.sharing import SharingPath
from gpu_auditor.controller.trials import Trials


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...] = ()
    annotation_prefix: str = DEFAULT_ANNOTATION_PREFIX
    metrics_port: int = 9402
    metrics_bind_address: str = "0.0.0.0"
    liveness_port: int = 8080
    log_tail_lines: int = 500
    log_limit_bytes: int = 1 << 20
    annotate_owners: bool = True
    diagnosis_timeout: float = 10.0
    diagnosis_workers: int = 2
    job_kinds: tuple[str, ...] = SWITCHES
    """`base.jobkinds` switches whose pods are grouped by job; empty: none."""
    group_log_reads: int = DEFAULT_LOG_READS


@dataclass
class Services:
    """What the handlers share: API access, config, and the two paths."""

    kube: KubeApi
    config: OperatorConfig
    diagnoser: Diagnoser
    schedule: Schedule = field(default_factory=RetryTimer)
    reports: NodeReports = field(init=False)
    oom: OomPath = field(init=False)
    sharing: SharingPath = field(init=False)
    jobs: JobPath | None = field(init=False, default=None)
    trials: Trials = field(init=False)

    def __post_init__(self) -> None:
        cfg = self.config
        self.reports = NodeReports(self.kube.read_node_report)
        self.oom = OomPath(self.kube, self.diagnoser, self.reports, Attempts(self.schedule),
                           prefix=cfg.annotation_prefix, log_tail_lines=cfg.log_tail_lines,
                           log_limit_bytes=cfg.log_limit_bytes,
                           annotate_owners=cfg.annotate_owners)
        self.sharing = SharingPath(self.kube, self.reports, Attempts(self.schedule),
                                   prefix=cfg.annotation_prefix, namespaces=cfg.namespaces)
        self.trials = Trials(self.kube, self.schedule, prefix=cfg.annotation_prefix,
                             switches=frozenset(cfg.job_kinds))
        self.oom.trials = self.trials
        if cfg.job_kinds:
            self.jobs = JobPath(self.kube, self.oom, self.oom.attempts, self.schedule,
                                switches=cfg.job_kinds, prefix=cfg.annotation_prefix,
                                log_reads=cfg.group_log_reads)
            self.oom.jobs = self.jobs

    def parse(self, body: Mapping[str, Any]) -> Pod:
        return parse_pod(body, self.config.annotation_prefix)

    def pending(self, body: Mapping[str, Any]) -> list[Termination]:
        """Failed terminations of this pod not yet diagnosed (kopf's cheap filter)."""
        return self.oom.pending(self.parse(body))

    def wants(self, body: Mapping[str, Any]) -> bool:
        """A pod with a termination to diagnose or an Event to post again (kopf's cheap
        filter)."""
        return self.oom.wants(self.parse(body))

    def handle_pod(self, body: Mapping[str, Any]) -> None:
        self.oom.handle(self.parse(body))

    def follows(self, body: Mapping[str, Any]) -> bool:
        """A pod whose state may decide a recommendation's trial (kopf's cheap filter)."""
        return self.trials.follows(body)

    def follow_pod(self, body: Mapping[str, Any]) -> None:
        self.trials.follow(body)

    def handle_report(self, report: NodeReport) -> None:
        self.sharing.handle(report)

    def close(self) -> None:
        """Stop the retries and the diagnosis workers (at operator shutdown)."""
        for part in (self.schedule, self.diagnoser, self.jobs):
            stop = getattr(part, "stop", None) or getattr(part, "close", None)
            if stop is not None:
                stop()
