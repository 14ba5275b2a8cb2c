#!/usr/bin/env python3
"""Fixed-shape training whose batch is simply too large for the card.

A stack of 6 pre-norm residual feed-forward blocks (d=1024, hidden 4096; a transformer without
attention) trained with AdamW under bf16 autocast on batches of the same shape every step
(``batch x 256 x 1024``): nothing changes size between steps, so the cache has nothing to
fragment; the batch was picked for a bigger card. ``--scale`` multiplies the batch (1.0: the
job's own estimate of its peak is the card).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from _job import GiB, Job, parse_args
from torch import nn


class FFN(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=6, warmup=1)
    job = Job("mlp_capacity", args, varying=False)
    d, hidden, depth, seq = 1024, 4096, 6, 256
    params = depth * (2 * d * hidden + hidden + 2 * d) + d * d
    static = params * 18
    per_token = 1.15 * (depth * (4 * d + 2 * d + 4 * hidden) + 12 * d)
    batch = max(1, round(job.spare(static) / (seq * per_token)))
    need = static + batch * seq * per_token
    if job.dry:
        d, hidden, depth, seq, run_batch = 32, 64, 2, 16, 2
    else:
        run_batch = batch
    dev = job.device
    print(
        f"config: {depth} blocks, d {d}, hidden {hidden}, {params / 1e6:.1f}M params, "
        f"batch {batch} x {seq} (card {args.card_gib:g} GiB, scale {args.scale:g})",
        flush=True,
    )

    def train() -> None:
        with torch.device(dev):
            model = nn.Sequential(*[FFN(d, hidden) for _ in range(depth)], nn.Linear(d, d))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        gen = torch.Generator(device=dev).manual_seed(args.seed)
        n = args.warmup + args.steps
        for i in range(n):
            job.step, job.phase = i + 1, "data"
            job.need(need)
            t0 = time.time()
            x = torch.randn(run_batch, seq, d, device=dev, generator=gen)
            y = torch.randn(run_batch, seq, d, device=dev, generator=gen)
            job.phase = "forward"
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                out = model(x)
            loss = F.mse_loss(out.float(), y)
            job.phase = "backward"
            loss.backward()
            job.phase = "optimizer"
            opt.step()
            opt.zero_grad(set_to_none=True)
            lv = loss.item()
            del x, y, out, loss
            if i == args.warmup:
                job.steady()
            print(
                f"{{'loss': {lv:.4f}, 'step': {i + 1}, 'mem': '{job.mem()}', "
                f"'step_time': {time.time() - t0:.3f}}}",
                flush=True,
            )
        print(
            f"done: {args.steps} steps, peak allocated "
            f"{job.stats().get('max_memory_allocated', 0) / GiB:.2f} GiB",
            flush=True,
        )

    job.run(train)


if __name__ == "__main__":
    main()
