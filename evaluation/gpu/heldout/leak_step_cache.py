"""A cache keyed by step that is never evicted: the GPU fills 64 MiB at a time, key=value logs.

An online-distillation job caches the frozen teacher's logits for every step in a dict keyed by
step ("to replay them in the second epoch without running the teacher again") and never evicts
them: 64 MiB more every step. Everything else is steady. It logs one ``key=value`` line per
step with ``torch.cuda.memory_allocated()`` and ``memory_reserved()`` in MiB (``gpu_alloc_mb``,
``gpu_reserved_mb``). The GPU is already nearly full with the job's own state (one block
leaving 3 GiB), so after some 25 steps PyTorch has allocated more than 99% of the GPU, almost
nothing is reserved-but-unused, and a 64 MiB request fails.

Fixes: ``--fix evict`` (keep only the last 4 steps' teacher logits); ``--fix cpu`` (keep the
cached logits in host memory).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from _common_ho import allocated, banner, hold, parse_args, reserved, sync

FIXES = ["evict", "cpu"]


def extra(p):
    p.add_argument("--leave-gib", type=float, default=3.0)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--seed", type=int, default=0)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "online_distill")
    torch.manual_seed(args.seed)
    dev, dry = args.dev, args.dry_run_cpu
    d, tokens = (64, 32) if dry else (4096, 4096)
    state = hold(args, args.leave_gib, "student optimizer state and teacher loaded")
    student = torch.nn.Sequential(
        torch.nn.Linear(d, d),
        torch.nn.GELU(),
        torch.nn.Linear(d, d),
        torch.nn.GELU(),
        torch.nn.Linear(d, d),
    ).to(dev)
    teacher = torch.nn.Linear(d, d).to(dev).requires_grad_(False)
    opt = torch.optim.AdamW(student.parameters(), lr=3e-4)
    teacher_cache: dict[int, torch.Tensor] = {}
    t0 = time.time()
    for step in range(1, args.steps + 1):
        x = torch.randn(tokens, d, device=dev)
        with torch.no_grad():
            t_logits = teacher(x)
        if "cpu" in args.fixes:
            teacher_cache[step] = t_logits.cpu()
        else:
            teacher_cache[step] = t_logits
        if "evict" in args.fixes:
            teacher_cache.pop(step - 4, None)
        s_logits = student(x)
        loss = F.kl_div(
            F.log_softmax(s_logits, dim=-1),
            F.log_softmax(t_logits, dim=-1),
            log_target=True,
            reduction="batchmean",
        )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(args)
        print(
            f"it={step} loss={loss.item():.4f} lr=0.0003 "
            f"tok_s={step * tokens / (time.time() - t0):.0f} cached_steps={len(teacher_cache)} "
            f"gpu_alloc_mb={allocated(args) // 2**20} gpu_reserved_mb={reserved(args) // 2**20}",
            flush=True,
        )
    print("epoch 1 done", flush=True)
    del state


if __name__ == "__main__":
    main()
