#!/usr/bin/env python3
"""A model of PyTorch's CUDA caching allocator, to check ``gen_kvcat.py`` without a GPU.

Whether a job fragments depends on the exact order and sizes of its allocations, so the
fragmentation job was designed against this model and must be judged on the GPU: the model is
not the allocator. It follows ``c10/cuda/CUDACachingAllocator.cpp`` (2.x): best fit by size in
a small (<= 1 MiB, 2 MiB segments) and a large pool; new segments of 20 MiB for 1-10 MiB
requests, else the request rounded to 2 MiB; a large block is split when more than 1 MiB would
remain; when the device is full, every cached segment with nothing allocated in it is released
and the request retried once. ``expandable_segments:True``: one address range per pool mapped
in 20 MiB (large) / 2 MiB (small) pages, blocks split down to 512 B, and on a failed request
every whole free page is unmapped before the retry. One stream, no memory fraction, no CUDA
graphs.

    python3 alloc_model.py                 # gen_kvcat at its GPU sizes: baseline / ES / fix
    python3 alloc_model.py --compare-trace # (needs torch) the replayed plan vs the real job's
                                           # allocations, traced on the CPU at small sizes
"""

from __future__ import annotations

import argparse
import ast
import bisect
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

MiB = 1 << 20
GiB = 1 << 30
SMALL_SIZE = MiB  # largest "small" request
SMALL_BUFFER = 2 * MiB  # small-pool segment; also the small pool's expandable page
MIN_LARGE_ALLOC = 10 * MiB
LARGE_BUFFER = 20 * MiB  # segment for 1-10 MiB requests; large-pool expandable page
ROUND_LARGE = 2 * MiB

Event = tuple  # ("a", name, bytes) | ("f", name) | ("r", old_name, new_name)


class OOM(Exception):
    pass


def round_size(n: int) -> int:
    return 512 if n < 512 else 512 * ((n + 511) // 512)


def segment_size(n: int) -> int:
    if n <= SMALL_SIZE:
        return SMALL_BUFFER
    if n < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((n + ROUND_LARGE - 1) // ROUND_LARGE)


class Block:
    __slots__ = ("allocated", "mapped", "next", "page", "prev", "ptr", "size", "small")

    def __init__(self, ptr: int, size: int, small: bool, page: int = 0, mapped: bool = True):
        self.ptr, self.size, self.small, self.page, self.mapped = ptr, size, small, page, mapped
        self.prev: Block | None = None
        self.next: Block | None = None
        self.allocated = False


class _Pools:
    """Free blocks per pool, ordered by (size, address); unmapped ranges by address."""

    def __init__(self, device_free: int) -> None:
        self.device_free = device_free
        self.free: dict[bool, list] = {True: [], False: []}
        self.unmapped: dict[bool, list] = {True: [], False: []}
        self.allocated = 0
        self.reserved = 0
        self.next_ptr = LARGE_BUFFER << 24  # aligned for both page sizes

    def _add(self, b: Block) -> None:
        bisect.insort(self.free[b.small], (b.size, b.ptr, id(b), b))

    def _remove(self, b: Block) -> None:
        lst = self.free[b.small]
        i = bisect.bisect_left(lst, (b.size, b.ptr, id(b)))
        assert lst[i][3] is b, "model bug: free list out of order"
        lst.pop(i)

    def _add_unmapped(self, b: Block) -> None:
        bisect.insort(self.unmapped[b.small], (b.ptr, id(b), b))

    def _remove_unmapped(self, b: Block) -> None:
        lst = self.unmapped[b.small]
        i = bisect.bisect_left(lst, (b.ptr, id(b)))
        assert lst[i][2] is b, "model bug: unmapped list out of order"
        lst.pop(i)

    def _merge(self, dst: Block, src: Block | None) -> None:
        if src is None or src.allocated or src.mapped != dst.mapped:
            return
        if src.mapped:
            self._remove(src)
        else:
            self._remove_unmapped(src)
        if dst.prev is src:
            dst.ptr, dst.prev = src.ptr, src.prev
            if dst.prev:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next:
                dst.next.prev = dst
        dst.size += src.size

    def _split(self, b: Block, size: int) -> None:
        r = Block(b.ptr + size, b.size - size, b.small, b.page)
        r.prev, r.next = b, b.next
        if b.next:
            b.next.prev = r
        b.next, b.size = r, size
        self._add(r)

    def free_block(self, b: Block) -> None:
        b.allocated = False
        self.allocated -= b.size
        self._merge(b, b.prev)
        self._merge(b, b.next)
        self._add(b)

    def summary(self) -> str:
        return (
            f"allocated {self.allocated / GiB:.2f} GiB, reserved {self.reserved / GiB:.2f} GiB "
            f"(unallocated {(self.reserved - self.allocated) / GiB:.2f} GiB), "
            f"device free {self.device_free / GiB:.2f} GiB"
        )


class Native(_Pools):
    """The default allocator: one cudaMalloc'd segment per miss."""

    def malloc(self, n: int) -> Block:
        size = round_size(n)
        small = size <= SMALL_SIZE
        lst = self.free[small]
        i = bisect.bisect_left(lst, (size, -1, -1))
        if i < len(lst):
            b = lst.pop(i)[3]
        else:
            seg = segment_size(size)
            if seg > self.device_free:
                self._release_cached()
            if seg > self.device_free:
                raise OOM(f"tried to allocate {size / MiB:.2f} MiB; {self.summary()}")
            self.device_free -= seg
            self.reserved += seg
            b = Block(self.next_ptr, seg, small)
            self.next_ptr += -(-(seg + GiB) // LARGE_BUFFER) * LARGE_BUFFER
        rem = b.size - size
        if (rem >= 512) if small else (rem > SMALL_SIZE):
            self._split(b, size)
        b.allocated = True
        self.allocated += b.size
        return b

    def _release_cached(self) -> None:
        for small in (True, False):
            keep = []
            for t in self.free[small]:
                b = t[3]
                if b.prev is None and b.next is None:
                    self.device_free += b.size
                    self.reserved -= b.size
                else:
                    keep.append(t)
            self.free[small] = keep


class Expandable(_Pools):
    """``expandable_segments:True``."""

    def __init__(self, device_free: int, total: int = 140 * GiB) -> None:
        super().__init__(device_free)
        self.address_space = total + total // 8

    def malloc(self, n: int) -> Block:
        size = round_size(n)
        small = size <= SMALL_SIZE
        b = self._best_fit(small, size)
        if b is None:
            b = self._grow(small, size)
            if b is None:
                self._release_cached()
                b = self._grow(small, size)
            if b is None:
                raise OOM(f"tried to allocate {size / MiB:.2f} MiB; {self.summary()}")
        if b.size - size >= 512:
            self._split(b, size)
        b.allocated = True
        self.allocated += b.size
        return b

    def _best_fit(self, small: bool, size: int) -> Block | None:
        lst = self.free[small]
        i = bisect.bisect_left(lst, (size, -1, -1))
        if i >= len(lst):
            return None

        def reach(b: Block) -> int:  # a free block's size counting the unmapped range after it
            return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

        while i + 1 < len(lst) and reach(lst[i + 1][3]) < reach(lst[i][3]):
            i += 1
        return lst.pop(i)[3]

    def _map(self, b: Block, size: int) -> bool:
        n = -(-size // b.page) * b.page
        if n > self.device_free:
            return False
        self.device_free -= n
        self.reserved += n
        self._remove_unmapped(b)
        b.mapped = True
        if n < b.size:
            r = Block(b.ptr + n, b.size - n, b.small, b.page, mapped=False)
            r.prev, r.next = b, b.next
            if b.next:
                b.next.prev = r
            b.next, b.size = r, n
            self._add_unmapped(r)
        self._merge(b, b.prev)
        self._merge(b, b.next)
        self._add(b)
        return True

    def _grow(self, small: bool, size: int) -> Block | None:
        def usable(b: Block | None) -> bool:
            return b is not None and not b.allocated

        cand = None
        for _ptr, _id, u in list(self.unmapped[small]):
            c = u.prev if usable(u.prev) else u
            room, x = 0, c
            while room < size and usable(x):
                room += x.size
                x = x.next
            if room >= size:
                cand = c
                break
        if cand is None:  # a new segment: fresh address space
            page = SMALL_BUFFER if small else LARGE_BUFFER
            va = -(-self.address_space // page) * page
            cand = Block(self.next_ptr, va, small, page, mapped=False)
            self.next_ptr += -(-(va + GiB) // LARGE_BUFFER) * LARGE_BUFFER
            self._add_unmapped(cand)
        if not cand.mapped and not self._map(cand, min(cand.size, size)):
            return None
        while cand.size < size:
            nxt = cand.next
            assert nxt is not None
            if not self._map(nxt, min(size - cand.size, nxt.size)):
                return None
            cand = nxt
        self._remove(cand)
        return cand

    def _release_cached(self) -> None:
        for small in (True, False):
            for t in list(self.free[small]):
                b = t[3]
                # whole pages inside the free block (segments start 20 MiB-aligned here)
                begin = -(-b.ptr // b.page) * b.page
                end = ((b.ptr + b.size) // b.page) * b.page
                if begin >= end:
                    continue
                self._remove(b)
                if begin > b.ptr:
                    f = Block(b.ptr, begin - b.ptr, b.small, b.page)
                    f.prev, f.next = b.prev, b
                    if b.prev:
                        b.prev.next = f
                    b.prev = f
                    self._add(f)
                if end < b.ptr + b.size:
                    f = Block(end, b.ptr + b.size - end, b.small, b.page)
                    f.prev, f.next = b, b.next
                    if b.next:
                        b.next.prev = f
                    b.next = f
                    self._add(f)
                b.ptr, b.size, b.mapped = begin, end - begin, False
                self.device_free += b.size
                self.reserved -= b.size
                self._merge(b, b.prev)
                self._merge(b, b.next)
                self._add_unmapped(b)
                if b.prev is None and b.next is None:  # whole segment unmapped: released
                    self._remove_unmapped(b)


def replay(events: Iterable[Event], device_free: int, expandable: bool) -> tuple[bool, str]:
    """Run a plan through the model; (finished without OOM, state at the end or at the OOM)."""
    a: _Pools = Expandable(device_free) if expandable else Native(device_free)
    live: dict[str, Block] = {}
    ev: Event = ()
    try:
        for ev in events:
            if ev[0] == "a":
                live[ev[1]] = a.malloc(ev[2])  # type: ignore[attr-defined]
            elif ev[0] == "f":
                a.free_block(live.pop(ev[1]))
            else:
                live[ev[2]] = live.pop(ev[1])
    except OOM as e:
        return False, f"OOM at {ev[1]}: {e}"
    return True, f"finished: {a.summary()}"


def gen_kvcat_plan(
    dims: tuple[int, ...],
    static: bool = False,
    cublas_workspace: int = 32 * MiB,
    attention_temp: int = 0,
) -> Iterator[Event]:
    """gen_kvcat.job's allocations of more than a few KiB, in order, with CUDA semantics.

    SDPA is flash attention (output + fp32 logsumexp); ``attention_temp`` adds a per-layer
    temporary of that size per decode step (a split-KV or math-backend workspace) to see how
    much the outcome depends on it; the cuBLAS workspace is allocated at the first matmul.
    ``--compare-trace`` checks this order against the real job traced on the CPU.
    """
    vocab, d, heads, layers, batch, prompt, new = dims

    def act(n: int) -> int:
        return batch * n * d * 2

    def kv(s: int) -> int:
        return batch * s * d * 2

    if static:
        for i in range(layers):
            yield ("a", f"K{i}", kv(prompt + new))
            yield ("a", f"V{i}", kv(prompt + new))
    n = prompt
    yield ("a", "x", act(n))
    for i in range(layers):  # prefill
        yield ("a", "ln1", act(n))
        if i == 0 and cublas_workspace:
            yield ("a", "cublas_workspace", cublas_workspace)
        yield ("a", f"qkv{i}", 3 * act(n))
        yield ("f", "ln1")
        yield ("a", "y", act(n))
        yield ("a", "lse", batch * heads * n * 4)
        yield ("f", "lse")
        yield ("a", "proj", act(n))
        yield ("a", "mid", act(n))
        yield ("f", "proj")
        yield ("a", "ln2", act(n))
        yield ("a", "up", 4 * act(n))
        yield ("f", "ln2")
        yield ("a", "gelu", 4 * act(n))
        yield ("f", "up")
        yield ("a", "down", act(n))
        yield ("f", "gelu")
        yield ("a", "out", act(n))
        yield ("f", "down")
        yield ("f", "mid")
        if static:  # the cache copied K/V out; the q/k/v views die with the block's locals
            yield ("f", f"qkv{i}")
        yield ("f", "y")
        yield ("f", "x")
        yield ("r", "out", "x")
    yield ("f", "x")
    for t in range(new):  # decode: everything but the caches and the scores is < 1 MiB
        s = prompt + t + 1
        for i in range(layers):
            if not static:
                # CatCache.update holds the old K and V in locals until it returns; at the
                # first step the old K/V are views of the prefill's qkv output
                yield ("a", f"K{i}@step{t + 1}", kv(s))
                yield ("a", f"V{i}@step{t + 1}", kv(s))
                if t == 0:
                    yield ("f", f"qkv{i}")
                else:
                    yield ("f", f"K{i}")
                    yield ("f", f"V{i}")
                yield ("r", f"K{i}@step{t + 1}", f"K{i}")
                yield ("r", f"V{i}@step{t + 1}", f"V{i}")
            if attention_temp:
                yield ("a", "attention_temp", attention_temp)
                yield ("f", "attention_temp")
        yield ("a", f"scores{t}", batch * vocab * 4)
    yield ("a", "stacked", batch * new * vocab * 4)
    yield ("a", "log_softmax", batch * new * vocab * 4)


def job_constants(script: str, names: tuple[str, ...]) -> list:
    """Module-level literals of a job script, read without importing it (no torch needed)."""
    tree = ast.parse((Path(__file__).resolve().parent / script).read_text())
    found = {
        t.id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name) and t.id in names
    }
    return [found[n] for n in names]


def check_gen_kvcat() -> int:
    GPU_DIMS, MARGIN_GIB = job_constants("gen_kvcat.py", ("GPU_DIMS", "MARGIN_GIB"))

    vocab, d, _heads, layers, batch, prompt, new = GPU_DIMS
    need = 2 * layers * batch * (prompt + new) * d * 2 + new * batch * vocab * 4
    print(f"gen_kvcat {GPU_DIMS}: caches + kept scores at the end {need / GiB:.2f} GiB")
    print("columns: the job's free memory (caches + scores + margin); baseline / ES / fix;")
    print("ES and fix are replayed with 0.5 GiB less (non-PyTorch memory the job may add)\n")
    variants = {
        "as modelled": {},
        "no cuBLAS workspace": {"cublas_workspace": 0},
        "2 MiB attention temp": {"attention_temp": 2 * MiB},
        "12 MiB attention temp": {"attention_temp": 12 * MiB},
    }
    as_built = True
    for label, kw in variants.items():
        cells = []
        for margin in (3, MARGIN_GIB, 10):
            free = need + margin * GiB
            b, bmsg = replay(gen_kvcat_plan(GPU_DIMS, **kw), free, False)
            e, emsg = replay(gen_kvcat_plan(GPU_DIMS, **kw), free - GiB // 2, True)
            f, fmsg = replay(gen_kvcat_plan(GPU_DIMS, static=True, **kw), free - GiB // 2, False)
            outcomes = "/".join("ok" if x else "OOM" for x in (b, e, f))
            cells.append(f"+{margin} GiB: {outcomes}")
            as_built &= (not b) and e and f
            if label == "as modelled" and margin == MARGIN_GIB:
                detail = (bmsg, emsg, fmsg)
        print(f"{label:<22} " + "   ".join(cells))
    print(f"\nat the job's margin ({MARGIN_GIB} GiB):")
    for name, msg in zip(("baseline", "ES", "fix"), detail, strict=True):
        print(f"  {name:<8} {msg}")
    print("\n" + ("as built in every row" if as_built else "NOT as built in some row"))
    return 0 if as_built else 1


def compare_trace() -> int:
    """Trace gen_kvcat.job on the CPU and compare its allocations with gen_kvcat_plan."""
    import contextlib
    import io
    import json
    import os
    import tempfile

    import gen_kvcat
    from _hb import Run
    from torch.profiler import ProfilerActivity, profile

    dims = (311, 96, 3, 2, 5, 13, 7)  # sizes chosen so the plan's tensor sizes are distinct
    bad = 0
    for static in (False, True):
        with (
            profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
            contextlib.redirect_stdout(io.StringIO()),
        ):
            gen_kvcat.job(Run(True), {"static-cache": None} if static else {}, dims)
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        prof.export_chrome_trace(path)
        with open(path) as fh:
            trace = json.load(fh)["traceEvents"]
        os.unlink(path)
        mem = sorted(
            (e["args"] for e in trace if e.get("name") == "[memory]"), key=lambda a: a["Ev Idx"]
        )
        planned: list[tuple[str, int]] = []
        sizes: dict[str, int] = {}
        for ev in gen_kvcat_plan(dims, static=static, cublas_workspace=0):
            if ev[0] == "a":
                sizes[ev[1]] = ev[2]
                planned.append(("alloc", ev[2]))
            elif ev[0] == "f":
                planned.append(("free", sizes.pop(ev[1])))
            else:
                sizes[ev[2]] = sizes.pop(ev[1])
        wanted = {n for _, n in planned}
        live: dict[int, int] = {}
        traced: list[tuple[str, int]] = []
        for a in mem:
            if a["Bytes"] > 0:
                live[a["Addr"]] = a["Bytes"]
                kind, n = "alloc", a["Bytes"]
            else:
                kind, n = "free", live.pop(a["Addr"], -a["Bytes"])
            if n in wanted:
                traced.append((kind, n))
        same = traced[: len(planned)] == planned
        bad += not same
        label = "static-cache" if static else "torch.cat cache"
        print(
            f"{label}: {len(planned)} planned allocations/frees, "
            + ("the traced job does the same, in the same order" if same else "MISMATCH")
        )
        if not same:
            i = next(i for i, (p, t) in enumerate(zip(planned, traced, strict=False)) if p != t)
            print(f"  first difference at {i}: plan {planned[i : i + 4]} trace {traced[i : i + 4]}")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare-trace", action="store_true")
    a = ap.parse_args()
    return compare_trace() if a.compare_trace else check_gen_kvcat()


if __name__ == "__main__":
    sys.exit(main())
