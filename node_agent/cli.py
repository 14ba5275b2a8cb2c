"""``gpu-auditor-agent``: wires the sources, the sampler, the collector, HTTP and the report."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_auditor.base.errors import ConfigError
from node_agent.agent import Agent, heap_trimmer
from node_agent.collector import AgentCollector
from node_agent.config import Config, api_configured, node_name, parse
from node_agent.dra import DraSlices
from node_agent.exposition import Exposition, process_text, render
from node_agent.fake_source import FakeNvmlSource
from node_agent.history import History
from node_agent.pods import ApiPods, ClusterPods, FakePods, PodSource
from node_agent.procfs import ProcReader
from node_agent.publisher import ReportPublisher
from node_agent.sampler import GpuSource, Sampler

if TYPE_CHECKING:
    from node_agent.http_server import MetricsServer
    from node_agent.kube import AgentApi

log = logging.getLogger("node_agent")


def _fake_pods_path(cfg: Config, nvml: FakeNvmlSource | None) -> Path | None:
    if cfg.pods_fake is not None:
        return cfg.pods_fake
    if nvml is not None and nvml.pods_ref:
        ref = nvml.pods_ref
        if not isinstance(ref, str):
            raise ConfigError(f"{nvml.path}: pods must name a file (relative to it)")
        try:
            path = (nvml.path.parent / ref).resolve()
            found = path.is_file()
        except (OSError, ValueError) as err:  # a NUL byte, a name too long, a link loop
            raise ConfigError(f"{nvml.path}: pods: not a usable file name ({err})") from err
        if not found:
            raise ConfigError(f"{nvml.path}: pods file {path} not found")
        return path
    return None


def build(cfg: Config) -> Agent:
    """Everything the agent runs with; raises ConfigError on bad input files."""
    fake_nvml = FakeNvmlSource(cfg.nvml_fake) if cfg.nvml_fake else None
    gpus: GpuSource
    if fake_nvml is not None:
        gpus = fake_nvml
    else:
        from node_agent.nvml_source import NvmlSource

        gpus = NvmlSource()  # ConfigError where nvidia-ml-py is not installed

    fake_pods_path = _fake_pods_path(cfg, fake_nvml)
    fake_pods = FakePods.from_file(fake_pods_path) if fake_pods_path else None
    node = node_name(cfg, fake_pods.node.name if fake_pods else None)

    report = cfg.report if cfg.report is not None else (not cfg.once and api_configured(cfg))
    api: AgentApi | None = None
    if report or (fake_pods is None and api_configured(cfg)):
        from node_agent.kube import api_client

        api = api_client(str(cfg.kubeconfig) if cfg.kubeconfig else None)

    pods: PodSource
    if fake_pods is not None:
        pods = fake_pods
    else:
        from node_agent.podresources.client import PodResourcesClient

        pods = ClusterPods(PodResourcesClient(cfg.pod_resources_socket),
                           ApiPods(api, node) if api is not None else None,
                           DraSlices(api, node) if api is not None else None)

    sampler = Sampler(node, gpus, ProcReader(cfg.proc_root), pods, History())
    publisher = (ReportPublisher(api, sampler.errors, min_interval=cfg.report_min_interval)
                 if report and api is not None else None)
    if not report and not cfg.once:
        log.info("GPUNodeReport publishing is off (--report to turn it on)")
    return Agent(sampler, cfg.interval, publisher)


def collector_for(agent: Agent, cfg: Config) -> AgentCollector:
    """The agent's metric families, from its latest snapshot."""
    return AgentCollector(agent.latest, agent.sampler.node, cfg.process_labels,
                          cfg.max_series_per_gpu)


def exposition_for(agent: Agent, cfg: Config) -> Exposition:
    """/metrics: the agent's families rendered after each pass, plus live process_* metrics."""
    exposition = Exposition(collector_for(agent, cfg).collect, process_text)
    agent.listeners.append(exposition.prime)
    return exposition


def server_for(agent: Agent, cfg: Config, exposition: Exposition) -> MetricsServer:
    """The HTTP server of /metrics (the latest pass's exposition) and /healthz, bound."""
    from node_agent.http_server import Body, make_server

    return make_server(lambda gzip: Body(*exposition.body(gzip, agent.latest())), agent.health,
                       cfg.bind_address, cfg.port,
                       inline=lambda gzip: exposition.cached(agent.latest(), gzip))


def run_once(agent: Agent, cfg: Config) -> int:
    snapshot = agent.run_once(force_publish=True)
    sys.stdout.write(render(collector_for(agent, cfg).collect()).decode())
    sys.stdout.flush()
    if snapshot is None:
        log.error("the sampling pass failed: no GPU metrics (see the error above)")
        return 1
    if agent.publisher is not None and (snapshot is None or agent.publisher.writes == 0):
        log.error("the GPUNodeReport was not written")
        return 1
    return 0


def serve(agent: Agent, cfg: Config) -> int:
    # A sampling pass holds the GIL for tens of ms on a big node; hand it to a waiting scrape
    # thread every 1 ms instead of Python's default 5 ms, so scrapes stay fast during a pass.
    sys.setswitchinterval(0.001)
    exposition = exposition_for(agent, cfg)
    trimmer = heap_trimmer()
    if trimmer is not None:
        agent.listeners.append(trimmer)
    try:  # bound before the first pass: a port in use is a config error at once
        server = server_for(agent, cfg, exposition)
    except OSError as err:  # address in use, no such address, no permission for the port
        raise ConfigError(f"cannot serve on {cfg.bind_address}:{cfg.port}: "
                          f"{err.strerror or err}") from err
    agent.run_once()  # the first scrape already has data
    agent.start()
    log.info("serving /metrics and /healthz on %s:%d for node %s", cfg.bind_address,
             server.server_address[1], agent.sampler.node)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        agent.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = parse(argv)
        logging.basicConfig(level=cfg.log_level, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        agent = build(cfg)
    except ConfigError as err:
        print(f"gpu-auditor-agent: error: {err}", file=sys.stderr)
        return 2
    if cfg.once:
        return run_once(agent, cfg)
    try:
        return serve(agent, cfg)
    except ConfigError as err:
        print(f"gpu-auditor-agent: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
