"""An out-of-memory code from a call that asks for no GPU memory: not an OOM.

CUDA returns ``CUDA_ERROR_OUT_OF_MEMORY`` from ``cuMemAddressReserve`` when it cannot reserve a
range of virtual addresses, with the device's memory untouched (the call maps nothing; the CUDA
driver API documents it as a reservation of address space). llama.cpp's CUDA backend reserves
its whole VMM pool (``CUDA_POOL_VMM_MAX_SIZE``) that way and names the failing call on the lines
after its "CUDA error: out of memory"; where the reservation is refused (WSL2, some Windows
drivers) the job fails with the GPU's memory free, and building without the pool
(``GGML_CUDA_NO_VMM``) fixed it (public11 u-016, labelled blind as not an OOM). The call must be
named within the failure's own next lines: a log that only mentions it elsewhere is read as
before.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from .logtext import Line, quoted

_RESERVE: Final = re.compile(r"^[ \t]{0,16}cuMemAddressReserve\(")
NEXT_LINES: Final = 4

ADDRESS_SPACE_ACTION: Final = (
    "the out-of-memory code came from reserving virtual address space ({line}), not from GPU "
    "memory running out: llama.cpp reserves its VMM pool that way; build it with "
    "GGML_CUDA_NO_VMM=ON, or run where the driver grants the reservation (not WSL2)"
)


def address_space_call(after: Sequence[Line]) -> str | None:
    """The failing call, when the failure's next lines name ``cuMemAddressReserve`` as it
    (stripped, cut to ``logtext.QUOTED_CHARS``, non-printable characters as ``?``); else None."""
    for line in after[:NEXT_LINES]:
        if _RESERVE.match(line.text) is not None:
            return quoted(line.text)
    return None
