#!/usr/bin/env python3
"""Inference server loop: batched generation with a KV cache that grows token by token.

A decoder-only LM (8 layers, d=1024, vocab 32000, bf16 weights, ``torch.inference_mode``) serves
waves of requests the way a simple batched ``generate`` does: each wave takes the next batch of
requests (prompts of long-tailed lengths, padded to the longest), runs the prefill, then decodes
``max_new_tokens`` (16-64, per wave) greedily, appending each new key/value to the cache with
``torch.cat`` (a new, one-token-longer tensor per layer per token; the old one is freed). When a
wave ends its cache is dropped and the next wave, of another length, builds its own: tensors of
ever-changing sizes freed and re-made. ``--steps`` counts waves; ``--scale`` multiplies the
longest prompt (1.0: the job's own estimate of its peak is the card).
"""

from __future__ import annotations

import random
import time

import torch
import torch.nn.functional as F
from _job import Job, long_tail, parse_args, round_to
from torch import nn


class Layer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d, bias=False)
        self.fc2 = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor, cache: list[torch.Tensor] | None) -> tuple:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if cache is not None:  # decode: append this token's key/value
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)))), [k, v]


class LM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx: torch.Tensor, past: list | None) -> tuple:
        x = self.emb(idx)
        new = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, None if past is None else past[i])
            if past is not None:
                past[i] = None  # the old cache of this layer is freed now
            new.append(kv)
        return F.linear(self.ln_f(x[:, -1]), self.emb.weight).float(), new


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=5, warmup=1)
    job = Job("kv_server", args, varying=True)
    vocab, d, layers, heads = 32000, 1024, 8, 16
    batch = max(4, round(2 * args.card_gib))
    params = vocab * d + layers * 12 * d * d
    static = params * 2 + 64 * 1024 * 1024
    per_pos = 1.1 * (layers * 4 * d + 24 * d)  # KV cache of all layers + one layer's prefill
    n = args.warmup + args.steps
    rng = random.Random(args.seed)
    gens = [rng.choice([16, 24, 32, 48, 64]) for _ in range(n)]
    rel = long_tail(rng, n, sigma=0.5, peak_at=0.6)
    top = job.spare(static) / (batch * per_pos)  # positions of the longest wave
    prompts = [round_to(r * top - gens[i], 8, 16) for i, r in enumerate(rel)]
    need = [static + batch * (p + g) * per_pos for p, g in zip(prompts, gens, strict=True)]
    if job.dry:
        vocab, d, layers, heads, run_batch = 256, 32, 2, 4, 2
        run_prompts, run_gens = [max(8, p // 64) for p in prompts], [4] * n
    else:
        run_batch, run_prompts, run_gens = batch, prompts, gens
    dev = job.device
    print(
        f"INFO:     loading model: {layers} layers, d_model {d}, {params / 1e6:.0f}M params, bf16",
        flush=True,
    )
    print(
        f"INFO:     engine: max_batch_size={batch}, max_prompt_len={max(prompts)} "
        f"(card {args.card_gib:g} GiB, scale {args.scale:g})",
        flush=True,
    )

    def serve() -> None:
        with torch.device(dev):
            model = LM(vocab, d, layers, heads).to(torch.bfloat16).eval()
        gen = torch.Generator(device=dev).manual_seed(args.seed)
        with torch.inference_mode():
            for w in range(n):
                job.step, job.phase = w + 1, "prefill"
                job.need(need[w])
                t0 = time.time()
                prompt = torch.randint(
                    0, vocab, (run_batch, run_prompts[w]), device=dev, generator=gen
                )
                logits, past = model(prompt, None)
                tok = logits.argmax(-1, keepdim=True)
                job.phase = "decode"
                for _ in range(run_gens[w] - 1):
                    logits, past = model(tok, past)
                    tok = logits.argmax(-1, keepdim=True)
                job.sync()
                kv = sum(t.numel() * t.element_size() for kvs in past for t in kvs)
                del past, logits, tok, prompt
                if w == args.warmup:
                    job.steady()
                dt = time.time() - t0
                label = "warmup " if w < args.warmup else ""
                print(
                    f"INFO:     {label}wave {w + 1}/{n}: {run_batch} requests, prompt_len "
                    f"{run_prompts[w]}, max_new_tokens {run_gens[w]}, kv_cache "
                    f"{kv / 2**30:.2f} GiB, mem {job.mem()}, "
                    f"{run_batch * run_gens[w] / dt:.0f} tok/s",
                    flush=True,
                )
        print(f"INFO:     served {args.steps} waves", flush=True)

    job.run(serve)


if __name__ == "__main__":
    main()
