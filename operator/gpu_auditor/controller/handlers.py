"""kopf handlers: thin edges that hand pods and node reports to `Services`.

Only `@kopf.on.event` handlers: they keep no per-object state, so kopf writes no diff-base or
progress annotations onto the cluster's pods (change-detection handlers would, on every pod).
Neither handler raises: kopf never retries an event handler, so the services schedule their
own retries, and a report is parsed into its typed value here, once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from gpu_auditor.base.contract import IGNORE_LABEL
from gpu_auditor.base.nodereport import GROUP, PLURAL, VERSION, InvalidReport, parse_report
from gpu_auditor.controller import metrics
from gpu_auditor.controller.service import Services

log = logging.getLogger("gpu_auditor.operator")


def _services(memo: Any) -> Services:
    services: Services = memo.services
    return services


def has_failed_container(body: Mapping[str, Any], memo: Any, **_: Any) -> bool:
    """Cheap filter in the event loop: only pods with an undiagnosed failure, or an Event lost
    to a kill to post again, reach a thread."""
    return _services(memo).wants(body)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    # Our own Events carry the diagnoses; kopf's per-handler log Events would add an API write
    # for every pod event it processes. Keep only its errors.
    settings.posting.level = logging.ERROR
    # Pods labelled gpu-auditor.io/ignore=true never leave the API server.
    settings.watching.label_selectors["pods"] = f"{IGNORE_LABEL}!=true"
    # Ask the server to end each watch every 5 minutes and give up on a silent stream after
    # 10: an API server restart or a dead load balancer can leave a TCP stream open but mute.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.inactivity_timeout = 600
    settings.watching.reconnect_backoff = 1.0
    # List pods in pages of 500, not in one response: with 5,000 pods the single list made the
    # operator's memory peak (VmHWM) 57 MiB above its steady state (bench/operator_scale.py).
    settings.watching.chunk_size = 500
    # Handlers block on API calls (3 per diagnosis, more with a log): a bounded pool keeps a
    # burst from starving the rest; 8 queued a 100-pod burst for up to 1.4 s at 5,000 pods,
    # 32 brought the p99 under 0.5 s (bench/results/operator_scale.md). The diagnosis itself
    # runs in worker processes (diagnosispool.py): a handler thread only waits for it.
    settings.execution.max_workers = 32
    # Standalone: one replica (Deployment strategy Recreate); no peering objects needed.
    settings.peering.standalone = True
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10


@kopf.on.cleanup()
def stop_workers(memo: Any, **_: Any) -> None:
    _services(memo).close()


@kopf.on.login()
def login(memo: Any, **_: Any) -> kopf.ConnectionInfo:
    """The operator's own config and credentials (`login.Login`): kubeconfig files merged,
    exec plugins, the service account. Declaring a login keeps kopf from its default, which
    imports the kubernetes package when it is installed."""
    connection: kopf.ConnectionInfo = memo.login()
    return connection


@kopf.on.event("v1", "pods", when=has_failed_container)
def pod_event(body: kopf.Body, type: str | None, memo: Any, **_: Any) -> None:
    if type == "DELETED":
        return
    _services(memo).handle_pod(body)


def follows_trial(body: Mapping[str, Any], memo: Any, **_: Any) -> bool:
    """Cheap filter in the event loop: only a next pod of an owner with a recommendation's
    trial, or a pod the webhook put a setting into, reaches a thread."""
    return _services(memo).follows(body)


@kopf.on.event("v1", "pods", when=follows_trial)
def pod_trial_event(body: kopf.Body, type: str | None, memo: Any, **_: Any) -> None:
    if type == "DELETED":
        return
    _services(memo).follow_pod(body)


@kopf.on.event(GROUP, VERSION, PLURAL)
def node_report_event(body: kopf.Body, type: str | None, memo: Any, **_: Any) -> None:
    if type == "DELETED":
        return
    try:
        report = parse_report(dict(body))
    except InvalidReport as exc:
        metrics.REPORT_ITEMS_IGNORED.labels(exc.reason).inc()
        log.warning("GPUNodeReport %s ignored: %s",
                    str((body.get("metadata") or {}).get("name"))[:80], exc)
        return
    _services(memo).handle_report(report)


__all__ = ["configure", "follows_trial", "has_failed_container", "login", "node_report_event",
           "pod_event", "pod_trial_event", "stop_workers"]
