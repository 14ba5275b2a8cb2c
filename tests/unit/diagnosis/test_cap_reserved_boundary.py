"""A memory-fraction cap can run out on what PyTorch has *reserved* before allocated + request
reach it; the device still had room. That is ``memory-fraction-cap`` (raise the fraction), not
``capacity`` (the summary used to say "the 4.20 GiB request exceeds the 136.14 GiB free").
Literal numbers on both sides of each condition (``_Facts.cap_short``)."""

from __future__ import annotations

import re

import pytest

from gpu_auditor.diagnosis import diagnose

pytestmark = pytest.mark.unit


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
