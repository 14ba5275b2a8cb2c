#!/usr/bin/env python3
"""In-house LLM serving engine with continuous batching and per-request KV caches.

Stands for a small team's own generation server (a Mistral-7B-shaped model: d 4096, 32 layers,
8 KV heads of 128, vocabulary 32000). Each admitted request gets its own KV-cache tensor sized
for prompt + max_new_tokens; each engine step prefills the newly admitted requests as one padded
batch and returns, for ``echo`` requests, the model's top-1 guess for every prompt position, so
the prefill computes logits for all prompt positions ([n, L, 32000] fp16); then it decodes a
chunk of tokens for every running request and frees the caches of the finished ones.

The scheduler keeps its own books: KV bytes in use plus the prefill's estimate must stay under
``gpu_memory_utilization`` x the memory free after loading. The books stay right, but the
caching allocator hands each new KV tensor a piece of a freed prefill-logits segment; those
pieces outlive the prefill and pin the segments, so a later, larger prefill cannot get a
contiguous block although the books say there is room.

``--fix kv-pool``: one KV pool tensor allocated at start-up and handed out in pages of 16 tokens
(what paged-attention engines do); no per-request KV allocations.
"""

from __future__ import annotations

import logging
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hc import Device, GiB, MiB, parse_args

PAGE_TOKENS = 16


@dataclass(frozen=True)
class Config:
    d_model: int
    vocab: int
    n_layers: int
    kv_dim: int  # n_kv_heads * head_dim
    budget: int  # bytes left free for the engine after loading
    utilization: float
    max_batch: int  # requests admitted per step at most
    tokens_per_step: int  # decode tokens per engine step
    prompt_len: tuple[int, int]
    max_new: tuple[int, int]
    n_requests: int
    decode_micro_batch: int = 8
    dtype_bytes: int = 2

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.kv_dim * self.dtype_bytes

    def prefill_bytes(self, n: int, longest: int) -> int:
        """Hidden states plus all-position logits of one padded prefill batch."""
        return n * longest * (self.d_model + self.vocab) * self.dtype_bytes


GPU = Config(
    d_model=4096,
    vocab=32000,
    n_layers=32,
    kv_dim=8 * 128,
    budget=24 * GiB,
    utilization=0.85,
    max_batch=8,
    tokens_per_step=32,
    prompt_len=(256, 4096),
    max_new=(64, 512),
    n_requests=400,
)
TINY = Config(
    d_model=64,
    vocab=512,
    n_layers=2,
    kv_dim=32,
    budget=64 * MiB,
    utilization=0.85,
    max_batch=8,
    tokens_per_step=32,
    prompt_len=(16, 256),
    max_new=(64, 512),
    n_requests=24,
)
SEED = 0


@dataclass
class Request:
    rid: int
    prompt_len: int
    max_new: int
    echo: bool
    generated: int = 0
    kv: object = None  # the request's KV tensor, or its page list under kv-pool
    out: list[int] = field(default_factory=list)
    echo_top1: object = None

    @property
    def tokens(self) -> int:
        return self.prompt_len + self.max_new


def make_requests(cfg: Config, seed: int = SEED) -> list[Request]:
    rng = random.Random(seed)
    return [
        Request(i, rng.randint(*cfg.prompt_len), rng.randint(*cfg.max_new), rng.random() < 0.5)
        for i in range(cfg.n_requests)
    ]


class Scheduler:
    """FCFS admission under a byte budget; no torch here (the allocator model reuses it)."""

    def __init__(self, cfg: Config, requests: list[Request], free_bytes: int, paged: bool):
        self.cfg = cfg
        self.waiting = list(requests)
        self.running: list[Request] = []
        self.limit = int(cfg.utilization * free_bytes)
        self.paged = paged
        self.kv_in_use = 0
        self.prefill_reserve = cfg.prefill_bytes(cfg.max_batch, cfg.prompt_len[1])
        # under kv-pool the pool is carved once, leaving room for the largest prefill
        self.pool_bytes = self.limit - self.prefill_reserve

    def kv_bytes(self, r: Request) -> int:
        if self.paged:
            pages = -(-r.tokens // PAGE_TOKENS)
            return pages * PAGE_TOKENS * self.cfg.kv_bytes_per_token
        return r.tokens * self.cfg.kv_bytes_per_token

    def admit(self) -> list[Request]:
        wave: list[Request] = []
        while self.waiting and len(wave) < self.cfg.max_batch:
            r = self.waiting[0]
            longest = max([w.prompt_len for w in wave] + [r.prompt_len])
            need = self.kv_in_use + self.kv_bytes(r)
            if self.paged:
                ok = need <= self.pool_bytes
            else:
                ok = need + self.cfg.prefill_bytes(len(wave) + 1, longest) <= self.limit
            if not ok:
                break
            wave.append(self.waiting.pop(0))
            self.kv_in_use = need
        self.running += wave
        return wave

    def advance(self, tokens: int) -> list[Request]:
        """Count ``tokens`` decoded for every running request; return the finished ones."""
        done = []
        for r in self.running:
            r.generated = min(r.max_new, r.generated + tokens)
            if r.generated >= r.max_new:
                done.append(r)
        for r in done:
            self.running.remove(r)
            self.kv_in_use -= self.kv_bytes(r)
        return done


class Engine:
    def __init__(self, cfg: Config, dev: Device, paged: bool, log: logging.Logger) -> None:
        self.cfg, self.dev, self.paged, self.log = cfg, dev, paged, log
        d = dev.device
        self.dtype = torch.float32 if dev.dry else torch.float16  # no fp16 GEMM on CPU
        g = torch.Generator(device="cpu").manual_seed(1)
        self.embed = (torch.randn(cfg.vocab, cfg.d_model, generator=g) * 0.02).to(d, self.dtype)
        self.lm_head = (torch.randn(cfg.vocab, cfg.d_model, generator=g) * 0.02).to(d, self.dtype)
        self.pool: torch.Tensor | None = None
        self.free_pages: list[int] = []

    def warmup(self) -> None:
        x = self.embed[:8] @ self.lm_head.T  # cuBLAS handle and workspace before serving
        x.argmax(-1).tolist()

    def make_pool(self, pool_bytes: int) -> None:
        page = PAGE_TOKENS * self.cfg.kv_bytes_per_token
        n_pages = pool_bytes // page
        shape = (n_pages, 2, self.cfg.n_layers, PAGE_TOKENS, self.cfg.kv_dim)
        self.pool = torch.empty(shape, dtype=self.dtype, device=self.dev.device)
        self.free_pages = list(range(n_pages))
        self.log.info(
            "KV pool: %d pages of %d tokens (%.2f GiB)", n_pages, PAGE_TOKENS, n_pages * page / GiB
        )

    def allocate_kv(self, r: Request) -> None:
        if self.paged:
            n = -(-r.tokens // PAGE_TOKENS)
            r.kv, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        else:
            shape = (2, self.cfg.n_layers, r.tokens, self.cfg.kv_dim)
            r.kv = torch.empty(shape, dtype=self.dtype, device=self.dev.device)

    def release_kv(self, r: Request) -> None:
        if self.paged:
            self.free_pages += r.kv
        r.kv = None

    def prefill(self, wave: list[Request]) -> None:
        longest = max(r.prompt_len for r in wave)
        ids = torch.randint(0, self.cfg.vocab, (len(wave), longest), device=self.dev.device)
        hidden = self.embed[ids]  # [n, L, d]
        logits = hidden @ self.lm_head.T  # [n, L, vocab]: all prompt positions, for echo
        guesses = logits.argmax(-1)
        for j, r in enumerate(wave):
            if self.paged:
                page0 = r.kv[0]
                n = min(PAGE_TOKENS, r.prompt_len)
                self.pool[page0, 0, 0, :n].copy_(hidden[j, :n, : self.cfg.kv_dim])
            else:
                r.kv[0, 0, : r.prompt_len].copy_(hidden[j, : r.prompt_len, : self.cfg.kv_dim])
            r.out.append(int(logits[j, r.prompt_len - 1].argmax()))
            if r.echo:
                r.echo_top1 = guesses[j, : r.prompt_len]
        del logits, hidden

    def decode(self, running: list[Request], steps: int) -> None:
        mb = self.cfg.decode_micro_batch
        for i in range(0, len(running), mb):
            chunk = running[i : i + mb]
            last = torch.tensor([r.out[-1] for r in chunk], device=self.dev.device)
            toks = []
            for _ in range(steps):
                last = (self.embed[last] @ self.lm_head.T).argmax(-1)
                toks.append(last)
            for r, new in zip(chunk, torch.stack(toks, 1).tolist(), strict=True):
                r.out += new


def serve(cfg: Config, dev: Device, engine: Engine, sched: Scheduler, log: logging.Logger) -> None:
    """The engine loop: admit, allocate KV, prefill, decode a chunk, free finished requests."""
    t0 = time.time()
    step = prompt_tokens = gen_tokens = finished = 0
    while sched.waiting or sched.running:
        step += 1
        wave = sched.admit()
        for r in wave:
            engine.allocate_kv(r)
        if wave:
            engine.prefill(wave)
            prompt_tokens += sum(r.prompt_len for r in wave)
        if not sched.running:
            raise RuntimeError("scheduler admitted nothing with nothing running")
        engine.decode(sched.running, cfg.tokens_per_step)
        gen_tokens += cfg.tokens_per_step * len(sched.running)
        for r in sched.advance(cfg.tokens_per_step):
            engine.release_kv(r)
            finished += 1
        if step % 5 == 0:
            dev.sync()
            dt = max(time.time() - t0, 1e-6)
            log.info(
                "step %d: running %d, waiting %d, finished %d; prompt %.0f tok/s, generation "
                "%.0f tok/s; KV in use %.2f GiB; torch allocated %.2f GiB, reserved %.2f GiB",
                step,
                len(sched.running),
                len(sched.waiting),
                finished,
                prompt_tokens / dt,
                gen_tokens / dt,
                sched.kv_in_use / GiB,
                dev.allocated() / GiB,
                dev.reserved() / GiB,
            )
    dev.sync()
    log.info("served %d requests in %d steps, %.1f s", finished, step, time.time() - t0)


def main() -> int:
    a = parse_args(__doc__.splitlines()[0], ["kv-pool"])
    cfg = TINY if a.dry_run_cpu else GPU
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s [engine] %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stdout,
    )
    log = logging.getLogger("engine")
    dev = Device(a.dry_run_cpu)
    paged = a.fix == "kv-pool"
    log.info(
        "torch %s on %s; model d=%d layers=%d vocab=%d; kv cache %s",
        torch.__version__,
        dev.name,
        cfg.d_model,
        cfg.n_layers,
        cfg.vocab,
        "paged pool" if paged else "per request",
    )
    engine = Engine(cfg, dev, paged, log)
    engine.warmup()
    weights = dev.ballast(cfg.budget)  # the rest of the 7B weights, already resident
    if weights is not None:
        log.info("weights loaded: %.1f GiB resident", dev.allocated() / GiB)
    free = cfg.budget if dev.dry else dev.free_bytes()
    sched = Scheduler(cfg, make_requests(cfg), free, paged)
    log.info(
        "gpu_memory_utilization=%.2f of %.2f GiB free -> %.2f GiB for KV cache + prefill",
        cfg.utilization,
        free / GiB,
        sched.limit / GiB,
    )
    if paged:
        engine.make_pool(sched.pool_bytes)

    serve(cfg, dev, engine, sched, log)
    del weights
    return 0


if __name__ == "__main__":
    sys.exit(main())
