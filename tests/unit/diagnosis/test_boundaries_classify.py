"""Boundary table for the classifier: each threshold from both sides, one rule deciding each pair.

Every pair below differs in one figure by one byte (or the smallest step the rule can see), and
everything else in the case is chosen so that only the rule under test changes its answer; the
comment on each pair says why the other rules do not. Figures are exact bytes handed straight to
``classify`` (a message prints them rounded to 0.01 of a unit); the numbers are literals, never
the production constants, so a changed threshold fails here.

Names as in ``classify.py``: R request, T total, F device free, A allocated, U reserved but
unallocated, reserved = A + U, P this process's memory, L allowed (the fraction's cap), O other
processes. Unless a case says otherwise P = reserved + 512 MiB: a CUDA context's worth outside
PyTorch (no non-PyTorch excess), and a process figure, so the "memory unseen outside" rule is off.
"""

from __future__ import annotations

import json

import pytest

from gpu_auditor.diagnosis import formats
from gpu_auditor.diagnosis.classify import Verdict, classify
from gpu_auditor.diagnosis.model import (
    Figures,
    Growth,
    NodeEvidence,
    OomEvent,
    OtherPod,
    OtherProcess,
)
from gpu_auditor.diagnosis.proberecord import ProbeRecord, parse_record

pytestmark = pytest.mark.unit

G = 2**30
M = 2**20
DEFAULT = object()


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
) -> Verdict:
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
    event = OomEvent(family, "pytorch", "CUDA out of memory", figures)
    return classify(event, growth=growth, phase=phase)


def kind(**kw: object) -> str:
    return verdict(**kw).kind  # type: ignore[arg-type]


# -- 1. a request above the whole GPU ---------------------------------------------------------


def test_request_one_byte_above_the_gpu_is_capacity_equal_fits() -> None:
    # an empty 80 GiB GPU: nothing else is in play, the request alone decides
    base = {"T": 80 * G, "F": 80 * G, "A": 0}
    assert kind(R=80 * G + 1, **base) == "capacity"
    assert kind(R=80 * G, **base) == "unknown"  # the figures show room


# -- 2. the memory fraction's cap --------------------------------------------------------------


def test_cap_binds_when_live_memory_plus_request_exceeds_it_by_one_byte() -> None:
    # L 8 GiB on an 80 GiB GPU with 70 GiB free. A + R = L + 1: the cap, with the device's room
    # (F >= R). At A + R = L the headroom L - reserved = R covers it: the figures show room.
    base = {"T": 80 * G, "F": 70 * G, "A": 4 * G, "L": 8 * G}
    v = verdict(R=4 * G + 1, **base)
    assert v.kind == "memory-fraction-cap"
    assert v.summary.startswith("memory-fraction-cap: 4.00 GiB allocated + the 4.00 GiB request")
    assert kind(R=4 * G, **base) == "unknown"


def test_cap_only_counts_reserved_but_unallocated_memory_as_the_devices_room() -> None:
    # L 8 GiB, A 6 GiB, U 1 GiB, R 4 GiB: A + R = 10 GiB > L (binding). F + U = R: the device
    # and the idle cache had the room, the cap withheld it. One byte less free and it is not
    # the cap alone: capacity (the idle 1 GiB + the 1 GiB headroom cannot serve 4 GiB).
    base = {"R": 4 * G, "T": 80 * G, "A": 6 * G, "U": 1 * G, "L": 8 * G}
    assert kind(F=3 * G, **base) == "memory-fraction-cap"  # F < R: only U makes it the cap
    assert kind(F=3 * G - 1, **base) == "capacity"


def test_a_cap_at_the_gpus_total_is_ignored_one_byte_below_it_binds() -> None:
    # Figures printed to 0.01 GiB can add up to a few MiB over the total: here A + R is 1 byte
    # over T. With L = T (fraction 1.0) there is no cap: the other process's 10 GiB covers the
    # 10 GiB shortfall, gpu-shared. One byte below T the cap binds, and a binding cap is not
    # another pod's fault (nor the cap's alone: F + U < R): capacity.
    base = {
        "R": 20 * G + 1,
        "T": 80 * G,
        "F": 10 * G + 1,
        "A": 60 * G,
        "others": (10 * G,),
    }
    assert kind(L=80 * G, **base) == "gpu-shared"
    assert kind(L=80 * G + 1, **base) == "gpu-shared"
    assert kind(L=80 * G - 1, **base) == "capacity"


# -- 3. another process on the GPU -------------------------------------------------------------


def test_other_processes_count_from_one_gib() -> None:
    # shortfall R - F = 0.5 GiB, well under O: only the 1 GiB floor decides
    base = {"R": 2 * G + 512 * M, "T": 80 * G, "F": 2 * G, "A": 76 * G}
    v = verdict(others=(1 * G,), **base)
    assert v.kind == "gpu-shared"
    below = verdict(others=(1 * G - 1,), **base)
    assert below.kind == "capacity" and "gpu-shared" not in below.contributing


def test_other_processes_must_cover_the_shortfall() -> None:
    # F 1 GiB, R 3 GiB: shortfall 2 GiB; O = 2 GiB covers it, one byte less does not (and is
    # still above the 1 GiB floor, so it contributes)
    base = {"R": 3 * G, "T": 80 * G, "F": 1 * G, "A": 76 * G}
    assert kind(others=(2 * G,), **base) == "gpu-shared"
    v = verdict(others=(2 * G - 1,), **base)
    assert (v.kind, v.contributing) == ("capacity", ("gpu-shared",))



def test_other_processes_are_not_blamed_when_the_figures_show_room() -> None:
    # another process holds 5 GiB; F = R: the device had the request's room, no shortfall for
    # anyone to cause (the figures show room: unknown); one byte less free is a 1-byte shortfall
    base = {"R": 2 * G, "T": 80 * G, "A": 70 * G}
    v = verdict(F=2 * G, others=(5 * G,), **base)
    assert (v.kind, v.contributing) == ("unknown", ("gpu-shared",))
    assert "shows room" in v.summary or "room" in v.summary
    assert kind(F=2 * G - 1, others=(5 * G,), **base) == "gpu-shared"

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


# -- 4. fragmentation --------------------------------------------------------------------------

# T 80 GiB, A 60 GiB, U 10 GiB (reserved 70 GiB, U is 14 % of it), R 10 GiB: the room F decides
# need = R - F against 0.40 * U = 4 GiB.


def test_fragmentation_while_the_need_is_at_most_0_40_of_the_idle_cache() -> None:
    base = {"R": 10 * G, "T": 80 * G, "A": 60 * G, "U": 10 * G}
    v = verdict(F=6 * G, **base)  # need 4 GiB = 0.40 * U
    assert v.kind == "fragmentation"
    over = verdict(F=6 * G - 1, **base)  # need 4 GiB + 1
    assert over.kind == "capacity"
    assert "fragmentation" in over.contributing  # the cache would cover it, packed
    assert "would have to be reclaimed" in over.summary


def test_fragmentation_needs_the_room_to_be_short_of_the_request() -> None:
    # room = R: the request fits, nothing to explain (unknown). One byte short: fragmentation.
    base = {"R": 10 * G, "T": 80 * G, "A": 60 * G, "U": 10 * G}
    assert kind(F=10 * G, **base) == "unknown"
    assert kind(F=10 * G - 1, **base) == "fragmentation"


def test_the_idle_cache_must_cover_what_the_room_lacks() -> None:
    # need 0.40 of U is already too much, so R = U + F is capacity with fragmentation
    # contributing, and one byte more is capacity without it: the cache could not cover it
    base = {"T": 80 * G, "F": 1 * G, "A": 60 * G, "U": 10 * G}
    v = verdict(R=11 * G, **base)
    assert (v.kind, "fragmentation" in v.contributing) == ("capacity", True)
    v = verdict(R=11 * G + 1, **base)
    assert (v.kind, "fragmentation" in v.contributing) == ("capacity", False)


def test_idle_cache_counts_from_20_mib() -> None:
    # a small capped job: L = reserved + 60 MiB, R 64 MiB, so need 4 MiB (0.2 of U). reserved
    # ~1 GiB: its 0.5 % (5 MiB) is under the 20 MiB floor, which alone decides.
    inside = verdict(R=64 * M, T=80 * G, F=70 * G, A=1 * G, U=20 * M, L=1 * G + 80 * M)
    assert inside.kind == "fragmentation"
    assert "left under the 1.08 GiB cap" in inside.summary
    outside = verdict(R=64 * M, T=80 * G, F=70 * G, A=1 * G, U=20 * M - 1, L=1 * G + 80 * M)
    # not fragmentation: the device had room and the cap's headroom (60 MiB + 1) did not
    assert outside.kind == "memory-fraction-cap"
    assert "fragmentation" not in outside.contributing


def test_idle_cache_counts_from_half_a_percent_of_reserved() -> None:
    # reserved 100 GiB either way; U = 512 MiB is 0.5 % of it. R 256 MiB, F 128 MiB: need
    # 128 MiB, a quarter of U, far above the 20 MiB floor: only the share decides.
    base = {"R": 256 * M, "T": 140 * G, "F": 128 * M}
    assert kind(A=100 * G - 512 * M, U=512 * M, **base) == "fragmentation"
    v = verdict(A=100 * G - 512 * M + 1, U=512 * M - 1, **base)
    assert v.kind == "capacity" and "fragmentation" not in v.contributing


def test_no_fragmentation_verdict_while_the_optimizer_creates_its_state() -> None:
    base = {"R": 10 * G, "T": 80 * G, "F": 8 * G, "A": 60 * G, "U": 10 * G}
    assert kind(phase="backward", **base) == "fragmentation"
    v = verdict(phase="optimizer-step", **base)
    assert (v.kind, v.contributing) == ("capacity", ("fragmentation",))


def test_capacity_contributes_when_defragmenting_leaves_under_5_percent() -> None:
    # T 100 GiB (5 % = 5 GiB), U 8 GiB, R 4 GiB: U + F - R is 5 GiB at F 1 GiB (need 3 GiB,
    # within 0.40 of U either way)
    base = {"R": 4 * G, "T": 100 * G, "A": 80 * G, "U": 8 * G}
    v = verdict(F=1 * G, **base)
    assert (v.kind, v.contributing) == ("fragmentation", ())
    v = verdict(F=1 * G - 1, **base)
    assert (v.kind, v.contributing) == ("fragmentation", ("capacity",))


def test_under_a_cap_thin_headroom_is_measured_against_the_cap() -> None:
    # L 40 GiB on a 100 GiB GPU with 50 GiB free: 5 % of L is 2 GiB (of T it would be 5 GiB).
    # A 30 GiB, U 3 GiB: room = the cap's 7 GiB headroom. R 8 GiB: need 1 GiB (a third of U),
    # U + room - R = 2 GiB, not thin; one byte more requested and it is.
    base = {"T": 100 * G, "F": 50 * G, "A": 30 * G, "U": 3 * G, "L": 40 * G}
    v = verdict(R=8 * G, **base)
    assert (v.kind, v.contributing) == ("fragmentation", ("memory-fraction-cap",))
    v = verdict(R=8 * G + 1, **base)
    assert (v.kind, v.contributing) == ("fragmentation", ("memory-fraction-cap", "capacity"))


# -- 5. memory outside PyTorch in this process -----------------------------------------------


def test_non_pytorch_memory_beyond_1_5_gib_must_cover_the_shortfall() -> None:
    # F 1 GiB, R 2 GiB: shortfall 1 GiB. P - reserved = 1.5 GiB + 1 GiB: the excess over the
    # 1.5 GiB allowance covers it exactly; one byte less and it does not. Share 2.5/22.5 > 10 %.
    base = {"R": 2 * G, "T": 80 * G, "F": 1 * G, "A": 20 * G}
    v = verdict(P=20 * G + 2 * G + 512 * M, **base)
    assert v.kind == "non-pytorch-memory"
    assert "this process holds 22.50 GiB but PyTorch reserved only 20.00 GiB" in v.summary
    v = verdict(P=20 * G + 2 * G + 512 * M - 1, **base)
    assert (v.kind, v.contributing) == ("capacity", ())  # and under 1 GiB: not contributing



def test_non_pytorch_memory_is_not_blamed_when_the_figures_show_room() -> None:
    # 12 GiB outside PyTorch (a third of the process), F = R: no shortfall to cover, unknown
    # (non-PyTorch memory contributing); one byte less free and the excess covers the shortfall
    base = {"R": 2 * G, "T": 80 * G, "A": 22 * G, "P": 36 * G}
    v = verdict(F=2 * G, **base)
    assert (v.kind, v.contributing) == ("unknown", ("non-pytorch-memory",))
    assert "shortfall" not in v.summary
    assert kind(F=2 * G - 1, **base) == "non-pytorch-memory"

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
def test_library_failures_outside_pytorchs_cache_are_non_pytorch_memory(family: str) -> None:
    empty = {"R": None, "T": None, "F": None, "A": None, "P": None}
    assert kind(family=family, **empty) == "non-pytorch-memory"
    assert kind(family=formats.TORCH_RAW, **empty) == "unknown"


# -- 6. memory held outside PyTorch with no process list --------------------------------------


def test_unseen_memory_must_cover_the_shortfall() -> None:
    # no P, no process list: T - F - reserved - 1.5 GiB = 80 - 1 - 70 - 1.5 = 7.5 GiB unseen
    base = {"T": 80 * G, "F": 1 * G, "A": 70 * G, "P": None}
    v = verdict(R=1 * G + 7 * G + 512 * M, **base)  # shortfall 7.5 GiB
    assert (v.kind, v.contributing) == ("unknown", ("gpu-shared", "non-pytorch-memory"))
    assert v.summary.startswith("unknown: 7.50 GiB of the 80.00 GiB GPU is held outside")
    v = verdict(R=1 * G + 7 * G + 512 * M + 1, **base)
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


# -- leak: primacy and growth that must cover the shortfall ------------------------------------

# T 80 GiB, F 1 GiB, A 77 GiB, R 2 GiB: capacity, need 1 GiB


def _growth(grew: int, source: str = "samples") -> Growth:
    return Growth(source, 10, 40 * G, 40 * G + grew, 1.0)


CAPACITY = {"R": 2 * G, "T": 80 * G, "F": 1 * G, "A": 77 * G}


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
    v = verdict(growth=_growth(4 * G), others=(2 * G,), R=3 * G, T=80 * G, F=1 * G, A=76 * G)
    assert (v.kind, v.contributing) == ("gpu-shared", ("leak",))


def test_leak_takes_the_slot_from_fragmentation_a_setting_cannot_fix() -> None:
    # the fragmentation pair above (need 4 GiB vs 0.40 * U), with a 5 GiB rise
    base = {"R": 10 * G, "T": 80 * G, "A": 60 * G, "U": 10 * G, "growth": _growth(5 * G)}
    v = verdict(F=6 * G, **base)
    assert (v.kind, v.contributing) == ("fragmentation", ("leak",))
    v = verdict(F=6 * G - 1, **base)
    assert (v.kind, v.contributing) == ("leak", ("capacity", "fragmentation"))


def test_leak_replaces_unknown_without_naming_it() -> None:
    # the unseen-memory case: unknown is no finding to keep beside the leak
    v = verdict(growth=_growth(8 * G), R=8 * G + 512 * M, T=80 * G, F=1 * G, A=70 * G, P=None)
    assert v.kind == "leak"
    assert "unknown" not in v.contributing
    assert set(v.contributing) == {"gpu-shared", "non-pytorch-memory"}


def test_host_allocation_failures_are_never_gpu_kinds() -> None:
    v = verdict(family=formats.HOST_ALLOC, R=1 * G, T=None, F=None, A=None, P=None)
    assert v.kind == "unknown"
    assert v.summary.startswith("unknown: host (CPU) memory ran out")


# -- what the verdict says: each summary, in full (the line a job owner reads) ---------------


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
            {"R": 3 * G, "T": 80 * G, "F": 1 * G, "A": 76 * G, "others": (2 * G,)},
            "gpu-shared: other processes hold 2.00 GiB of the GPU (pid 1000: 2.00 GiB); the "
            "3.00 GiB request needed 2.00 GiB more than the 1.00 GiB free",
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
            {"R": 10 * G, "T": 80 * G, "F": 6 * G, "A": 60 * G, "U": 10 * G},
            "fragmentation: 10.00 GiB reserved but unallocated + 6.00 GiB free would cover the "
            "10.00 GiB request; PyTorch holds 70.00 GiB with 60.00 GiB in use",
        ),
        (
            {"R": 64 * M, "T": 80 * G, "F": 70 * G, "A": 1 * G, "U": 20 * M, "L": 1 * G + 80 * M},
            "fragmentation: 20.00 MiB reserved but unallocated + 60.00 MiB left under the 1.08 GiB "
            "cap would cover the 64.00 MiB request; PyTorch holds 1.02 GiB with 1.00 GiB in use",
        ),
        (
            {"R": 2 * G, "T": 80 * G, "F": 1 * G, "A": 20 * G, "P": 22 * G + 512 * M},
            "non-pytorch-memory: this process holds 22.50 GiB but PyTorch reserved only 20.00 GiB; "
            "the difference covers the 2.00 GiB request's shortfall",
        ),
        (
            {"R": None, "T": None, "F": None, "A": None, "P": None, "family": formats.NCCL},
            "non-pytorch-memory: NCCL could not allocate its own memory outside PyTorch's cache",
        ),
        (
            {"R": None, "T": None, "F": None, "A": None, "P": None,
             "family": formats.CUDA_LIBRARY},
            "non-pytorch-memory: a CUDA library (cuBLAS/cuDNN) could not allocate its own memory "
            "outside PyTorch's cache",
        ),
        (
            {"R": 10 * G, "T": 80 * G, "F": 6 * G - 1, "A": 60 * G, "U": 10 * G},
            "capacity: the 10.00 GiB request exceeds the 6.00 GiB free on a 80.00 GiB GPU; PyTorch "
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
            {"R": 8 * G + 512 * M, "T": 80 * G, "F": 1 * G, "A": 70 * G, "P": None},
            "unknown: 7.50 GiB of the 80.00 GiB GPU is held outside this process's PyTorch "
            "allocator and the message lists no processes: another process or non-PyTorch memory",
        ),
        (
            {"R": 80 * G, "T": 80 * G, "F": 80 * G, "A": 0},
            "unknown: the figures show room (80.00 GiB) for the 80.00 GiB request",
        ),
        (
            {"R": None, "T": None, "F": None, "A": None, "P": None, "family": formats.TORCH_RAW},
            "unknown: torch-raw failure with no memory figures in the log (another process may "
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


# -- the node report fills in what the log lacks -------------------------------------------


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


# -- a probe record's pool replaces the message's idle cache ----------------------------------


def _record(request: int, large_free: int, small_free: int = 0, status: str = "ok") -> ProbeRecord:
    raw = {
        "probe": "gpu-auditor", "v": 1, "status": status, "request_bytes": request,
        "pools": {
            "large": {"free_bytes": large_free, "largest_free_bytes": 0},
            "small": {"free_bytes": small_free, "largest_free_bytes": 0},
        },
    }  # fmt: skip
    parsed = parse_record(json.dumps(raw))
    assert parsed.record is not None, parsed.reason
    return parsed.record


def test_the_records_large_pool_is_the_idle_cache_of_a_large_request() -> None:
    # the message shows no idle cache (U 0): capacity. The record's large pool then decides,
    # as U would: need 4 GiB against 0.40 of 10 GiB. A record whose status is not ok is unused.
    figures = Figures(10 * G, 80 * G, 6 * G, 60 * G + 512 * M, 60 * G, 0)
    event = OomEvent(formats.TORCH, "pytorch", "x", figures)
    assert classify(event).kind == "capacity"
    v = classify(event, record=_record(10 * G, 10 * G))
    assert v.kind == "fragmentation"
    assert v.summary.startswith(
        "fragmentation: 10.00 GiB free in the cache's blocks (probe record) + 6.00 GiB free"
    )
    assert classify(event, record=_record(10 * G, 10 * G - 1)).kind == "capacity"
    assert classify(event, record=_record(10 * G, 10 * G, status="no-hooks")).kind == "capacity"


def test_a_small_request_reads_the_records_small_pool() -> None:
    # R 2 MiB (the small pool's largest request), F 1.5 MiB, need 0.5 MiB; reserved 1 GiB
    figures = Figures(2 * M, 80 * G, 3 * M // 2, 1 * G + 512 * M, 1 * G, 0)
    event = OomEvent(formats.TORCH, "pytorch", "x", figures)
    assert classify(event, record=_record(2 * M, 0, small_free=20 * M)).kind == "fragmentation"
    assert classify(event, record=_record(2 * M, 20 * M, small_free=0)).kind == "capacity"
    big = Figures(2 * M + 1, 80 * G, 3 * M // 2, 1 * G + 512 * M, 1 * G, 0)
    event = OomEvent(formats.TORCH, "pytorch", "x", big)
    assert classify(event, record=_record(2 * M + 1, 20 * M, small_free=0)).kind == "fragmentation"
