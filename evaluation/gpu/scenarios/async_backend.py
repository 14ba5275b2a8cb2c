"""cudaMallocAsync backend: batch too big, under PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync.

The same capacity problem as capacity_batch.py (weights fill the GPU but 12 GiB; the step needs
about 15 GiB), with the CUDA async allocator. Its OOM message is a different block
("Allocation on device 0 would exceed allowed memory ... PyTorch limit ... 17179869184.00 GiB").
Native-only allocator keys (expandable_segments, max_split_size_mb) do not apply to it.

Run it with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync in the environment (the driver does;
the script refuses to run under the native allocator unless ``--any-backend``).

Fixes: ``--fix half-batch``; ``--fix amp``.
"""

from __future__ import annotations

import torch
from _common import banner, fill_gpu, mlp, parse_args

FIXES = ["half-batch", "amp"]


def extra(p):
    p.add_argument("--leave-gib", type=float, default=12.0)
    p.add_argument("--tokens", type=int, default=98304)
    p.add_argument("--any-backend", action="store_true")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner()
    backend = torch.cuda.get_allocator_backend()
    print(f"allocator backend {backend}", flush=True)
    if backend != "cudaMallocAsync" and not args.any_backend:
        raise SystemExit("set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync")
    ballast = fill_gpu(args.leave_gib)
    width = 4096
    model = mlp(width, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = args.tokens // 2 if "half-batch" in args.fixes else args.tokens
    print(f"batch {tokens} tokens", flush=True)
    for step in range(1, 4):
        x = torch.randn(tokens, width, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled="amp" in args.fixes):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    print("training done", flush=True)
    del ballast


if __name__ == "__main__":
    main()
