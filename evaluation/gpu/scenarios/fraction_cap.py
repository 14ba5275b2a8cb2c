"""Memory-fraction cap: torch.cuda.set_per_process_memory_fraction is set too low for the job.

The job caps itself at 7 GiB (a fraction of 0.05 on a 141 GB H200; the fraction is computed
from 7 GiB so the scenario behaves the same on any GPU), e.g. to "leave room" for a co-located
evaluator, then trains an MLP whose step needs about 10 GiB. The device itself has plenty free.

Fixes: ``--fix fraction=F`` (raise the fraction to F of the device; 0.1 on an H200 = 14 GiB);
``--fix half-batch``. No allocator setting can help.
Run with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync for the same cap under the async backend.
"""

from __future__ import annotations

import torch
from _common import GiB, banner, mlp, parse_args, set_fraction_for

FIXES = ["fraction", "half-batch"]


def extra(p):
    p.add_argument("--allowed-gib", type=float, default=7.0)
    p.add_argument("--tokens", type=int, default=65536)
    p.add_argument("--steps", type=int, default=3)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner()
    if args.fixes.get("fraction"):
        frac = float(args.fixes["fraction"])
        torch.cuda.set_per_process_memory_fraction(frac)
    else:
        frac = set_fraction_for(args.allowed_gib)
    total = torch.cuda.get_device_properties(0).total_memory
    print(f"memory fraction {frac} ({frac * total / GiB:.2f} GiB allowed)", flush=True)
    width = 4096
    model = mlp(width, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = args.tokens // 2 if "half-batch" in args.fixes else args.tokens
    print(f"batch {tokens} tokens", flush=True)
    for step in range(1, args.steps + 1):
        x = torch.randn(tokens, width, device="cuda")
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    print("training done", flush=True)


if __name__ == "__main__":
    main()
