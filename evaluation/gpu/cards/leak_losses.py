#!/usr/bin/env python3
"""Training loop that keeps every step's validation loss, graph and all, in a list (a leak).

A 4-layer MLP regressor (d=1024, fp32, AdamW) takes a training step, then scores a validation
batch for the progress line without ``torch.no_grad()`` and appends the loss tensor to a
history list (``val_history.append(val_loss)`` where ``.item()`` was meant): each step's
validation graph, with its saved activations, stays alive. Memory is printed every 20 steps
(``step 40 mem_allocated=... GiB``) and rises by the same amount each time.

``--cap-of-card F``: the job runs under ``torch.cuda.set_per_process_memory_fraction`` with a
cap of F x the card (a GPU-sharing platform's slot); the OOM message then prints ``allowed``.
``--scale`` multiplies the validation batch (1.0: the kept graphs fill the card, or the cap, at
the last step, by the job's own estimate).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from _job import GiB, Job, parse_args
from torch import nn


def extra(p):
    p.add_argument(
        "--cap-of-card",
        type=float,
        default=None,
        help="cap the process at this fraction of the card",
    )


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=240, warmup=1, extra=extra)
    job = Job("leak_losses" if args.cap_of_card is None else "leak_fraction", args, varying=False)
    if args.cap_of_card is not None:
        frac = job.set_cap(args.cap_of_card)
        print(
            f"[gpushare] tenant slot: torch.cuda.set_per_process_memory_fraction"
            f"({args.cap_of_card:.2f}) -> {job.cap_bytes / GiB:.2f} GiB allowed "
            f"(emulated card: fraction {frac:.4f} of this GPU)",
            flush=True,
        )
    d, depth, train_bsz = 1024, 4, 256
    params = depth * (d * d + d) + d + 1
    static = params * 16 + train_bsz * (depth * 8 * d + 4 * d) * 2
    per_sample = 1.05 * (depth * 8 * d + 4 * d + 8)
    n = args.warmup + args.steps
    val_bsz = max(1, round(job.spare(static) / (args.steps * per_sample)))
    if job.dry:
        d, train_bsz, run_val = 32, 4, 4
    else:
        run_val = val_bsz
    dev = job.device
    print(
        f"model: MLP {depth}x{d}, {params / 1e6:.1f}M params; train batch {train_bsz}, "
        f"val batch {val_bsz} (card {args.card_gib:g} GiB, scale {args.scale:g})",
        flush=True,
    )

    def train() -> None:
        with torch.device(dev):
            layers: list[nn.Module] = []
            for _ in range(depth):
                layers += [nn.Linear(d, d), nn.GELU()]
            model = nn.Sequential(*layers, nn.Linear(d, 1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        gen = torch.Generator(device=dev).manual_seed(args.seed)
        val_history = []
        t0 = time.time()
        for i in range(n):
            job.step, job.phase = i + 1, "train"
            job.need(static + max(0, i - args.warmup + 1) * val_bsz * per_sample)
            x = torch.randn(train_bsz, d, device=dev, generator=gen)
            y = torch.randn(train_bsz, 1, device=dev, generator=gen)
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            job.phase = "validation"
            xv = torch.randn(run_val, d, device=dev, generator=gen)
            yv = torch.randn(run_val, 1, device=dev, generator=gen)
            val_loss = F.mse_loss(model(xv), yv)
            if i >= args.warmup:
                val_history.append(val_loss)  # BUG: keeps the graph; meant val_loss.item()
            if i == 0:
                job.steady()
            s = i + 1
            if s % 20 == 0 or s == n:
                avg = torch.stack(val_history).mean().item() if val_history else float("nan")
                print(
                    f"step {s} loss={loss.item():.4f} val={avg:.4f} "
                    f"mem_allocated={job.allocated() / GiB:.2f} GiB "
                    f"({(time.time() - t0) / s * 1e3:.1f} ms/step)",
                    flush=True,
                )
        print(f"done: {args.steps} steps", flush=True)

    job.run(train)


if __name__ == "__main__":
    main()
