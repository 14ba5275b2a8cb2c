"""One buffer larger than the driver allows in a single allocation: not the GPU running out.

Vulkan caps the size of one allocation (``maxMemoryAllocationSize``: 4 GiB on many drivers, 1-2
GiB on some), whatever the device has free. llama.cpp's Vulkan backend checks a buffer against
that cap before it asks for memory and, when the buffer is larger, throws vulkan-hpp's
``OutOfDeviceMemoryError`` with its own words, "Requested buffer size exceeds device memory
allocation limit" (``ggml_vk_create_buffer``), then reports the buffer it failed to allocate in
the words of a device that ran out ("failed to allocate Vulkan0 buffer of size N"). Public
threads: a 4.43 GiB compute buffer on a card with its memory free (public31 d-012, labelled blind
as not an OOM: the maintainer named the per-allocation cap) and llama.cpp#12728 ("I do have
memory on GPU", a 2 GiB buffer; a smaller context or batch ran). Read only where that line stands
among the last lines before the failure, and the failure is a Vulkan buffer's.
"""

from __future__ import annotations

import re
from typing import Final

from .logtext import printable

_LIMIT: Final = re.compile(r"\bRequested buffer size exceeds device memory allocation limit\b")
_VULKAN_BUFFER: Final = re.compile(r"\bVulkan\d{0,3} buffer\b")
LINES_BEFORE: Final = 4
MAX_LINE_CHARS: Final = 200

ALLOCATION_LIMIT_ACTION: Final = (
    "one buffer was larger than the Vulkan driver allows in a single allocation ({line}), "
    "whatever the GPU had free: make that buffer smaller (a smaller batch or micro-batch, -b/-ub, "
    "or a shorter context, -c), or, on an NVIDIA card, use the CUDA backend, which has no such cap"
)


def allocation_limit(failure: str, before: str) -> str | None:
    """The driver's per-allocation cap, when one of the last ``LINES_BEFORE`` lines of ``before``
    names it and the ``failure`` line is a Vulkan buffer's (the line stripped, cut to
    ``MAX_LINE_CHARS``, non-printable characters as ``?``); else None."""
    if _VULKAN_BUFFER.search(failure) is None:
        return None
    for line in reversed(before.splitlines()[-LINES_BEFORE:]):
        if _LIMIT.search(line) is not None:
            return printable(line.strip()[:MAX_LINE_CHARS])
    return None
