"""Agent flags (docs/contracts.md) and their validation: a bad config exits at start, clearly."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_auditor.base.errors import ConfigError
from node_agent.kube import in_cluster
from node_agent.podresources import DEFAULT_SOCKET
from node_agent.series import DEFAULT_MAX_SERIES_PER_GPU

MAX_SERIES_PER_GPU = 100_000


@dataclass(frozen=True)
class Config:
    node_name: str | None
    bind_address: str
    port: int
    interval: float
    nvml_fake: Path | None
    pods_fake: Path | None
    proc_root: Path
    pod_resources_socket: str
    kubeconfig: Path | None
    report: bool | None  # None: the default (on for the daemon when an API server is known)
    report_min_interval: float
    process_labels: bool
    once: bool
    log_level: str
    max_series_per_gpu: int = DEFAULT_MAX_SERIES_PER_GPU


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-auditor-agent",
        description="gpu-auditor node agent: per-process GPU memory by pod, sharing findings, "
        "Prometheus metrics and the node's GPUNodeReport.",
    )
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                   help="this node's name (env NODE_NAME; default: the fake node's name, "
                   "else the host name)")
    p.add_argument("--bind-address", default="0.0.0.0", help="address to serve on")
    p.add_argument("--port", type=int, default=9401, help="port for /metrics and /healthz")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between sampling passes")
    p.add_argument("--nvml-fake", type=Path, metavar="FILE",
                   help="read GPUs and processes from this YAML instead of NVML")
    p.add_argument("--pods-fake", type=Path, metavar="FILE",
                   help="read the node's pods and GPU allocations from this YAML instead of the "
                   "kubelet and API server (default: the 'pods:' file named in --nvml-fake)")
    p.add_argument("--proc-root", type=Path, default=Path("/proc"), metavar="DIR",
                   help="directory standing for /proc")
    p.add_argument("--pod-resources-socket", default=DEFAULT_SOCKET, metavar="PATH",
                   help="kubelet pod-resources gRPC socket")
    p.add_argument("--kubeconfig", type=Path, metavar="PATH",
                   help="kubeconfig for the API server (else in-cluster config)")
    p.add_argument("--report", action=argparse.BooleanOptionalAction, default=None,
                   help="publish the GPUNodeReport (default: on for the daemon when an API "
                   "server is configured, off with --once)")
    p.add_argument("--report-min-interval", type=float, default=30.0,
                   help="seconds between two GPUNodeReport writes at least")
    p.add_argument("--process-labels", action="store_true",
                   help="one series per process with pid and process labels (they churn)")
    p.add_argument("--max-series-per-gpu", type=int, default=DEFAULT_MAX_SERIES_PER_GPU,
                   metavar="N", help="at most N series per GPU in each per-pod metric (memory, "
                   "sharing findings): the pods or processes with the most memory are kept, the "
                   "rest counted in gpu_auditor_agent_series_dropped_total (default "
                   f"{DEFAULT_MAX_SERIES_PER_GPU})")
    p.add_argument("--once", action="store_true",
                   help="sample once, print the exposition text and exit")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level")
    return p


def parse(argv: Sequence[str] | None = None) -> Config:
    a = parser().parse_args(argv)
    cfg = Config(
        node_name=a.node_name or None,
        bind_address=a.bind_address,
        port=a.port,
        interval=a.interval,
        nvml_fake=a.nvml_fake,
        pods_fake=a.pods_fake,
        proc_root=a.proc_root,
        pod_resources_socket=a.pod_resources_socket,
        kubeconfig=a.kubeconfig,
        report=a.report,
        report_min_interval=a.report_min_interval,
        process_labels=a.process_labels,
        once=a.once,
        log_level=a.log_level,
        max_series_per_gpu=a.max_series_per_gpu,
    )
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    if not 0 < cfg.interval <= 3600:
        raise ConfigError(f"--interval must be in (0, 3600] seconds, got {cfg.interval}")
    if not 0 <= cfg.port <= 65535:
        raise ConfigError(f"--port must be 0..65535, got {cfg.port}")
    if not 1 <= cfg.max_series_per_gpu <= MAX_SERIES_PER_GPU:
        raise ConfigError(f"--max-series-per-gpu must be 1..{MAX_SERIES_PER_GPU}, "
                          f"got {cfg.max_series_per_gpu}")
    if cfg.report_min_interval < 0:
        raise ConfigError("--report-min-interval must be >= 0")
    for flag, path in (("--nvml-fake", cfg.nvml_fake), ("--pods-fake", cfg.pods_fake),
                       ("--kubeconfig", cfg.kubeconfig)):
        if path is not None and not path.is_file():
            raise ConfigError(f"{flag} {path}: no such file")
    if not cfg.proc_root.is_dir():
        raise ConfigError(f"--proc-root {cfg.proc_root}: not a directory")
    if not os.access(cfg.proc_root, os.R_OK | os.X_OK):
        raise ConfigError(f"--proc-root {cfg.proc_root}: not readable by uid {os.geteuid()}")
    if cfg.report and not api_configured(cfg):
        raise ConfigError("--report needs --kubeconfig, or in-cluster config "
                          "(KUBERNETES_SERVICE_HOST is not set)")


def api_configured(cfg: Config) -> bool:
    return cfg.kubeconfig is not None or in_cluster()


def node_name(cfg: Config, fake_node_name: str | None) -> str:
    return cfg.node_name or fake_node_name or socket.gethostname()
