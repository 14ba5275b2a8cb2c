"""Classification rules, pinned on messages built from figures (GiB)."""

from __future__ import annotations

import json
import math
import re

import pytest

from gpu_auditor.diagnosis import MemorySample, NodeEvidence, OtherPod, diagnose, formats
from gpu_auditor.diagnosis.classify import Verdict, classify, full_gpu_margin
from gpu_auditor.diagnosis.model import (
    Figures,
    Growth,
    OomEvent,
    OtherProcess,
)
from gpu_auditor.diagnosis.phase import STARTUP
from gpu_auditor.diagnosis.proberecord import ProbeRecord, parse_record
from gpu_auditor.diagnosis.recommend import ENGINE_DUMMY_RUN_FIX, ENGINE_WARM_UP_FIX
from gpu_auditor.diagnosis.thresholds import FRAG_STEADY_STEPS

from .diagnosis_helpers import GIB, PROGRESS, torch_oom

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
    # need = 2 - 1.7 (+ the 12.24 MiB margin) = 0.31 GiB, 0.19 of U 1.6 GiB; U is 2.1 % of the
    # 77.1 GiB reserved: material for a job that made progress (0.5 %)
    log = torch_oom(
        requested=2, total=79.15, free=1.7, process=77.3, allocated=75.5, unallocated=1.6
    )
    assert diagnose(PROGRESS + log).kind == "fragmentation"


def test_idle_cache_of_2_percent_is_capacity_before_the_first_step() -> None:
    # the same figures with no step finished before the failure: 2.1 % idle is under the quarter
    # of the reservation a job without progress needs (FRAG_MIN_SHARE_WITHOUT_PROGRESS)
    log = torch_oom(
        requested=2, total=79.15, free=1.7, process=77.3, allocated=75.5, unallocated=1.6
    )
    diagnosis = diagnose(log)
    assert (diagnosis.kind, diagnosis.contributing) == ("capacity", ("fragmentation",))
    assert diagnosis.recommendation.alloc_conf is None
    assert "no step of the failing work finished before the failure" in diagnosis.summary
    # a setting may still be named as an action, never as the recommendation
    assert diagnosis.recommendation.actions[-1] == (
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True may recover part of the 1.60 GiB "
        "reserved but unallocated, but not the room the job needs beyond it: not recommended "
        "as the fix"
    )


def test_fragmentation_summary_carries_the_numbers() -> None:
    log = torch_oom(
        requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9
    )
    summary = diagnose(PROGRESS + log).summary
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
    # issue 24: 124.88 GiB outside this process's PyTorch, more than the 0 bytes it reserved,
    # is another process even before the node report names it
    assert diagnose(log).kind == "gpu-shared"
    assert set(diagnose(log).contributing) == {"non-pytorch-memory"}
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


# Boundary table for the classifier: each threshold from both sides, one rule deciding each pair.

G = 2**30
M = 2**20
DEFAULT = object()
MARGIN = 12_834_570
"""A full GPU's margin for a free and a request figure both printed in GiB (issue 24): the
2 MiB cudaMalloc needs beyond the request + half the last printed digit (0.005 GiB, 5,368,709
bytes) of each figure. Free memory up to request + MARGIN - 1 is a full GPU; from request +
MARGIN the request fits. Literal, not the production constants."""


def verdict(
    *,
    R: int | None,
    T: int | None,
    F: int | None,
    A: int | None,
    U: int = 0,
    P: object = DEFAULT,
    L: int | None = None,
    others: tuple[int, ...] = (),
    family: str = formats.TORCH,
    phase: str | None = None,
    growth: Growth | None = None,
    progressed: bool = False,
    steps: int | None = None,
    framework: str = "pytorch",
) -> Verdict:
    """``progressed``: a steady run (``FRAG_STEADY_STEPS`` steps); ``steps`` says how many."""
    if steps is None:
        steps = FRAG_STEADY_STEPS if progressed else 0
    process = (None if A is None else A + U + 512 * M) if P is DEFAULT else P
    figures = Figures(
        requested_bytes=R,
        total_bytes=T,
        free_bytes=F,
        process_bytes=process,  # type: ignore[arg-type]
        allocated_bytes=A,
        reserved_unallocated_bytes=U,
        allowed_bytes=L,
        other_processes=tuple(OtherProcess(1000 + i, b) for i, b in enumerate(others)),
    )
    event = OomEvent(family, framework, "CUDA out of memory", figures)
    return classify(event, growth=growth, phase=phase, steps=steps)


def kind(**kw: object) -> str:
    return verdict(**kw).kind  # type: ignore[arg-type]


def _growth(grew: int, source: str = "samples") -> Growth:
    return Growth(source, 10, 40 * G, 40 * G + grew, 1.0)


CAPACITY = {"R": 2 * G, "T": 80 * G, "F": 1 * G + MARGIN, "A": 77 * G}  # shortfall 1 GiB


def _record(
    request: int,
    large_free: int,
    small_free: int = 0,
    status: str = "ok",
    device_free: int | None = None,
) -> ProbeRecord:
    raw = {
        "probe": "gpu-auditor", "v": 1, "status": status, "request_bytes": request,
        "pools": {
            "large": {"free_bytes": large_free, "largest_free_bytes": 0},
            "small": {"free_bytes": small_free, "largest_free_bytes": 0},
        },
        **({} if device_free is None else {"device_free_bytes": device_free}),
    }  # fmt: skip
    parsed = parse_record(json.dumps(raw))
    assert parsed.record is not None, parsed.reason
    return parsed.record


def test_request_one_byte_above_the_gpu_is_capacity_and_fits_a_margin_below_the_free() -> None:
    # an empty 80 GiB GPU: nothing else is in play, the request alone decides. One byte above
    # the GPU it alone exceeds it; equal to the free memory it no longer fits (issue 24: a full
    # GPU has a margin), so the summary names the free memory instead
    base = {"T": 80 * G, "F": 80 * G, "A": 0}
    assert verdict(R=80 * G + 1, **base).summary == (
        "capacity: the 80.00 GiB request alone exceeds the GPU's 80.00 GiB"
    )
    assert verdict(R=80 * G, **base).summary.startswith(
        "capacity: the 80.00 GiB request found 80.00 GiB free on a 80.00 GiB GPU, within the "
        "12.24 MiB a new segment needs beyond the request near a full GPU (allocation "
        "granularity and the figures' rounding): the GPU was full; "
    )
    # the new boundary: free = request + margin fits (the figures show room), one byte more
    # requested does not
    assert kind(R=80 * G - MARGIN, **base) == "unknown"
    assert kind(R=80 * G - MARGIN + 1, **base) == "capacity"


def test_cap_binds_when_live_memory_plus_request_exceeds_it_by_one_byte() -> None:
    # L 8 GiB on an 80 GiB GPU with 70 GiB free. A + R = L + 1: the cap, with the device's room
    # (F >= R). At A + R = L the headroom L - reserved = R covers it: the figures show room.
    base = {"T": 80 * G, "F": 70 * G, "A": 4 * G, "L": 8 * G}
    v = verdict(R=4 * G + 1, **base)
    assert v.kind == "memory-fraction-cap"
    assert v.summary.startswith("memory-fraction-cap: 4.00 GiB allocated + the 4.00 GiB request")
    assert kind(R=4 * G, **base) == "unknown"


def test_cap_only_counts_reserved_but_unallocated_memory_as_the_devices_room() -> None:
    # L 8 GiB, A 6 GiB, U 1 GiB, R 4 GiB: A + R = 10 GiB > L (binding). F - margin + U = R:
    # the device and the idle cache had the room, the cap withheld it. One byte less free and
    # it is not the cap alone: capacity (the idle 1 GiB + the 1 GiB headroom cannot serve
    # 4 GiB). Issue 24 moved the pair from F = 3 GiB to F = 3 GiB + the margin.
    base = {"R": 4 * G, "T": 80 * G, "A": 6 * G, "U": 1 * G, "L": 8 * G}
    assert kind(F=3 * G + MARGIN, **base) == "memory-fraction-cap"  # F < R: only U makes it
    assert kind(F=3 * G + MARGIN - 1, **base) == "capacity"


def test_a_cap_at_the_gpus_total_is_ignored_one_byte_below_it_binds() -> None:
    # Figures printed to 0.01 GiB can add up to a few MiB over the total: here A + R is 1 byte
    # over T. With L = T (fraction 1.0) there is no cap: the other process's 10 GiB covers the
    # 10 GiB shortfall, gpu-shared. One byte below T the cap binds, and a binding cap is not
    # another pod's fault (nor the cap's alone: F + U < R): capacity. (F carries the full-GPU
    # margin of issue 24, so that the usable free is 10 GiB + 1.)
    base = {
        "R": 20 * G + 1,
        "T": 80 * G,
        "F": 10 * G + 1 + MARGIN,
        "A": 60 * G,
        "others": (10 * G,),
    }
    assert kind(L=80 * G, **base) == "gpu-shared"
    assert kind(L=80 * G + 1, **base) == "gpu-shared"
    assert kind(L=80 * G - 1, **base) == "capacity"


def test_other_processes_count_from_one_gib() -> None:
    # shortfall R - F = 0.5 GiB, well under O: only the 1 GiB floor decides
    base = {"R": 2 * G + 512 * M, "T": 80 * G, "F": 2 * G, "A": 76 * G}
    v = verdict(others=(1 * G,), **base)
    assert v.kind == "gpu-shared"
    below = verdict(others=(1 * G - 1,), **base)
    assert below.kind == "capacity" and "gpu-shared" not in below.contributing


def test_other_processes_must_cover_the_shortfall() -> None:
    # F 1.5 GiB, R 3 GiB: shortfall 1.5 GiB + the full-GPU margin (issue 24); O = 1.5 GiB +
    # margin covers it, one byte less does not (and is still above the 1 GiB floor, so it
    # contributes). F is not exactly 1 GiB: PyTorch prints that as "1024.00 MiB" (a smaller
    # rounding, so another margin)
    base = {"R": 3 * G, "T": 80 * G, "F": 1 * G + 512 * M, "A": 76 * G}
    assert kind(others=(G + 512 * M + MARGIN,), **base) == "gpu-shared"
    v = verdict(others=(G + 512 * M + MARGIN - 1,), **base)
    assert (v.kind, v.contributing) == ("capacity", ("gpu-shared",))


def test_other_processes_are_not_blamed_when_the_figures_show_room() -> None:
    # another process holds 5 GiB; F = R + margin: the device had the request's room, no
    # shortfall for anyone to cause (the figures show room: unknown); one byte less free is a
    # 1-byte shortfall. F = R is a full GPU since issue 24 (the pair moved by the margin).
    base = {"R": 2 * G, "T": 80 * G, "A": 70 * G}
    v = verdict(F=2 * G + MARGIN, others=(5 * G,), **base)
    assert (v.kind, v.contributing) == ("unknown", ("gpu-shared",))
    assert "shows room" in v.summary or "room" in v.summary
    assert kind(F=2 * G + MARGIN - 1, others=(5 * G,), **base) == "gpu-shared"
    assert kind(F=2 * G, others=(5 * G,), **base) == "gpu-shared"


def test_other_processes_are_summed() -> None:
    # two processes of 0.75 GiB: 1.5 GiB together, over the floor and the 1.25 GiB shortfall
    base = {"R": 2 * G + 256 * M, "T": 80 * G, "F": 1 * G, "A": 76 * G}
    assert kind(others=(768 * M, 768 * M), **base) == "gpu-shared"
    assert kind(others=(768 * M,), **base) == "capacity"


def test_a_binding_cap_is_not_blamed_on_another_process() -> None:
    # L 40 GiB, R 2 GiB, O 10 GiB covers the 1 GiB shortfall. A = 38 GiB: A + R = L, the cap
    # does not bind, gpu-shared. One byte more allocated and the cap binds (F + U < R, so it
    # is not the cap alone either): capacity, the other process only contributing.
    base = {"R": 2 * G, "T": 80 * G, "F": 1 * G, "L": 40 * G, "others": (10 * G,)}
    assert kind(A=38 * G, **base) == "gpu-shared"
    v = verdict(A=38 * G + 1, **base)
    assert (v.kind, v.contributing) == ("capacity", ("gpu-shared",))


def test_without_a_request_figure_the_gpu_is_full_at_5_percent_free() -> None:
    # CUDA error: out of memory (no figures of its own): 100 GiB GPU, 5 % = 5 GiB
    base = {"R": None, "T": 100 * G, "A": None, "P": None, "others": (2 * G,)}
    raw = {"family": formats.TORCH_RAW}
    assert kind(F=5 * G, **base, **raw) == "gpu-shared"
    assert kind(F=5 * G + 1, **base, **raw) == "unknown"
    # the 1 GiB floor holds here too
    assert kind(F=0, **{**base, "others": (1 * G - 1,)}, **raw) == "unknown"


def test_without_request_or_free_figures_a_big_other_process_is_the_finding() -> None:
    raw = {"R": None, "T": None, "F": None, "A": None, "P": None, "family": formats.TORCH_RAW}
    assert kind(others=(1 * G,), **raw) == "gpu-shared"
    assert kind(others=(1 * G - 1,), **raw) == "unknown"


def test_fragmentation_while_the_need_is_at_most_0_40_of_the_idle_cache() -> None:
    # a job that made progress (U 10 GiB is 14 % of the 70 GiB reserved: material at 0.5 %);
    # the usable free is F - MARGIN (issue 24)
    base = {"R": 10 * G, "T": 80 * G, "A": 60 * G, "U": 10 * G, "progressed": True}
    v = verdict(F=6 * G + MARGIN, **base)  # need 4 GiB = 0.40 * U
    assert v.kind == "fragmentation"
    over = verdict(F=6 * G + MARGIN - 1, **base)  # need 4 GiB + 1
    assert over.kind == "capacity"
    assert "fragmentation" in over.contributing  # the cache would cover it, packed
    assert "would have to be reclaimed" in over.summary


def test_fourteen_percent_idle_is_no_fragmentation_without_progress() -> None:
    # the need pair above before the job finished a step: 14 % idle is under the quarter of the
    # reservation (FRAG_MIN_SHARE_WITHOUT_PROGRESS): it contributes, and the summary says why
    # it is no fix
    base = {"R": 10 * G, "T": 80 * G, "A": 60 * G, "U": 10 * G}
    v = verdict(F=6 * G + MARGIN, **base)
    assert (v.kind, v.contributing) == ("capacity", ("fragmentation",))
    assert "would have to be reclaimed" not in v.summary
    assert (
        "no step of the failing work finished before the failure and the 10.00 GiB idle is 14% of"
        in v.summary
    )


def test_fragmentation_needs_the_room_to_be_short_of_the_request() -> None:
    # room = R (F = R + MARGIN since issue 24): the request fits, nothing to explain (unknown).
    # One byte short: fragmentation (for a job that made progress).
    base = {"R": 10 * G, "T": 80 * G, "A": 60 * G, "U": 10 * G, "progressed": True}
    assert kind(F=10 * G + MARGIN, **base) == "unknown"
    assert kind(F=10 * G + MARGIN - 1, **base) == "fragmentation"


def test_the_idle_cache_must_cover_what_the_room_lacks() -> None:
    # need 0.40 of U is already too much, so R = U + room is capacity with fragmentation
    # contributing, and one byte more is capacity without it: the cache could not cover it.
    # The room is F - MARGIN (issue 24); a job that made progress (U is 14 % of reserved).
    base = {"T": 80 * G, "F": 1 * G + MARGIN, "A": 60 * G, "U": 10 * G, "progressed": True}
    v = verdict(R=11 * G, **base)
    assert (v.kind, "fragmentation" in v.contributing) == ("capacity", True)
    v = verdict(R=11 * G + 1, **base)
    assert (v.kind, "fragmentation" in v.contributing) == ("capacity", False)


def test_idle_cache_counts_from_20_mib() -> None:
    # a small capped job: L = reserved + 60 MiB, R 64 MiB, so need 4 MiB (0.2 of U). reserved
    # ~1 GiB: its 0.5 % (5 MiB) is under the 20 MiB floor, which alone decides.
    # (a job that made progress: without, the quarter of ~1 GiB, 256 MiB, decides; below)
    capped = {"R": 64 * M, "T": 80 * G, "F": 70 * G, "A": 1 * G, "L": 1 * G + 80 * M}
    inside = verdict(U=20 * M, progressed=True, **capped)  # type: ignore[arg-type]
    assert inside.kind == "fragmentation"
    assert "left under the 1.08 GiB cap" in inside.summary
    outside = verdict(U=20 * M - 1, progressed=True, **capped)  # type: ignore[arg-type]
    # not fragmentation: the device had room and the cap's headroom (60 MiB + 1) did not
    assert outside.kind == "memory-fraction-cap"
    assert "fragmentation" not in outside.contributing
    # no progress: 20 MiB is 2 % of the reservation, under the quarter: it only contributes
    early = verdict(U=20 * M, **capped)  # type: ignore[arg-type]
    assert (early.kind, early.contributing) == ("memory-fraction-cap", ("fragmentation",))


def test_idle_cache_counts_from_half_a_percent_of_reserved() -> None:
    # reserved 100 GiB either way; U = 512 MiB is 0.5 % of it. R 256 MiB, F 128 MiB: need
    # 128 MiB + the 2.01 MiB margin, a quarter of U, far above the 20 MiB floor: only the share
    # decides (for a job that made progress: FRAG_MIN_SHARE_OF_RESERVED).
    base = {"R": 256 * M, "T": 140 * G, "F": 128 * M, "progressed": True}
    assert kind(A=100 * G - 512 * M, U=512 * M, **base) == "fragmentation"
    v = verdict(A=100 * G - 512 * M + 1, U=512 * M - 1, **base)
    assert v.kind == "capacity" and "fragmentation" not in v.contributing
    # without progress 0.5 % is far under the quarter: material, so it contributes; under 0.5 %
    # it does not even contribute
    v = verdict(A=100 * G - 512 * M, U=512 * M, R=256 * M, T=140 * G, F=128 * M)
    assert (v.kind, v.contributing) == ("capacity", ("fragmentation",))
    v = verdict(A=100 * G - 512 * M + 1, U=512 * M - 1, R=256 * M, T=140 * G, F=128 * M)
    assert (v.kind, v.contributing) == ("capacity", ())


def test_no_fragmentation_verdict_while_the_optimizer_creates_its_state() -> None:
    base = {"R": 10 * G, "T": 80 * G, "F": 8 * G, "A": 60 * G, "U": 10 * G, "progressed": True}
    assert kind(phase="backward", **base) == "fragmentation"
    v = verdict(phase="optimizer-step", **base)
    assert (v.kind, v.contributing) == ("capacity", ("fragmentation",))


def test_no_fragmentation_verdict_while_the_model_is_loaded() -> None:
    # issue 24: loading the weights is many tensors that all stay, like the optimizer's state
    base = {"R": 10 * G, "T": 80 * G, "F": 8 * G, "A": 60 * G, "U": 10 * G, "progressed": True}
    assert kind(phase="forward", **base) == "fragmentation"
    v = verdict(phase="loading", **base)
    assert (v.kind, v.contributing) == ("capacity", ("fragmentation",))
    # ...with a quarter idle and no progress too
    quarter = {"R": 10 * G, "T": 80 * G, "F": 8 * G, "A": 30 * G, "U": 10 * G}
    assert kind(phase="forward", **quarter) == "fragmentation"
    v = verdict(phase="loading", **quarter)
    assert (v.kind, v.contributing) == ("capacity", ("fragmentation",))


def test_capacity_contributes_when_defragmenting_leaves_under_5_percent() -> None:
    # T 100 GiB (5 % = 5 GiB), U 8 GiB, R 4 GiB: U + room - R is 5 GiB at room 1 GiB (F 1 GiB
    # + MARGIN since issue 24; need 3 GiB, within 0.40 of U either way; a job that made progress)
    base = {"R": 4 * G, "T": 100 * G, "A": 80 * G, "U": 8 * G, "progressed": True}
    v = verdict(F=1 * G + MARGIN, **base)
    assert (v.kind, v.contributing) == ("fragmentation", ())
    v = verdict(F=1 * G + MARGIN - 1, **base)
    assert (v.kind, v.contributing) == ("fragmentation", ("capacity",))


def test_under_a_cap_thin_headroom_is_measured_against_the_cap() -> None:
    # L 40 GiB on a 100 GiB GPU with 50 GiB free: 5 % of L is 2 GiB (of T it would be 5 GiB).
    # A 30 GiB, U 3 GiB: room = the cap's 7 GiB headroom. R 8 GiB: need 1 GiB (a third of U),
    # U + room - R = 2 GiB, not thin; one byte more requested and it is. (A job that made
    # progress: U is 9 % of the 33 GiB reserved.)
    base = {"T": 100 * G, "F": 50 * G, "A": 30 * G, "U": 3 * G, "L": 40 * G, "progressed": True}
    v = verdict(R=8 * G, **base)
    assert (v.kind, v.contributing) == ("fragmentation", ("memory-fraction-cap",))
    v = verdict(R=8 * G + 1, **base)
    assert (v.kind, v.contributing) == ("fragmentation", ("memory-fraction-cap", "capacity"))


def test_non_pytorch_memory_beyond_1_5_gib_must_cover_the_shortfall() -> None:
    # F 1 GiB + MARGIN, R 2 GiB: shortfall 1 GiB. P - reserved = 1.5 GiB + 1 GiB: the excess
    # over the 1.5 GiB allowance covers it exactly; one byte less and it does not. Share
    # 2.5/22.5 > 10 %. (F carries issue 24's full-GPU margin.)
    base = {"R": 2 * G, "T": 80 * G, "F": 1 * G + MARGIN, "A": 20 * G}
    v = verdict(P=20 * G + 2 * G + 512 * M, **base)
    assert v.kind == "non-pytorch-memory"
    assert "this process holds 22.50 GiB but PyTorch reserved only 20.00 GiB" in v.summary
    v = verdict(P=20 * G + 2 * G + 512 * M - 1, **base)
    assert (v.kind, v.contributing) == ("capacity", ())  # and under 1 GiB: not contributing


def test_non_pytorch_memory_is_not_blamed_when_the_figures_show_room() -> None:
    # 12 GiB outside PyTorch (a third of the process), F = R + MARGIN: no shortfall to cover,
    # unknown (non-PyTorch memory contributing); one byte less free and the excess covers the
    # shortfall. Issue 24 moved the pair from F = R (now a full GPU) by the margin.
    base = {"R": 2 * G, "T": 80 * G, "A": 22 * G, "P": 36 * G}
    v = verdict(F=2 * G + MARGIN, **base)
    assert (v.kind, v.contributing) == ("unknown", ("non-pytorch-memory",))
    assert "shortfall" not in v.summary
    assert kind(F=2 * G + MARGIN - 1, **base) == "non-pytorch-memory"
    assert kind(F=2 * G, **base) == "non-pytorch-memory"


def test_non_pytorch_memory_must_be_a_tenth_of_the_process() -> None:
    # P 40 GiB with 4 GiB outside PyTorch is exactly 0.10 of it; one byte more reserved is
    # under 0.10. The excess (2.5 GiB) covers the 1 GiB shortfall either way.
    base = {"R": 2 * G, "T": 80 * G, "F": 1 * G, "P": 40 * G}
    assert kind(A=36 * G, **base) == "non-pytorch-memory"
    v = verdict(A=36 * G + 1, **base)
    assert (v.kind, v.contributing) == ("capacity", ("non-pytorch-memory",))


def test_non_pytorch_memory_contributes_from_1_gib_over_the_allowance() -> None:
    # share 2.5/61.5 (4 %) is under 0.10: never primary here; contributing from 1 GiB excess
    base = {"R": 2 * G, "T": 80 * G, "F": 1 * G, "A": 59 * G}
    v = verdict(P=59 * G + 2 * G + 512 * M, **base)
    assert (v.kind, v.contributing) == ("capacity", ("non-pytorch-memory",))
    v = verdict(P=59 * G + 2 * G + 512 * M - 1, **base)
    assert (v.kind, v.contributing) == ("capacity", ())


@pytest.mark.parametrize("family", [formats.NCCL, formats.CUDA_LIBRARY])
@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_a_library_starved_by_a_framework_s_up_front_reservation_is_non_pytorch_memory(
    family: str, framework: str
) -> None:
    empty = {"R": None, "T": None, "F": None, "A": None, "P": None}
    assert kind(family=family, framework=framework, **empty) == "non-pytorch-memory"
    assert kind(family=formats.TORCH_RAW, framework=framework, **empty) == "unknown"


@pytest.mark.parametrize("family", [formats.NCCL, formats.CUDA_LIBRARY])
@pytest.mark.parametrize("framework", ["pytorch", "nccl", "cupy", None])
def test_a_library_that_found_the_gpu_full_beside_an_on_demand_cache_names_no_cause(
    family: str, framework: str | None
) -> None:
    """The message says the GPU was full, not with what (public2 p-017, p-030, unworded c-004:
    the job's own work; the H200's library-errors: the job's own tensors)."""
    v = verdict(R=None, T=None, F=None, A=None, P=None, family=family, framework=framework)
    lib = "NCCL" if family == formats.NCCL else "a CUDA library"  # the message names none
    assert (v.kind, v.contributing) == ("unknown", ())
    assert v.summary == (
        f"unknown: {lib} could not allocate its own memory: the GPU was full, and the log does not "
        "say with what (the job's own tensors, or another process; the node report can tell)"
    )


def test_unseen_memory_must_cover_the_shortfall() -> None:
    # no P, no process list: T - F - reserved - 1.5 GiB = 80 - 1.5 - 70 - 1.5 = 7 GiB unseen
    # (less than the 70 GiB reserved: not read as another process). The usable free is
    # F - MARGIN (issue 24), so the pair moved from R = 8.5 GiB by the margin.
    base = {"T": 80 * G, "F": 1 * G + 512 * M, "A": 70 * G, "P": None}
    v = verdict(R=1 * G + 512 * M + 7 * G - MARGIN, **base)  # shortfall 7 GiB
    assert (v.kind, v.contributing) == ("unknown", ("gpu-shared", "non-pytorch-memory"))
    assert v.summary.startswith("unknown: 7.00 GiB of the 80.00 GiB GPU is held outside")
    v = verdict(R=1 * G + 512 * M + 7 * G - MARGIN + 1, **base)
    assert (v.kind, v.contributing) == ("capacity", ())


def test_unseen_memory_counts_from_1_gib() -> None:
    # shortfall 1 MiB; unseen = 80 - 1 - A - 1.5 GiB is 1 GiB at A = 76.5 GiB
    base = {"R": 1 * G + 1 * M, "T": 80 * G, "F": 1 * G, "P": None}
    assert kind(A=76 * G + 512 * M, **base) == "unknown"
    assert kind(A=76 * G + 512 * M + 1, **base) == "capacity"


def test_a_process_figure_or_list_turns_the_unseen_rule_off() -> None:
    base = {"R": 1 * G + 1 * M, "T": 80 * G, "F": 1 * G, "A": 70 * G}
    assert kind(P=None, **base) == "unknown"
    assert kind(P=70 * G + 512 * M, **base) == "capacity"


def test_a_rise_that_covers_the_shortfall_is_the_leak() -> None:
    v = verdict(growth=_growth(1 * G), **CAPACITY)
    assert (v.kind, v.contributing) == ("leak", ("capacity",))
    assert v.summary.startswith("leak: memory rose steadily from 40.00 GiB to 41.00 GiB over 10")


def test_a_rise_smaller_than_the_shortfall_only_contributes() -> None:
    v = verdict(growth=_growth(1 * G - 1), **CAPACITY)
    assert (v.kind, v.contributing) == ("capacity", ("leak",))
    # figures the job printed (labels read, not known) that do not cover it are dropped
    v = verdict(growth=_growth(1 * G - 1, "log"), **CAPACITY)
    assert (v.kind, v.contributing) == ("capacity", ())
    v = verdict(growth=_growth(1 * G, "log"), **CAPACITY)
    assert (v.kind, v.contributing) == ("leak", ("capacity",))


def test_the_node_rate_always_counts_as_a_rise() -> None:
    v = verdict(growth=Growth("node-rate", 0, 0, 0, 2.0e6), **CAPACITY)
    assert (v.kind, v.contributing) == ("leak", ("capacity",))


def test_leak_does_not_take_the_slot_from_another_pod() -> None:
    # the other process covers the 2 GiB shortfall (F carries issue 24's margin)
    v = verdict(
        growth=_growth(4 * G), others=(2 * G,), R=3 * G, T=80 * G, F=1 * G + MARGIN, A=76 * G
    )
    assert (v.kind, v.contributing) == ("gpu-shared", ("leak",))


def test_leak_takes_the_slot_from_fragmentation_a_setting_cannot_fix() -> None:
    # the fragmentation pair above (need 4 GiB vs 0.40 * U, a job that made progress), with a
    # 5 GiB rise: 0.56 GiB a point, the 10 GiB idle cache absorbs far more than 2 points
    base = {
        "R": 10 * G, "T": 80 * G, "A": 60 * G, "U": 10 * G, "growth": _growth(5 * G),
        "progressed": True,
    }  # fmt: skip
    v = verdict(F=6 * G + MARGIN, **base)  # type: ignore[arg-type]
    assert (v.kind, v.contributing) == ("fragmentation", ("leak",))
    v = verdict(F=6 * G + MARGIN - 1, **base)  # type: ignore[arg-type]
    assert (v.kind, v.contributing) == ("leak", ("capacity", "fragmentation"))


def test_leak_replaces_unknown_without_naming_it() -> None:
    # the unseen-memory case: unknown is no finding to keep beside the leak (R less the margin:
    # the 7.5 GiB unseen covers the shortfall exactly)
    v = verdict(
        growth=_growth(8 * G), R=8 * G + 512 * M - MARGIN, T=80 * G, F=1 * G, A=70 * G, P=None
    )
    assert v.kind == "leak"
    assert "unknown" not in v.contributing
    assert set(v.contributing) == {"gpu-shared", "non-pytorch-memory"}


def test_host_allocation_failures_are_never_gpu_kinds() -> None:
    # issue 24: host memory is a kind of its own (was unknown)
    v = verdict(family=formats.HOST_ALLOC, R=1 * G, T=None, F=None, A=None, P=None)
    assert v.kind == "host-oom-killed"
    assert v.summary.startswith("host-oom-killed: host (CPU) memory ran out")


@pytest.mark.parametrize(
    ("case", "summary"),
    [
        (
            {"R": 81 * G, "T": 80 * G, "F": 80 * G, "A": 0},
            "capacity: the 81.00 GiB request alone exceeds the GPU's 80.00 GiB",
        ),
        (
            {"R": 4 * G + 1, "T": 80 * G, "F": 70 * G, "A": 4 * G, "L": 8 * G},
            "memory-fraction-cap: 4.00 GiB allocated + the 4.00 GiB request exceed the 8.00 GiB "
            "allowed by the memory fraction, while the GPU had 70.00 GiB free",
        ),
        (
            {"R": 3 * G, "T": 80 * G, "F": 1 * G + MARGIN, "A": 76 * G, "others": (2 * G,)},
            "gpu-shared: other processes hold 2.00 GiB of the GPU (pid 1000: 2.00 GiB); the "
            "3.00 GiB request needed 2.00 GiB more than the 1.01 GiB free",
        ),
        (
            {"R": None, "T": 100 * G, "F": 5 * G, "A": None, "P": None, "others": (2 * G,),
             "family": formats.TORCH_RAW},
            "gpu-shared: other processes hold 2.00 GiB of the GPU (pid 1000: 2.00 GiB); the GPU "
            "had 5.00 GiB free",
        ),
        (
            {"R": None, "T": None, "F": None, "A": None, "P": None, "others": (1 * G,),
             "family": formats.TORCH_RAW},
            "gpu-shared: other processes hold 1.00 GiB of the GPU (pid 1000: 1.00 GiB); the GPU "
            "was full",
        ),
        (
            {"R": 10 * G, "T": 80 * G, "F": 6 * G + MARGIN, "A": 60 * G, "U": 10 * G,
             "progressed": True},
            "fragmentation: 10.00 GiB reserved but unallocated + 6.01 GiB free would cover the "
            "10.00 GiB request; PyTorch holds 70.00 GiB with 60.00 GiB in use",
        ),
        (
            {"R": 64 * M, "T": 80 * G, "F": 70 * G, "A": 1 * G, "U": 20 * M, "L": 1 * G + 80 * M,
             "progressed": True},
            "fragmentation: 20.00 MiB reserved but unallocated + 60.00 MiB left under the 1.08 GiB "
            "cap would cover the 64.00 MiB request; PyTorch holds 1.02 GiB with 1.00 GiB in use",
        ),
        (
            {"R": 2 * G, "T": 80 * G, "F": 1 * G + MARGIN, "A": 20 * G, "P": 22 * G + 512 * M},
            "non-pytorch-memory: this process holds 22.50 GiB but PyTorch reserved only 20.00 GiB; "
            "the difference covers the 2.00 GiB request's shortfall",
        ),
        (
            {"R": None, "T": None, "F": None, "A": None, "P": None, "family": formats.NCCL,
             "framework": "tensorflow"},
            "non-pytorch-memory: NCCL could not allocate its own memory beside what tensorflow "
            "reserves up front",
        ),
        (
            {"R": None, "T": None, "F": None, "A": None, "P": None,
             "family": formats.CUDA_LIBRARY, "framework": "jax"},
            "non-pytorch-memory: a CUDA library could not allocate its own memory beside what "
            "jax reserves up front",
        ),
        (
            {"R": 10 * G, "T": 80 * G, "F": 6 * G + MARGIN - 1, "A": 60 * G, "U": 10 * G,
             "progressed": True},
            "capacity: the 10.00 GiB request exceeds the 6.01 GiB free on a 80.00 GiB GPU; PyTorch "
            "holds 60.00 GiB allocated and 10.00 GiB reserved but unallocated; packed, the idle "
            "cache would cover it, but 4.00 GiB of its 10.00 GiB would have to be reclaimed: more "
            "than an allocator setting was measured to recover",
        ),
        (
            {"R": 2 * G, "T": 80 * G, "F": 1 * G, "A": None, "P": None},
            "capacity: the 2.00 GiB request exceeds the 1.00 GiB free on a 80.00 GiB GPU",
        ),
        (
            {"R": 2 * G, "T": None, "F": 1 * G, "A": 77 * G},
            "capacity: the 2.00 GiB request exceeds the 1.00 GiB free; PyTorch holds 77.00 GiB "
            "allocated and 0 bytes reserved but unallocated",
        ),
        (
            {"R": 8 * G + 512 * M - MARGIN, "T": 80 * G, "F": 1 * G, "A": 70 * G, "P": None},
            "unknown: 7.50 GiB of the 80.00 GiB GPU is held outside this process's PyTorch "
            "allocator and the message lists no processes: another process or non-PyTorch memory",
        ),
        (
            {"R": 80 * G - MARGIN, "T": 80 * G, "F": 80 * G, "A": 0},
            "unknown: the figures show room (79.99 GiB) for the 79.99 GiB request",
        ),
        (
            {"R": None, "T": None, "F": None, "A": None, "P": None, "family": formats.TORCH_RAW},
            "unknown: pytorch failure with no memory figures in the log (another process may "
            "hold the GPU; the node report can tell)",
        ),
    ],
)  # fmt: skip
def test_the_summary_names_the_numbers_that_decided(case: dict[str, object], summary: str) -> None:
    assert verdict(**case).summary == summary  # type: ignore[arg-type]


def test_the_summary_of_a_leak_says_where_the_series_came_from() -> None:
    v = verdict(growth=_growth(1 * G, "log"), **CAPACITY)
    assert v.summary == (
        "leak: memory rose steadily from 40.00 GiB to 41.00 GiB over 10 figures the job printed "
        "before the out-of-memory failure"
    )


@pytest.mark.parametrize(
    ("family", "framework", "figures", "summary"),
    [
        (formats.VLLM, "vllm", Figures(), "capacity: vllm ran out of GPU memory (vllm)"),
        (formats.XLA, "jax", Figures(requested_bytes=2 * G),
         "capacity: jax could not get the 2.00 GiB it requested"),
        (formats.XLA, None, Figures(requested_bytes=2 * G),
         "capacity: the job could not get the 2.00 GiB it requested"),
        (formats.VLLM, None, Figures(), "capacity: the job ran out of GPU memory (vllm)"),
    ],
)  # fmt: skip
def test_other_stacks_without_free_figures(
    family: str, framework: str | None, figures: Figures, summary: str
) -> None:
    v = classify(OomEvent(family, framework, "x", figures))
    assert (v.kind, v.summary) == ("capacity", summary)


def test_the_summary_names_at_most_three_processes_with_their_pods() -> None:
    figures = Figures(
        requested_bytes=8 * G,
        total_bytes=80 * G,
        free_bytes=1 * G,
        allocated_bytes=40 * G,
        other_processes=tuple(OtherProcess(10 + i, 5 * G) for i in range(4)),
    )
    node = NodeEvidence(other_pods=(OtherPod("ml", "trainer-0", 5 * G, pid=11),))
    v = classify(OomEvent(formats.TORCH, "pytorch", "x", figures), node)
    assert v.summary.startswith(
        "gpu-shared: other processes hold 20.00 GiB of the GPU (pid 10: 5.00 GiB, ml/trainer-0: "
        "5.00 GiB, pid 12: 5.00 GiB); the 8.00 GiB request"
    )


def test_the_node_report_fills_only_the_missing_figures() -> None:
    node = NodeEvidence(
        gpu_total_bytes=80 * G, gpu_free_bytes=2 * G, process_bytes=50 * G,
        other_pods=(OtherPod("team-b", "nb", 20 * G, pid=7),),
    )  # fmt: skip
    empty = classify(OomEvent(formats.TORCH, "pytorch", "x", Figures()), node).figures
    assert (empty.total_bytes, empty.free_bytes, empty.process_bytes) == (80 * G, 2 * G, 50 * G)
    assert empty.other_processes == (OtherProcess(7, 20 * G, "team-b", "nb"),)
    given = Figures(total_bytes=79 * G, free_bytes=1 * G, process_bytes=40 * G)
    kept = classify(OomEvent(formats.TORCH, "pytorch", "x", given), node).figures
    assert (kept.total_bytes, kept.free_bytes, kept.process_bytes) == (79 * G, 1 * G, 40 * G)
    # the message had this process's figure but listed no others: the node's pods are not
    # added (the message would have listed them)
    assert kept.other_processes == ()


def test_the_node_names_only_the_processes_whose_pid_it_knows() -> None:
    listed = Figures(other_processes=(OtherProcess(7, 20 * G), OtherProcess(8, 1 * G)))
    node = NodeEvidence(other_pods=(OtherPod("team-b", "nb", 20 * G, pid=7),
                                    OtherPod("x", "no-pid", 1 * G)))  # fmt: skip
    got = classify(OomEvent(formats.TORCH, "pytorch", "x", listed), node).figures
    assert got.other_processes == (
        OtherProcess(7, 20 * G, "team-b", "nb"),
        OtherProcess(8, 1 * G),
    )
    assert classify(OomEvent(formats.TORCH, "pytorch", "x", listed)).figures == listed


def test_the_records_large_pool_is_the_idle_cache_of_a_large_request() -> None:
    # the message shows no idle cache (U 0): capacity. The record's large pool then decides,
    # as U would: need 4 GiB against 0.40 of 10 GiB (F carries issue 24's margin; a job that
    # made progress: 10 GiB is 17 % of the 60 GiB reserved). A record whose status is not ok is
    # unused.
    figures = Figures(10 * G, 80 * G, 6 * G + MARGIN, 60 * G + 512 * M, 60 * G, 0)
    event = OomEvent(formats.TORCH, "pytorch", "x", figures)
    assert classify(event, steps=FRAG_STEADY_STEPS).kind == "capacity"
    v = classify(event, record=_record(10 * G, 10 * G), steps=FRAG_STEADY_STEPS)
    assert v.kind == "fragmentation"
    assert v.summary.startswith(
        "fragmentation: 10.00 GiB free in the cache's blocks (probe record) + 6.01 GiB free"
    )
    under = _record(10 * G, 10 * G - 1)
    assert classify(event, record=under, steps=FRAG_STEADY_STEPS).kind == "capacity"
    no_hooks = _record(10 * G, 10 * G, status="no-hooks")
    assert classify(event, record=no_hooks, steps=FRAG_STEADY_STEPS).kind == "capacity"
    # without progress 17 % is under the quarter: the record's pool is not material
    assert classify(event, record=_record(10 * G, 10 * G)).kind == "capacity"


def test_a_small_request_reads_the_records_small_pool() -> None:
    # R 2 MiB (the small pool's largest request), F 1.5 MiB (no room once the 2 MiB margin is
    # taken: need 2 MiB); reserved 1 GiB; a job that made progress (20 MiB is 2 % of reserved)
    figures = Figures(2 * M, 80 * G, 3 * M // 2, 1 * G + 512 * M, 1 * G, 0)
    event = OomEvent(formats.TORCH, "pytorch", "x", figures)
    small = _record(2 * M, 0, small_free=20 * M)
    assert classify(event, record=small, steps=FRAG_STEADY_STEPS).kind == "fragmentation"
    large = _record(2 * M, 20 * M, small_free=0)
    assert classify(event, record=large, steps=FRAG_STEADY_STEPS).kind == "capacity"
    big = Figures(2 * M + 1, 80 * G, 3 * M // 2, 1 * G + 512 * M, 1 * G, 0)
    event = OomEvent(formats.TORCH, "pytorch", "x", big)
    large = _record(2 * M + 1, 20 * M, small_free=0)
    assert classify(event, record=large, steps=FRAG_STEADY_STEPS).kind == "fragmentation"


# What mutation testing found loose in the classifier (``scripts/mutation.py --modules
# classify``): the cases the boundary table above did not pin, each from both sides where it is
# a threshold, literal figures, exact verdicts and summaries. Names as there: R request, T total,
# F free, A allocated, U reserved but unallocated, P this process, L the cap, O other processes.

def leak_of(source: str) -> Growth:
    return Growth(source=source, points=12, first_bytes=10 * G, last_bytes=20 * G, per_unit=1e6)


@pytest.mark.parametrize(
    ("source", "where"),
    [("samples", "12 samples"), ("log", "12 figures the job printed")],
)
def test_the_leak_summary_names_its_series(source: str, where: str) -> None:
    v = verdict(R=2 * G, T=80 * G, F=1 * G, A=70 * G, growth=leak_of(source))
    assert v.kind == "leak"
    assert v.summary == (
        f"leak: memory rose steadily from 10.00 GiB to 20.00 GiB over {where} before the "
        "out-of-memory failure"
    )


def test_a_leak_that_only_contributes_leaves_the_summary_to_the_primary() -> None:
    # fragmentation a setting fixes keeps the primary slot; the leak contributes (a job that
    # made progress: 5 GiB is 7.7 % of the 65 GiB reserved). U + room - R is exactly 5 % of T
    # (not thin headroom) once F carries issue 24's margin.
    v = verdict(
        R=2 * G, T=80 * G, F=1 * G + MARGIN, A=60 * G, U=5 * G, growth=leak_of("samples"),
        progressed=True,
    )
    assert (v.kind, v.contributing) == ("fragmentation", ("leak",))
    assert v.summary.startswith("fragmentation: 5.00 GiB reserved but unallocated + 1.01 GiB")


def test_a_leak_without_a_request_figure_is_still_judged() -> None:
    v = verdict(R=None, T=80 * G, F=1 * G, A=70 * G, growth=leak_of("samples"))
    assert v.kind == "leak"


def test_a_retry_loop_that_gave_up_with_figures_says_so_after_them() -> None:
    v = verdict(R=2 * G, T=80 * G, F=1 * G, A=None, P=None, family=formats.RETRY_EXHAUSTED)
    assert v.summary == (
        "capacity: the 2.00 GiB request exceeds the 1.00 GiB free on a 80.00 GiB GPU; the job's "
        "retry loop halved the batch down to zero (figures of the last OOM it caught, from the "
        "probe record)"
    )


def test_a_retry_loop_that_gave_up_without_figures() -> None:
    v = verdict(R=None, T=None, F=None, A=None, P=None, family=formats.RETRY_EXHAUSTED)
    assert (v.kind, v.summary) == (
        "capacity",
        "capacity: the job's retry loop (find_executable_batch_size) halved the batch down to "
        "zero and every size ran out of GPU memory",
    )


def test_host_memory_names_the_request() -> None:
    v = verdict(R=2 * G, T=None, F=None, A=None, P=None, family=formats.HOST_ALLOC)
    assert v.summary == (
        "host-oom-killed: host (CPU) memory ran out, not GPU memory: could not allocate 2.00 GiB"
    )


def test_unseen_memory_is_named_from_one_byte() -> None:
    # no request figure: unknown; T - F - reserved - 1.5 GiB is the unseen memory
    one = verdict(R=None, T=80 * G, F=8 * G + 512 * M - 1, A=70 * G, P=None)
    assert one.summary.startswith("unknown: 1 bytes of the 80.00 GiB GPU is held outside")
    none = verdict(R=None, T=80 * G, F=8 * G + 512 * M, A=70 * G, P=None)
    assert none.summary == (
        "unknown: pytorch failure with no memory figures in the log (another process may hold the "
        "GPU; the node report can tell)"
    )


def test_an_allocator_summary_without_a_request_says_what_it_shows() -> None:
    # a BFC summary's figures (public22 x-023): in use and the pool's limit, no request, no card
    v = verdict(R=None, T=None, F=None, A=4894695424, L=4949881651, P=None)
    assert v.kind == "unknown"
    assert v.summary.startswith(
        "unknown: pytorch's allocator ran out with 4.56 GiB in use of its 4.61 GiB limit; the "
        "log does not show the request that failed"
    )
    v = verdict(R=None, T=None, F=None, A=4894695424, L=None, P=None)
    assert v.summary.startswith("unknown: pytorch's allocator ran out with 4.56 GiB in use; ")


def test_a_cap_that_leaves_more_than_the_free_memory_is_not_named() -> None:
    # the cap leaves 5 GiB (70 - 65), the device 1 GiB: the room is the device's free memory
    # (a job that made progress: 5 GiB idle is 7.7 % of the 65 GiB reserved)
    v = verdict(R=2 * G, T=80 * G, F=1 * G, A=60 * G, U=5 * G, L=70 * G, steps=FRAG_STEADY_STEPS)
    assert (v.kind, v.contributing) == ("fragmentation", ())
    assert v.summary == (
        "fragmentation: 5.00 GiB reserved but unallocated + 1.00 GiB free would cover the "
        "2.00 GiB request; PyTorch holds 65.00 GiB with 60.00 GiB in use"
    )


def test_a_cap_that_leaves_less_is_named_and_withholds_from_the_request_equal_to_it() -> None:
    # the cap leaves 1 GiB (66 - 65); the device has 2 GiB + MARGIN free: exactly the request
    # once issue 24's margin is taken (a job that made progress: 7.7 % idle)
    capped = {"R": 2 * G, "T": 80 * G, "A": 60 * G, "U": 5 * G, "L": 66 * G, "progressed": True}
    v = verdict(F=2 * G + MARGIN, **capped)  # type: ignore[arg-type]
    assert (v.kind, v.contributing) == ("fragmentation", ("memory-fraction-cap",))
    assert "+ 1.00 GiB left under the 66.00 GiB cap would cover" in v.summary
    short = verdict(F=2 * G + MARGIN - 1, **capped)  # type: ignore[arg-type]
    assert (short.kind, short.contributing) == ("fragmentation", ())


def test_a_cap_with_no_allocated_figure_binds_only_above_the_request() -> None:
    # without A the live memory counts as 0: R == L fits under the cap, R == L + 1 does not
    fits = verdict(R=4 * G, T=80 * G, F=10 * G, A=None, P=None, L=4 * G)
    assert fits.kind == "unknown"
    over = verdict(R=4 * G + 1, T=80 * G, F=10 * G, A=None, P=None, L=4 * G)
    assert over.kind == "memory-fraction-cap"


def test_nccl_with_process_figures_is_still_worded_as_nccl() -> None:
    v = verdict(R=1 * G, T=80 * G, F=512 * M, A=70 * G, family=formats.NCCL, framework="jax")
    assert v.summary == (
        "non-pytorch-memory: NCCL could not allocate its own memory beside what jax reserves up "
        "front"
    )


def test_nccl_beside_pytorch_with_figures_reads_the_figures() -> None:
    v = verdict(R=1 * G, T=80 * G, F=512 * M, A=70 * G, family=formats.NCCL)
    assert v.kind == kind(R=1 * G, T=80 * G, F=512 * M, A=70 * G) != "non-pytorch-memory"


def test_non_pytorch_memory_never_decides_when_the_request_fits() -> None:
    # a 16 GiB GPU, the request fits (F 2 GiB, R 1 GiB): at the allowance (P - reserved =
    # 1.5 GiB) or far past it (5.5 GiB outside PyTorch), no shortfall is left to cover: unknown,
    # with non-PyTorch memory contributing once it is 1 GiB past the allowance
    at = verdict(R=1 * G, T=16 * G, F=2 * G, A=10 * G, P=11 * G + 512 * M)
    assert (at.kind, at.contributing) == ("unknown", ())
    over = verdict(R=1 * G, T=16 * G, F=2 * G, A=10 * G, P=15 * G + 512 * M)
    assert (over.kind, over.contributing) == ("unknown", ("non-pytorch-memory",))
    # one byte of shortfall (F = R - 1) and the same 4 GiB excess decides
    short = verdict(R=1 * G, T=16 * G, F=1 * G - 1, A=10 * G, P=15 * G + 512 * M)
    assert short.kind == "non-pytorch-memory"


def test_a_process_figure_of_zero_is_read_without_error() -> None:
    v = verdict(R=2 * G, T=80 * G, F=1 * G, A=70 * G, P=0)
    assert v.kind == "capacity"


def test_others_without_free_but_with_total_are_the_finding() -> None:
    v = verdict(R=None, T=80 * G, F=None, A=None, P=None, others=(2 * G,))
    assert v.kind == "gpu-shared"


def test_fragmentation_without_a_total_gets_no_thin_headroom() -> None:
    v = verdict(R=2 * G, T=None, F=1 * G, A=60 * G, U=5 * G, steps=FRAG_STEADY_STEPS)
    assert (v.kind, v.contributing) == ("fragmentation", ())


def test_no_allocated_figure_is_no_fragmentation() -> None:
    v = verdict(R=2 * G, T=80 * G, F=1 * G, A=None, U=5 * G, P=None)
    assert v.kind == "capacity"


def test_no_total_turns_the_unseen_rule_off_without_error() -> None:
    v = verdict(R=2 * G, T=None, F=1 * G, A=60 * G, P=None)
    assert v.kind == "capacity"


def test_other_processes_contribute_from_exactly_1_gib() -> None:
    # they hold less than the 2 GiB shortfall, so fragmentation stays primary
    base = {"R": 3 * G, "T": 80 * G, "F": 1 * G, "A": 60 * G, "U": 7 * G, "progressed": True}
    assert verdict(**base, others=(1 * G,)).contributing == ("gpu-shared",)  # type: ignore[arg-type]
    assert verdict(**base, others=(1 * G - 1,)).contributing == ()  # type: ignore[arg-type]


def test_unseen_memory_contributes_only_to_an_unknown_and_after_fragmentation() -> None:
    # unknown: 16.5 GiB unseen (less than the 60 GiB reserved) covers the 8 GiB shortfall; the
    # idle cache would cover the request but 8 of its 10 GiB would have to be reclaimed (a job
    # that made progress: 10 GiB idle is 17 % of reserved)
    v = verdict(R=10 * G, T=80 * G, F=2 * G, A=50 * G, U=10 * G, P=None, steps=FRAG_STEADY_STEPS)
    assert (v.kind, v.contributing) == (
        "unknown", ("fragmentation", "gpu-shared", "non-pytorch-memory"))
    # fragmentation is decided before the unseen rule: nothing unseen is added to it
    # (F carries the margin: U + room - R stays at 5 % of T, not thin headroom)
    f = verdict(R=2 * G, T=80 * G, F=1 * G + MARGIN, A=50 * G, U=5 * G, P=None, progressed=True)
    assert (f.kind, f.contributing) == ("fragmentation", ())


def test_others_holding_a_gib_when_the_request_fits_are_not_the_cause() -> None:
    # the request fits the free memory: no shortfall for another process to cause (this test
    # pinned "the 1.00 GiB request needed 0 bytes more than the 2.00 GiB free" before)
    v = verdict(R=1 * G, T=80 * G, F=2 * G, A=70 * G, others=(1 * G,))
    assert (v.kind, v.contributing) == ("unknown", ("gpu-shared",))
    # the room is the free memory less issue 24's margin: 2 GiB - 12.24 MiB
    assert v.summary == "unknown: the figures show room (1.99 GiB) for the 1.00 GiB request"


def test_the_retry_loop_note_comes_after_what_pytorch_holds() -> None:
    v = verdict(R=2 * G, T=80 * G, F=1 * G, A=70 * G, family=formats.RETRY_EXHAUSTED)
    assert v.summary == (
        "capacity: the 2.00 GiB request exceeds the 1.00 GiB free on a 80.00 GiB GPU; PyTorch "
        "holds 70.00 GiB allocated and 0 bytes reserved but unallocated; the job's retry loop "
        "halved the batch down to zero (figures of the last OOM it caught, from the probe record)"
    )


def test_a_cap_filled_by_reserved_cache_names_the_reserved_memory() -> None:
    # allocated + request reach the 10 GiB cap exactly (not binding), but 10 MiB of idle cache
    # (under the 20 MiB floor) leaves the cap's headroom short while the device has 20 GiB
    v = verdict(R=2 * G, T=80 * G, F=20 * G, A=8 * G, U=10 * M, L=10 * G)
    assert v.kind == "memory-fraction-cap"
    assert v.summary == (
        "memory-fraction-cap: 8.01 GiB reserved + the 2.00 GiB request exceed the 10.00 GiB "
        "allowed by the memory fraction, while the GPU had 20.00 GiB free"
    )


# A memory-fraction cap can run out on what PyTorch has *reserved* before allocated + request
# reach it; the device still had room. That is ``memory-fraction-cap`` (raise the fraction), not
# ``capacity`` (the summary used to say "the 4.20 GiB request exceeds the 136.14 GiB free").
# Literal numbers on both sides of each condition (``_Facts.cap_short``).

def _msg(request: str, free: str, allowed: str, allocated: str, unallocated: str,
         total: str = "139.80 GiB", process: str = "3.60 GiB") -> str:
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        f"{request}. GPU 0 has a total capacity of {total} of which {free} is free. "
        f"Including non-PyTorch memory, this process has {process} memory in use. "
        f"{allowed} allowed; Of the allocated memory {allocated} is allocated by PyTorch, and "
        f"{unallocated} is reserved by PyTorch but unallocated.\n"
    )


def test_reserved_fills_the_cap_while_the_gpu_has_room() -> None:
    # reserved 3.00 + 0.01 GiB = 3.01; the cap leaves 7.00 - 3.01 = 3.99 GiB < the 4.00 GiB
    # request; allocated + request = 7.00, not above the cap; the GPU has 136 GiB free
    d = diagnose(_msg("4.00 GiB", "136.00 GiB", "7.00 GiB", "3.00 GiB", "10.00 MiB"))
    assert d.kind == "memory-fraction-cap"
    assert d.summary.startswith("memory-fraction-cap: 3.01 GiB reserved + the 4.00 GiB request")
    assert "136.00 GiB free" in d.summary
    action = d.recommendation.actions[0]
    m = re.search(r"fraction to about (\d\.\d\d)", action)
    assert m is not None, action
    # what was reserved + the request, over the GPU: (3.01 + 4.00) / 139.80 = 0.0501
    assert float(m.group(1)) > 0.0501


def test_request_that_fits_under_the_cap_is_not_a_cap_failure() -> None:
    # the same, request 3.98 GiB: 3.99 GiB of headroom covers it
    d = diagnose(_msg("3.98 GiB", "136.00 GiB", "7.00 GiB", "3.00 GiB", "10.00 MiB"))
    assert d.kind != "memory-fraction-cap"
    assert d.kind != "capacity"


def test_device_without_room_is_not_a_cap_failure() -> None:
    # the device has 3.00 GiB free, less than the 4.00 GiB request: the GPU ran out, not the
    # cap, though the cap's 3.99 GiB of headroom is short too
    d = diagnose(_msg("4.00 GiB", "3.00 GiB", "7.00 GiB", "3.00 GiB", "10.00 MiB"))
    assert d.kind == "capacity"


def test_a_cap_at_the_gpus_total_is_no_cap() -> None:
    # allowed 139.80 GiB == total: the fraction is 1.0; the device is what ran out
    d = diagnose(_msg("4.00 GiB", "3.00 GiB", "139.80 GiB", "135.00 GiB", "10.00 MiB",
                   process="135.60 GiB"))
    assert d.kind == "capacity"


def test_allocated_plus_request_above_the_cap_keeps_its_wording() -> None:
    # allocated 3.10 + request 4.00 = 7.10 > 7.00: the cap binds on allocations
    d = diagnose(_msg("4.00 GiB", "136.00 GiB", "7.00 GiB", "3.10 GiB", "10.00 MiB"))
    assert d.kind == "memory-fraction-cap"
    assert d.summary.startswith("memory-fraction-cap: 3.10 GiB allocated + the 4.00 GiB request")


# Boundary cases of the cap rules (issue 18): cap_short ignores a cap equal to the GPU's total (a
# fraction of 1.0 is no cap), even where the printed figures, each rounded to 0.01 GiB, show one
# byte more free than total - reserved; and the cap summaries name every figure. Exact bytes
# handed to classify, literal numbers, never the production constants.

def context_verdict(*, R: int, T: int, F: int, A: int, U: int, L: int) -> Verdict:
    figures = Figures(
        requested_bytes=R,
        total_bytes=T,
        free_bytes=F,
        process_bytes=A + U + 512 * M,  # a CUDA context outside PyTorch: no excess
        allocated_bytes=A,
        reserved_unallocated_bytes=U,
        allowed_bytes=L,
    )
    return classify(OomEvent(formats.TORCH, "pytorch", "CUDA out of memory", figures))


def test_a_cap_equal_to_the_gpus_total_is_no_cap_even_when_the_cache_fills_it() -> None:
    # T = L = 80 GiB (fraction 1.0), 76 GiB allocated: the cap's headroom is 4 GiB, one byte
    # short of the request, while free shows 4 GiB + 1 + issue 24's margin (rounded figures):
    # room for the request. No cap: capacity.
    base = {"R": 4 * G + 1, "T": 80 * G, "F": 4 * G + 1 + MARGIN, "A": 76 * G, "U": 0}
    assert context_verdict(L=80 * G, **base).kind == "capacity"
    # one byte below the total it is a cap, and allocated + request exceed it
    assert context_verdict(L=80 * G - 1, **base).kind == "memory-fraction-cap"


def test_the_reserved_cap_summary_names_reserved_request_allowed_and_free() -> None:
    # A + R = 3 + 4 = L 7 GiB: allocations do not bind; reserved 3 GiB + 10 MiB does.
    # U = 10 MiB is too little to be fragmentation.
    v = context_verdict(R=4 * G, T=80 * G, F=70 * G, A=3 * G, U=10 * M, L=7 * G)
    assert v.kind == "memory-fraction-cap"
    assert v.summary == (
        "memory-fraction-cap: 3.01 GiB reserved + the 4.00 GiB request exceed the 7.00 GiB "
        "allowed by the memory fraction, while the GPU had 70.00 GiB free"
    )


def test_the_binding_cap_summary_names_allocated_request_allowed_and_free() -> None:
    # A + R = 4 + 4 GiB > L 7 GiB: the allocations bind the cap
    v = context_verdict(R=4 * G, T=80 * G, F=70 * G, A=4 * G, U=0, L=7 * G)
    assert v.kind == "memory-fraction-cap"
    assert v.summary == (
        "memory-fraction-cap: 4.00 GiB allocated + the 4.00 GiB request exceed the 7.00 GiB "
        "allowed by the memory fraction, while the GPU had 70.00 GiB free"
    )


# Every threshold that decides a kind, from both sides, on the card sizes issue 24 names (4, 16,
# 24, 40, 80 and 140 GiB): "rules that hold at every card size". Each card by the total PyTorch
# prints for it (a GTX 1650, a V100 16 GB, an RTX 3090/4090, an A100 40 GB, an A100/H100 80 GB, an
# H200); the other figures scale with the card and always fit it (``_card_figures`` checks that
# this process, the other processes and the free memory add up to at most the total). Exact bytes
# handed to classify; the shares and floors are literal numbers, never the production constants.

CARDS = [
    pytest.param(3901 * M, id="4GiB-3.81GiB"),
    pytest.param(16148 * M, id="16GiB-15.77GiB"),
    pytest.param(24258 * M, id="24GiB-23.69GiB"),
    pytest.param(40335 * M, id="40GiB-39.39GiB"),
    pytest.param(81050 * M, id="80GiB-79.15GiB"),
    pytest.param(143155 * M, id="140GiB-139.80GiB"),
]
CONTEXT = 512 * M  # what ``verdict`` adds to the process beside PyTorch's reservation
ALLOWANCE = 1536 * M  # memory a process holds outside PyTorch in ordinary use (1.5 GiB)


def _printed_error(size: int) -> int:
    """Half the last digit PyTorch prints of ``size`` (two decimals of its largest unit), by hand:
    0.005 KiB, MiB or GiB, rounded down to whole bytes."""
    if size < 1024:
        return 0
    if size < M:
        return 5  # 0.005 KiB
    if size < G:
        return 5_242  # 0.005 MiB
    return 5_368_709  # 0.005 GiB


def _margin(free: int, request: int) -> int:
    """Issue 24's full-GPU margin for printed figures: the 2 MiB cudaMalloc needs beyond the
    request + the printing error of the free and the request figures."""
    return 2 * M + _printed_error(free) + _printed_error(request)


def _mib(total: int, share: float) -> int:
    """``share`` of the card, in whole MiB."""
    return round(total * share / M) * M


def _card_verdict(
    total: int,
    *,
    R: int | None,
    F: int,
    A: int | None,
    U: int = 0,
    P: object = DEFAULT,
    others: tuple[int, ...] = (),
    progressed: bool = False,
    growth: Growth | None = None,
    family: str = formats.TORCH,
    steps: int | None = None,
) -> Verdict:
    process = (None if A is None else A + U + CONTEXT) if P is DEFAULT else P
    used = F + (process if isinstance(process, int) else (A or 0) + U) + sum(others)
    assert used <= total, f"{used / G:.2f} GiB of figures on a {total / G:.2f} GiB card"
    return verdict(
        R=R, T=total, F=F, A=A, U=U, P=P, others=others, progressed=progressed,
        growth=growth, family=family, steps=steps,
    )  # fmt: skip


@pytest.mark.parametrize("total", CARDS)
def test_free_memory_from_the_request_plus_the_margin_fits_on_every_card(total: int) -> None:
    # a request of 5 % of the card (MiB-sized on the 4 and 16 GiB cards, GiB-sized above: the
    # printing error differs), PyTorch holding most of the rest with no idle cache
    R = _mib(total, 0.05)
    margin = _margin(R, R)
    assert _printed_error(R + margin) == _printed_error(R)  # free prints in the request's unit
    A = total - CONTEXT - (R + margin) - 64 * M
    fits = _card_verdict(total, R=R, F=R + margin, A=A)
    assert (fits.kind, fits.contributing) == ("unknown", ())
    assert fits.summary.startswith("unknown: the figures show room")
    for short in (1, M):  # one byte, one MiB less: a full GPU
        full = _card_verdict(total, R=R, F=R + margin - short, A=A)
        assert (full.kind, full.contributing) == ("capacity", ()), short


@pytest.mark.parametrize("total", CARDS)
def test_idle_cache_a_quarter_of_the_reservation_is_fragmentation_without_progress_on_every_card(
    total: int,
) -> None:
    # PyTorch reserves 60 % of the card; the request needs a quarter of the idle cache beyond the
    # room (well within 0.40 of it, and covered by it): only the idle cache's share decides
    reserved = _mib(total, 0.60)
    F = _mib(total, 0.01)
    quarter = reserved // 4
    R = F + quarter // 4

    def at(U: int, progressed: bool = False) -> Verdict:
        return _card_verdict(total, R=R, F=F, A=reserved - U, U=U, progressed=progressed)

    assert (quarter / reserved, (quarter - 1) / reserved < 0.25) == (0.25, True)
    assert at(quarter).kind == "fragmentation"
    for U in (quarter - 1, round(0.24 * reserved)):  # a byte under, and 24 %: capacity
        below = at(U)
        # the idle cache would cover the request: it contributes, with no setting
        assert (below.kind, below.contributing) == ("capacity", ("fragmentation",)), U
        assert "no step of the failing work finished before the failure" in below.summary, U
        # ...which a job after a steady run reads as fragmentation (0.5 % is enough there)
        assert at(U, progressed=True).kind == "fragmentation", U


@pytest.mark.parametrize("total", CARDS)
def test_with_progress_idle_cache_counts_from_half_a_percent_of_the_reservation_or_20_mib(
    total: int,
) -> None:
    # PyTorch reserves 75 % of the card. The idle cache is material from 0.5 % of that, or from
    # 20 MiB where 0.5 % is less (the 4 GiB card: 0.5 % of 2.86 GiB is 14.6 MiB). MiB-sized
    # free and request keep the margin small; the need is a quarter of the idle cache.
    reserved = _mib(total, 0.75)
    floor = max(20 * M, math.ceil(0.005 * reserved))
    assert floor - 1 < 20 * M or floor - 1 < 0.005 * reserved <= floor
    F = 64 * M

    def at(U: int) -> Verdict:
        return _card_verdict(
            total, R=F + floor // 4, F=F, A=reserved - U, U=U, progressed=True
        )

    assert at(floor).kind == "fragmentation"
    below = at(floor - 1)
    assert (below.kind, below.contributing) == ("capacity", ())


@pytest.mark.parametrize("total", CARDS)
def test_fragmentation_while_the_need_is_at_most_0_40_of_the_idle_cache_on_every_card(
    total: int,
) -> None:
    # a quarter of the card idle in a 60 % reservation (material with or without progress); the
    # request is the idle cache's size, the room F - margin: need = 0.40 U exactly, then a byte
    # more (the cache would still cover it, packed: fragmentation contributes)
    U = _mib(total, 0.15) // (5 * M) * (5 * M)
    reserved = 4 * U
    R = U
    F = U - 2 * U // 5  # 0.60 U
    F += _margin(F, R)
    assert _printed_error(F) == _printed_error(U - 2 * U // 5)
    assert 0.40 * U == 2 * U // 5

    def at(F: int) -> Verdict:
        return _card_verdict(total, R=R, F=F, A=reserved - U, U=U)

    assert at(F).kind == "fragmentation"
    over = at(F - 1)
    assert (over.kind, over.contributing) == ("capacity", ("fragmentation",))
    assert "would have to be reclaimed" in over.summary


@pytest.mark.parametrize("total", CARDS)
def test_other_processes_covering_the_shortfall_share_the_gpu_on_every_card(total: int) -> None:
    # a request of 40 % of the card with 5 % free: the shortfall (R - F + margin) is over 1 GiB
    # on every card; other processes holding exactly it are the cause, a byte less contributes
    R, F = _mib(total, 0.40), _mib(total, 0.05)
    shortfall = R - F + _margin(F, R)
    assert shortfall > G
    A = total - F - shortfall - CONTEXT - 64 * M
    shared = _card_verdict(total, R=R, F=F, A=A, others=(shortfall,))
    assert (shared.kind, shared.contributing) == ("gpu-shared", ())
    short = _card_verdict(total, R=R, F=F, A=A, others=(shortfall - 1,))
    assert (short.kind, short.contributing) == ("capacity", ("gpu-shared",))


@pytest.mark.parametrize("total", CARDS)
def test_other_processes_count_from_1_gib_on_every_card(total: int) -> None:
    # a 256 MiB shortfall: only the 1 GiB floor decides (MiB-sized free and request)
    F = 512 * M
    R = F - _margin(F, F) + 256 * M
    assert _margin(F, R) == _margin(F, F)
    A = total - F - G - CONTEXT - 64 * M
    shared = _card_verdict(total, R=R, F=F, A=A, others=(G,))
    assert shared.kind == "gpu-shared"
    below = _card_verdict(total, R=R, F=F, A=A, others=(G - 1,))
    assert (below.kind, below.contributing) == ("capacity", ())


@pytest.mark.parametrize("total", CARDS)
def test_memory_beyond_the_1_5_gib_allowance_must_cover_the_shortfall_on_every_card(
    total: int,
) -> None:
    # a 128 MiB shortfall; PyTorch reserves as much as is held outside it (half the process, far
    # over a tenth): the 1.5 GiB allowance plus the shortfall decides, the same on every card
    F = 64 * M
    R = F - _margin(F, F) + 128 * M
    outside = ALLOWANCE + 128 * M
    reserved = outside
    blamed = _card_verdict(total, R=R, F=F, A=reserved, P=reserved + outside)
    assert blamed.kind == "non-pytorch-memory"
    short = _card_verdict(total, R=R, F=F, A=reserved, P=reserved + outside - 1)
    assert (short.kind, short.contributing) == ("capacity", ())


@pytest.mark.parametrize(
    ("total", "contributing"),
    [
        # on the 4 GiB card a tenth of any process it can hold is under the 1.5 GiB allowance:
        # the allowance decides there (above)
        *[pytest.param(c.values[0], (), id=c.id) for c in CARDS[1:3]],
        *[pytest.param(c.values[0], ("non-pytorch-memory",), id=c.id) for c in CARDS[3:]],
    ],
)
def test_memory_outside_pytorch_is_the_cause_from_a_tenth_of_the_process_on_every_card(
    total: int, contributing: tuple[str, ...]
) -> None:
    # the process fills the card but for 128 MiB; a 16 MiB shortfall. A tenth of the process
    # outside PyTorch is the cause; a byte less is under the share (still over the allowance and
    # the shortfall: contributing where it is 1 GiB past the allowance)
    F = 64 * M
    R = F - _margin(F, F) + 16 * M
    P = total - 128 * M
    tenth = math.ceil(0.10 * P)
    assert (tenth - 1) / P < 0.10 <= tenth / P
    assert tenth - 1 - ALLOWANCE >= 16 * M  # the excess covers the shortfall on both sides
    blamed = _card_verdict(total, R=R, F=F, A=P - tenth, P=P)
    assert blamed.kind == "non-pytorch-memory"
    under = _card_verdict(total, R=R, F=F, A=P - tenth + 1, P=P)
    assert (under.kind, under.contributing) == ("capacity", contributing)


@pytest.mark.parametrize("total", CARDS)
def test_unseen_memory_at_least_what_pytorch_reserved_is_another_process_on_every_card(
    total: int,
) -> None:
    # no process figure or list (torch < 2.1): unseen = T - F - reserved - 1.5 GiB. Equal to the
    # reservation it is another process; a byte more reserved (unseen 2 bytes less) is unknown,
    # naming both. The unseen memory covers the 256 MiB shortfall and 1 GiB either way (on the
    # 4 GiB card only just: 1.12 GiB).
    F = 64 * M
    R = F - _margin(F, F) + 256 * M
    reserved = (total - F - ALLOWANCE) // 2
    assert total - F - reserved - ALLOWANCE == reserved >= G
    shared = _card_verdict(total, R=R, F=F, A=reserved, P=None)
    assert (shared.kind, shared.contributing) == ("gpu-shared", ("non-pytorch-memory",))
    assert shared.summary.startswith("gpu-shared: ")
    assert "more than the" in shared.summary
    unseen = _card_verdict(total, R=R, F=F, A=reserved + 1, P=None)
    assert (unseen.kind, unseen.contributing) == ("unknown", ("gpu-shared", "non-pytorch-memory"))


@pytest.mark.parametrize("total", CARDS)
def test_without_a_request_the_gpu_is_full_at_5_percent_free_on_every_card(total: int) -> None:
    # a raw CUDA error (no figures of its own), another process of 1 GiB: 5 % of the card free
    # is a full GPU (gpu-shared), a byte more is not (unknown)
    five = math.floor(0.05 * total)
    assert five <= 0.05 * total < five + 1
    raw = {"R": None, "A": None, "P": None, "others": (G,), "family": formats.TORCH_RAW}
    assert _card_verdict(total, F=five, **raw).kind == "gpu-shared"  # type: ignore[arg-type]
    assert _card_verdict(total, F=five + 1, **raw).kind == "unknown"  # type: ignore[arg-type]


@pytest.mark.parametrize("total", CARDS)
def test_a_leak_outrunning_the_idle_cache_takes_the_slot_from_fragmentation_on_every_card(
    total: int,
) -> None:
    # fragmentation (a job that made progress; 10 % of the card idle) beside a series of 11
    # points rising by half the idle cache a point: the cache absorbs exactly 2 points, the
    # setting is kept (leak contributes); a byte less idle and the leak is the cause
    U = _mib(total, 0.10)
    rise = U // 2
    growth = Growth("samples", 11, _mib(total, 0.30), _mib(total, 0.30) + 10 * rise, 1.0)
    reserved = _mib(total, 0.70)
    F = _mib(total, 0.02)
    R = F + U // 4

    def at(U: int) -> Verdict:
        return _card_verdict(
            total, R=R, F=F, A=reserved - U, U=U, progressed=True, growth=growth
        )

    frag = at(U)
    assert (frag.kind, frag.contributing) == ("fragmentation", ("leak",))
    leak = at(U - 1)
    assert (leak.kind, leak.contributing) == ("leak", ("fragmentation",))


def _printed_oom(request: str, total: str, free: str, process: str, allocated: str) -> str:
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {request}. GPU 0 has a "
        f"total capacity of {total} of which {free} is free. Including non-PyTorch memory, this "
        f"process has {process} memory in use. Of the allocated memory {allocated} is allocated "
        "by PyTorch, and 2.00 MiB is reserved by PyTorch but unallocated.\n"
    )


@pytest.mark.parametrize(
    ("total", "asked", "full", "fits", "process", "allocated", "margin"),
    [
        # free in MiB: 0.01 MiB steps; request + 2 MiB + 2 x 0.005 MiB (2.01 MiB, less the
        # bytes 0.005 MiB rounds down) is the first that fits, 2 bytes over the margin
        pytest.param("3.81 GiB", "200.00 MiB", "202.00 MiB", "202.01 MiB", "3.30 GiB", "3.00 GiB",
                     "2.01 MiB", id="4GiB"),
        pytest.param("15.77 GiB", "800.00 MiB", "802.00 MiB", "802.01 MiB", "14.70 GiB",
                     "14.40 GiB", "2.01 MiB", id="16GiB"),
        # free in GiB: 0.01 GiB steps (10.24 MiB); request + 2 MiB + 2 x 0.005 GiB (12.24 MiB)
        pytest.param("23.69 GiB", "1.50 GiB", "1.51 GiB", "1.52 GiB", "21.90 GiB", "21.60 GiB",
                     "12.24 MiB", id="24GiB"),
        pytest.param("39.39 GiB", "2.00 GiB", "2.01 GiB", "2.02 GiB", "37.00 GiB", "36.70 GiB",
                     "12.24 MiB", id="40GiB"),
        pytest.param("79.15 GiB", "4.00 GiB", "4.01 GiB", "4.02 GiB", "74.80 GiB", "74.50 GiB",
                     "12.24 MiB", id="80GiB"),
        pytest.param("139.80 GiB", "8.00 GiB", "8.01 GiB", "8.02 GiB", "131.50 GiB",
                     "131.20 GiB", "12.24 MiB", id="140GiB"),
    ],
)  # fmt: skip
def test_a_printed_free_figure_one_step_above_the_margin_fits_on_every_card(
    total: str, asked: str, full: str, fits: str, process: str, allocated: str, margin: str
) -> None:
    """Issue 24, item 1, as a log prints it: the free figure one printed step (0.01 of its unit)
    below request + margin is a full GPU, the next one up shows room."""
    room = diagnose(_printed_oom(asked, total, fits, process, allocated))
    assert (room.kind, room.contributing) == ("unknown", ())
    assert room.summary.startswith("unknown: the figures show room")
    gpu_full = diagnose(_printed_oom(asked, total, full, process, allocated))
    assert (gpu_full.kind, gpu_full.contributing) == ("capacity", ())
    assert gpu_full.summary.startswith(
        f"capacity: the {asked} request found {full} free on a {total} GPU, within the {margin} "
        "a new segment needs beyond the request near a full GPU (allocation granularity and the "
        "figures' rounding): the GPU was full; "
    )


# -- issue 24's other rules, each from both sides ----------------------------------------------


def test_a_probe_records_exact_free_bytes_leave_only_the_2_mib_granularity() -> None:
    # the record gave the device's free bytes for this request: no printing error to allow for,
    # the request fits from R + 2 MiB. The same figures printed (no record, or a record whose
    # free bytes differ from the figure) keep the printing error: a full GPU there.
    R = 2 * G

    def at(F: int, device_free: int | None) -> str:
        figures = Figures(R, 80 * G, F, 70 * G + 512 * M, 70 * G, 0)
        record = _record(R, 0, device_free=device_free)
        return classify(OomEvent(formats.TORCH, "pytorch", "x", figures), record=record).kind

    assert at(R + 2 * M, R + 2 * M) == "unknown"
    assert at(R + 2 * M - 1, R + 2 * M - 1) == "capacity"
    assert at(R + 2 * M, R + 2 * M + 1) == "capacity"  # not this figure's bytes: printed
    assert at(R + 2 * M, None) == "capacity"
    assert at(R + MARGIN, None) == "unknown"


RAW = {"R": None, "T": None, "F": None, "A": None, "P": None, "family": formats.TORCH_RAW}
FIRST_CALL = (
    "gpu-shared: the job's first CUDA call failed (CUDA context creation) before it put anything "
    "on the GPU: another process, or a stale process of this job, had filled it"
)


@pytest.mark.parametrize(
    ("phase", "kind_"),
    [("cuda-init", "gpu-shared"), ("loading", "gpu-shared"), ("forward", "unknown"),
     ("backward", "unknown"), ("optimizer-step", "unknown"), (None, "unknown")],
)  # fmt: skip
def test_a_raw_oom_at_the_first_cuda_call_is_another_process(
    phase: str | None, kind_: str
) -> None:
    v = verdict(phase=phase, **RAW)  # type: ignore[arg-type]
    assert (v.kind, v.contributing) == (kind_, ())
    assert (v.summary == FIRST_CALL) is (kind_ == "gpu-shared")


def test_only_a_raw_error_at_the_first_call_says_the_job_had_nothing_on_the_gpu() -> None:
    # the caching allocator's own message while loading (figures, the TORCH family) is read by
    # its figures: a full GPU of the job's own weights is capacity
    loading = verdict(R=2 * G, T=80 * G, F=1 * G, A=77 * G, phase="loading")
    assert loading.kind == "capacity"
    # other processes named (the node report): their memory is in the summary
    v = verdict(phase="cuda-init", others=(60 * G,), **{**RAW, "T": 80 * G})  # type: ignore[arg-type]
    assert v.kind == "gpu-shared"
    assert v.summary == FIRST_CALL + "; other processes hold 60.00 GiB (pid 1000: 60.00 GiB)"


def test_unseen_memory_more_than_pytorchs_names_the_figures() -> None:
    # no process list: 80 - 1 - 30 - 1.5 = 47.5 GiB outside this process's PyTorch, over the
    # 30 GiB it reserved
    v = verdict(R=3 * G, T=80 * G, F=1 * G, A=30 * G, P=None)
    assert (v.kind, v.contributing) == ("gpu-shared", ("non-pytorch-memory",))
    assert v.summary == (
        "gpu-shared: 47.50 GiB of the 80.00 GiB GPU is held outside this process's PyTorch, more "
        "than the 30.00 GiB PyTorch holds: most likely another process (the message lists none; "
        "the node report names them); the 3.00 GiB request found 1.00 GiB free"
    )


@pytest.mark.parametrize(
    ("line", "summary", "first_action"),
    [
        (
            "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.",
            "host-oom-killed: the kernel killed a DataLoader worker (SIGKILL): host (CPU) memory "
            "ran out, not GPU memory",
            "use fewer DataLoader workers (each worker holds its own copy of the dataset object)",
        ),
        (
            "Killed",
            "host-oom-killed: the job was killed (SIGKILL, the kernel's OOM killer): host (CPU) "
            "memory ran out, not GPU memory",
            "raise the container's memory limit (and set the request equal to it)",
        ),
        # the scheduler killed it, not the kernel (public18 h-009; the census's PBS lines)
        (
            "slurmstepd: error: Job 7518 exceeded memory limit (626359956 > 512000000), being "
            "killed",
            "host-oom-killed: the batch scheduler (Slurm, PBS, LSF) killed the job over its "
            "memory limit: host (CPU) memory, not GPU memory",
            "raise the container's memory limit (and set the request equal to it)",
        ),
        (
            "=>> PBS: job killed: mem 38427376kb exceeded limit 33554432kb",
            "host-oom-killed: the batch scheduler (Slurm, PBS, LSF) killed the job over its "
            "memory limit: host (CPU) memory, not GPU memory",
            "raise the container's memory limit (and set the request equal to it)",
        ),
    ],
)
def test_a_kill_by_the_kernel_is_host_memory(line: str, summary: str, first_action: str) -> None:
    d = diagnose(f"epoch 1 loss 2.3\n{line}\n")
    assert (d.kind, d.contributing, d.summary) == ("host-oom-killed", (), summary)
    assert d.recommendation.actions[0] == first_action
    assert len(d.recommendation.actions) == 5  # every host action, once
    assert d.recommendation.alloc_conf is None


FIRST_CALL_LOG = (
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 8, in <module>\n'
    "    model = Model().cuda()\n"
    '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1050, in cuda\n'
    "    return self._apply(lambda t: t.cuda(device))\n"
    '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 900, in _apply\n'
    "    param_applied = fn(param)\n"
    '  File "/usr/lib/python3.11/site-packages/torch/cuda/__init__.py", line 300, in _lazy_init\n'
    "    torch._C._cuda_init()\n"
    "RuntimeError: CUDA error: out of memory\n"
)


def test_a_raw_oom_creating_the_context_tells_what_to_look_for_on_the_node() -> None:
    d = diagnose(FIRST_CALL_LOG)
    assert (d.kind, d.contributing, d.summary) == ("gpu-shared", (), FIRST_CALL)
    assert d.to_json_dict()["phase"] == "cuda-init"
    assert d.recommendation.actions == (
        "find what else holds the GPU: nvidia-smi --query-compute-apps=pid,used_memory "
        "--format=csv on the node, or its GPUNodeReport (kubectl get gpunodereport NODE -o yaml "
        "lists each pod's memory on each GPU); stop it (it may be a stale process of an earlier "
        "run of this job)",
        "make sure one pod gets the whole GPU (request nvidia.com/gpu; check time-slicing/MPS)",
    )
    # pasted without its "Traceback" header, the frames are read all the same
    fragment = diagnose(FIRST_CALL_LOG[FIRST_CALL_LOG.index("  File") :])
    assert (fragment.kind, fragment.to_json_dict()["phase"]) == ("gpu-shared", "cuda-init")
    # the same error in a forward pass is no first call
    forward = diagnose(
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1, in '
        "_call_impl\n    return forward_call(*a)\nRuntimeError: CUDA error: out of memory\n"
    )
    assert (forward.kind, forward.to_json_dict()["phase"]) == ("unknown", "forward")
    # the node report's pods: the isolation action names what they hold
    node = NodeEvidence(other_pods=(OtherPod("ml", "trainer-0", 60 * G, pid=872),))
    with_node = diagnose(FIRST_CALL_LOG, node=node)
    assert with_node.summary == (
        FIRST_CALL + "; other processes hold 60.00 GiB (ml/trainer-0: 60.00 GiB)"
    )
    assert with_node.recommendation.actions[0].startswith(
        "isolate the GPU: other processes hold 60.00 GiB of it"
    )


# What mutation testing found loose in issue 24's code (``scripts/mutation.py --modules
# classify``), each named by the behaviour it pins.


def test_sizes_of_a_tib_and_more_keep_the_printing_error_of_gib() -> None:
    # PyTorch prints nothing larger than GiB ("1024.00 GiB"): a TiB-sized free and request figure
    # carry the GiB figure's 0.005 GiB each, the same 12.24 MiB margin
    T = 4 * 1024 * G
    R = 1024 * G
    assert kind(R=R, T=T, F=R + MARGIN, A=0) == "unknown"
    assert kind(R=R, T=T, F=R + MARGIN - 1, A=0) == "capacity"


def test_a_request_under_a_kib_is_printed_exactly() -> None:
    # "512 bytes" has no rounding: the margin is 2 MiB + the MiB-sized free figure's 0.005 MiB
    R = 512
    F = R + 2 * M + 5_242
    assert kind(R=R, T=80 * G, F=F, A=70 * G) == "unknown"
    assert kind(R=R, T=80 * G, F=F - 1, A=70 * G) == "capacity"


def test_the_first_call_summary_names_three_processes() -> None:
    others = (30 * G, 20 * G, 10 * G, 5 * G)
    v = verdict(phase="cuda-init", others=others, **{**RAW, "T": 80 * G})  # type: ignore[arg-type]
    assert v.summary == FIRST_CALL + (
        "; other processes hold 65.00 GiB (pid 1000: 30.00 GiB, pid 1001: 20.00 GiB, pid 1002: "
        "10.00 GiB)"
    )


def test_unseen_memory_over_the_reservation_is_another_process_before_the_idle_cache() -> None:
    # a 40 GiB card, 10 GiB reserved, 4 of them idle (40 %: material without progress), no
    # process list: 27.49 GiB is unseen, more than PyTorch's own. Another process holds most of
    # the card: it decides, the idle cache contributes (public11 t-007 on a 40 GiB A100)
    v = verdict(R=2 * G, T=40 * G, F=1 * G + MARGIN, A=6 * G, U=4 * G, P=None)
    assert (v.kind, v.contributing) == ("gpu-shared", ("fragmentation", "non-pytorch-memory"))
    assert v.summary.startswith(
        "gpu-shared: 27.49 GiB of the 40.00 GiB GPU is held outside this process's PyTorch, more "
        "than the 10.00 GiB PyTorch holds: most likely another process"
    )
    # unseen exactly what PyTorch holds (10 GiB) decides; a byte less, the idle cache does
    exact = 1 * G + MARGIN + 10 * G + 3 * G // 2 + 10 * G  # F + reserved + allowance + unseen
    base = {"R": 2 * G, "F": 1 * G + MARGIN, "A": 6 * G, "U": 4 * G, "P": None}
    assert kind(T=exact, **base) == "gpu-shared"
    assert kind(T=exact - 1, **base) == "fragmentation"


def test_a_two_point_series_rises_by_its_whole_growth_a_point() -> None:
    # two points: the rise a point is the whole growth (1 GiB); the 2 GiB idle cache absorbs 2
    # points exactly (fragmentation kept), a byte less idle and the leak is the cause. (A 20 GiB
    # card, 12 GiB reserved; need 0.5 GiB.)
    base = {"R": 1 * G + 512 * M, "T": 20 * G, "F": 1 * G + MARGIN, "progressed": True}
    growth = Growth("samples", 2, 10 * G, 11 * G, 1.0)
    v = verdict(A=10 * G, U=2 * G, growth=growth, **base)  # type: ignore[arg-type]
    assert (v.kind, v.contributing) == ("fragmentation", ("leak",))
    v = verdict(A=10 * G + 1, U=2 * G - 1, growth=growth, **base)  # type: ignore[arg-type]
    assert (v.kind, v.contributing) == ("leak", ("fragmentation",))


def test_another_process_on_a_gpu_full_within_the_margin_says_why_it_was_full() -> None:
    # the free figure equals the request: gpu-shared (the other 2 GiB cover the margin's
    # shortfall), and the summary says the free memory was within the margin, not short of it
    v = verdict(R=2 * G, T=80 * G, F=2 * G, A=70 * G, others=(2 * G,))
    assert v.summary == (
        "gpu-shared: other processes hold 2.00 GiB of the GPU (pid 1000: 2.00 GiB); the 2.00 GiB "
        "request found 2.00 GiB free, within the 12.24 MiB a new segment needs beyond the request "
        "near a full GPU (allocation granularity and the figures' rounding): the GPU was full"
    )


def test_free_memory_under_the_margin_itself_is_named_whole() -> None:
    # 1025 bytes free for a 1024-byte request: the whole of the free memory is within the margin
    v = verdict(R=1024, T=80 * G, F=1025, A=70 * G)
    assert v.summary.startswith(
        "capacity: the 1024 bytes request found 1.00 KiB free on a 80.00 GiB GPU, within the "
        "1.00 KiB a new segment needs"
    )


def test_another_process_with_a_request_and_no_free_figure_is_the_finding() -> None:
    # no free figure to compare: the request's sentence is not the margin's (no error either)
    v = verdict(R=2 * G, T=80 * G, F=None, A=70 * G, others=(2 * G,))
    assert v.kind == "gpu-shared"
    assert v.summary.startswith(
        "gpu-shared: other processes hold 2.00 GiB of the GPU (pid 1000: 2.00 GiB); the 2.00 GiB "
        "request needed"
    )


@pytest.mark.parametrize("total", CARDS)
def test_a_few_steps_in_the_idle_cache_must_hold_three_requests_on_every_card(total: int) -> None:
    # PyTorch reserves 70 % of the card, 8 % of it idle; the room covers half the request. A
    # job that finished 4 steps: fragmentation from 3 requests' worth idle (U = 3 R), capacity
    # with fragmentation contributing a byte under; after a steady run (10 steps) the share rule
    # alone decides; 9 steps is still a few
    reserved = _mib(total, 0.70)
    U = _mib(total, 0.70 * 0.08)
    R = U // 3
    F = R // 2 + MARGIN
    A = reserved - U

    def at(request: int, steps: int) -> Verdict:
        return _card_verdict(total, R=request, F=F, A=A, U=U, steps=steps)

    assert at(R, 4).kind == "fragmentation"
    early = at(R + 1, 4)
    assert (early.kind, early.contributing) == ("capacity", ("fragmentation",))
    assert "only 4 steps finished before the failure" in early.summary
    assert at(R + 1, 9).kind == "capacity"
    assert at(R + 1, 10).kind == "fragmentation"


@pytest.mark.parametrize("total", CARDS)
def test_a_few_steps_in_a_request_the_room_nearly_covered_is_fragmentation_on_every_card(
    total: int,
) -> None:
    # the idle cache holds 1.5 requests (under the 3 above); the room covers all but 10 % of the
    # request (the card's edge): fragmentation; all but 10 % and a byte: capacity
    R = _mib(total, 0.04)
    U = R * 3 // 2
    A = _mib(total, 0.60)
    short = R // 10  # the request's tenth, what the room may lack
    # the margin of figures printed in R's unit (F is near R): the rule under test is the tenth
    margin = full_gpu_margin(Figures(requested_bytes=R, free_bytes=R), exact=False)

    def at(lacks: int) -> Verdict:
        return _card_verdict(total, R=R, F=R - lacks + margin, A=A, U=U, steps=4)

    assert at(short).kind == "fragmentation"
    assert at(short + 1).kind == "capacity"


def test_memory_outside_pytorch_blames_no_one_when_most_of_the_device_is_free() -> None:
    # public6 w-020 (calibration since its blind score): a memory fraction refused a 2 MiB
    # request with 244.65 GiB of 255.98 free; the 8.84 GiB outside PyTorch is no cause
    d = diagnose(
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total "
        "capacity of 255.98 GiB of which 244.65 GiB is free. 1.05 GiB allowed; Of the allocated "
        "memory 1017.01 MiB is allocated by PyTorch, with 17.00 MiB allocated in private pools\n"
    )
    assert d.kind == "unknown" and "gpu-shared" not in d.contributing
    # the same figures on a full device (5 % free or less) still name the memory outside
    full = diagnose(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 "
        "GiB total capacity; 2.42 GiB already allocated; 26.12 MiB free; 2.75 GiB reserved in "
        "total by PyTorch)\n"
    )
    assert full.kind == "gpu-shared"


def test_paddle_failing_with_a_sliver_free_beside_what_it_holds_is_a_full_card() -> None:
    # public4 t-006, public7 z-025 (calibration): free above the request, a sliver of the card
    d = diagnose(
        "Out of memory error on GPU 0. Cannot allocate 17.266846MB memory on GPU 0, 23.651855GB "
        "memory has been allocated and available memory is only 45.687500MB.\n"
    )
    assert (d.framework, d.kind) == ("paddle", "capacity")
    assert "Paddle holds" in d.summary and "PyTorch" not in d.summary
    # the same request with a tenth of the card free is room, not a full card
    roomy = diagnose(
        "Out of memory error on GPU 0. Cannot allocate 17.266846MB memory on GPU 0, 2.000000GB "
        "memory has been allocated and available memory is only 245.687500MB.\n"
    )
    assert roomy.kind == "unknown"


# The summaries of the start-up, engine, arena, Ray and short-run branches, word for word (what
# mutation found unpinned in classify after issue 24's rounds; each read against its rule first).

_VLLM_START = (
    "ValueError: Free memory on device ({free}/79.2 GiB) on startup is less than desired GPU "
    "memory utilization ({util}, {asks} GiB). Decrease GPU memory utilization or reduce GPU "
    "memory used by other processes.\n"
)
_FRAG_AT_EDGE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process "
    "has 77.64 GiB memory in use. Of the allocated memory 73.00 GiB is allocated by PyTorch, and "
    "4.00 GiB is reserved by PyTorch but unallocated.\n"
)


@pytest.mark.parametrize(("log", "kind", "summary"), [
    (_VLLM_START.format(free="79.1", util="0.9999", asks="79.19"), "memory-fraction-cap",
     "memory-fraction-cap: vLLM found 79.10 GiB free of the 79.20 GiB GPU at start, less than "
     "the 79.19 GiB its gpu_memory_utilization asks: 102.40 MiB was held by other processes; at "
     "most 0.99 of the GPU is there to take"),
    (_VLLM_START.format(free="70.0", util="0.9", asks="71.28"), "gpu-shared",
     "gpu-shared: vLLM found 70.00 GiB free of the 79.20 GiB GPU at start, less than the 71.28 "
     "GiB its gpu_memory_utilization asks: 9.20 GiB was held by other processes; at most 0.88 of "
     "the GPU is there to take"),
    ("ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine.\n", "memory-fraction-cap",
     "memory-fraction-cap: the engine's memory budget (vLLM's gpu_memory_utilization, SGLang's "
     "--mem-fraction-static) was spent on the weights and the profiling run before any KV cache "
     "fit"),
    ("step 1\nAvailable memory of 0 is smaller than requested bytes of 135383040\n",
     "memory-fraction-cap",
     "memory-fraction-cap: ONNX Runtime's CUDA arena reached its own limit (gpu_mem_limit) "
     "before the 129.11 MiB request"),
    ("step 1\nAvailable memory of 0 is smaller than requested bytes\n", "memory-fraction-cap",
     "memory-fraction-cap: ONNX Runtime's CUDA arena reached its own limit (gpu_mem_limit) "
     "before the request"),
    ("step 1\nray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
     "memory.\n", "host-oom-killed",
     "host-oom-killed: Ray's memory monitor killed a worker as the node's host (CPU) memory ran "
     "low, not GPU memory"),
    ("(raylet) node_manager.cc:3069: 1 Workers (tasks / actors) killed due to memory pressure "
     "(OOM), 0 Workers crashed due to other reasons\n", "host-oom-killed",
     "host-oom-killed: Ray's memory monitor killed a worker as the node's host (CPU) memory ran "
     "low, not GPU memory"),
    (_FRAG_AT_EDGE, "capacity",
     "capacity: the 2.00 GiB request exceeds the 1.50 GiB free on a 79.15 GiB GPU; PyTorch holds "
     "73.00 GiB allocated and 4.00 GiB reserved but unallocated; packed, the idle cache would "
     "cover this request, but no step of the failing work finished before the failure and the "
     "4.00 GiB idle is 5% of what PyTorch holds: the rest of the step needs more than a setting "
     "can recover"),
    ("step 1 loss 2.0\nstep 2 loss 1.9\nstep 3 loss 1.8\n" + _FRAG_AT_EDGE, "capacity",
     "capacity: the 2.00 GiB request exceeds the 1.50 GiB free on a 79.15 GiB GPU; PyTorch holds "
     "73.00 GiB allocated and 4.00 GiB reserved but unallocated; packed, the idle cache would "
     "cover this request, but only 3 steps finished before the failure and the 4.00 GiB idle "
     "holds 2.0 requests of this size (5% of what PyTorch holds): a job this early needs more "
     "than a setting can recover"),
    ("Out of memory error on GPU 0. Cannot allocate 17.266846MB memory on GPU 0, 23.651855GB "
     "memory has been allocated and available memory is only 45.687500MB.\n", "capacity",
     "capacity: the 17.27 MiB request found 45.69 MiB free beside the 23.65 GiB Paddle holds: a "
     "sliver of the card, and Paddle's allocator asks more than the tensor: the GPU was full; "
     "Paddle holds 23.65 GiB allocated and 0 bytes reserved but unallocated"),
])  # fmt: skip
def test_each_late_branch_summary_word_for_word(log: str, kind: str, summary: str) -> None:
    d = diagnose(log)
    assert (d.kind, d.summary) == (kind, summary)


def test_tensorflows_start_up_summaries_word_for_word() -> None:
    from .diagnosis_helpers import FIXTURES

    public = FIXTURES.parents[2] / "evaluation" / "public" / "logs"
    shared = diagnose((public / "b-006.log").read_text(errors="replace"))
    assert (shared.kind, shared.summary) == (
        "gpu-shared",
        "gpu-shared: TensorFlow found 190.31 MiB free of the 7.92 GiB GPU when it started and "
        "could not reserve its memory: another process held the GPU before the job began",
    )
    cap = diagnose((public / "b-039.log").read_text(errors="replace"))
    assert (cap.kind, cap.summary) == (
        "memory-fraction-cap",
        "memory-fraction-cap: TensorFlow could not reserve the 5.93 GiB it maps at start "
        "(per_process_gpu_memory_fraction of the GPU, nearly all of it by default): the GPU had "
        "less free than the fraction asks",
    )


# The near-full boundary (NEAR_FULL_FREE_SHARE, 5 %) at exactly 5 % free, on each reading that
# uses it: memory outside PyTorch, Paddle's sliver, TensorFlow's start-up banner.


@pytest.mark.parametrize(("free", "kind"), [("4.00 GiB", "gpu-shared"), ("4.01 GiB", "unknown")])
def test_memory_outside_pytorch_on_a_device_with_exactly_5_percent_free(
    free: str, kind: str
) -> None:
    d = diagnose(
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 80.00 GiB total "
        f"capacity; 9.00 GiB already allocated; {free} free; 10.00 GiB reserved in total by "
        "PyTorch)\n"
    )
    assert d.kind == kind


@pytest.mark.parametrize(
    ("free", "kind"), [("50.000000MB", "capacity"), ("50.100000MB", "unknown")]
)
def test_paddle_with_exactly_5_percent_of_what_it_holds_plus_free(free: str, kind: str) -> None:
    d = diagnose(
        "Out of memory error on GPU 0. Cannot allocate 20.000000MB memory on GPU 0, "
        f"950.000000MB memory has been allocated and available memory is only {free}.\n"
    )
    assert d.kind == kind


@pytest.mark.parametrize(("free", "kind"), [("512.00MiB", "gpu-shared"),
                                            ("513.00MiB", "memory-fraction-cap")])
def test_tensorflows_banner_with_exactly_5_percent_free(free: str, kind: str) -> None:
    from .diagnosis_helpers import FIXTURES

    log = (FIXTURES.parents[2] / "evaluation" / "public" / "logs" / "b-006.log").read_text(
        errors="replace"
    )
    log = log.replace("Total memory: 7.92GiB", "Total memory: 10.00GiB")
    log = log.replace("Free memory: 190.31MiB", f"Free memory: {free}")
    assert diagnose(log).kind == kind


def test_vllm_s_start_check_naming_its_device_reads_like_the_older_one() -> None:
    # vLLM 0.11+ (public14 r-021: a flaky test beside other processes on the node's GPU)
    d = diagnose(
        "(EngineCore pid=407) ValueError: Free memory on device cuda:0 (22.65/79.18 GiB) on "
        "startup is less than desired GPU memory utilization (0.825, 65.32 GiB). Decrease GPU "
        "memory utilization or reduce GPU memory used by other processes.\n"
    )
    assert (d.kind, d.summary) == (
        "gpu-shared",
        "gpu-shared: vLLM found 22.65 GiB free of the 79.18 GiB GPU at start, less than the 65.32 "
        "GiB its gpu_memory_utilization asks: 56.53 GiB was held by other processes; at most 0.28 "
        "of the GPU is there to take",
    )


def test_an_op_s_allocation_failing_in_tensorflow_s_pool_is_not_its_start_reservation() -> None:
    """public14 n-003: TensorFlow 1.x created its device, printed "Epoch 1/1" and its BFC pool
    failed an op's 798 MiB at the first step: not the reservation at start (b-039's driver line
    "failed to allocate 5.93G ... from device" is); what limited the pool the log does not say."""
    from .diagnosis_helpers import FIXTURES

    log = (FIXTURES.parents[2] / "evaluation" / "public14" / "logs" / "n-003.log").read_text(
        errors="replace"
    )
    d = diagnose(log)
    assert (d.kind, d.summary) == (
        "unknown",
        "unknown: the 798.06 MiB an op asked did not fit TensorFlow's pool before a step "
        "finished; the pool was reserved at start from the 3.55 GiB free of the 3.94 GiB GPU (all "
        "of it by default, or per_process_gpu_memory_fraction of it): the work's size or a memory "
        "fraction is the limit, and the log does not say which",
    )
    op = ("OOM when allocating tensor with shape[16,3785,512] and type float on "
          "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n")
    assert diagnose(log + op).kind == "unknown"
    # a device near full at start is another process's, whatever failed (the review)
    full = log.replace("Free memory: 3.55GiB", "Free memory: 150.00MiB")
    assert diagnose(full).kind == diagnose(full + op).kind == "gpu-shared"


def test_an_op_s_failure_in_tensorflow_s_pool_without_its_size_says_so() -> None:
    """An "OOM when allocating tensor" cut before its dtype has no request: the summary names
    the op's allocation, not a size (mutation found the branch unpinned)."""
    event = OomEvent(formats.TENSORFLOW, "tensorflow", "OOM when allocating tensor with shape",
                     Figures(total_bytes=4 * 2**30, free_bytes=3 * 2**30))
    v = classify(event, phase=STARTUP)
    assert (v.kind, v.summary) == (
        "unknown",
        "unknown: an op's allocation did not fit TensorFlow's pool before a step finished; the "
        "pool was reserved at start from the 3.00 GiB free of the 4.00 GiB GPU (all of it by "
        "default, or per_process_gpu_memory_fraction of it): the work's size or a memory "
        "fraction is the limit, and the log does not say which",
    )


def test_a_library_starved_at_tensorflow_s_start_is_not_tensorflow_s_own_reservation() -> None:
    """TensorFlow created its device, then cuBLAS could not create its handle: TensorFlow's
    reservation left the library no room (tests/fixtures/oom/families/tf_cublas_alloc_failed)."""
    empty = {"R": None, "T": None, "F": None, "A": None, "P": None, "framework": "tensorflow"}
    assert kind(family=formats.CUDA_LIBRARY, phase=STARTUP, **empty) == "non-pytorch-memory"
    assert kind(family=formats.DRIVER, phase=STARTUP, **empty) == "memory-fraction-cap"
    # an op's allocation in TensorFlow's pool is not its reservation (public14 n-003)
    assert kind(family=formats.TENSORFLOW, phase=STARTUP, **empty) == "unknown"
    assert kind(family=formats.BFC, phase=STARTUP, **empty) == "unknown"


def test_an_eviction_is_a_host_kill_worded_as_the_kubelet_s() -> None:
    event = OomEvent(formats.HOST_KILLED, None, "The node was low on resource: memory.", Figures())
    v = classify(event)
    assert (v.kind, v.summary) == (
        "host-oom-killed",
        "host-oom-killed: the kubelet evicted the pod: the node was low on host (CPU) memory, not "
        "GPU memory",
    )


HAMI = (
    "[HAMI-core Msg(30:140387636202368:libvgpu.c:855)]: Initialized\n"
    "[HAMI-core ERROR (pid:30 thread=140382094939712 allocator.c:53)]: Device 0 OOM 3171158016 / "
    "3145728000\n"
    "Traceback (most recent call last):\n"
    '  File "train.py", line 40, in <module>\n'
    "    loss.backward()\n"
    "RuntimeError: CUDA error: unrecognized error code\n"
)


def test_hamis_refusal_is_the_pods_vgpu_memory_cap_and_names_its_resource() -> None:
    """public12 f-016: HAMi refused past the pod's 3,000 MiB; torch said only an unrecognized
    CUDA error, which is that refusal, not a later failure."""
    d = diagnose(HAMI)
    assert (d.detected, d.kind) == (True, "memory-fraction-cap")
    assert d.summary == (
        "memory-fraction-cap: HAMi refused an allocation: the container's GPU memory with it "
        "came to 2.95 GiB, 24.25 MiB past the 2.93 GiB of vGPU memory the pod was given")
    assert (d.figures.process_bytes, d.figures.allowed_bytes) == (3171158016, 3145728000)
    assert "nvidia.com/gpumem" in d.recommendation.actions[0]
    assert d.recommendation.alloc_conf is None


@pytest.mark.parametrize("error", [
    "KeyError: 'labels'",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA error: device-side assert triggered",
    "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle)`",
])  # fmt: skip
def test_another_error_after_a_hamis_refusal_is_still_a_later_failure(error: str) -> None:
    """The review of this round: "CUDA error" in any later exception was read as the refusal."""
    d = diagnose(HAMI.replace("RuntimeError: CUDA error: unrecognized error code", error))
    assert not d.detected


def test_a_hamis_refusal_the_job_got_past_is_no_oom() -> None:
    """HAMi logs the refusal before it retries, and PyTorch's allocator frees its cache and
    retries: with no out-of-memory error raised after it, the job went on."""
    line = HAMI.splitlines()[1]
    d = diagnose(f"step 10 loss 2.1\n{line}\nstep 11 loss 2.0\nstep 12 loss 1.9\n"
                 "eval accuracy 0.41 < required 0.80\n")
    assert not d.detected and d.oom_count == 1
    assert d.to_json_dict()["handled_refusal"] == line
    assert "nvidia.com/gpumem" in d.recommendation.actions[0]


def test_a_hamis_refusal_raised_as_cudas_out_of_memory_is_the_cap() -> None:
    d = diagnose(HAMI.replace("unrecognized error code", "out of memory"))
    assert (d.detected, d.kind) == (True, "memory-fraction-cap")


@pytest.mark.parametrize(("request_", "kind"), [
    ("173.69M (182124544 bytes)", "gpu-shared"),  # asked what was free: the memory was taken
    ("1.50G (1610612736 bytes)", "memory-fraction-cap"),  # asked a fraction of the device
])  # fmt: skip
def test_tensorflow_asking_what_it_found_free_at_start_on_a_shared_card(
    request_: str, kind: str
) -> None:
    """public12 f-002: 1.79 GiB of a 1.96 GiB card held before TensorFlow started (8.6 % free,
    above the near-full share); it asked for the 173.69 MiB it found free and failed."""
    log = (
        "Total memory: 1.96GiB\nFree memory: 173.69MiB\n"
        "I tensorflow/core/common_runtime/gpu/gpu_device.cc:975] Creating TensorFlow device "
        "(/gpu:0) -> (device: 0, name: GeForce GTX 950M)\n"
        f"E tensorflow/stream_executor/cuda/cuda_driver.cc:1002] failed to allocate {request_} "
        "from device: CUDA_ERROR_OUT_OF_MEMORY\n"
    )
    assert diagnose(log).kind == kind


def test_tensorflow_asking_what_was_free_with_less_than_a_gib_held_is_no_sharing() -> None:
    log = (
        "Total memory: 7.92GiB\nFree memory: 7.10GiB\n"
        "I tensorflow/core/common_runtime/gpu/gpu_device.cc:975] Creating TensorFlow device\n"
        "E tensorflow/stream_executor/cuda/cuda_driver.cc:1002] failed to allocate 7.10G "
        "(7623566950 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY\n"
    )
    assert diagnose(log).kind == "memory-fraction-cap"


def test_a_process_figure_of_two_to_the_64_is_nvmls_not_available() -> None:
    """public12 c-005 (Windows): "this process has 17179869184.00 GiB memory in use" is no
    memory; before, it made the process's non-PyTorch memory the cause."""
    d = diagnose(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.63 GiB. GPU 0 has "
        "a total capacity of 23.99 GiB of which 0 bytes is free. Including non-PyTorch memory, "
        "this process has 17179869184.00 GiB memory in use. Of the allocated memory 34.86 GiB is "
        "allocated by PyTorch, and 5.63 GiB is reserved by PyTorch but unallocated.\n"
    )
    assert d.detected and d.figures.process_bytes is None
    assert d.kind == "capacity"


def test_a_hamis_refusal_raised_past_a_deep_traceback_is_the_cap() -> None:
    """The refusal's exception may come after more than the failure's 16 lines."""
    frames = "".join(f'  File "model.py", line {n}, in forward\n    x = layer(x)\n'
                     for n in range(30))
    d = diagnose(HAMI.replace('  File "train.py", line 40, in <module>\n', frames)
                 .replace("unrecognized error code", "out of memory"))
    assert (d.detected, d.kind) == (True, "memory-fraction-cap")


@pytest.mark.parametrize(("after", "kind"), [
    ("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.", "host-oom-killed"),
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor "
     "with shape[1024,1024,256] and type float on /job:localhost/replica:0/task:0/device:GPU:0",
     "capacity"),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:114] . DefaultCPUAllocator: can't allocate "
     "memory: you tried to allocate 4294967296 bytes.", "host-oom-killed"),
])  # fmt: skip
def test_another_stacks_failure_after_a_hamis_refusal_is_the_one_read(after: str, kind: str
                                                                       ) -> None:
    """The second review of this round: HAMi's line (rank 8) absorbed a later failure of equal
    or lower rank and was then read as a refusal the job got past: the job's own failure after
    it is read instead."""
    line = HAMI.splitlines()[1]
    d = diagnose(f"step 10 loss 2.1\n{line}\nstep 11 loss 2.0\n{after}\n")
    assert (d.detected, d.kind) == (True, kind)


def test_the_failure_after_a_hamis_refusal_is_read_with_everything_the_caller_gave() -> None:
    """The re-read of the later failure gets the caller's torch version, allocator setting,
    backend, node evidence and probe record, as a log without the refusal would."""
    from gpu_auditor.diagnosis.model import NodeEvidence

    after = (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:114] . DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 4294967296 bytes.\n"
    )
    given = {
        "torch_version": "1.8.1",
        "alloc_conf": "expandable_segments:True,max_split_size_mb:1",
        "backend": "cudaMallocAsync",
        "node": NodeEvidence(gpu_total_bytes=16 * 2**30, growth_bytes_per_second=2**30),
    }
    line = HAMI.splitlines()[1]
    read = diagnose(f"step 10 loss 2.1\n{line}\nstep 11 loss 2.0\n{after}", **given)
    alone = diagnose(f"step 10 loss 2.1\nstep 11 loss 2.0\n{after}", **given)
    assert read.alloc_conf_problems  # 1.8.1 has no expandable_segments
    first, second = read.to_json_dict(), alone.to_json_dict()
    del first["oom_count"], second["oom_count"]
    assert first == second


def test_a_hamis_refusal_raised_only_after_more_steps_is_no_cap() -> None:
    """The traceback must start right after the refusal: a CUDA error after more training is
    another failure (the second review's d2)."""
    line = HAMI.splitlines()[1]
    d = diagnose(f"{line}\nstep 11 loss 2.0\nstep 12 loss 1.9\nstep 13 loss 1.8\nstep 14 loss 1.7\n"
                 "Traceback (most recent call last):\n  File \"t.py\", line 9, in <module>\n"
                 "RuntimeError: CUDA error: unknown error\n")
    assert not d.detected


def test_the_readings_added_this_round_say_so_in_their_summaries() -> None:
    line = HAMI.splitlines()[1]
    handled = diagnose(f"{line}\nstep 11 loss 2.0\n")
    assert handled.summary == (
        "no out-of-memory failure ended the job: HAMi refused an allocation past the pod's vGPU "
        "memory and the job went on (HAMi retries; PyTorch frees its cache and retries)")
    named = diagnose("OutOfMemoryError                          Traceback (most recent call "
                     "last)\n")
    assert named.summary == (
        "unknown: an OutOfMemoryError's failure with no memory figures in the log (another "
        "process may hold the GPU; the node report can tell)")
    bare = diagnose("DefaultCPUAllocator: can't allocate memory\n")
    assert bare.summary == "host-oom-killed: host (CPU) memory ran out, not GPU memory"


@pytest.mark.parametrize(("free", "kind"), [("1.00GiB", "gpu-shared"),  # 1 GiB held: the bound
                                            ("1.01GiB", "memory-fraction-cap")])
def test_tensorflow_asking_what_it_found_free_with_exactly_a_gib_held(free: str, kind: str
                                                                       ) -> None:
    size = {"1.00GiB": 1073741824, "1.01GiB": 1084479242}[free]
    log = (
        f"Total memory: 2.00GiB\nFree memory: {free}\n"
        "I tensorflow/core/common_runtime/gpu/gpu_device.cc:975] Creating TensorFlow device\n"
        f"E tensorflow/stream_executor/cuda/cuda_driver.cc:1002] failed to allocate {free[:-2]} "
        f"({size} bytes) from device: CUDA_ERROR_OUT_OF_MEMORY\n"
    )
    assert diagnose(log).kind == kind


TORCH_ROOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total "
    "capacity of 79.33 GiB of which 58.12 GiB is free. Process 3471 has 21.20 GiB memory in use. "
    "Of the allocated memory 17.81 GiB is allocated by PyTorch, and 2.90 GiB is reserved by "
    "PyTorch but unallocated.\n"
)


def test_a_torch_oom_right_after_a_hamis_refusal_is_the_pods_vgpu_cap() -> None:
    """The second review's d1: under a pod's 20 GiB vGPU limit torch's figures showed 58 GiB
    free of the card and were read as room; the refusal just before it is the cause."""
    log = (
        "{'loss': 1.8812, 'epoch': 0.02}\n"
        "[HAMI-core ERROR (pid:1 thread=139941524457280 allocator.c:54)]: Device 0 OOM "
        "23555211264 / 21474836480\n"
        "Traceback (most recent call last):\n  File \"/app/train.py\", line 142, in <module>\n"
        "    trainer.train()\n" + TORCH_ROOM
    )
    d = diagnose(log)
    assert (d.detected, d.kind, d.framework) == (True, "memory-fraction-cap", "pytorch")
    assert d.figures.requested_bytes == round(1.96 * 2**30)
    assert (d.figures.process_bytes, d.figures.allowed_bytes) == (23555211264, 21474836480)
    assert "nvidia.com/gpumem" in d.recommendation.actions[0]
    assert d.recommendation.alloc_conf is None


def test_the_same_torch_oom_without_a_refusal_before_it_reads_its_figures() -> None:
    assert diagnose("step 3\n" + TORCH_ROOM).kind != "memory-fraction-cap"


# -- the tenth round: a HAMi refusal where the log ends, HAMi's own failure, vLLM's warm-up -----


@pytest.mark.parametrize("after", [
    "",  # the log ends at the refusal (public26 e-005)
    # only HAMi's own lines after it, under Ray's prefix (public26 e-006)
    "(ImageGenerator pid=414) \n(ImageGenerator pid=414) [HAMI-core Info(414:1:memory.c:509)]: "
    "orig free=21910454272 total=47622258688 limit=48305799168 usage=48234496000\n"
    "(ImageGenerator pid=414) [HAMI-core Debug(414:1:hook.c:403)]: found symbol cuMemMap\n",
])  # fmt: skip
def test_a_hamis_refusal_where_the_log_ends_is_the_cap(after: str) -> None:
    line = HAMI.splitlines()[1]
    d = diagnose(f"step 10 loss 2.1\n{line}\n{after}")
    assert (d.detected, d.kind) == (True, "memory-fraction-cap")
    assert (d.figures.process_bytes, d.figures.allowed_bytes) == (3171158016, 3145728000)


def test_a_hamis_refusal_with_the_job_s_own_line_after_it_is_still_got_past() -> None:
    line = HAMI.splitlines()[1]
    d = diagnose(f"{line}\n[HAMI-core Info(1:1:memory.c:509)]: orig free=0\nstep 11 loss 2.0\n")
    assert not d.detected


def test_hamis_own_allocation_failing_with_out_of_memory_is_the_shared_card() -> None:
    """public26 e-007: HAMi-core's cuMemoryAllocate through the driver returned res=2 (the card,
    not the pod's vGPU limit); e-029: two 16000 MiB pods on one 16 GB card."""
    d = diagnose("[HAMI-core ERROR (pid:7 thread=140360328144640 allocator.c:115)]: "
                 "cuMemoryAllocate failed res=2\n")
    assert (d.detected, d.kind, d.framework) == (True, "unknown", "hami")
    assert any(a.startswith("HAMi shares this card between pods") for a in
               d.recommendation.actions)
    other = diagnose("[HAMI-core ERROR (pid:7 thread=1 allocator.c:115)]: cuMemoryAllocate "
                     "failed res=1\n")
    assert not other.detected  # CUDA_ERROR_INVALID_VALUE: not memory


WARMUP = (
    "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 \n"
    "dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` \n"
    "when initializing the engine.\n"
)


@pytest.mark.parametrize(("before", "fix"), [
    ("", ENGINE_DUMMY_RUN_FIX),  # public26 e-017 as posted: profiling or warm-up, not told
    ("INFO 05-01 10:00:10 [kv_cache_utils.py:600] GPU KV cache size: 400,000 tokens\n",
     ENGINE_WARM_UP_FIX),
])  # fmt: skip
def test_vllms_warm_up_message_alone_names_its_own_levers(before: str, fix: str) -> None:
    d = diagnose(before + WARMUP)
    assert (d.detected, d.kind, d.framework) == (True, "memory-fraction-cap", "vllm")
    assert d.summary == (
        "memory-fraction-cap: vLLM ran out warming up with max_num_seqs dummy requests at once: "
        "its own settings (max_num_seqs, gpu_memory_utilization) leave the warm-up too little "
        "room")
    assert d.recommendation.actions[0] == fix and d.recommendation.alloc_conf is None


CAP_REFUSAL = (
    "Allocation on device 0 would exceed allowed memory. (out of memory)\n"
    "Currently allocated : 7.99 GiB\nRequested : 10.00 MiB\nDevice limit : 15.99 GiB\n"
    "Free (according to CUDA): 6.61 GiB\n"
    "PyTorch limit (set by user-supplied memory fraction)\n: 8.00 GiB\n"
)


def test_pytorchs_cap_refusal_is_the_cap_whatever_its_rounded_figures_leave() -> None:
    """public26 g-028: 7.99 GiB + 10 MiB under a printed 8.00 GiB (0.5 x 15.99 GiB): the
    figures' two decimals leave 10.24 MiB, PyTorch's words say the fraction refused it."""
    d = diagnose(CAP_REFUSAL)
    assert (d.detected, d.kind) == (True, "memory-fraction-cap")
    assert d.recommendation.actions[0].startswith("raise the per-process memory fraction")


def test_a_cap_at_the_device_is_no_cap_even_when_stated() -> None:
    d = diagnose(CAP_REFUSAL.replace(": 8.00 GiB", ": 15.99 GiB").replace("7.99 GiB", "15.98 GiB"))
    assert d.kind != "memory-fraction-cap"


def test_the_async_backend_s_sentence_with_room_under_its_fraction_is_no_cap() -> None:
    """The review's case 01: cudaMallocAsync prints 'would exceed allowed memory' for any
    failure; 2.10 GiB + 20 MiB under a 39.57 GiB fraction with 45 GiB free is not the cap."""
    d = diagnose(
        "Allocation on device 0 would exceed allowed memory. (out of memory)\n"
        "Currently allocated     : 2.10 GiB\nRequested               : 20.00 MiB\n"
        "Device limit            : 79.15 GiB\nFree (according to CUDA): 45.00 GiB\n"
        "PyTorch limit (set by user-supplied memory fraction)\n"
        "                        : 39.57 GiB\n"
    )
    assert d.kind != "memory-fraction-cap"


def test_a_hamis_refusal_before_a_redrawn_bar_is_still_got_past() -> None:
    """The review's case 12: a bar's redraws after the refusal, ended by HAMi's warning on the
    same physical line, are the job's own output."""
    line = HAMI.splitlines()[1]
    bar = "".join(f"\rEpoch 3: {i}/1000 [00:{i % 60:02d}<00:00, 7.10it/s]" for i in range(1000))
    warn = "[HAMI-core Warn(61:1:multiprocess_memory_limit.c:812)]: device 0 usage 15021 MiB"
    assert not diagnose(f"{line}\n{bar}{warn}\n").detected


def test_a_hamis_refusal_far_from_the_log_s_end_is_still_got_past() -> None:
    """The review's case 18: only the log's last 32 KiB are kept after a failure; a refusal
    further back may have hours of training after it, whatever HAMi printed last."""
    line = HAMI.splitlines()[1]
    training = "".join(f"step {i} loss 1.0\n" for i in range(20_000))
    flood = "[HAMI-core Warn(1:1:utils.c:9)]: lock shrreg timeout, try fix (1:2)\n" * 600
    assert not diagnose(f"{line}\n{training}{flood}").detected


def test_hamis_own_allocation_the_job_got_past_is_no_oom() -> None:
    """The review's case 10: HAMi returns the failure, PyTorch frees its cache and retries."""
    d = diagnose("[HAMI-core ERROR (pid:7 thread=1 allocator.c:115)]: cuMemoryAllocate failed "
                 "res=2\nstep 301 loss 1.2\nstep 302 loss 1.1\nERROR eval accuracy 0.41 is below "
                 "the gate\n")
    assert not d.detected
    assert d.summary.startswith("no out-of-memory failure ended the job: HAMi's allocation on "
                                "the card it shares")


def _async_refusal(allocated: int | None, request: int, allowed: int, total: int) -> Verdict:
    figures = Figures(requested_bytes=request, total_bytes=total, free_bytes=total - G,
                      allocated_bytes=allocated, allowed_bytes=allowed)
    return classify(OomEvent(formats.TORCH_ASYNC, "pytorch", "Allocation on device 0 would "
                             "exceed allowed memory. (out of memory)", figures))


def test_the_async_backends_figures_reach_its_limit_within_their_printed_decimals() -> None:
    """Each printed figure may be half its last digit off: 8 GiB's and 7.99 GiB's 0.005 GiB."""
    slack = 2 * (G // 200)  # printed_error of a GiB-sized figure, twice
    limit = 8 * G
    a = limit - slack - 10 * M
    assert _async_refusal(a, 10 * M + 1, limit, 16 * G).kind == "memory-fraction-cap"
    assert _async_refusal(a, 10 * M, limit, 16 * G).kind != "memory-fraction-cap"  # reached only
    # with no allocated figure, nothing of PyTorch's is counted, nor its printing
    one = G // 200
    assert _async_refusal(None, limit - one, limit, 16 * G).kind != "memory-fraction-cap"
    assert _async_refusal(None, limit - one + 1, limit, 16 * G).kind == "memory-fraction-cap"
    # a limit at the device is no fraction
    assert _async_refusal(a, 2 * G, 16 * G, 16 * G).kind != "memory-fraction-cap"


@pytest.mark.parametrize(("line", "summary"), [
    ("pyopencl._cl.MemoryError: clEnqueueMapBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE",
     "unknown: OpenCL could not allocate a buffer on the device: the GPU was full"),
    ("CURANDError: CURAND_STATUS_ALLOCATION_FAILED",
     "unknown: cuRAND could not allocate its own memory: the GPU was full"),
])  # fmt: skip
def test_a_librarys_failure_names_the_library_and_what_it_could_not_get(
    line: str, summary: str
) -> None:
    assert diagnose(line + "\n").summary.startswith(summary)


# -- the kind of an XLA compile plan is decided where the event is classified (CI's mutation run
# on 2faaa86: the plan's condition survived, classify's tests had no TPU compile failure) -------


def test_an_xla_tpu_compile_plan_over_the_chip_s_hbm_is_capacity() -> None:
    line = ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent "
            "error. Ran out of memory in memory space hbm. Used 21.95G of 15.48G hbm. Exceeded hbm "
            "capacity by 6.47G.")
    d = diagnose(line + "\n")
    assert (d.detected, d.kind) == (True, "capacity")
    assert d.summary.startswith("capacity: XLA's TPU compiler planned")


def test_a_memoryerror_head_alone_names_both_memories_it_may_be() -> None:
    # public37 u-029: IPython's head, cut before its message
    log = ("MemoryError                               Traceback (most recent call last)\n"
           "/tmp/ipykernel_1/2.py in <module>\n")
    d = diagnose(log)
    assert d.summary == (
        "unknown: a MemoryError ended the job, its message not in the log: host (CPU) memory "
        "refused, or a GPU library that raises it (RAPIDS' RMM, CuPy); the lines before it and "
        "the node report can tell")
    # PyTorch's OutOfMemoryError head keeps its own words
    torch_head = diagnose(log.replace("MemoryError       ", "OutOfMemoryError  "))
    assert torch_head.summary.startswith("unknown: an OutOfMemoryError's failure")
