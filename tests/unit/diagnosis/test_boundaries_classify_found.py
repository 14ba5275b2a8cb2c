"""What mutation testing found loose in the classifier (``scripts/mutation.py --modules
classify``): the cases test_boundaries_classify.py did not pin, each from both sides where it is
a threshold, literal figures, exact verdicts and summaries. Names as there: R request, T total,
F free, A allocated, U reserved but unallocated, P this process, L the cap, O other processes.
"""

from __future__ import annotations

import pytest
from test_boundaries_classify import G, M, verdict

from gpu_auditor.diagnosis import formats
from gpu_auditor.diagnosis.model import Growth

pytestmark = pytest.mark.unit


def leak_of(source: str) -> Growth:
    return Growth(source=source, points=12, first_bytes=10 * G, last_bytes=20 * G, per_unit=1e6)


# -- the leak summary says where the series came from ---------------------------------------------


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
    # fragmentation a setting fixes keeps the primary slot; the leak contributes
    v = verdict(R=2 * G, T=80 * G, F=1 * G, A=60 * G, U=5 * G, growth=leak_of("samples"))
    assert (v.kind, v.contributing) == ("fragmentation", ("leak",))
    assert v.summary.startswith("fragmentation: 5.00 GiB reserved but unallocated + 1.00 GiB")


def test_a_leak_without_a_request_figure_is_still_judged() -> None:
    v = verdict(R=None, T=80 * G, F=1 * G, A=70 * G, growth=leak_of("samples"))
    assert v.kind == "leak"


# -- Accelerate's retry loop, host memory ---------------------------------------------------------


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
        "unknown: host (CPU) memory ran out, not GPU memory: could not allocate 2.00 GiB"
    )


# -- memory unseen outside: named from one byte ---------------------------------------------------


def test_unseen_memory_is_named_from_one_byte() -> None:
    # no request figure: unknown; T - F - reserved - 1.5 GiB is the unseen memory
    one = verdict(R=None, T=80 * G, F=8 * G + 512 * M - 1, A=70 * G, P=None)
    assert one.summary.startswith("unknown: 1 bytes of the 80.00 GiB GPU is held outside")
    none = verdict(R=None, T=80 * G, F=8 * G + 512 * M, A=70 * G, P=None)
    assert none.summary == (
        "unknown: torch failure with no memory figures in the log (another process may hold the "
        "GPU; the node report can tell)"
    )


# -- the fragmentation summary under a cap --------------------------------------------------------


def test_a_cap_that_leaves_more_than_the_free_memory_is_not_named() -> None:
    # the cap leaves 5 GiB (70 - 65), the device 1 GiB: the room is the device's free memory
    v = verdict(R=2 * G, T=80 * G, F=1 * G, A=60 * G, U=5 * G, L=70 * G)
    assert (v.kind, v.contributing) == ("fragmentation", ())
    assert v.summary == (
        "fragmentation: 5.00 GiB reserved but unallocated + 1.00 GiB free would cover the "
        "2.00 GiB request; PyTorch holds 65.00 GiB with 60.00 GiB in use"
    )


def test_a_cap_that_leaves_less_is_named_and_withholds_from_the_request_equal_to_it() -> None:
    # the cap leaves 1 GiB (66 - 65); the device has 2 GiB free: exactly the request
    v = verdict(R=2 * G, T=80 * G, F=2 * G, A=60 * G, U=5 * G, L=66 * G)
    assert (v.kind, v.contributing) == ("fragmentation", ("memory-fraction-cap",))
    assert "+ 1.00 GiB left under the 66.00 GiB cap would cover" in v.summary
    short = verdict(R=2 * G, T=80 * G, F=2 * G - 1, A=60 * G, U=5 * G, L=66 * G)
    assert (short.kind, short.contributing) == ("fragmentation", ())


def test_a_cap_with_no_allocated_figure_binds_only_above_the_request() -> None:
    # without A the live memory counts as 0: R == L fits under the cap, R == L + 1 does not
    fits = verdict(R=4 * G, T=80 * G, F=10 * G, A=None, P=None, L=4 * G)
    assert fits.kind == "unknown"
    over = verdict(R=4 * G + 1, T=80 * G, F=10 * G, A=None, P=None, L=4 * G)
    assert over.kind == "memory-fraction-cap"


# -- non-PyTorch memory ---------------------------------------------------------------------------


def test_nccl_with_process_figures_is_still_worded_as_nccl() -> None:
    v = verdict(R=1 * G, T=80 * G, F=512 * M, A=70 * G, family=formats.NCCL)
    assert v.summary == (
        "non-pytorch-memory: NCCL could not allocate its own memory outside PyTorch's cache"
    )


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


# -- figures missing ------------------------------------------------------------------------------


def test_others_without_free_but_with_total_are_the_finding() -> None:
    v = verdict(R=None, T=80 * G, F=None, A=None, P=None, others=(2 * G,))
    assert v.kind == "gpu-shared"


def test_fragmentation_without_a_total_gets_no_thin_headroom() -> None:
    v = verdict(R=2 * G, T=None, F=1 * G, A=60 * G, U=5 * G)
    assert (v.kind, v.contributing) == ("fragmentation", ())


def test_no_allocated_figure_is_no_fragmentation() -> None:
    v = verdict(R=2 * G, T=80 * G, F=1 * G, A=None, U=5 * G, P=None)
    assert v.kind == "capacity"


def test_no_total_turns_the_unseen_rule_off_without_error() -> None:
    v = verdict(R=2 * G, T=None, F=1 * G, A=60 * G, P=None)
    assert v.kind == "capacity"


# -- contributing ---------------------------------------------------------------------------------


def test_other_processes_contribute_from_exactly_1_gib() -> None:
    # they hold less than the 2 GiB shortfall, so fragmentation stays primary
    base = {"R": 3 * G, "T": 80 * G, "F": 1 * G, "A": 60 * G, "U": 6 * G}
    assert verdict(**base, others=(1 * G,)).contributing == ("gpu-shared",)  # type: ignore[arg-type]
    assert verdict(**base, others=(1 * G - 1,)).contributing == ()  # type: ignore[arg-type]


def test_unseen_memory_contributes_only_to_an_unknown_and_after_fragmentation() -> None:
    # unknown: 16.5 GiB unseen covers the 8 GiB shortfall; the idle cache would cover the
    # request but 8 of its 10 GiB would have to be reclaimed
    v = verdict(R=10 * G, T=80 * G, F=2 * G, A=50 * G, U=10 * G, P=None)
    assert (v.kind, v.contributing) == (
        "unknown", ("fragmentation", "gpu-shared", "non-pytorch-memory"))
    # fragmentation is decided before the unseen rule: nothing unseen is added to it
    f = verdict(R=2 * G, T=80 * G, F=1 * G, A=50 * G, U=5 * G, P=None)
    assert (f.kind, f.contributing) == ("fragmentation", ())


def test_others_holding_a_gib_when_the_request_fits_are_not_the_cause() -> None:
    # the request fits the free memory: no shortfall for another process to cause (this test
    # pinned "the 1.00 GiB request needed 0 bytes more than the 2.00 GiB free" before)
    v = verdict(R=1 * G, T=80 * G, F=2 * G, A=70 * G, others=(1 * G,))
    assert (v.kind, v.contributing) == ("unknown", ("gpu-shared",))
    assert v.summary == "unknown: the figures show room (2.00 GiB) for the 1.00 GiB request"


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
