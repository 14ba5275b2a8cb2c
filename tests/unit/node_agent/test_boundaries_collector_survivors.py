"""What the agent's scrape says for figures that are zero or missing (issue 18, mutation
survivors of ``node_agent.collector``): a source without errors counts 0, a container and a
process using 0 bytes are 0 bytes (not 1), and a failed
scrape says why in the log. A hand-built snapshot, literal values."""

from __future__ import annotations

import logging

import pytest
from agent_helpers import GIB, GPU0, Scrape, gpu

from node_agent.collector import AgentCollector
from node_agent.model import (
    Allocated,
    GpuUsage,
    NodeSharing,
    PodRef,
    ProcessUsage,
    Snapshot,
)
from node_agent.sampler import sum_containers

pytestmark = pytest.mark.unit

NODE = "node-1"


def snapshot(*procs: ProcessUsage, errors: dict[str, int] | None = None) -> Snapshot:
    usage = GpuUsage(gpu(0, GPU0, total=80 * GIB), procs, sum_containers(list(procs)))
    return Snapshot(node=NODE, taken_at=1.0, duration_seconds=0.5, nvml_up=True,
                    kubelet_up=True, strategy=NodeSharing(), gpus=(usage,), findings=(),
                    errors=errors if errors is not None else {})


def samples(scrape: Scrape, name: str) -> list[float]:
    return [s.value for f in scrape.collect() for s in f.samples if s.name == name]


def test_a_source_missing_from_the_errors_counts_0() -> None:
    scrape = Scrape(AgentCollector(lambda: snapshot(errors={"nvml": 2}), NODE))
    for source, count in (("nvml", 2.0), ("kubelet", 0.0), ("proc", 0.0), ("apiserver", 0.0)):
        value = scrape.get_sample_value("gpu_auditor_agent_errors_total",
                                        {"node": NODE, "source": source})
        assert value == count, source


POD = PodRef("ml", "train", "uid-1", "main")


def test_a_container_using_0_bytes_is_0_bytes() -> None:
    s = snapshot(ProcessUsage(7, "python", 0, POD, Allocated.TRUE))
    scrape = Scrape(AgentCollector(lambda: s, NODE))
    assert samples(scrape, "gpu_auditor_container_gpu_memory_bytes") == [0.0]


def test_a_process_using_0_bytes_is_0_bytes() -> None:
    s = snapshot(ProcessUsage(7, "python", 0, POD, Allocated.TRUE))
    scrape = Scrape(AgentCollector(lambda: s, NODE, process_labels=True))
    assert samples(scrape, "gpu_auditor_process_gpu_memory_bytes") == [0.0]


def test_a_failed_scrape_logs_why(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> Snapshot:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="node_agent.collector"):
        Scrape(AgentCollector(broken, NODE)).collect()
    assert [r.getMessage() for r in caplog.records] == [
        "building metrics from the snapshot failed"]
