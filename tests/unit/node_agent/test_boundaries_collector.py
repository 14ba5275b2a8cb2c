"""The agent's metric families as a scrape describes them (issue 18, found by
``scripts/mutation.py --modules node_agent.collector``): each family's name and HELP text, which
dashboards and alert descriptions quote, and the per-process family only with --process-labels.
"""

from __future__ import annotations

import pytest

from node_agent.collector import AgentCollector

pytestmark = pytest.mark.unit

HELP = {
    "gpu_auditor_container_gpu_memory_bytes":
        "GPU memory used by a container's processes, summed per GPU, pod and container",
    "gpu_auditor_gpu_memory_total_bytes": "Total GPU memory",
    "gpu_auditor_gpu_memory_used_bytes":
        "Used GPU memory (NVML memory v2: without driver-reserved memory)",
    "gpu_auditor_gpu_memory_free_bytes": "Free GPU memory",
    "gpu_auditor_gpu_memory_reserved_bytes": "GPU memory reserved by the driver",
    "gpu_auditor_gpu_pods": "Pods with a process on the GPU",
    "gpu_auditor_sharing_finding": "1 per pod in a sharing finding",
    "gpu_auditor_agent_nvml_up": "1 when NVML answered in the last pass",
    "gpu_auditor_agent_kubelet_up":
        "1 when the kubelet pod-resources API answered in the last pass",
    "gpu_auditor_agent_collect_duration_seconds": "Duration of the last sampling pass",
    "gpu_auditor_agent_errors_total": "Errors by source since the agent started",
    "gpu_auditor_agent_series_dropped_total":
        "Series left out of a metric by --max-series-per-gpu, summed over sampling passes",
}  # fmt: skip
PROCESS = {
    "gpu_auditor_process_gpu_memory_bytes": "GPU memory used by one process (--process-labels)",
}


def described(collector: AgentCollector) -> dict[str, str]:
    return {f.name: f.doc for f in collector.describe()}


def test_every_family_with_its_help_text() -> None:
    assert described(AgentCollector(lambda: None, "node-1")) == HELP


def test_the_process_family_only_with_process_labels() -> None:
    assert described(AgentCollector(lambda: None, "node-1", process_labels=True)) == {
        **HELP, **PROCESS}
    assert described(AgentCollector(lambda: None, "node-1", process_labels=False)) == HELP
