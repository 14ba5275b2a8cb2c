"""/metrics bodies: rendered once per sampling pass, live process metrics added per scrape."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_helpers import GIB, GPU0, StaticGpus, fake_pods, gpu
from prometheus_client import CollectorRegistry, Gauge

from node_agent.collector import AgentCollector
from node_agent.exposition import Exposition
from node_agent.model import Snapshot
from node_agent.procfs import ProcReader
from node_agent.sampler import Sampler

pytestmark = pytest.mark.unit

OPENMETRICS = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3"


@pytest.fixture
def setup(proc_root: Path):
    gpus = StaticGpus([gpu(0, GPU0, [])])
    sampler = Sampler("n", gpus, ProcReader(proc_root), fake_pods())
    latest: list[Snapshot] = [sampler.sample()]
    collects: list[int] = []

    def current() -> Snapshot:
        collects.append(1)
        return latest[-1]

    registry = CollectorRegistry()
    registry.register(AgentCollector(current, "n"))
    live = CollectorRegistry()
    scrapes = Gauge("live_scrapes", "changes on every scrape", registry=live)
    return gpus, sampler, latest, collects, Exposition(registry, live), scrapes


def test_a_primed_snapshot_is_served_without_collecting_again(setup) -> None:
    _, _, latest, collects, exposition, _ = setup
    exposition.prime(latest[-1])
    collects.clear()
    for _ in range(3):
        body, content_type = exposition.render("", latest[-1])
    assert collects == []
    assert content_type.startswith("text/plain")
    assert b'gpu_auditor_gpu_pods{gpu="0",node="n"' in body


def test_a_new_snapshot_is_rendered_afresh(setup) -> None:
    gpus, sampler, latest, _, exposition, _ = setup
    exposition.prime(latest[-1])
    gpus.gpus = [gpu(0, GPU0, [(1, GIB)]), gpu(1, "GPU-x", [])]
    latest.append(sampler.sample())
    body, _ = exposition.render("", latest[-1])
    assert b'uuid="GPU-x"' in body


def test_live_metrics_are_read_on_every_scrape(setup) -> None:
    _, _, latest, _, exposition, scrapes = setup
    exposition.prime(latest[-1])
    scrapes.set(1)
    first, _ = exposition.render("", latest[-1])
    scrapes.set(2)
    second, _ = exposition.render("", latest[-1])
    assert b"live_scrapes 1.0" in first and b"live_scrapes 2.0" in second


def test_openmetrics_is_negotiated_and_ends_with_one_eof(setup) -> None:
    _, _, latest, _, exposition, _ = setup
    body, content_type = exposition.render(OPENMETRICS, latest[-1])
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n") and body.count(b"# EOF") == 1


def test_formats_asked_for_once_are_primed_after_each_pass(setup) -> None:
    _, sampler, latest, collects, exposition, _ = setup
    exposition.render(OPENMETRICS, latest[-1])
    latest.append(sampler.sample())
    exposition.prime(latest[-1])
    collects.clear()
    exposition.render(OPENMETRICS, latest[-1])
    exposition.render("", latest[-1])
    assert collects == []
