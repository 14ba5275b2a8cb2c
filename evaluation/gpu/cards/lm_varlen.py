#!/usr/bin/env python3
"""Decoder-only LM pre-training on variable-length batches (long-tailed lengths), AdamW, bf16.

A small GPT (4 layers, d=768, vocab 32000, tied head, SDPA causal attention) trained with AdamW
under bf16 autocast. Every batch holds 8 sequences padded to the longest in the batch; the batch
length is drawn from a seeded long-tailed (lognormal) distribution, so activations and the fp32
logits change size at every step: the classic fragmentation pattern. ``--scale`` multiplies the
longest batch (1.0: the job's own estimate of its peak is the card).
"""

from __future__ import annotations

import random
import time

import torch
import torch.nn.functional as F
from _job import GiB, Job, long_tail, parse_args, round_to
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d, bias=False)
        self.fc2 = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        nn.init.normal_(self.wte.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)
        for blk in self.blocks:
            x = blk(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=14, warmup=2)
    job = Job("lm_varlen", args, varying=True)
    vocab, d, layers, heads, bsz = 32000, 768, 4, 12, 8
    params = vocab * d + layers * 12 * d * d
    static = params * 18  # fp32 weights, grads, AdamW moments, bf16 weight copies
    per_token = 1.1 * (layers * 34 * d + 14 * vocab)
    max_len = round_to(job.spare(static) / (bsz * per_token), 8, 32)
    n = args.warmup + args.steps
    rng = random.Random(args.seed)
    rel = long_tail(rng, n, sigma=0.6, peak_at=0.7)
    lens = [round_to(r * max_len, 8, 32) for r in rel]
    need = [static + bsz * L * per_token for L in lens]
    if job.dry:
        vocab, d, layers, heads, bsz = 256, 32, 2, 4, 2
        run_lens = [max(8, L // 64) for L in lens]
    else:
        run_lens = lens
    dev = job.device
    print(
        f"model: GPT {layers} layers, d_model {d}, vocab {vocab}, {params / 1e6:.1f}M params; "
        f"batch {bsz} x up to {max_len} tokens (card {args.card_gib:g} GiB, scale {args.scale:g})",
        flush=True,
    )

    def train() -> None:
        with torch.device(dev):
            model = GPT(vocab, d, layers, heads)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        gen = torch.Generator(device=dev).manual_seed(args.seed)
        for i in range(n):
            job.step, job.phase = i + 1, "data"
            L = run_lens[i]
            job.need(need[i])
            t0 = time.time()
            idx = torch.randint(0, vocab, (bsz, L + 1), device=dev, generator=gen)
            real = torch.randint(L // 2, L + 1, (bsz, 1), device=dev, generator=gen)
            pad = torch.arange(L + 1, device=dev)[None, :] > real
            targets = idx[:, 1:].masked_fill(pad[:, 1:], -1)
            job.phase = "forward"
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                logits = model(idx[:, :-1])
                loss = F.cross_entropy(logits.view(-1, vocab), targets.reshape(-1), ignore_index=-1)
            job.phase = "backward"
            loss.backward()
            job.phase = "optimizer"
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            lv = loss.item()
            del logits, loss, idx, targets, pad, real
            if i == args.warmup:
                job.steady()
            tag = "warmup " if i < args.warmup else ""
            print(
                f"{tag}iter {i + 1}/{n}: loss {lv:.4f}, seq_len {run_lens[i]}, "
                f"tokens {bsz * run_lens[i]}, mem {job.mem()}, "
                f"time {(time.time() - t0) * 1e3:.0f}ms",
                flush=True,
            )
        print(
            f"done: {args.steps} steps, peak allocated "
            f"{job.stats().get('max_memory_allocated', 0) / GiB:.2f} GiB",
            flush=True,
        )

    job.run(train)


if __name__ == "__main__":
    main()
