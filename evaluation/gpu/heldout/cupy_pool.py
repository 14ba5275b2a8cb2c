"""CuPy preprocessing in the same process: CuPy's memory pool keeps what it freed; PyTorch OOMs.

A feature pipeline standardises a 10 GiB float32 feature matrix with CuPy on the GPU
(centre, scale), hands the result to PyTorch zero-copy through DLPack, and trains a classifier
on it. CuPy's default memory pool keeps every block it has freed (the raw matrix and the
centred copy, 20 GiB) for reuse by CuPy, so that memory is neither free for PyTorch nor
PyTorch's: the OOM message shows it as non-PyTorch memory of the process. The job's other
state (one block) leaves 46 GiB; the classifier's step needs about 24 GiB.

Fixes: ``--fix free-pool`` (``cupy.get_default_memory_pool().free_all_blocks()`` once the
features are made); ``--fix torch-allocator`` (route CuPy's allocations through PyTorch's
caching allocator with ``cupy.cuda.set_allocator``, so both share one cache).
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from _common_ho import GiB, allocated, banner, hold, parse_args, reserved, sync

FIXES = ["free-pool", "torch-allocator"]


def extra(p):
    p.add_argument("--leave-gib", type=float, default=46.0)
    p.add_argument("--rows", type=int, default=2_621_440)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--batch", type=int, default=147_456)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)


def torch_backed_allocator(size: int):
    """A CuPy allocator drawing from PyTorch's caching allocator (pytorch-pfn-extras style)."""
    import cupy

    buf = torch.empty(size, dtype=torch.uint8, device="cuda")
    mem = cupy.cuda.memory.UnownedMemory(buf.data_ptr(), size, buf, 0)
    return cupy.cuda.memory.MemoryPointer(mem, 0)


def standardise(xp, rows: int, dim: int, seed: int):
    """Raw features -> per-column standardised features (the CuPy stage)."""
    if xp is np:
        raw = np.random.default_rng(seed).standard_normal((rows, dim), dtype=np.float32)
    else:
        raw = xp.random.RandomState(seed).standard_normal((rows, dim), dtype=xp.float32)
    raw *= 3.0
    raw += 1.0
    centred = raw - raw.mean(axis=0)
    scaled = centred / xp.sqrt((centred**2).mean(axis=0) + 1e-6)
    del raw, centred
    return scaled


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "features_then_train")
    torch.manual_seed(args.seed)
    dev, dry = args.dev, args.dry_run_cpu
    rows, dim, batch = (4096, 32, 512) if dry else (args.rows, args.dim, args.batch)
    state = hold(args, args.leave_gib, "job state loaded")
    if dry:
        xp = np
    else:
        import cupy as xp

        print(f"cupy {xp.__version__}", flush=True)
        if "torch-allocator" in args.fixes:
            xp.cuda.set_allocator(torch_backed_allocator)
    t0 = time.time()
    feats_xp = standardise(xp, rows, dim, args.seed)
    if not dry:
        xp.cuda.Stream.null.synchronize()
        pool = xp.get_default_memory_pool()
        print(
            f"features ready: {rows}x{dim} float32 in {time.time() - t0:.1f} s; cupy pool "
            f"used {pool.used_bytes() / GiB:.2f} GiB, total {pool.total_bytes() / GiB:.2f} GiB",
            flush=True,
        )
        if "free-pool" in args.fixes:
            pool.free_all_blocks()
            print(f"cupy pool after free_all_blocks: {pool.total_bytes() / GiB:.2f} GiB")
    feats = torch.from_dlpack(feats_xp)
    labels = torch.randint(0, 1000, (rows,), device=dev)
    print(
        f"torch allocated {allocated(args) / GiB:.2f} GiB, reserved {reserved(args) / GiB:.2f} GiB",
        flush=True,
    )
    model = torch.nn.Sequential(
        torch.nn.Linear(dim, 8192),
        torch.nn.GELU(),
        torch.nn.Linear(8192, 8192),
        torch.nn.GELU(),
        torch.nn.Linear(8192, 1000),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(1, args.steps + 1):
        lo = (step - 1) * batch % (rows - batch + 1)
        x, y = feats[lo : lo + batch], labels[lo : lo + batch]
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(args)
        print(f"step {step} loss {loss.item():.4f} mem {allocated(args) / GiB:.1f} GiB", flush=True)
    print("training done", flush=True)
    del state


if __name__ == "__main__":
    main()
