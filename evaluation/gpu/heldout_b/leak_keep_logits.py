#!/usr/bin/env python3
"""Causal-LM fine-tuning that keeps every step's logits on the GPU for an epoch-end metric.

The job: a small decoder LM is fine-tuned with AdamW under bf16 autocast. To report token
accuracy at the end of the epoch it appends ``logits.detach()`` ([batch, seq, vocab]) of every
step to a list, as a hand-written ``compute_metrics`` often does (the reason the HF Trainer has
``eval_accumulation_steps``). ``detach()`` drops the graph but not the tensor: each step adds
~250 MiB that is never freed. A logging callback prints the HF-Trainer-style metrics dict every
5 steps, with the process's GPU memory in it, so the climb is in the log.

Fix (``--fix running-metric``): count correct tokens per step (a GPU scalar) and keep nothing.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from _hb import GiB, Run, parse_args
from torch import nn

FIXES = ["running-metric"]


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln_f(self.blocks(self.tok(ids) + self.pos[: ids.shape[1]])))


# vocab, d_model, heads, layers, batch, seq, steps in the epoch
GPU_DIMS = (32000, 1024, 16, 4, 8, 512, 100)
CPU_DIMS = (97, 32, 4, 2, 2, 16, 12)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES)
    run = Run(args.dry_run_cpu)
    job(run, args.fixes, CPU_DIMS if run.dry else GPU_DIMS)


def job(run: Run, fixes: dict, dims: tuple[int, ...]) -> None:
    vocab, d, heads, layers, batch, seq, steps = dims
    dev = run.device
    torch.manual_seed(0)
    # The job's own share of the GPU: 16 GiB; the rest holds the frozen teacher's weights.
    ballast = run.ballast(16 * GiB, "teacher model loaded")  # noqa: F841 (kept alive on purpose)
    model = TinyLM(vocab, d, heads, layers, seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s / steps)
    n_params = sum(p.numel() for p in model.parameters())
    print("***** Running training *****")
    print(f"  Num examples = {steps * batch}")
    print("  Num Epochs = 1")
    print(f"  Instantaneous batch size per device = {batch}")
    print(f"  Total optimization steps = {steps}")
    print(f"  Number of trainable parameters = {n_params}", flush=True)

    running = "running-metric" in fixes
    kept_logits: list[torch.Tensor] = []
    kept_labels: list[torch.Tensor] = []
    correct = torch.zeros((), dtype=torch.long, device=dev)
    total = 0
    loss_sum, t0 = 0.0, time.time()
    for step in range(1, steps + 1):
        ids = torch.randint(0, vocab, (batch, seq + 1), device=dev)
        inputs, labels = ids[:, :-1], ids[:, 1:]
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().view(-1, vocab), labels.reshape(-1))
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if running:
            correct += (logits.argmax(-1) == labels).sum()
            total += labels.numel()
        else:
            kept_logits.append(logits.detach())  # for the epoch-end token accuracy
            kept_labels.append(labels)
        loss_sum += loss.item()
        if step % 5 == 0:
            logs = {
                "loss": round(loss_sum / 5, 4),
                "grad_norm": round(grad_norm.item(), 4),
                "learning_rate": float(f"{sched.get_last_lr()[0]:.3e}"),
                "epoch": round(step / steps, 2),
                "gpu_mem_gb": round(run.allocated() / 1024**3, 2),
            }
            print(logs, flush=True)
            loss_sum = 0.0
    if not running:
        for lg, lb in zip(kept_logits, kept_labels, strict=True):
            correct += (lg.argmax(-1) == lb).sum()
            total += lb.numel()
    print(
        {
            "train_runtime": round(time.time() - t0, 2),
            "train_steps_per_second": round(steps / (time.time() - t0), 3),
            "train_token_accuracy": round(correct.item() / total, 4),
            "epoch": 1.0,
        },
        flush=True,
    )


if __name__ == "__main__":
    main()
