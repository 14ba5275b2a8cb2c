"""One buffer larger than the driver allows in a single allocation: not the GPU running out.

Vulkan caps the size of one allocation (``maxMemoryAllocationSize``: 4 GiB on many drivers, 1-2
GiB on some; llama.cpp also caps a buffer at the device's buffer size limit), whatever the device
has free. llama.cpp's Vulkan backend checks a buffer against that cap before it asks for memory
and, when the buffer is larger, prints "Device memory allocation of size N failed." and throws
vulkan-hpp's ``OutOfDeviceMemoryError`` with its own words, "Requested buffer size exceeds device
memory allocation limit" (``ggml_vk_create_buffer``; "... exceeds device buffer size limit" in
later releases, llama.cpp#18160), then reports the same buffer in the words of a device that ran
out ("failed to allocate Vulkan0 buffer of size N"). Public threads: a 4.43 GiB compute buffer on
a card with its memory free (public31 d-012, labelled blind as not an OOM: the maintainer named
the per-allocation cap) and llama.cpp#12728 ("I do have memory on GPU", a 2 GiB buffer; a
smaller context or batch ran). Read only where the cap's words follow the allocation of the very
size the failure reports, among the last lines before it: the same words also follow a pinned
host buffer llama.cpp gave up for host memory, before a real device allocation failed (the
round's review).
"""

from __future__ import annotations

import re
from typing import Final

from .logtext import quoted

_LIMIT: Final = re.compile(
    r"\bRequested buffer size exceeds device (?:memory allocation|buffer size) limit\b"
)
_ALLOCATION: Final = re.compile(r"\bDevice memory allocation of size (\d{1,20}) failed\b")
_VULKAN_BUFFER: Final = re.compile(r"\bVulkan\d{0,3} buffer of size (\d{1,20})\b")
LINES_BEFORE: Final = 4

ALLOCATION_LIMIT_ACTION: Final = (
    "one buffer was larger than the Vulkan driver allows in a single allocation ({line}), "
    "whatever the GPU had free: make that buffer smaller (a smaller batch or micro-batch, -b/-ub, "
    "or a shorter context, -c), or, on an NVIDIA card, use the CUDA backend, which has no such cap"
)


def allocation_limit(failure: str, before: str) -> str | None:
    """The driver's per-allocation cap, when one of the last ``LINES_BEFORE`` lines of ``before``
    names it right after the line saying the allocation of the failing Vulkan buffer's very size
    failed (the cap's line stripped, cut to ``logtext.QUOTED_CHARS``, non-printable characters as
    ``?``); else None."""
    buffer = _VULKAN_BUFFER.search(failure)
    if buffer is None:
        return None
    lines = before.splitlines()[-LINES_BEFORE:]
    for at in range(len(lines) - 1, 0, -1):
        if _LIMIT.search(lines[at]) is None:
            continue
        asked = _ALLOCATION.search(lines[at - 1])
        if asked is not None and asked.group(1) == buffer.group(1):
            return quoted(lines[at])
    return None
