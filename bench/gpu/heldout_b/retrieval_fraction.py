#!/usr/bin/env python3
"""Dense-retrieval scoring worker that caps itself to 1/8 of the GPU, too little for its batch.

The job: one of eight retrieval workers packed on one GPU. Each caps itself with
``torch.cuda.set_per_process_memory_fraction(0.125)`` so that eight fit, keeps a corpus of
1.5M passage embeddings (1024-d, fp16) on the GPU, and scores query shards of 8192 queries with
one matmul (``queries @ corpus.T``) before ``topk``. The [8192, 1.5M] fp16 score matrix
(~23 GiB) alone is more than the worker's 1/8 (~17.5 GiB on a 140 GiB GPU), although the device
itself has most of its memory free: the cap, not the GPU, is what runs out.

Fix (``--fix fraction=0.25``): give the worker a quarter of the GPU (four workers per GPU).
"""

from __future__ import annotations

import time

import torch
from _hb import GiB, Run, parse_args

FIXES = ["fraction"]


# passages, dim, queries per shard, shards, top-k
GPU_DIMS = (1_500_000, 1024, 8192, 2, 100)
CPU_DIMS = (5000, 32, 64, 2, 10)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES)
    run = Run(args.dry_run_cpu)
    fraction = float(args.fixes["fraction"] or 0.25) if "fraction" in args.fixes else 0.125
    job(run, fraction, CPU_DIMS if run.dry else GPU_DIMS)


def job(run: Run, fraction: float, dims: tuple[int, ...]) -> None:
    n_passages, dim, n_queries, shards, k = dims
    dev = run.device
    dtype = torch.float32 if run.dry else torch.float16
    if not run.dry:
        torch.cuda.set_per_process_memory_fraction(fraction)
    print(
        f"worker 3/8: per-process memory fraction {fraction} "
        f"({fraction * run.total_bytes() / GiB:.2f} GiB of {run.total_bytes() / GiB:.2f} GiB); "
        f"device free {run.free_bytes() / GiB:.2f} GiB",
        flush=True,
    )
    torch.manual_seed(0)
    corpus = torch.nn.functional.normalize(
        torch.randn(n_passages, dim, device=dev, dtype=dtype), dim=-1
    )
    print(f"corpus index: {n_passages} passages x {dim} ({corpus.nbytes / GiB:.2f} GiB)")
    t0 = time.time()
    for s in range(shards):
        queries = torch.nn.functional.normalize(
            torch.randn(n_queries, dim, device=dev, dtype=dtype), dim=-1
        )
        scores = queries @ corpus.T
        top = scores.topk(k, dim=1)
        del scores
        run.sync()
        rate = (s + 1) * n_queries / (time.time() - t0)
        print(
            f"shard {s + 1}/{shards}: {n_queries} queries scored, top-{k} mean "
            f"{top.values.float().mean().item():.4f}, {rate:.0f} q/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
