"""Classification rules, pinned on messages built from figures (GiB)."""

from __future__ import annotations

import pytest
from diagnosis_helpers import GIB, torch_oom

from gpu_auditor.diagnosis import MemorySample, NodeEvidence, OtherPod, diagnose

pytestmark = pytest.mark.unit


def test_near_full_gpu_with_little_reserved_unallocated_memory_is_capacity() -> None:
    # 120 MiB + 1.95 GiB would cover the 2 GiB request, but 120 MiB is no cause.
    log = torch_oom(
        requested=2, total=79.15, free=1.95, process=77.1, allocated=76.1, unallocated=120 / 1024
    )
    diagnosis = diagnose(log)
    assert diagnosis.kind == "capacity"
    assert diagnosis.recommendation.alloc_conf is None


def test_idle_cache_that_needs_only_a_quarter_reclaimed_is_fragmentation() -> None:
    # need = 2 - 1.7 = 0.3 GiB, 0.19 of U 1.6 GiB; U is 2.1 % of the 77.1 GiB reserved
    log = torch_oom(
        requested=2, total=79.15, free=1.7, process=77.3, allocated=75.5, unallocated=1.6
    )
    assert diagnose(log).kind == "fragmentation"


def test_fragmentation_summary_carries_the_numbers() -> None:
    log = torch_oom(
        requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9
    )
    summary = diagnose(log).summary
    assert summary.startswith(
        "fragmentation: 6.90 GiB reserved but unallocated + 1.20 GiB free would cover the "
        "2.00 GiB request"
    )


def test_cap_that_fits_live_memory_plus_request_is_fragmentation_not_fraction_cap() -> None:
    # frag_pinned_segments.log: 1.26 GiB live + 4.20 GiB request fits under the 6.99 GiB cap.
    log = torch_oom(
        requested=4.2,
        total=139.8,
        free=136.14,
        process=3.65,
        allowed=6.99,
        allocated=1.26,
        unallocated=1.89,
    )
    diagnosis = diagnose(log)
    assert diagnosis.kind == "fragmentation"
    assert "memory-fraction-cap" in diagnosis.contributing
    assert "left under the 6.99 GiB cap" in diagnosis.summary


def test_cap_below_live_memory_plus_request_is_memory_fraction_cap() -> None:
    log = torch_oom(
        requested=8,
        total=139.8,
        free=110.3,
        process=27.5,
        allowed=27.96,
        allocated=25,
        unallocated=1.5,
    )
    diagnosis = diagnose(log)
    assert diagnosis.kind == "memory-fraction-cap"
    assert diagnosis.recommendation.alloc_conf is None
    assert any("set_per_process_memory_fraction" in a for a in diagnosis.recommendation.actions)


def test_request_larger_than_the_whole_gpu_is_capacity_even_with_fragmentation() -> None:
    log = torch_oom(requested=200, total=139.8, free=60, process=79, allocated=40, unallocated=38)
    assert diagnose(log).kind == "capacity"


def test_other_processes_covering_the_shortfall_make_gpu_shared() -> None:
    log = torch_oom(
        requested=40,
        total=139.8,
        free=13.42,
        process=0.5,
        allocated=0,
        unallocated=0,
        others=[(872, 125.87)],
    )
    diagnosis = diagnose(log)
    assert diagnosis.kind == "gpu-shared"
    assert diagnosis.figures.other_processes[0].pid == 872
    assert "pid 872: 125.87 GiB" in diagnosis.summary


def test_small_other_process_does_not_make_gpu_shared() -> None:
    log = torch_oom(
        requested=2,
        total=79.15,
        free=1.0,
        process=77.4,
        allocated=76.5,
        unallocated=0.1,
        others=[(99, 0.5)],
    )
    assert diagnose(log).kind == "capacity"


def test_node_report_pods_fill_in_when_the_message_lists_no_processes() -> None:
    log = torch_oom(requested=40, total=139.8, free=13.42, allocated=0, unallocated=0)
    node = NodeEvidence(other_pods=(OtherPod("team-b", "notebook-1", round(125 * GIB)),))
    assert diagnose(log).kind == "unknown"
    assert set(diagnose(log).contributing) == {"gpu-shared", "non-pytorch-memory"}
    diagnosis = diagnose(log, node=node)
    assert diagnosis.kind == "gpu-shared"
    assert "team-b/notebook-1" in diagnosis.summary


def test_node_report_names_the_pod_of_a_process_the_message_lists() -> None:
    log = torch_oom(
        requested=40,
        total=139.8,
        free=13.42,
        process=0.5,
        allocated=0,
        unallocated=0,
        others=[(872, 125.87)],
    )
    node = NodeEvidence(other_pods=(OtherPod("ml", "trainer-0", round(125.8 * GIB), pid=872),))
    other = diagnose(log, node=node).figures.other_processes[0]
    assert (other.namespace, other.pod, other.pid) == ("ml", "trainer-0", 872)


def test_pod_not_allocated_the_gpu_is_told_to_request_one() -> None:
    log = torch_oom(
        requested=40,
        total=139.8,
        free=13.42,
        process=0.5,
        allocated=0,
        unallocated=0,
        others=[(872, 125.87)],
    )
    diagnosis = diagnose(log, node=NodeEvidence(allocated=False))
    assert any("did not allocate" in a for a in diagnosis.recommendation.actions)


def test_process_memory_outside_pytorch_covering_the_shortfall_is_non_pytorch_memory() -> None:
    log = torch_oom(requested=4, total=79.15, free=1, process=77.9, allocated=60, unallocated=1)
    assert diagnose(log).kind == "non-pytorch-memory"


def test_cuda_context_sized_non_pytorch_memory_is_not_blamed() -> None:
    log = torch_oom(
        requested=2, total=139.8, free=1.72, process=138.08, allocated=137.35, unallocated=0.0005
    )
    diagnosis = diagnose(log)
    assert diagnosis.kind == "capacity"
    assert "non-pytorch-memory" not in diagnosis.contributing


def test_figures_that_show_room_for_the_request_are_unknown() -> None:
    log = torch_oom(requested=1, total=79.15, free=10, process=60, allocated=58, unallocated=1)
    assert diagnose(log).kind == "unknown"


def test_steadily_growing_samples_make_leak_primary_over_capacity() -> None:
    log = torch_oom(requested=2, total=79.15, free=1.0, process=78, allocated=76.9, unallocated=0.1)
    samples = [MemorySample(t * 10.0, round((40 + t) * GIB)) for t in range(20)]
    diagnosis = diagnose(log, samples=samples)
    assert diagnosis.kind == "leak"
    assert "capacity" in diagnosis.contributing
    assert diagnosis.growth is not None and diagnosis.growth.source == "samples"
    assert any(".item()" in a for a in diagnosis.recommendation.actions)


def test_leak_does_not_hide_another_pod_on_the_gpu() -> None:
    log = torch_oom(
        requested=40,
        total=139.8,
        free=13.42,
        process=0.5,
        allocated=0,
        unallocated=0,
        others=[(872, 125.87)],
    )
    samples = [MemorySample(float(t), round((1 + t) * GIB)) for t in range(10)]
    diagnosis = diagnose(log, samples=samples)
    assert diagnosis.kind == "gpu-shared"
    assert "leak" in diagnosis.contributing


def test_node_growth_rate_alone_is_only_a_contributing_leak() -> None:
    log = torch_oom(requested=2, total=79.15, free=1.0, process=78, allocated=76.9, unallocated=0.1)
    diagnosis = diagnose(log, node=NodeEvidence(growth_bytes_per_second=50 * 2**20))
    assert diagnosis.kind == "capacity"
    assert "leak" in diagnosis.contributing


def test_no_oom_in_the_log_is_not_detected_even_with_samples() -> None:
    samples = [MemorySample(float(t), round((1 + t) * GIB)) for t in range(10)]
    diagnosis = diagnose("epoch 1 done\nepoch 2 done\n", samples=samples)
    assert (diagnosis.detected, diagnosis.kind, diagnosis.oom_count) == (False, "unknown", 0)
    assert diagnosis.contributing == ("leak",)
