#!/usr/bin/env python3
"""LoRA fine-tune: frozen bf16 base weights, small trainable adapters, variable-length SFT batches.

A decoder-only base model (8 layers, width chosen so its bf16 weights take ~30% of the card, as
a 7B model takes a 24 GB card; vocab 32000, tied head) is frozen; rank-16 adapters on every
projection (fp32, AdamW) are trained under bf16 autocast on instruction-style batches of 4
examples padded to the longest, lengths long-tailed (seeded). The backward runs through the
whole frozen stack, so activations are those of full training, without weight gradients or
optimizer state for the base. ``--scale`` multiplies the longest batch (1.0: the job's own
estimate of its peak is the card).
"""

from __future__ import annotations

import math
import random
import time

import torch
import torch.nn.functional as F
from _job import GiB, Job, long_tail, parse_args, round_to
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, din: int, dout: int, rank: int, alpha: float) -> None:
        super().__init__()
        w = torch.empty(dout, din, dtype=torch.bfloat16)
        nn.init.normal_(w, std=0.02)
        self.weight = nn.Parameter(w, requires_grad=False)  # frozen base
        self.lora_A = nn.Parameter(torch.empty(rank, din))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.lora_B = nn.Parameter(torch.zeros(dout, rank))
        self.scaling = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (
            F.linear(x, self.weight)
            + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling
        )


class Block(nn.Module):
    def __init__(self, d: int, heads: int, rank: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = LoRALinear(d, 3 * d, rank, 32)
        self.o = LoRALinear(d, d, rank, 32)
        self.ln2 = nn.LayerNorm(d)
        self.up = LoRALinear(d, 4 * d, rank, 32)
        self.down = LoRALinear(4 * d, d, rank, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Model(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, rank: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d, dtype=torch.bfloat16)
        nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(d, heads, rank) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return F.linear(self.ln_f(x), self.emb.weight)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=6, warmup=1)
    job = Job("lora_finetune", args, varying=True)
    vocab, layers, rank, bsz = 32000, 8, 16, 4
    d = round_to((0.3 * job.card_bytes / (24 * layers)) ** 0.5, 128, 512)
    heads = d // 128
    base = layers * 12 * d * d + vocab * d
    adapters = layers * rank * (d + 3 * d + d + d + d + 4 * d + 4 * d + d)
    static = base * 2 + adapters * 16 + layers * 4 * d * 4
    per_token = 1.1 * (layers * 34 * d + 14 * vocab)
    max_len = round_to(job.spare(static) / (bsz * per_token), 8, 32)
    n = args.warmup + args.steps
    rng = random.Random(args.seed)
    lens = [round_to(r * max_len, 8, 32) for r in long_tail(rng, n, sigma=0.5, peak_at=0.6)]
    need = [static + bsz * L * per_token for L in lens]
    if job.dry:
        vocab, d, layers, heads, bsz = 256, 64, 2, 2, 2
        run_lens = [max(8, L // 64) for L in lens]
    else:
        run_lens = lens
    dev = job.device
    print(
        f"[lora] base model: {layers} layers, hidden {d}, {base / 1e9:.2f}B params (bf16, frozen)",
        flush=True,
    )
    print(
        f"[lora] trainable params: {adapters:,} || all params: {base + adapters:,} || "
        f"trainable%: {100 * adapters / (base + adapters):.4f}",
        flush=True,
    )
    print(
        f"[lora] batch {bsz}, max_seq_len {max_len} (card {args.card_gib:g} GiB, "
        f"scale {args.scale:g})",
        flush=True,
    )

    def train() -> None:
        with torch.device(dev):
            model = Model(vocab, d, layers, heads, rank)
        for name, p in model.named_parameters():
            if "lora_" not in name:
                p.requires_grad_(False)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=2e-4)
        gen = torch.Generator(device=dev).manual_seed(args.seed)
        for i in range(n):
            job.step, job.phase = i + 1, "data"
            L = run_lens[i]
            job.need(need[i])
            t0 = time.time()
            idx = torch.randint(0, vocab, (bsz, L + 1), device=dev, generator=gen)
            prompt = torch.randint(1, L // 2 + 1, (bsz, 1), device=dev, generator=gen)
            real = torch.randint(L // 2 + 1, L + 1, (bsz, 1), device=dev, generator=gen)
            pos = torch.arange(1, L + 1, device=dev)[None, :]
            labels = idx[:, 1:].masked_fill((pos <= prompt) | (pos > real), -100)
            job.phase = "forward"
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                logits = model(idx[:, :-1])
                loss = F.cross_entropy(logits.view(-1, vocab), labels.reshape(-1))
            job.phase = "backward"
            loss.backward()
            job.phase = "optimizer"
            gn = torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            lv = loss.item()
            del logits, loss, idx, labels
            if i == args.warmup:
                job.steady()
            print(
                f"{{'loss': {lv:.4f}, 'grad_norm': {float(gn):.3f}, 'learning_rate': 0.0002, "
                f"'step': {i + 1}, 'seq_len': {L}, 'mem': '{job.mem()}', "
                f"'step_time': {time.time() - t0:.3f}}}",
                flush=True,
            )
        print(
            f"[lora] done: {args.steps} steps, peak allocated "
            f"{job.stats().get('max_memory_allocated', 0) / GiB:.2f} GiB",
            flush=True,
        )

    job.run(train)


if __name__ == "__main__":
    main()
