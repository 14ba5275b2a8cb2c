#!/usr/bin/env python3
"""Retriever-distillation scoring worker that caps itself to 1/16 of the GPU, too little for it.

The job: one of sixteen teacher-scoring workers packed on one GPU, each capped with
``torch.cuda.set_per_process_memory_fraction(0.0625)`` so that sixteen fit. A worker keeps a
corpus of 2M passage embeddings (1024-d, fp16, ~3.8 GiB) on the GPU and, for each shard of 1024
queries, scores the whole corpus with one matmul, turns the scores into soft labels with a
softmax at temperature 0.05, and keeps the top 100 per query. The scores and their softmax
(~3.8 GiB each) next to the corpus are more than the worker's 1/16 (~8.7 GiB of a 140 GiB
GPU), although the device itself has most of its memory free: the cap, not the GPU, runs out.

Fix (``--fix fraction=0.125``): give the worker 1/8 of the GPU (eight workers per GPU).
"""

from __future__ import annotations

import time

import torch
from _hb import GiB, Run, parse_args

FIXES = ["fraction"]
DEFAULT_FRACTION = 0.0625

# passages, dim, queries per shard, shards, top-k (no tensor above 2**31 elements)
GPU_DIMS = (2_000_000, 1024, 1024, 2, 100)
CPU_DIMS = (5000, 32, 64, 2, 10)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES)
    run = Run(args.dry_run_cpu)
    fraction = DEFAULT_FRACTION
    if "fraction" in args.fixes:
        fraction = float(args.fixes["fraction"] or 2 * DEFAULT_FRACTION)
    job(run, fraction, CPU_DIMS if run.dry else GPU_DIMS)


def job(run: Run, fraction: float, dims: tuple[int, ...]) -> None:
    n_passages, dim, n_queries, shards, k = dims
    dev = run.device
    dtype = torch.float32 if run.dry else torch.float16
    if not run.dry:
        torch.cuda.set_per_process_memory_fraction(fraction)
    total = run.total_bytes()
    print(
        f"teacher-scoring worker 5/16: per-process memory fraction {fraction} "
        f"({fraction * total / GiB:.2f} GiB of {total / GiB:.2f} GiB); "
        f"device free {run.free_bytes() / GiB:.2f} GiB",
        flush=True,
    )
    torch.manual_seed(0)
    # stands for loading the pre-computed, L2-normalised passage embeddings
    corpus = torch.randn(n_passages, dim, device=dev, dtype=dtype)
    corpus /= corpus.norm(dim=-1, keepdim=True)
    print(f"corpus index: {n_passages} passages x {dim} ({corpus.nbytes / GiB:.2f} GiB)")
    temperature = 0.05
    t0 = time.time()
    for s in range(shards):
        queries = torch.randn(n_queries, dim, device=dev, dtype=dtype)
        queries /= queries.norm(dim=-1, keepdim=True)
        scores = queries @ corpus.T
        scores /= temperature
        soft = scores.softmax(dim=-1)
        top = soft.topk(k, dim=-1)
        del scores, soft
        run.sync()
        rate = (s + 1) * n_queries / (time.time() - t0)
        print(
            f"shard {s + 1}/{shards}: {n_queries} queries, top-{k} soft-label mass "
            f"{top.values.float().sum(-1).mean().item():.4f}, {rate:.0f} q/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
