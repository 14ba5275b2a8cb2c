#!/usr/bin/env python3
"""Long-context fine-tuning (32k tokens) without activation checkpointing, under cudaMallocAsync.

Stands for a team's long-context extension run: a 16-layer, d-2048 decoder (bf16, flash
attention through SDPA) trained on single 32768-token sequences, with the allocator set to
``backend:cudaMallocAsync`` by the team's launcher environment (the scenario's
``PYTORCH_CUDA_ALLOC_CONF``; the job prints it). Every block keeps its activations for the
backward pass, about 2 GiB per block at this length, so the forward pass outgrows the memory the
job has next to its frozen reference model (a ballast here) long before the loss.

``--fix checkpoint``: ``torch.utils.checkpoint`` around each block: only block inputs are kept
and each block's activations are recomputed in the backward pass.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hc import Device, GiB, parse_args


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class LM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, ckpt: bool) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.ckpt = ckpt

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if self.ckpt else blk(x)
        return self.ln_f(x) @ self.emb.weight.T


def main() -> int:
    a = parse_args(__doc__.splitlines()[0], ["checkpoint"])
    dev = Device(a.dry_run_cpu)
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    backend = "n/a" if dev.dry else torch.cuda.get_allocator_backend()
    print(f"PYTORCH_CUDA_ALLOC_CONF={conf!r} (allocator backend: {backend})", flush=True)
    if dev.dry:
        vocab, d, layers, heads, seq, steps, spare, dtype = 128, 32, 2, 4, 64, 2, 0, torch.float32
    else:
        vocab, d, layers, heads, seq, steps, spare = 32000, 2048, 16, 16, 32768, 2, 28
        dtype = torch.bfloat16
    torch.manual_seed(0)
    with torch.device(dev.device):
        model = LM(vocab, d, layers, heads, ckpt=a.fix == "checkpoint").to(dtype)
    reference = dev.ballast(spare * GiB)  # frozen reference model for the KL term, resident
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0)
    n = sum(p.numel() for p in model.parameters())
    print(
        f"model: {n / 1e6:.0f}M params, {layers} layers, d={d}, seq_len={seq}, "
        f"activation checkpointing={'on' if model.ckpt else 'off'}",
        flush=True,
    )
    for step in range(1, steps + 1):
        t0 = time.time()
        ids = torch.randint(vocab, (1, seq + 1), device=dev.device)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, vocab), ids[:, 1:].reshape(-1))
        del logits
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dev.sync()
        print(
            f"Epoch 0 | step {step}/{steps} | loss {loss.item():.4f} | "
            f"{seq / (time.time() - t0):.0f} tok/s",
            flush=True,
        )
    del reference
    return 0


if __name__ == "__main__":
    sys.exit(main())
