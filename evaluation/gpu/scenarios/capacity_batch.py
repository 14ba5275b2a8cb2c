"""Capacity: the batch is too big for the memory the model leaves free.

A training job whose weights and optimizer state fill the GPU (a ballast leaving 12 GiB free)
runs an MLP stack on a batch of 98304 tokens: the activations kept for backward need about
15 GiB. Nothing is fragmented; the job simply needs more memory than there is.

Fixes (code only; no allocator setting can help): ``--fix half-batch``; ``--fix grad-accum``
(two micro-batches of half the size, gradients accumulated); ``--fix amp`` (bf16 autocast).
"""

from __future__ import annotations

import torch
from _common import banner, fill_gpu, mlp, parse_args

FIXES = ["half-batch", "grad-accum", "amp"]


def extra(p):
    p.add_argument("--leave-gib", type=float, default=12.0)
    p.add_argument("--tokens", type=int, default=98304)
    p.add_argument("--steps", type=int, default=3)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner()
    ballast = fill_gpu(args.leave_gib)
    width = 4096
    model = mlp(width, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = args.tokens // 2 if "half-batch" in args.fixes else args.tokens
    micro = 2 if "grad-accum" in args.fixes else 1
    print(f"batch {tokens} tokens, {micro} micro-batch(es) per step", flush=True)
    for step in range(1, args.steps + 1):
        for _ in range(micro):
            x = torch.randn(tokens // micro, width, device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled="amp" in args.fixes):
                loss = model(x).float().pow(2).mean() / micro
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item() * micro:.4f}", flush=True)
    print("training done", flush=True)
    del ballast


if __name__ == "__main__":
    main()
