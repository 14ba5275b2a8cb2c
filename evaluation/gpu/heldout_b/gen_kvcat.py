#!/usr/bin/env python3
"""Batched greedy generation with a hand-written decoder whose KV cache grows by ``torch.cat``.

The job: a decoder-only LM (GPT-NeoX vocabulary, 50304 tokens) generates continuations for a
batch of prompts, one token per step. Like the legacy ``past_key_values`` of many hand-written
decoders, each layer's cache is extended with ``torch.cat([past, new], dim=2)`` every step, so
every step allocates each layer's K and V one token larger and frees the old ones. Like
``generate(..., output_scores=True)``, it keeps each step's scores ([batch, vocab] fp32) on the
GPU for a later re-ranking pass.

The GPU's caching allocator serves the growing caches from ever new segments (each a little
larger than any freed one) and the small long-lived score tensors (1.15 MiB) land in the free
tails of those segments, so freed caches cannot be returned: reserved memory climbs far above
what is allocated until a cache extension fails with GiBs reserved but unallocated
(``alloc_model.py`` replays this job through a model of the allocator).

Fix (``--fix static-cache``): pre-allocate each layer's cache for prompt + new tokens once and
write each step's K/V into it in place (what Meta's reference Llama code and HF's StaticCache
do); nothing is re-allocated per step.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F
from _hb import GiB, MiB, Run, parse_args
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

FIXES = ["static-cache"]


class Block(nn.Module):
    def __init__(self, d: int, heads: int, device, dtype) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, **kw)
        self.qkv = nn.Linear(d, 3 * d, bias=False, **kw)
        self.proj = nn.Linear(d, d, bias=False, **kw)
        self.ln2 = nn.LayerNorm(d, **kw)
        self.up = nn.Linear(d, 4 * d, bias=False, **kw)
        self.down = nn.Linear(4 * d, d, bias=False, **kw)

    def forward(self, x: torch.Tensor, cache, i: int) -> torch.Tensor:
        b, n, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.view(b, n, self.heads, hd).transpose(1, 2)
        k = k.view(b, n, self.heads, hd).transpose(1, 2)
        v = v.view(b, n, self.heads, hd).transpose(1, 2)
        k, v = cache.update(i, k, v)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=n > 1)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Decoder(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, device, dtype) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.embed = nn.Embedding(vocab, d, **kw)
        self.blocks = nn.ModuleList(Block(d, heads, device, dtype) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, **kw)
        self.head = nn.Linear(d, vocab, bias=False, **kw)

    def forward(self, ids: torch.Tensor, cache) -> torch.Tensor:
        x = self.embed(ids)
        for i, blk in enumerate(self.blocks):
            x = blk(x, cache, i)
        return self.head(self.ln_f(x[:, -1:]))  # logits of the last position only


class CatCache:
    """past_key_values as many decoders keep them: grown by torch.cat every step."""

    def __init__(self, layers: int) -> None:
        self.k: list[torch.Tensor | None] = [None] * layers
        self.v: list[torch.Tensor | None] = [None] * layers

    def update(self, i: int, k: torch.Tensor, v: torch.Tensor):
        pk, pv = self.k[i], self.v[i]
        if pk is None or pv is None:
            self.k[i], self.v[i] = k, v
        else:
            self.k[i] = torch.cat([pk, k], dim=2)
            self.v[i] = torch.cat([pv, v], dim=2)
        return self.k[i], self.v[i]


class StaticCache:
    """The fix: one buffer per layer for prompt + all new tokens, written in place."""

    def __init__(self, layers, batch, heads, max_len, hd, device, dtype) -> None:
        shape = (batch, heads, max_len, hd)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.pos = [0] * layers

    def update(self, i: int, k: torch.Tensor, v: torch.Tensor):
        s, n = self.pos[i], k.shape[2]
        self.k[i][:, :, s : s + n].copy_(k)
        self.v[i][:, :, s : s + n].copy_(v)
        self.pos[i] = s + n
        return self.k[i][:, :, : s + n], self.v[i][:, :, : s + n]


# vocab, d_model, heads, layers, batch, prompt, max_new_tokens
# (alloc_model.py replays this job's allocations at these sizes: change them together)
GPU_DIMS = (50304, 4096, 32, 4, 6, 512, 1024)
CPU_DIMS = (503, 64, 4, 2, 3, 16, 12)
MARGIN_GIB = 6


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES)
    run = Run(args.dry_run_cpu)
    job(run, args.fixes, CPU_DIMS if run.dry else GPU_DIMS)


def job(run: Run, fixes: dict, dims: tuple[int, ...]) -> None:
    dev, dtype = run.device, torch.bfloat16
    vocab, d, heads, layers, batch, prompt, new = dims
    static = "static-cache" in fixes
    torch.manual_seed(0)

    model = Decoder(vocab, d, heads, layers, dev, dtype).eval()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"decoder: {layers} layers, d_model {d}, {heads} heads, {n_params / 1e9:.2f}B params")

    hd = d // heads
    kv_bytes = 2 * layers * batch * (prompt + new) * d * 2
    score_bytes = new * batch * vocab * 4
    # What the job holds at its last step: the caches and the kept scores; plus MARGIN_GIB for
    # the prefill's activations, the final re-ranking pass (two copies of the scores) and slack.
    # Everything else on the GPU is taken by the ballast.
    leave = kv_bytes + score_bytes + MARGIN_GIB * GiB
    ballast = run.ballast(leave, "reference model loaded")  # noqa: F841 (kept alive on purpose)
    print(
        f"generate: batch {batch}, prompt {prompt} tokens, max_new_tokens {new}, "
        f"kv cache {'static (pre-allocated)' if static else 'torch.cat per step'}, "
        f"output_scores=True",
        flush=True,
    )

    cache = (
        StaticCache(layers, batch, heads, prompt + new, hd, dev, dtype)
        if static
        else CatCache(layers)
    )
    ids = torch.randint(0, vocab, (batch, prompt), device=dev)
    scores: list[torch.Tensor] = []
    t0 = time.time()
    with torch.inference_mode():
        logits = model(ids, cache)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        for step in range(new):
            logits = model(nxt, cache)
            step_scores = logits[:, -1, :].float()
            scores.append(step_scores)  # output_scores=True keeps every step's scores
            nxt = step_scores.argmax(-1, keepdim=True)
            if step % 64 == 0 or step == new - 1:
                run.sync()
                print(
                    f"step {step + 1}/{new} len {prompt + step + 1} "
                    f"{(step + 1) / max(time.time() - t0, 1e-9):.1f} tok/s",
                    flush=True,
                )
    seq_logprob = torch.stack(scores, 1).log_softmax(-1).amax(-1).sum(-1)
    print(
        f"done: {new} tokens x {batch} sequences, mean max-logprob "
        f"{seq_logprob.mean().item() / new:.3f}, scores kept "
        f"{len(scores) * scores[0].numel() * 4 / MiB:.0f} MiB, "
        f"{math.ceil(time.time() - t0)} s",
        flush=True,
    )


if __name__ == "__main__":
    main()
