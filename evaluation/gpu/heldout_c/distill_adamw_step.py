#!/usr/bin/env python3
"""Distillation fine-tune of a 1.07B-parameter GPT student in fp32 with AdamW (nanoGPT style).

Stands for a job that fine-tunes a student next to a frozen teacher kept on the GPU (the teacher's
weights are a ballast here: the job only holds them). The student's forward and backward fit;
gradient accumulation runs its four micro-steps; then the first ``optimizer.step()`` creates
AdamW's two fp32 state tensors per parameter (8 GiB for 1.07B parameters) and runs out of memory.

``--fix adafactor``: torch.optim.Adafactor (factored second moment, no first moment), stepped one
parameter at a time (``foreach=False``): its state is a few MiB instead of 8 GiB.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hc import Device, GiB, parse_args


@dataclass
class GPTConfig:
    block_size: int = 512
    vocab_size: int = 32000
    n_layer: int = 20
    n_head: int = 16
    n_embd: int = 2048


class CausalSelfAttention(nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=False)
        self.n_head = c.n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.mlp = MLP(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.block_size, c.n_embd)
        self.h = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main() -> int:
    a = parse_args(__doc__.splitlines()[0], ["adafactor"])
    dev = Device(a.dry_run_cpu)
    if dev.dry:
        cfg = GPTConfig(block_size=64, vocab_size=256, n_layer=2, n_head=4, n_embd=64)
        batch_size, grad_accum, max_iters, spare = 2, 4, 3, 0
    else:
        cfg = GPTConfig()
        batch_size, grad_accum, max_iters, spare = 1, 4, 3, 9 * GiB
    torch.manual_seed(1337)
    tokens_per_iter = grad_accum * batch_size * cfg.block_size
    print(f"tokens per iteration will be: {tokens_per_iter:,}")
    with torch.device(dev.device):
        model = GPT(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"number of parameters: {n_params / 1e6:.2f}M")
    teacher = dev.ballast(spare)  # frozen teacher, resident for the whole run
    if teacher is not None:
        print(
            f"teacher resident: {teacher.numel() / GiB:.1f} GiB; "
            f"{dev.free_bytes() / GiB:.1f} GiB free for the student's training"
        )

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    print(
        f"num decayed parameter tensors: {len(decay)}, with "
        f"{sum(p.numel() for p in decay):,} parameters"
    )
    print(
        f"num non-decayed parameter tensors: {len(no_decay)}, with "
        f"{sum(p.numel() for p in no_decay):,} parameters"
    )
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    if a.fix == "adafactor":
        base_lr = 1e-2
        optimizer = torch.optim.Adafactor(groups, lr=base_lr, foreach=False)
        print("using Adafactor (factored second moment, foreach=False)")
    else:
        base_lr = 6e-4
        optimizer = torch.optim.AdamW(groups, lr=base_lr, betas=(0.9, 0.95))
        print("using AdamW")

    def get_batch():
        x = torch.randint(cfg.vocab_size, (batch_size, cfg.block_size), device=dev.device)
        return x, torch.roll(x, -1, dims=1)

    t0 = time.time()
    for it in range(max_iters):
        lr = base_lr * 0.5 * (1 + math.cos(math.pi * it / max_iters))
        for g in optimizer.param_groups:
            g["lr"] = lr
        for _micro in range(grad_accum):
            X, Y = get_batch()
            loss = model(X, Y) / grad_accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dev.sync()
        t1 = time.time()
        print(
            f"iter {it}: loss {loss.item() * grad_accum:.4f}, time {(t1 - t0) * 1000:.2f}ms, "
            f"mem {dev.allocated() / GiB:.2f}GiB"
        )
        t0 = t1
    return 0


if __name__ == "__main__":
    sys.exit(main())
