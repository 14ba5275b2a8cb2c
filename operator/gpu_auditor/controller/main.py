"""`gpu-auditor-operator`: parse flags, build the services, run kopf."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

try:
    import kopf
    from prometheus_client import start_http_server
except ImportError as missing:  # the light install: the CLI and the core only
    raise SystemExit(f"gpu-auditor-operator needs the operator extra ({missing.name} is not "
                     "installed): pip install 'gpu-auditor[operator]'") from None

from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.errors import APIError, APINotFoundError, ConfigError
from gpu_auditor.base.jobkinds import SWITCHES
from gpu_auditor.base.kubeconfig import load_config
from gpu_auditor.base.names import is_label, is_subdomain
from gpu_auditor.base.nodereport import GROUP, PLURAL, VERSION
from gpu_auditor.controller import (
    diagnosischild,
    handlers,  # noqa: F401  (registers the handlers)
    malloctrim,
)
from gpu_auditor.controller.annotations import DEFAULT_PREFIX, MAX_PREFIX
from gpu_auditor.controller.diagnosispool import DEFAULT_BUDGET, DEFAULT_WORKERS, DiagnosisPool
from gpu_auditor.controller.jobpath import DEFAULT_LOG_READS
from gpu_auditor.controller.kube import KubeApi
from gpu_auditor.controller.login import Login
from gpu_auditor.controller.service import OperatorConfig, Services

USER_AGENT = "gpu-auditor-operator"

log = logging.getLogger("gpu_auditor.operator")

REPORTS_WAIT = 120.0
"""Seconds the operator waits at startup for the GPUNodeReport CRD before it gives up."""


def parse_args(argv: Sequence[str] | None = None) -> OperatorConfig:
    parser = argparse.ArgumentParser(
        prog="gpu-auditor-operator",
        description="Watch pods for CUDA OOMs and OOMKills, diagnose them, annotate the pod.",
    )
    parser.add_argument("--namespace", action="append", default=[],
                        help="namespace to watch, by its exact name (repeatable); default: all "
                             "namespaces")
    parser.add_argument("--annotation-prefix", default=DEFAULT_PREFIX)
    parser.add_argument("--metrics-port", type=int, default=9402, help="0 disables /metrics")
    parser.add_argument("--metrics-bind-address", default="0.0.0.0",
                        help="address /metrics listens on (default %(default)s; 127.0.0.1 "
                             "behind a proxy in the same pod)")
    parser.add_argument("--liveness-port", type=int, default=8080, help="0 disables /healthz")
    parser.add_argument("--log-tail-lines", type=int, default=500)
    parser.add_argument("--log-limit-bytes", type=int, default=1 << 20)
    parser.add_argument("--diagnosis-timeout", type=float, default=DEFAULT_BUDGET,
                        help="seconds one diagnosis may take before its worker is killed and "
                             "the failure written on the pod (default %(default)s)")
    parser.add_argument("--diagnosis-workers", type=int, default=DEFAULT_WORKERS,
                        help="diagnosis worker processes at most (default %(default)s)")
    parser.add_argument("--job-kinds", default=",".join(SWITCHES),
                        help="distributed jobs whose pods are grouped, the root cause written "
                             f"on the job's object: comma-separated, of {', '.join(SWITCHES)}; "
                             "empty: none (default: all)")
    parser.add_argument("--group-log-reads", type=int, default=DEFAULT_LOG_READS,
                        help="logs read at most per distributed job's failure (default "
                             "%(default)s); the others are read from their termination state")
    parser.add_argument("--no-owner-annotations", action="store_true",
                        help="do not copy the diagnosis onto the owning Job/Deployment/...")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                        help="kubeconfig file, or several separated by the path separator "
                             "(merged as kubectl merges them); default $KUBECONFIG, else the "
                             "service account, else ~/.kube/config")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    prefix = args.annotation_prefix
    if (not prefix.endswith("/") or not is_subdomain(prefix[:-1])
            or len(prefix) > MAX_PREFIX):
        parser.error(f"--annotation-prefix must look like 'example.com/' (at most {MAX_PREFIX} "
                     "characters)")
    if not 0 < args.diagnosis_timeout <= 600 or not 1 <= args.diagnosis_workers <= 64:
        parser.error("--diagnosis-timeout must be in (0, 600] and --diagnosis-workers in "
                     "[1, 64]")
    # Exact names only: the operator switches kopf's namespace discovery off (see
    # `watch_only_what_we_name`), and kopf then ignores a glob pattern without a word.
    invalid = [n for n in args.namespace if not is_label(n)]
    if invalid:
        parser.error(f"--namespace takes exact namespace names, not patterns: {invalid[0]!r}")
    try:
        ipaddress.ip_address(args.metrics_bind_address)
    except ValueError:
        parser.error(f"--metrics-bind-address must be an IP address, not "
                     f"{args.metrics_bind_address!r}")
    kinds = tuple(dict.fromkeys(k.strip() for k in args.job_kinds.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in SWITCHES]
    if unknown:
        parser.error(f"--job-kinds: unknown {unknown[0]!r} (known: {', '.join(SWITCHES)})")
    if not 0 <= args.group_log_reads <= 10_000:
        parser.error("--group-log-reads must be in [0, 10000]")
    if args.log_tail_lines < 1 or args.log_limit_bytes < 1024:
        parser.error("--log-tail-lines must be >= 1 and --log-limit-bytes >= 1024")
    if args.kubeconfig:
        use_kubeconfig(args.kubeconfig)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return OperatorConfig(
        namespaces=tuple(args.namespace), annotation_prefix=args.annotation_prefix,
        metrics_port=args.metrics_port, metrics_bind_address=args.metrics_bind_address,
        liveness_port=args.liveness_port,
        log_tail_lines=args.log_tail_lines, log_limit_bytes=args.log_limit_bytes,
        annotate_owners=not args.no_owner_annotations,
        diagnosis_timeout=args.diagnosis_timeout, diagnosis_workers=args.diagnosis_workers,
        job_kinds=kinds, group_log_reads=args.group_log_reads,
    )


@kopf.on.startup()
def watch_only_what_we_name(settings: kopf.OperatorSettings, **_: Any) -> None:
    """No cluster discovery at runtime. The operator watches resources it names (pods,
    GPUNodeReports) in namespaces it names (exact `--namespace`s, or all of them): kopf's
    scanning would list and watch every CustomResourceDefinition, and in namespaced mode every
    namespace, only to notice CRDs and namespaces that come and go. Without it, kopf finds the
    resources once at startup (through the API discovery every account may read), so the
    GPUNodeReport CRD must exist before the operator starts (the chart installs it first), and
    a CRD deleted and created again needs an operator restart."""
    settings.scanning.disabled = True


def wait_for_reports(
    api: ApiClient, *, timeout: float = REPORTS_WAIT, poll: float = 5.0,
    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Wait until the API server serves GPUNodeReports: with discovery switched off, kopf
    watches them only if they are served when it starts. False when the answer is still 404
    after `timeout` seconds; True as soon as it is anything else (another error is kopf's to
    report, with the pods' diagnoses going on meanwhile)."""
    deadline = clock() + timeout
    while True:
        try:
            api.request("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}", query={"limit": "1"},
                        timeout=10.0)
            return True
        except APINotFoundError:
            pass
        except APIError as exc:
            log.warning("cannot tell whether GPUNodeReports are served: %s", exc)
            return True
        if clock() >= deadline:
            return False
        log.warning("GPUNodeReports are not served yet (is the CRD %s.%s installed?); "
                    "waiting", PLURAL, GROUP)
        sleep(poll)


def use_kubeconfig(path: str) -> None:
    """Read the kubeconfig(s) at `path` (a `KUBECONFIG`-style list) for every request."""
    os.environ["KUBECONFIG"] = path


def api_client() -> ApiClient:
    """`$KUBECONFIG` (one file or several), else the pod's service account, else
    ~/.kube/config; an exec plugin runs now, so a config that cannot authenticate fails at
    start. Raises ConfigError."""
    return ApiClient(load_config(), user_agent=USER_AGENT)


def main(argv: Sequence[str] | None = None, *,
         diagnose_function: str = diagnosischild.DEFAULT_FUNCTION) -> int:
    """`diagnose_function` (`module:function`, imported in the worker processes) is a test seam:
    the tests hand in a diagnosis that raises or never returns."""
    cfg = parse_args(argv)
    try:
        api = api_client()
    except ConfigError as exc:
        print(f"gpu-auditor-operator: {exc}", file=sys.stderr)
        return 2
    if not wait_for_reports(api):
        print(f"gpu-auditor-operator: the API server does not serve {PLURAL}.{GROUP}/{VERSION}"
              f" after {REPORTS_WAIT:g} s: install the CRD (the chart's crds/ folder) first",
              file=sys.stderr)
        return 1
    pool = DiagnosisPool(size=cfg.diagnosis_workers, budget=cfg.diagnosis_timeout,
                         function=diagnose_function)
    services = Services(kube=KubeApi(api), config=cfg, diagnoser=pool)
    if cfg.metrics_port:
        start_http_server(cfg.metrics_port, addr=cfg.metrics_bind_address)
    malloctrim.start_trimming()
    kopf.run(
        standalone=True,
        clusterwide=not cfg.namespaces,
        namespaces=cfg.namespaces,
        liveness_endpoint=(
            f"http://0.0.0.0:{cfg.liveness_port}/healthz" if cfg.liveness_port else None
        ),
        memo=kopf.Memo(services=services, login=Login(api)),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
