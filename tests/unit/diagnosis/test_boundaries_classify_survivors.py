"""Boundary cases for the classifier's cap rules that mutation testing found loose (issue 18).

``cap_short`` (the cache filled the cap while the device had room) must ignore a cap equal to
the GPU's total (a fraction of 1.0 is no cap), even where the printed figures, each rounded to
0.01 GiB, show one byte more free than total - reserved; and the cap summaries name every
figure. Exact bytes handed to ``classify``, literal numbers, never the production constants.
"""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import formats
from gpu_auditor.diagnosis.classify import Verdict, classify
from gpu_auditor.diagnosis.model import Figures, OomEvent

pytestmark = pytest.mark.unit

G = 2**30
M = 2**20


def verdict(*, R: int, T: int, F: int, A: int, U: int, L: int) -> Verdict:
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
    # short of the request, while free shows 4 GiB + 1 (rounded figures). No cap: capacity.
    base = {"R": 4 * G + 1, "T": 80 * G, "F": 4 * G + 1, "A": 76 * G, "U": 0}
    assert verdict(L=80 * G, **base).kind == "capacity"
    # one byte below the total it is a cap, and allocated + request exceed it
    assert verdict(L=80 * G - 1, **base).kind == "memory-fraction-cap"


def test_the_reserved_cap_summary_names_reserved_request_allowed_and_free() -> None:
    # A + R = 3 + 4 = L 7 GiB: allocations do not bind; reserved 3 GiB + 10 MiB does.
    # U = 10 MiB is too little to be fragmentation.
    v = verdict(R=4 * G, T=80 * G, F=70 * G, A=3 * G, U=10 * M, L=7 * G)
    assert v.kind == "memory-fraction-cap"
    assert v.summary == (
        "memory-fraction-cap: 3.01 GiB reserved + the 4.00 GiB request exceed the 7.00 GiB "
        "allowed by the memory fraction, while the GPU had 70.00 GiB free"
    )


def test_the_binding_cap_summary_names_allocated_request_allowed_and_free() -> None:
    # A + R = 4 + 4 GiB > L 7 GiB: the allocations bind the cap
    v = verdict(R=4 * G, T=80 * G, F=70 * G, A=4 * G, U=0, L=7 * G)
    assert v.kind == "memory-fraction-cap"
    assert v.summary == (
        "memory-fraction-cap: 4.00 GiB allocated + the 4.00 GiB request exceed the 7.00 GiB "
        "allowed by the memory fraction, while the GPU had 70.00 GiB free"
    )
