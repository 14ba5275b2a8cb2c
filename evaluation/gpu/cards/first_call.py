#!/usr/bin/env python3
"""A job whose first CUDA call fails: the GPU is already full when it starts.

Another process holds all of the GPU's memory but a few MiB, less than a CUDA context needs.
The job builds its model on the CPU and moves it to the GPU; that first CUDA call has to create
the context and fails with ``CUDA error: out of memory``: no allocator message, no figures. No
allocator setting can matter (the allocator never runs).
"""

from __future__ import annotations

import torch
from _job import Job, parse_args
from torch import nn


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=5, warmup=0)
    job = Job("first_call", args, varying=False, init_cuda=False)
    d = 32 if job.dry else 2048

    def train() -> None:
        job.phase = "model"
        print(f"building model (MLP 4x{d}) ...", flush=True)
        model = nn.Sequential(
            nn.Linear(d, d),
            nn.GELU(),
            nn.Linear(d, d),
            nn.GELU(),
            nn.Linear(d, d),
            nn.GELU(),
            nn.Linear(d, 1),
        )
        print(f"moving model to {job.device}", flush=True)
        model = model.to(job.device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for i in range(args.warmup + args.steps):
            job.step, job.phase = i + 1, "train"
            x = torch.randn(512, d, device=job.device)
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            print(f"step {i + 1} loss {loss.item():.4f}", flush=True)

    job.run(train)


if __name__ == "__main__":
    main()
