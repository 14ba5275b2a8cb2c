"""A leak seen only in the job's JSON log records: forward hooks keep every block's output.

A training job registers an "activation monitor" (forward hooks on each of its 12 residual
blocks) that appends each block's output to a list, meant to be summarised and cleared every
200 steps. Each step thus keeps 12 outputs of 8192 x 2048 fp32 (768 MiB) alive. The job logs a
JSON record every 2 steps with ``torch.cuda.memory_allocated()`` and ``memory_reserved()`` in
bytes, which is the only place the growth shows; it runs out of memory after about 20 steps
(the job's frozen weights, one block, leave 24 GiB).

Fixes: ``--fix stats-only`` (the hook keeps only the output's detached norm, a scalar);
``--fix detach`` (the hook keeps ``output.detach()``: the naive fix, the same memory).
"""

from __future__ import annotations

import json
import time

import torch
from _common_ho import allocated, autocast, banner, hold, max_allocated, parse_args, reserved, sync

FIXES = ["stats-only", "detach"]


def extra(p):
    p.add_argument("--leave-gib", type=float, default=24.0)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--seed", type=int, default=0)


class Block(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.out(torch.nn.functional.gelu(self.fc(self.norm(x))))


class ActivationMonitor:
    """Collects block outputs for periodic activation statistics."""

    def __init__(self, blocks: torch.nn.ModuleList, mode: str | None, every: int) -> None:
        self.records: list[torch.Tensor] = []
        self.mode, self.every = mode, every
        for blk in blocks:
            blk.register_forward_hook(self.hook)

    def hook(self, module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if self.mode == "stats-only":
            self.records.append(output.detach().float().norm())
        elif self.mode == "detach":
            self.records.append(output.detach())
        else:
            self.records.append(output)

    def maybe_flush(self, step: int) -> dict | None:
        if step % self.every:
            return None
        norms = torch.stack([r.float().norm() for r in self.records])
        self.records.clear()
        return {"act_norm_mean": norms.mean().item(), "act_norm_max": norms.max().item()}


def log(record: dict) -> None:
    record = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S"), "level": "INFO", **record}
    print(json.dumps(record), flush=True)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "train_with_monitor")
    torch.manual_seed(args.seed)
    dev, dry = args.dev, args.dry_run_cpu
    d, depth, tokens = (64, 3, 32) if dry else (2048, 12, args.tokens)
    frozen = hold(args, args.leave_gib, "frozen encoder loaded")
    blocks = torch.nn.ModuleList(Block(d) for _ in range(depth)).to(dev)
    head = torch.nn.Linear(d, d).to(dev)
    mode = next((m for m in ("stats-only", "detach") if m in args.fixes), None)
    monitor = ActivationMonitor(blocks, mode, every=200)
    params = [*blocks.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=3e-4)
    log({"event": "start", "params": sum(p.numel() for p in params), "tokens_per_step": tokens})
    t0 = time.time()
    for step in range(1, args.steps + 1):
        x = torch.randn(tokens, d, device=dev)
        with autocast(args):
            h = x
            for blk in blocks:
                h = blk(h)
            loss = (head(h).float() - x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        stats = monitor.maybe_flush(step)
        if step % 2 == 0:
            sync(args)
            rec = {
                "step": step,
                "loss": round(loss.item(), 5),
                "lr": 3e-4,
                "tokens_per_sec": round(step * tokens / (time.time() - t0), 1),
                "gpu_mem_allocated_bytes": allocated(args),
                "gpu_mem_reserved_bytes": reserved(args),
                "gpu_max_mem_allocated_bytes": max_allocated(args),
            }
            log({**rec, **(stats or {})})
    log({"event": "done", "steps": args.steps})
    del frozen


if __name__ == "__main__":
    main()
