"""Figures from a PyTorch OOM message, as a job owner's log shows them (pure, no torch).

This is the measurement side's own reader, kept apart from ``gpu_auditor`` on purpose: the table
must show what the message says even when the diagnosis under test reads it wrong. Formats:

- native allocator, torch 2.1+: ``CUDA out of memory. Tried to allocate R. GPU N has a total
  capacity of T of which F is free. [Process P has X memory in use. ]...[Including non-PyTorch
  memory, this process has P memory in use. ][L allowed; ]Of the allocated memory A is allocated
  by PyTorch, [with PP allocated in private pools (e.g., CUDA Graphs), ]and U is reserved by
  PyTorch but unallocated.``
- ``backend:cudaMallocAsync``: ``Allocation on device N would exceed allowed memory.`` then
  ``Currently allocated : A``, ``Requested : R``, ``Device limit : T``, ``Free (according to
  CUDA): F``, ``PyTorch limit (set by user-supplied memory fraction) : L`` (2^64 bytes = none).
- a raw ``CUDA error: out of memory``: no figures.

Sizes are torch's ``format_size``: ``n bytes`` or ``x.xx KiB|MiB|GiB`` (two decimals, so a
figure in GiB is only known to ~5 MiB).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Final

UNITS: Final = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}
NO_LIMIT_BYTES: Final = 2**60
"""Limits at or above this mean "no limit" (the async backend prints 2^64 bytes)."""

_SIZE = r"(\d+(?:\.\d+)?) (bytes|KiB|MiB|GiB|TiB)"
_NATIVE = re.compile(
    r"out of memory\. Tried to allocate "
    + _SIZE
    + r"\. GPU (\d+) has a total capac\w* of "
    + _SIZE
    + r" of which "
    + _SIZE
    + r" is free\. (.*?)(?:"
    + _SIZE
    + r" allowed; )?"
    r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch, "
    r"(?:with " + _SIZE + r" allocated in private pools \(e\.g\., CUDA Graphs\), )?"
    r"and " + _SIZE + r" is reserved by PyTorch but unallocated",
    re.DOTALL,
)
_PROCESS = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
_SELF = re.compile(r"this process has " + _SIZE + r" memory in use")
_ASYNC_HEAD = re.compile(r"would exceed allowed memory")
_ASYNC_FIELDS: Final = {
    "allocated": re.compile(r"Currently allocated\s*:\s*" + _SIZE),
    "requested": re.compile(r"Requested\s*:\s*" + _SIZE),
    "total": re.compile(r"Device limit\s*:\s*" + _SIZE),
    "free": re.compile(r"Free \(according to CUDA\)\s*:\s*" + _SIZE),
    "allowed": re.compile(r"memory fraction\)\s*:\s*" + _SIZE),
}
_RAW = re.compile(r"CUDA error: out of memory")


def to_bytes(number: str, unit: str) -> int:
    return round(float(number) * UNITS[unit])


@dataclass(frozen=True)
class OomFigures:
    family: str  # "native", "async", "raw", "none"
    requested: int | None = None
    total: int | None = None
    free: int | None = None
    allowed: int | None = None
    allocated: int | None = None
    unallocated: int | None = None
    private_pool: int | None = None
    process: int | None = None
    others: list[tuple[int, int]] = field(default_factory=list)

    @property
    def reserved(self) -> int | None:
        if self.allocated is None or self.unallocated is None:
            return None
        return self.allocated + self.unallocated

    @property
    def room(self) -> int | None:
        """What PyTorch could still get: device free, or the cap's headroom when that is less."""
        if self.free is None:
            return None
        if self.allowed is None:
            return self.free
        return min(self.free, self.allowed - (self.reserved or self.allocated or 0))

    @property
    def headroom(self) -> int | None:
        """U + room - R: what perfect packing of the cached memory would leave."""
        if self.requested is None or self.room is None or self.unallocated is None:
            return None
        return self.unallocated + self.room - self.requested

    def derived(self) -> dict[str, Any]:
        out = asdict(self)
        res, alloc, total = self.reserved, self.allocated, self.total
        out.update(
            reserved=res,
            room=self.room,
            headroom=self.headroom,
            unallocated_share_of_reserved=(
                self.unallocated / res if res and self.unallocated is not None else None
            ),
            allocated_share_of_total=alloc / total if alloc is not None and total else None,
            unallocated_share_of_request=(
                self.unallocated / self.requested
                if self.requested and self.unallocated is not None
                else None
            ),
        )
        return out


def parse(message: str) -> OomFigures:
    """Figures from the OOM message (the exception text); ``family`` none when not an OOM."""
    m = _NATIVE.search(message)
    if m:
        g = m.groups()
        allowed = to_bytes(g[8], g[9]) if g[8] else None
        procs = g[7]
        own = _SELF.search(procs)
        return OomFigures(
            family="native",
            requested=to_bytes(g[0], g[1]),
            total=to_bytes(g[3], g[4]),
            free=to_bytes(g[5], g[6]),
            allowed=allowed if allowed is None or allowed < NO_LIMIT_BYTES else None,
            allocated=to_bytes(g[10], g[11]),
            private_pool=to_bytes(g[12], g[13]) if g[12] else None,
            unallocated=to_bytes(g[14], g[15]),
            process=to_bytes(*own.groups()) if own else None,
            others=[(int(p), to_bytes(n, u)) for p, n, u in _PROCESS.findall(procs)],
        )
    if _ASYNC_HEAD.search(message):
        found: dict[str, int | None] = {}
        for key, rx in _ASYNC_FIELDS.items():
            fm = rx.search(message)
            found[key] = to_bytes(*fm.groups()) if fm else None
        allowed = found.pop("allowed")
        if allowed is not None and allowed >= NO_LIMIT_BYTES:
            allowed = None
        return OomFigures(family="async", allowed=allowed, **found)
    if _RAW.search(message):
        return OomFigures(family="raw")
    return OomFigures(family="none")
