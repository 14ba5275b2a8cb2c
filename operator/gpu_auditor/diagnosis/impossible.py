"""A figure no machine could hold: a size computed wrong, not memory running out.

A failure that asks for, or counts, more than any machine has did not fail for lack of memory:
the figure was computed wrong (an overflow, a negative length cast to an unsigned one, an
uninitialized value) or came from an error earlier in the job. Public threads: PyTorch's "Tried
to allocate more than 1EB memory" after an NCCL broadcast had timed out (NVIDIA/nccl#1284: the
maintainer points at the timeout), ONNX Runtime's arena asked for 4585490524328388608 bytes
(about 4 EiB) by a vision model's first convolution (both from the census), and HAMi counting a
container's vGPU usage as 2^64 bytes and refusing its next allocation (public12 f-017, the
accounting bug its maintainers fixed). Reading any as an OOM would send the owner to shrink work
that is not too big.
"""

from __future__ import annotations

import re
from typing import Final

from . import formats
from .model import OomEvent

IMPOSSIBLE_REQUEST_BYTES: Final = 2**50
"""1 PiB: above the memory of any one machine, GPU or host (the largest GPUs hold 288 GB, the
largest single-system hosts some tens of TiB), so a request of this size cannot be work that is
merely too big for this one."""

_TORCH_EXABYTE: Final = re.compile(r"\bTried to allocate more than 1EB memory\b")
"""PyTorch's ``format_size`` prints any size from 1 EiB up this way, without a figure."""

IMPOSSIBLE_ACTION: Final = (
    "the failure counted {size}, more than any machine has: a size computed wrong (an "
    "overflow, a negative or uninitialized length) or an error earlier in the job (a collective "
    "that timed out), not memory running out; look at the error before it and at the code that "
    "computed the size, not at the batch"
)


HAMI_ACCOUNTING: Final = (
    "HAMi counted the container's GPU memory as {size}: its own usage count went wrong (a "
    "count that fell below zero), not the job's memory; upgrade HAMi-core, or restart the pod"
)


_ZERO_REQUEST: Final = re.compile(
    r"\bran out of memory when allocating 0\b|\b[Tt]ried to allocate 0 bytes\b"
)
"""An allocator refusing a request of nothing (public22 x-001: TensorFlow's EigenAllocator "ran
out of memory when allocating 0" on an empty tensor, a bug its maintainers fixed)."""

ZERO_ACTION: Final = (
    "the failure asked for 0 bytes: no allocator runs out of memory for nothing; it is a bug in "
    "the operation that asked (an empty tensor, a size computed as 0), not memory running out: "
    "look at the shapes it was given, and upgrade the library"
)


def zero_request(event: OomEvent) -> bool:
    """Whether the failing request was of 0 bytes, printed or read."""
    return event.figures.requested_bytes == 0 or _ZERO_REQUEST.search(event.message) is not None


def impossible_request(event: OomEvent) -> str | None:
    """The request, or what the process would hold with it, printed, when it is more than any
    machine could hold; else None."""
    # the process figure only where HAMi counted it (PyTorch's comes from NVML: a wrong one
    # is no figure, not a wrong size)
    counted = event.figures.process_bytes if event.family == formats.HAMI else None
    for figure in (event.figures.requested_bytes, counted):
        if figure is not None and figure >= IMPOSSIBLE_REQUEST_BYTES:
            return f"{figure} bytes"
    if _TORCH_EXABYTE.search(event.message) is not None:
        return "more than 1 EiB"
    return None
