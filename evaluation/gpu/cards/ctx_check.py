#!/usr/bin/env python3
"""Start CUDA, allocate 64 MiB, record what the job sees (free at start, the allocator's settings
in effect: expandable segments, max_split_size). The runner uses it to measure a job's CUDA
context on the emulated card and to check that ``PYTORCH_CUDA_ALLOC_CONF`` reaches a launched
job."""

from __future__ import annotations

import torch
from _job import Job, MiB, parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=1, warmup=0)
    job = Job("ctx_check", args, varying=False)

    def run() -> None:
        x = torch.empty(64 * MiB, dtype=torch.uint8, device=job.device)
        job.rec["after_64mib"] = job.stats()
        print(f"free at start {job.rec['free_at_start']} bytes; conf {job.conf!r}", flush=True)
        del x

    job.run(run)


if __name__ == "__main__":
    main()
