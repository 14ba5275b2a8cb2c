"""Fragmentation, pattern (a): many mid-size blocks keep segments pinned, then one large request.

A preprocessing job caches per-sample feature blocks (8 MiB each) on the GPU, drops every other
one after filtering, then asks for one large workspace. The native caching allocator serves
each pair of 8 MiB blocks from one 20 MiB segment; after the filter every segment still holds
one live block, so no segment can be returned to CUDA, and the large request does not fit under
the cap although plenty of reserved memory is unused.

Default: per-process memory fraction capping the job at 7 GiB. ``--fullgpu``: no fraction; the
GPU is instead filled by the job's own weights (a ballast) to leave 7 GiB free.

Fixes: allocator ``expandable_segments:True`` (environment); code ``--fix compact`` (copy the
kept blocks into one tensor so the old segments become free); ``--fix empty_cache`` (the common
advice, call torch.cuda.empty_cache() before the big request).
"""

from __future__ import annotations

import torch
from _common import GiB, MiB, banner, fill_gpu, parse_args, set_fraction_for

FIXES = ["compact", "empty_cache"]


def extra(p):
    p.add_argument("--fullgpu", action="store_true", help="fill the GPU instead of a fraction")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner()
    ballast = None
    if args.fullgpu:
        ballast = fill_gpu(7.0)
    else:
        set_fraction_for(7.0)
    n_blocks = 322
    block_elems = 8 * MiB // 4
    print(f"caching {n_blocks} feature blocks of 8 MiB", flush=True)
    feats = [torch.empty(block_elems, device="cuda") for _ in range(n_blocks)]
    feats = feats[::2]  # keep the samples that pass the filter
    print(f"step 1 warmup done: kept {len(feats)} blocks", flush=True)
    if "compact" in args.fixes:
        packed = torch.stack(feats)
        feats = [packed]
    if "empty_cache" in args.fixes:
        torch.cuda.empty_cache()
    workspace = torch.empty(int(4.2 * GiB) // 4, device="cuda")
    workspace.zero_()
    torch.cuda.synchronize()
    print(f"workspace ready; done ({len(feats)} feature tensors)", flush=True)
    del ballast


if __name__ == "__main__":
    main()
