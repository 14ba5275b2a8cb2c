"""A small model of PyTorch's CUDA caching allocator, native and with expandable segments.

Written from ``c10/cuda/CUDACachingAllocator.cpp`` (read for this purpose; the comments name the
functions modelled), to size ``serve_prefill_frag.py`` before any GPU run. Only the large pool
(requests above 1 MiB) on one stream is modelled; the job keeps its other allocations small.

native: best fit over cached free blocks (``get_free_block``: the smallest block >= the request),
split when more than 1 MiB remains (``should_split``); otherwise a new segment of the request
rounded up to 2 MiB, or 20 MiB for requests under 10 MiB (``get_allocation_size``); when that does
not fit, every cached segment with no block in use is released (``release_cached_blocks``) and
the segment is tried once more; then out of memory.

expandable: one segment whose address space is mapped in 20 MiB pages (``kLargeBuffer``) as
needed; best fit as above but a block's size counts the unmapped space after it
(``get_free_block``); otherwise pages are mapped at the lowest address that has room
(``find_expandable_block``); when that fails, every page wholly inside a free block is unmapped
(``release_cached_blocks`` -> ``unmap_block``) and the mapping is tried once more.

It is a model, not the allocator: the GPU runs decide.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20
GiB = 1 << 30
SMALL = 1 * MiB  # kSmallSize
LARGE_BUFFER = 20 * MiB  # kLargeBuffer: 1-10 MiB requests share one; expandable page size
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc
ROUND_LARGE = 2 * MiB  # kRoundLarge


class OutOfMemory(Exception):
    pass


def round_size(n: int) -> int:
    return max(512, (n + 511) // 512 * 512)


def allocation_size(n: int) -> int:
    if n <= SMALL:
        return 2 * MiB
    if n < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return (n + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


@dataclass(eq=False)
class Block:
    addr: int
    size: int
    seg: int
    allocated: bool = False
    mapped: bool = True
    prev: Block | None = None
    next: Block | None = None


class Native:
    """The native allocator's large pool, ``budget`` bytes of device memory."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.reserved = 0
        self.free: list[Block] = []
        self.nseg = 0
        self.next_addr = 0
        self.allocated = 0
        self.peak_allocated = 0

    def _segment(self, size: int) -> Block | None:
        if self.reserved + size > self.budget:
            return None
        b = Block(self.next_addr, size, self.nseg)
        self.nseg += 1
        self.next_addr += size
        self.reserved += size
        return b

    def _release_cached(self) -> None:
        keep = []
        for b in self.free:
            if b.prev is None and b.next is None:
                self.reserved -= b.size
            else:
                keep.append(b)
        self.free = keep

    def malloc(self, n: int) -> Block:
        size = round_size(n)
        fits = [b for b in self.free if b.size >= size]
        if fits:
            b = min(fits, key=lambda x: (x.size, x.addr))
            self.free.remove(b)
        else:
            want = allocation_size(size)
            b = self._segment(want)
            if b is None:
                self._release_cached()
                b = self._segment(want)
            if b is None:
                raise OutOfMemory(self.report(size))
        if b.size - size > SMALL:
            rest = Block(b.addr + size, b.size - size, b.seg, prev=b, next=b.next)
            if b.next:
                b.next.prev = rest
            b.next = rest
            b.size = size
            self.free.append(rest)
        b.allocated = True
        self.allocated += b.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return b

    def free_block(self, b: Block) -> None:
        b.allocated = False
        self.allocated -= b.size
        for other in (b.prev, b.next):
            if other is not None and not other.allocated:
                self.free.remove(other)
                if other is b.prev:
                    b.addr, b.prev = other.addr, other.prev
                    if b.prev:
                        b.prev.next = b
                else:
                    b.next = other.next
                    if b.next:
                        b.next.prev = b
                b.size += other.size
        self.free.append(b)

    def report(self, size: int) -> str:
        return (
            f"tried {size / MiB:.0f} MiB: allocated {self.allocated / GiB:.2f} GiB, reserved "
            f"{self.reserved / GiB:.2f} GiB, device free {(self.budget - self.reserved) / GiB:.2f}"
            f" GiB, largest cached block {max((b.size for b in self.free), default=0) / MiB:.0f}"
            " MiB"
        )


class Expandable:
    """The large pool with ``expandable_segments:True``: one segment, 20 MiB pages."""

    PAGE = LARGE_BUFFER

    def __init__(self, budget: int, address_space: int) -> None:
        self.budget = budget
        self.mapped_bytes = 0
        space = address_space // self.PAGE * self.PAGE
        self.head = Block(0, space, 0, mapped=False)
        self.allocated = 0
        self.peak_mapped = 0

    def blocks(self):
        b: Block | None = self.head
        while b is not None:
            yield b
            b = b.next

    def _split(self, b: Block, size: int) -> Block:
        """b keeps ``size`` bytes; the rest becomes a new block after it (same state)."""
        rest = Block(b.addr + size, b.size - size, 0, mapped=b.mapped, prev=b, next=b.next)
        if b.next:
            b.next.prev = rest
        b.next = rest
        b.size = size
        return rest

    def _merge_free(self, b: Block) -> Block:
        """Merge b with free neighbours in the same mapped state (``try_merge_blocks``)."""
        for other in (b.prev, b.next):
            if other is not None and not other.allocated and other.mapped == b.mapped:
                if other is b.prev:
                    b.addr, b.prev = other.addr, other.prev
                    if b.prev:
                        b.prev.next = b
                    else:
                        self.head = b
                else:
                    b.next = other.next
                    if b.next:
                        b.next.prev = b
                b.size += other.size
        return b

    def _map(self, b: Block, size: int) -> bool:
        """Map pages for the first ``size`` bytes of unmapped block b (``map_block``)."""
        pages = -(-size // self.PAGE)
        if self.mapped_bytes + pages * self.PAGE > self.budget:
            return False
        self.mapped_bytes += pages * self.PAGE
        self.peak_mapped = max(self.peak_mapped, self.mapped_bytes)
        if pages * self.PAGE < b.size:
            self._split(b, pages * self.PAGE)
        b.mapped = True
        self._merge_free(b)
        return True

    def _find_expandable(self, size: int) -> Block:
        free_ok = [b for b in self.blocks() if not b.allocated]
        for c in (b for b in free_ok if not b.mapped):
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            n, x = 0, c
            while x is not None and n < size and not x.allocated:
                n += x.size
                x = x.next
            if n >= size:
                return c
        raise OutOfMemory("address space exhausted")

    def _try_expand(self, size: int) -> Block | None:
        c = self._find_expandable(size)
        if not c.mapped:
            if not self._map(c, min(c.size, size)):
                return None
            c = self._block_at(c.addr)
        while c.size < size:
            nxt = c.next
            assert nxt is not None and not nxt.mapped
            if not self._map(nxt, min(size - c.size, nxt.size)):
                return None
            c = self._block_at(c.addr)
        return c

    def _block_at(self, addr: int) -> Block:
        for b in self.blocks():
            if b.addr <= addr < b.addr + b.size:
                return b
        raise AssertionError(addr)

    def _unmap_free(self) -> None:
        for b in list(self.blocks()):
            if b.allocated or not b.mapped:
                continue
            lo = -(-b.addr // self.PAGE) * self.PAGE
            hi = (b.addr + b.size) // self.PAGE * self.PAGE
            if hi <= lo:
                continue
            mid = b
            if lo > b.addr:
                mid = self._split(b, lo - b.addr)
            if hi < mid.addr + mid.size:
                self._split(mid, hi - mid.addr)
            mid.mapped = False
            self.mapped_bytes -= hi - lo
            self._merge_free(mid)

    def malloc(self, n: int) -> Block:
        size = round_size(n)

        def expandable_size(b: Block) -> int:
            return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

        cands = sorted(
            (b for b in self.blocks() if not b.allocated and b.mapped and b.size >= size),
            key=lambda b: (b.size, b.addr),
        )
        b = None
        if cands:
            i = 0
            while i + 1 < len(cands) and expandable_size(cands[i + 1]) < expandable_size(cands[i]):
                i += 1
            b = cands[i]
        if b is None:
            b = self._try_expand(size)
            if b is None:
                self._unmap_free()
                b = self._try_expand(size)
            if b is None:
                raise OutOfMemory(self.report(size))
        if b.size - size >= 512:
            self._split(b, size)
        b.allocated = True
        self.allocated += b.size
        return b

    def free_block(self, b: Block) -> None:
        b.allocated = False
        self.allocated -= b.size
        self._merge_free(b)

    def report(self, size: int) -> str:
        return (
            f"tried {size / MiB:.0f} MiB: allocated {self.allocated / GiB:.2f} GiB, mapped "
            f"{self.mapped_bytes / GiB:.2f} GiB of {self.budget / GiB:.2f} GiB (peak "
            f"{self.peak_mapped / GiB:.2f} GiB)"
        )


def replay(alloc, events: list[tuple[str, int, int]]) -> tuple[bool, str, int]:
    """Replay ("a", key, bytes) / ("f", key, 0) events; (ok, message, index reached)."""
    live: dict[int, Block] = {}
    for i, (op, key, n) in enumerate(events):
        if op == "a":
            if n <= SMALL:
                continue
            try:
                live[key] = alloc.malloc(n)
            except OutOfMemory as e:
                return False, str(e), i
        elif key in live:
            alloc.free_block(live.pop(key))
    return True, alloc.report(0), len(events)
