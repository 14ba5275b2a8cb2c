"""Inference without no_grad / inference_mode.

A batch-inference job (weights fill the GPU but 10 GiB) runs a 16-layer MLP stack on a large
batch with ``model.eval()`` but without ``torch.inference_mode()``: autograd keeps every layer's
input for a backward pass that never comes (about 32 GiB), where inference needs about 3 GiB.

Fixes: ``--fix inference_mode``; ``--fix no_grad``; ``--fix half-batch`` (shows that a
smaller batch alone is not enough). No allocator setting can help.
"""

from __future__ import annotations

import contextlib

import torch
from _common import banner, fill_gpu, mlp, parse_args

FIXES = ["inference_mode", "no_grad", "half-batch"]


def extra(p):
    p.add_argument("--leave-gib", type=float, default=10.0)
    p.add_argument("--tokens", type=int, default=65536)


def run_inference(model: torch.nn.Module, batch: torch.Tensor, fixes) -> torch.Tensor:
    model.eval()
    if "inference_mode" in fixes:
        ctx = torch.inference_mode()
    elif "no_grad" in fixes:
        ctx = torch.no_grad()
    else:
        ctx = contextlib.nullcontext()
    with ctx:
        return model(batch).argmax(dim=-1)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner()
    ballast = fill_gpu(args.leave_gib)
    width = 4096
    model = mlp(width, 16)
    tokens = args.tokens // 2 if "half-batch" in args.fixes else args.tokens
    print(f"running inference on {tokens} tokens", flush=True)
    for i in range(2):
        batch = torch.randn(tokens, width, device="cuda")
        preds = run_inference(model, batch, args.fixes)
        print(f"batch {i} done: {preds.shape[0]} predictions", flush=True)
    print("inference done", flush=True)
    del ballast


if __name__ == "__main__":
    main()
