"""Leak: a graph kept alive across steps (``val_loss += loss`` without ``.item()``).

A training job that also evaluates a validation batch every step accumulates the validation
loss as a tensor, outside ``no_grad``: each step's whole forward graph, with the activations it
saved, stays reachable from ``val_total``. Memory grows by about 1 GiB a step until the GPU
(filled by the job's weights, leaving 12 GiB) runs out. The job prints ``step N ... mem X GiB``
every step, as many training loops do.

Fixes: ``--fix item`` (``val_total += val_loss.item()``); ``--fix detach``
(``val_total += val_loss.detach()``); ``--fix no_grad`` (validation under torch.no_grad()).
No allocator setting can help.
"""

from __future__ import annotations

import contextlib

import torch
from _common import GiB, banner, fill_gpu, mlp, parse_args

FIXES = ["item", "detach", "no_grad"]


def extra(p):
    p.add_argument("--leave-gib", type=float, default=12.0)
    p.add_argument("--steps", type=int, default=24)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner()
    ballast = fill_gpu(args.leave_gib)
    width = 4096
    model = mlp(width, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x_val = torch.randn(8192, width, device="cuda")
    val_total = 0.0
    for step in range(1, args.steps + 1):
        x = torch.randn(8192, width, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ctx = torch.no_grad() if "no_grad" in args.fixes else contextlib.nullcontext()
        with ctx:
            val_loss = model(x_val + 0.01 * step).pow(2).mean()
        if "item" in args.fixes:
            val_total += val_loss.item()
        elif "detach" in args.fixes:
            val_total += val_loss.detach()
        else:
            val_total += val_loss  # keeps the whole validation graph alive
        mem = torch.cuda.memory_allocated() / GiB
        print(
            f"step {step} loss {loss.item():.4f} val {float(val_total) / step:.4f} mem {mem:.2f} GiB",  # noqa: E501
            flush=True,
        )
    print("training done", flush=True)
    del ballast


if __name__ == "__main__":
    main()
